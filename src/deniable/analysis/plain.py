"""Numbers for people: shares in percent with their interval, means in their unit, p-values
and counts as a reader without statistics reads them.

    share(0.5329, 0.29, 0.78)         -> "53 % (29–78 %)"
    share(0.5329, 0.523, 0.543)       -> "53.3 % (52.3–54.3 %)"
    mean(812.4, 700.2, 925.9, "ms")   -> "812 ms (700–926 ms)"
    p_value(4.4e-15)                  -> "p < 0.001"

No output of this module uses scientific notation. The precision follows the interval: a
wide interval gets fewer digits (its last digit would be noise), a narrow one more, so two
numbers that differ on the page differ in the data.
"""
from __future__ import annotations

import math

DASH = "\u2013"
"""The en dash between an interval's bounds."""

UNIT_SUFFIXES = (("_ms", "ms"), ("_seconds", "s"), ("_secs", "s"), ("_sec", "s"), ("_s", "s"),
                 ("_minutes", "min"), ("_min", "min"), ("_bytes", "bytes"), ("_kb", "KB"),
                 ("_mb", "MB"), ("_pct", "%"), ("_percent", "%"), ("_count", ""))
"""A numeric metric's unit, from the end of its name (``startup_ms`` -> ms): the registry
declares a range, not a unit, so the name's convention is the only one there is."""


def unit_of(metric: str) -> str:
    """The unit a numeric metric's name ends in ("" when it names none)."""
    lower = metric.lower()
    for suffix, unit in UNIT_SUFFIXES:
        if lower.endswith(suffix):
            return unit
    return ""


def _decimals(width: float, scale: float) -> int:
    """Digits after the point for a value whose interval is ``width`` wide (in the unit the
    value is printed in): enough that the interval's width shows in two significant digits,
    never below 0 nor above 2 + the digits of ``scale``."""
    if not width > 0 or not math.isfinite(width):
        return 1
    digits = 1 - math.floor(math.log10(width))
    return max(0, min(digits, 2 + max(0, -math.floor(math.log10(scale))) if scale > 0 else 3))


def fixed(x: float, decimals: int) -> str:
    """``x`` with thousands separators and ``decimals`` digits after the point; "-" for NaN.
    Never scientific notation, never "-0"."""
    if x is None or not math.isfinite(x):
        return "-"
    text = f"{x:,.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text.replace(",", "")) == 0 else text


def share(value: float, low: float, high: float, *, signed: bool = False) -> str:
    """A share of devices in percent with its interval: "53 % (29–78 %)"; "-" for NaN.

    ``signed``: a change in percentage points, "+5.5 points (+3.1 to +7.9)"."""
    if value is None or not math.isfinite(value):
        return "-"
    decimals = min(_decimals((high - low) * 100, 1.0), 2)
    if signed:
        return (f"{_signed(value * 100, decimals)} points ({_signed(low * 100, decimals)} to "
                f"{_signed(high * 100, decimals)})")
    return (f"{fixed(value * 100, decimals)} % ({fixed(low * 100, decimals)}{DASH}"
            f"{fixed(high * 100, decimals)} %)")


def percent(value: float, decimals: int = 0) -> str:
    """A share alone, in percent: "53 %"; "-" for NaN."""
    return "-" if value is None or not math.isfinite(value) else f"{fixed(value * 100, decimals)} %"


def mean(value: float, low: float, high: float, unit: str = "", *, signed: bool = False) -> str:
    """A mean (or a change of a mean) in its unit with its interval: "812 ms (700–926 ms)"."""
    if value is None or not math.isfinite(value):
        return "-"
    decimals = _decimals(high - low, abs(value) or 1.0)
    u = f" {unit}" if unit else ""
    if signed:
        return (f"{_signed(value, decimals)}{u} ({_signed(low, decimals)} to "
                f"{_signed(high, decimals)}{u})")
    return f"{fixed(value, decimals)}{u} ({fixed(low, decimals)}{DASH}{fixed(high, decimals)}{u})"


def _signed(x: float, decimals: int) -> str:
    text = fixed(x, decimals)
    return text if text.startswith("-") or text == "-" else "+" + text


def number(x: float, digits: int = 3) -> str:
    """A number with about ``digits`` significant digits, thousands separated, never in
    scientific notation: 50558100 -> "50,558,100"; 0.000123 -> "0.000123"."""
    if x is None or not math.isfinite(x):
        return "-"
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return fixed(x, decimals)


def exact(x: float, decimals: int = 6) -> str:
    """``x`` with up to ``decimals`` digits after the point, trailing zeros dropped, never in
    scientific notation: 1000000.0 -> "1000000", 0.1 -> "0.1" (for ranges and the analyst's
    detailed tables)."""
    if x is None or not math.isfinite(x):
        return "-"
    text = f"{x:.{decimals}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def p_value(p: float) -> str:
    """A p-value as a reader reads it: "p = 0.006", "p < 0.001"; "-" when there is none."""
    if p is None or not math.isfinite(p):
        return "-"
    if p < 0.001:
        return "p < 0.001"
    if p >= 0.995:
        return "p = 1"
    return f"p = {p:.3f}" if p < 0.1 else f"p = {p:.2f}"


def count(n: int, word: str, plural: str | None = None) -> str:
    """"1 comparison", "16 comparisons", with thousands separators."""
    return f"{n:,} {word if n == 1 else plural or word + 's'}"
