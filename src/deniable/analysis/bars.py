"""Inline SVG bar charts of per-category shares with their intervals, for the HTML report.

Plain SVG text (no script, no external link): one bar per category at its unbiased share
(drawn from 0; a share below 0 by noise is marked with a red tick under the axis), the
per-category interval as a dark whisker and the simultaneous one as an orange band around
it. A histogram metric's bars touch, with the bucket edges on the axis; a categorical one's
stand apart, labelled when there are few enough to read.
"""
from __future__ import annotations

import html

import numpy as np

from deniable.analysis.categorical import CategoryEstimates

BAR = "#8fb0d6"
SIM = "#f0a35e"
FLAG = "#c0392b"
LABELLED = 40
"""Up to this many categories, each bar is labelled."""


def category_svg(cats: CategoryEstimates, *, histogram: bool = False,
                 edges: tuple[str, ...] = (), width: int = 860, height: int = 300) -> str:
    """One metric's shares as an SVG bar chart; ``edges``: a histogram's edge labels."""
    d = cats.d
    labelled = d <= LABELLED
    bottom = 70 if labelled and not histogram else 34
    left, right, top = 52, 10, 12
    plot_h = height - top - bottom
    has = cats.n > 0
    value = np.where(np.isfinite(cats.value), cats.value, 0.0) if has else np.zeros(d)
    peak = float(max(np.max(cats.sim_high) if has else 0.0, np.max(value), 0.05))
    peak = min(1.0, peak * 1.08)

    def y(v: float) -> float:
        return top + plot_h * (1 - min(max(v, 0.0), peak) / peak)

    slot = (width - left - right) / d
    edge = ' stroke="white" stroke-width=".5"' if histogram else ""
    bar_w = slot if histogram else max(slot * 0.7, 0.6)
    parts = [f'<svg class="bars" viewBox="0 0 {width} {height}" role="img" '
             'font-family="system-ui,sans-serif" '
             f'aria-label="share of each category with its intervals">',
             f'<text class="y-title" x="10" y="{top + plot_h / 2:.1f}" font-size="10" '
             f'fill="#333" text-anchor="middle" transform="rotate(-90 10 '
             f'{top + plot_h / 2:.1f})">share of devices (%)</text>']
    for k in range(5):
        v = peak * k / 4
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'stroke="#e4e4e4"/><text class="y-tick" x="{left - 4}" '
                     f'y="{y(v) + 4:.1f}" font-size="10" fill="#666" text-anchor="end">'
                     f'{v * 100:.{0 if peak >= 0.2 else 1}f} %</text>')
    for i in range(d):
        x0 = left + i * slot + (slot - bar_w) / 2
        cx = left + (i + 0.5) * slot
        label = html.escape(cats.labels[i])
        if has:
            v = float(value[i])
            parts.append(
                f'<rect x="{x0:.1f}" y="{y(v):.1f}" width="{bar_w:.1f}" '
                f'height="{max(y(0.0) - y(v), 0):.1f}" fill="{BAR}"{edge}>'
                f"<title>{label}: {v:+.4f} (per category [{cats.ci_low[i]:.4f}, "
                f"{cats.ci_high[i]:.4f}]; simultaneous [{cats.sim_low[i]:.4f}, "
                f"{cats.sim_high[i]:.4f}])</title></rect>")
            parts.append(
                f'<rect x="{cx - max(slot * 0.18, 1):.1f}" y="{y(float(cats.sim_high[i])):.1f}" '
                f'width="{max(slot * 0.36, 2):.1f}" height="'
                f'{max(y(float(cats.sim_low[i])) - y(float(cats.sim_high[i])), 0.5):.1f}" '
                f'fill="{SIM}" fill-opacity=".55"/>')
            parts.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(float(cats.ci_low[i])):.1f}" '
                         f'y2="{y(float(cats.ci_high[i])):.1f}" stroke="#0b2f5a" '
                         f'stroke-width="{1.5 if slot > 3 else 0.8}"/>')
            if v < 0:
                parts.append(f'<line x1="{x0:.1f}" x2="{x0 + bar_w:.1f}" y1="{y(0) + 3:.1f}" '
                             f'y2="{y(0) + 3:.1f}" stroke="{FLAG}" stroke-width="2"/>')
        if labelled and not histogram:
            parts.append(f'<text x="{cx:.1f}" y="{height - bottom + 12}" font-size="10" '
                         f'fill="#444" text-anchor="end" transform="rotate(-40 {cx:.1f} '
                         f'{height - bottom + 12})">{label}</text>')
    if histogram and edges:
        step = max(1, len(edges) // 12)
        for k in sorted(set(range(0, len(edges), step)) | {len(edges) - 1}):
            x = left + k * slot
            anchor = "end" if k == len(edges) - 1 else "start" if k == 0 else "middle"
            parts.append(f'<text x="{x:.1f}" y="{height - bottom + 14}" font-size="10" '
                         f'fill="#444" text-anchor="{anchor}">{html.escape(edges[k])}</text>')
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(0):.1f}" y2="{y(0):.1f}" '
                 'stroke="#888"/>')
    if not has:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" '
                     'fill="#666">no reports in this range</text>')
    parts.append(f'<text x="{left}" y="{height - 3}" font-size="10" fill="#666">bars: unbiased '
                 f"share; dark whisker: {cats.confidence:.0%} interval per category; orange band: "
                 f"simultaneous {cats.confidence:.0%} interval (all {d} at once)"
                 f"{'; red tick: share below 0 by noise' if has and np.any(value < 0) else ''}"
                 "</text></svg>")
    return "".join(parts)
