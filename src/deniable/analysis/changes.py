""""What changed": one line per metric, in plain words, from the comparisons of a report.

The question a reader asks is per metric: "did start-up time change?", "did the OS mix
change?". So by default the multiple-comparison correction's family is each metric's own
comparisons (``FAMILIES[0]``, "metric"): a boolean or numeric metric's one comparison is tested
alone, a categorical metric's categories are corrected together (Holm). On request
("report") every comparison of the report is corrected together, every category of every
metric: stricter, for a reader who scans many metrics for any change at all. Every output says
which family was used (``family_note``).

    lines = what_changed(comparisons)
    for line in lines: print(line.text)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deniable.analysis import plain
from deniable.analysis.compare import Comparison, correct

FAMILIES = ("metric", "report")
"""The correction's family: each metric's comparisons, or every comparison of the report."""


class FamilyError(ValueError):
    """An unknown correction family."""


def correct_family(comparisons: Sequence[Comparison], family: str = "metric",
                   method: str = "holm", alpha: float = 0.05) -> list[Comparison]:
    """Correct raw comparisons per metric (``family="metric"``: each metric's comparisons
    together, a categorical metric's categories) or all together (``"report"``), in the
    order given."""
    if family not in FAMILIES:
        raise FamilyError(f"family must be one of {FAMILIES}. Got {family!r} instead.")
    if family == "report":
        return correct(comparisons, method, alpha)
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(comparisons):
        groups.setdefault(c.metric or c.label, []).append(i)
    out: list[Comparison | None] = [None] * len(comparisons)
    for indexes in groups.values():
        for i, c in zip(indexes, correct([comparisons[i] for i in indexes], method, alpha)):
            out[i] = c
    return [c for c in out if c is not None]


def family_note(comparisons: Sequence[Comparison], family: str) -> str:
    """Which correction was used, in words."""
    if not comparisons:
        return ""
    method = comparisons[0].correction
    alpha = comparisons[0].alpha
    named = {"holm": "Holm's", "bonferroni": "Bonferroni's"}.get(method)
    if family == "report":
        how = (f"all {plain.count(len(comparisons), 'comparison')} of this report (every "
               f"category of every metric) corrected together"
               + (f" by {named} method" if named else " (no correction)"))
    else:
        how = ("each metric on its own: a yes/no or numeric metric's one comparison alone, a "
               "categorical metric's categories corrected together"
               + (f" by {named} method" if named else " (no correction)")
               + "; ask for the whole report's family to correct across metrics")
    return (f"A change is marked when its corrected p-value is at most {alpha:g} "
            f"(chance of a false alarm per family: {alpha:.0%}). Family: {how}.")


@dataclass(frozen=True)
class ChangeLine:
    """One metric's change, in words.

    Attributes:
        metric: the metric; kind: its kind.
        changed: at least one of its comparisons is significant after the correction.
        text: the line, e.g. "dark_mode: up 5.5 points (+3.1 to +7.9), 50 % to 56 %:
            a change (p < 0.001)".
        comparisons: the metric's corrected comparisons.
    """

    metric: str
    kind: str
    changed: bool
    text: str
    comparisons: tuple[Comparison, ...]


def _delta(c: Comparison, kind: str, metric: str) -> str:
    """"up 5.5 points (+3.1 to +7.9)", "down 201 ms (-344 to -59 ms)"."""
    direction = "up" if c.difference > 0 else "down"
    if kind != "numeric" and plain.share(abs(c.difference), c.ci_low, c.ci_high, signed=True
                                         ).lstrip("+").startswith(("0 ", "0.0 ", "0.00 ")):
        direction = "by"  # rounds to nothing: no direction to name
    if kind == "numeric":
        unit = plain.unit_of(metric)
        text = plain.mean(abs(c.difference), c.ci_low, c.ci_high, unit, signed=True)
        size, _, interval = text.partition(" (")
        return f"{direction} {size.lstrip('+')} ({interval}"
    text = plain.share(abs(c.difference), c.ci_low, c.ci_high, signed=True)
    size, _, interval = text.partition(" (")
    return f"{direction} {size.lstrip('+')} ({interval}"


def _level(value: float, kind: str, metric: str, decimals: int) -> str:
    if kind == "numeric":
        unit = plain.unit_of(metric)
        return plain.fixed(value, decimals) + (f" {unit}" if unit else "")
    return plain.percent(value, decimals)


def what_changed(comparisons: Sequence[Comparison]) -> list[ChangeLine]:
    """One line per metric, in the order the metrics first appear in ``comparisons``
    (already corrected: ``correct_family``)."""
    groups: dict[str, list[Comparison]] = {}
    for c in comparisons:
        groups.setdefault(c.metric or c.label, []).append(c)
    lines = []
    for metric, found in groups.items():
        kind = found[0].kind
        if found[0].category is None:
            c = found[0]
            decimals = 0 if kind == "numeric" else 1
            levels = (f", {_level(c.estimate_a, kind, metric, decimals)} to "
                      f"{_level(c.estimate_b, kind, metric, decimals)}")
            if c.significant:
                text = (f"{metric}: {_delta(c, kind, metric)}{levels}: a change "
                        f"({plain.p_value(c.p_adjusted)})")
            else:
                text = (f"{metric}: no clear change ({_delta(c, kind, metric)}{levels}; "
                        f"{plain.p_value(c.p_adjusted)})")
            lines.append(ChangeLine(metric, kind, c.significant, text, tuple(found)))
            continue
        moved = [c for c in found if c.significant]
        if moved:
            text = (f"{metric}: {len(moved)} of {plain.count(len(found), 'category', 'categories')}"
                    " changed: " + "; ".join(
                        f"{c.category} {_delta(c, kind, metric)}, "
                        f"{plain.percent(c.estimate_a, 1)} to {plain.percent(c.estimate_b, 1)}"
                        for c in moved))
        else:
            text = (f"{metric}: no clear change in any of its "
                    f"{plain.count(len(found), 'category', 'categories')}")
        lines.append(ChangeLine(metric, kind, bool(moved), text, tuple(found)))
    return lines
