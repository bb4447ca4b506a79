"""Charts with matplotlib (Agg, no display): the estimate over time, its CI band, the raw
yes-rate as a faint line, and n as bars. Output is inline SVG text, with no external links."""
from __future__ import annotations

import io
import re

import numpy as np

from deniable.analysis.estimate import Estimates
from deniable.analysis.timeseries import TimeSeries

ESTIMATE = "#1f5fa8"
RAW = "#9a9a9a"
BARS = "#b9c7d6"
FLAG = "#c0392b"


def series_svg(ts: TimeSeries, width_inches: float = 9.0, height_inches: float = 4.2) -> str:
    """An SVG chart of one series: the estimate with its interval above, n per bucket below.

    Clipped buckets are marked with a red ring; buckets flagged wide (too few reports) are drawn
    hollow. Buckets with no reports leave gaps.
    """
    if ts.simultaneous is not None:
        raise ValueError(f"{ts.metric.name} is {ts.kind}: draw its shares with "
                         "deniable.analysis.bars.category_svg")
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    e = ts.estimates
    # UTC instants as naive datetime64 (numpy has no time zones).
    # Points sit mid-bucket, over their bar.
    step = np.timedelta64(int(ts.step.total_seconds()), "s")
    x = np.array([s.replace(tzinfo=None) for s in ts.starts], dtype="datetime64[s]") + step // 2
    fig = Figure(figsize=(width_inches, height_inches), dpi=96, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": (3, 1)})
    pct = f"{e.confidence:.0%}"
    has = e.n > 0
    if has.any():
        top.fill_between(x, e.ci_low, e.ci_high, where=has, color=ESTIMATE, alpha=0.18,
                         linewidth=0, label=f"{pct} interval", step=None)
        # A bucket with no non-empty neighbour makes no band: draw its interval as a bar.
        padded = np.concatenate(([False], has, [False]))
        alone = has & ~padded[:-2] & ~padded[2:]
        if alone.any():
            top.errorbar(x[alone], e.estimate[alone],
                         yerr=[e.estimate[alone] - e.ci_low[alone],
                               e.ci_high[alone] - e.estimate[alone]],
                         fmt="none", ecolor=ESTIMATE, alpha=0.5, elinewidth=6, capsize=0)
        top.plot(x, np.where(has, e.yes_rate, np.nan), color=RAW, alpha=0.6, linewidth=1,
                 linestyle="--", label="raw yes-rate (perturbed)")
        top.plot(x, np.where(has, e.estimate, np.nan), color=ESTIMATE, linewidth=2,
                 label="estimate")
        solid = has & ~e.wide
        top.plot(x[solid], e.estimate[solid], "o", color=ESTIMATE, markersize=4)
        hollow = has & e.wide
        if hollow.any():
            top.plot(x[hollow], e.estimate[hollow], "o", markerfacecolor="white",
                     color=ESTIMATE, markersize=5, label="too few reports")
        if e.clipped.any():
            top.plot(x[e.clipped], e.estimate[e.clipped], "o", markerfacecolor="none",
                     color=FLAG, markersize=9, label="clipped to [0, 1]")
    top.set_ylim(*y_limits(e, ts.kind == "numeric"))
    top.set_ylabel("mean" if ts.kind == "numeric" else "share answering yes")
    top.grid(alpha=0.3)
    if has.any():
        top.legend(loc="upper left", fontsize=8, ncols=3, frameon=False)
    else:
        top.text(0.5, 0.5, "no reports in this range", transform=top.transAxes, ha="center")
    if len(x):
        bottom.bar(x, e.n, width=step * 0.8, align="center", color=BARS)
    bottom.set_ylabel("n")
    bottom.grid(alpha=0.3, axis="y")
    fig.autofmt_xdate()
    out = io.StringIO()
    # Text stays text (searchable, small); a fixed hash salt makes the SVG reproducible.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "deniable"}):
        fig.savefig(out, format="svg", metadata={"Date": None})
    return _inline(out.getvalue())


def y_limits(e: Estimates, numeric: bool = False) -> tuple[float, float]:
    """The estimate axis: zoomed to the intervals (a band on a fixed 0..1 axis vanishes at
    large n), with a margin; all of [0, 1] when there is nothing to show. ``numeric``: a
    mean's axis, in its units (no [0, 1] bounds)."""
    has = e.n > 0
    if not has.any():
        return -0.02, 1.02
    low, high = float(e.ci_low[has].min()), float(e.ci_high[has].max())
    if numeric:
        pad = max((high - low) * 0.15, 1e-9)
        return low - pad, high + pad
    pad = max(0.005, (high - low) * 0.15)
    return max(-0.02, low - pad), min(1.02, high + pad)


def _inline(svg: str) -> str:
    """Strip the XML prolog, doctype and metadata, so the SVG embeds inline with no links."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    return svg
