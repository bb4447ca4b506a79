"""A dated, labelled time chart as inline SVG text (no script, no link): one line per series
(a categorical metric's categories, a histogram's buckets), each with its interval as a band,
a time axis with dates, a y-axis with its title and unit, on an axis zoomed to the values so
that a shift of a few points shows.

Every chart carries the classes a test (or a reader's tool) can look for: ``x-tick`` (dated
tick labels), ``y-tick``, ``x-title``, ``y-title``, ``band``, ``line``, ``legend``.
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from numpy.typing import NDArray

PALETTE = ("#1f5fa8", "#d9622b", "#2e8b57", "#8e44ad", "#c0392b", "#7f8c8d", "#b8860b",
           "#17a2b8", "#e83e8c", "#343a40")
"""One colour per line; more lines than colours are not drawn (the caller picks the
largest)."""


@dataclass(frozen=True)
class Line:
    """One series to draw: its label and per-bucket value and interval (NaN: no reports)."""

    label: str
    value: NDArray[np.float64]
    low: NDArray[np.float64]
    high: NDArray[np.float64]


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]: steps of 1, 2 or 5 times a power of ten."""
    span = high - low
    if not span > 0:
        return [low]
    raw = span / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    t = first
    while t <= high + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def date_label(moment: datetime, granularity: str) -> str:
    """A tick's date: "11-23" for days and weeks (with the year on the first tick),
    "11-23 14h" for hours."""
    if granularity == "hour":
        return f"{moment:%m-%d %H}h"
    return f"{moment:%m-%d}"


def time_chart_svg(starts: Sequence[datetime], granularity: str, lines: Sequence[Line], *,
                   y_title: str, percent: bool = True, axis: tuple[float, float] = (0.0, 1.0),
                   marks: Sequence[tuple[int, str]] = (), width: int = 860,
                   height: int = 300, title: str = "") -> str:
    """Lines over time with their bands. ``axis``: the y range drawn (values outside are
    clipped to it); ``percent``: y ticks as percent of a share; ``marks``: (bucket index,
    label) of vertical markers, e.g. where a new version starts."""
    left, right, top, bottom = 64, 120 if len(lines) > 1 else 14, 22, 46
    plot_w, plot_h = width - left - right, height - top - bottom
    count = max(len(starts), 1)
    lo, hi = axis

    def x(i: float) -> float:
        return left + (i + 0.5) * plot_w / count

    def y(v: float) -> float:
        return top + plot_h * (1 - (min(max(v, lo), hi) - lo) / (hi - lo))

    parts = [f'<svg class="timechart" viewBox="0 0 {width} {height}" role="img" '
             'font-family="system-ui,sans-serif" '
             f'aria-label="{html.escape(title or y_title)} over time">']
    if title:
        parts.append(f'<text x="{left}" y="14" font-size="12" font-weight="600" '
                     f'fill="#222">{html.escape(title)}</text>')
    for t in nice_ticks(lo, hi):
        label = (f"{t * 100:.{0 if (hi - lo) * 100 >= 10 else 1}f} %" if percent
                 else f"{t:,.{max(0, -math.floor(math.log10(max(hi - lo, 1e-12))) + 1)}f}")
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
                     f'stroke="#e4e4e4"/><text class="y-tick" x="{left - 6}" y="{y(t) + 4:.1f}" '
                     f'font-size="11" fill="#555" text-anchor="end">{label}</text>')
    parts.append(f'<text class="y-title" x="14" y="{top + plot_h / 2:.1f}" font-size="11" '
                 f'fill="#333" text-anchor="middle" transform="rotate(-90 14 '
                 f'{top + plot_h / 2:.1f})">{html.escape(y_title)}</text>')
    every = max(1, math.ceil(count / 8))
    for i in range(0, len(starts), every):
        parts.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{top + plot_h}" '
                     f'y2="{top + plot_h + 4}" stroke="#888"/><text class="x-tick" '
                     f'x="{x(i):.1f}" y="{top + plot_h + 16}" font-size="11" fill="#555" '
                     f'text-anchor="middle">{date_label(starts[i], granularity)}</text>')
    year = f"{starts[0]:%Y}" if len(starts) else ""
    parts.append(f'<text class="x-title" x="{left + plot_w / 2:.1f}" y="{height - 6}" '
                 f'font-size="11" fill="#333" text-anchor="middle">{granularity} (UTC) '
                 f"{year}</text>")
    parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" '
                 f'y2="{top + plot_h}" stroke="#888"/>')
    for index, label in marks:
        xm = left + index * plot_w / count
        parts.append(f'<line class="mark" x1="{xm:.1f}" x2="{xm:.1f}" y1="{top}" '
                     f'y2="{top + plot_h}" stroke="#444" stroke-dasharray="4 3"/><text '
                     f'class="mark-label" x="{xm + 3:.1f}" y="{top + 10}" font-size="10" '
                     f'fill="#444">{html.escape(label)}</text>')
    for k, line in enumerate(lines[:len(PALETTE)]):
        colour = PALETTE[k]
        has = np.isfinite(line.value)
        runs = _runs(has)
        for a, b in runs:
            idx = range(a, b)
            upper = " ".join(f"{x(i):.1f},{y(float(line.high[i])):.1f}" for i in idx)
            lower = " ".join(f"{x(i):.1f},{y(float(line.low[i])):.1f}" for i in reversed(idx))
            parts.append(f'<polygon class="band" points="{upper} {lower}" fill="{colour}" '
                         f'fill-opacity=".22" stroke="{colour}" stroke-opacity=".35" '
                         f'stroke-width=".6"/>')
            points = " ".join(f"{x(i):.1f},{y(float(line.value[i])):.1f}" for i in idx)
            parts.append(f'<polyline class="line" points="{points}" fill="none" '
                         f'stroke="{colour}" stroke-width="2"/>')
            if b - a <= 60:
                parts.extend(f'<circle cx="{x(i):.1f}" cy="{y(float(line.value[i])):.1f}" '
                             f'r="2.5" fill="{colour}"/>' for i in idx)
        if len(lines) > 1:
            ly = top + 8 + k * 16
            parts.append(f'<g class="legend"><rect x="{left + plot_w + 10}" y="{ly - 8}" '
                         f'width="12" height="8" fill="{colour}"/><text x="'
                         f'{left + plot_w + 26}" y="{ly}" font-size="11" fill="#333">'
                         f"{html.escape(line.label)}</text></g>")
    parts.append("</svg>")
    return "".join(parts)


def _runs(has: NDArray[np.bool_]) -> list[tuple[int, int]]:
    """[start, end) index ranges of consecutive True values."""
    runs, start = [], None
    for i, v in enumerate(has.tolist()):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(has)))
    return runs


def share_axis(lines: Sequence[Line], min_span: float = 0.1) -> tuple[float, float]:
    """A share axis around the lines' values and intervals, at least ``min_span`` wide, in
    [0, 1], its ends on round numbers."""
    from deniable.analysis.report import zoomed_axis

    values = [float(v) for line in lines for arr in (line.value, line.low, line.high)
              for v, ok in zip(arr, np.isfinite(line.value)) if ok]
    return zoomed_axis(values, 0.0, 1.0, min_span)
