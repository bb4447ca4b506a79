"""The report of an open-domain metric (``od:``): the discovered strings with their share of
devices and interval, per reporting period (the one its version declares: hour, UTC day or
week; the counters' period) and over the window, and the smallest discoverable share at this n
and epsilon. Text, JSON and CSV.

Only strings whose lower bound is above 0 at the stated (family-wise, Bonferroni) confidence
are listed (``deniable.analysis.discovery``); the window pools the periods' counters (a device
reports at most once per period, so a device that reports every period counts once per
period: the window's share is of reports, i.e. of device-periods).
"""
from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deniable.analysis.discovery import Discovery, discover
from deniable.client.open_domain import OpenDomainSketch
from deniable.core.periods import period_label

__all__ = ["OpenPeriod", "OpenSummary", "html_page", "period_label", "render_open",
           "render_open_html", "summarize_open"]


@dataclass(frozen=True)
class OpenPeriod:
    """One reporting period's discovery: ``label`` names it (``period_label``)."""

    label: str
    result: Discovery


@dataclass(frozen=True)
class OpenSummary:
    """An open-domain metric's discoveries over a window and per reporting period.

    Attributes:
        metric: its name; epsilon: its mechanism's (nats); period: the reporting period its
            version declares (hour, day, week); window: the pooled discovery (None with no
            reports); periods: one per period with reports, oldest first.
    """

    metric: str
    mechanism: str
    epsilon: float
    confidence: float
    window: Discovery | None
    periods: tuple[OpenPeriod, ...]
    period: str = "day"


def summarize_open(metric: str, mechanism_id: str, starts: list[int],
                   counters: NDArray[np.integer], confidence: float = 0.95,
                   keep: int = 64, period: str = "day") -> OpenSummary:
    """Discover per reporting period and over the window.

    Args:
        starts: each period's start hour (hours since the epoch), one per row of ``counters``.
        counters: shape (periods, width): slot 0 = n, slot 1 + cell.
        period: the period the version declares (``hour``, ``day``, ``week``).
    """
    sketch = OpenDomainSketch.from_id(mechanism_id)
    periods = tuple(OpenPeriod(period_label(start, period),
                               discover(sketch, row, confidence=confidence, keep=keep))
                    for start, row in zip(starts, counters))
    window = (discover(sketch, np.asarray(counters).sum(axis=0), confidence=confidence,
                       keep=keep) if len(starts) else None)
    return OpenSummary(metric, mechanism_id, sketch.epsilon, confidence, window, periods,
                       period)


def _rows(summary: OpenSummary) -> list[tuple[str, Discovery]]:
    rows = [("window", summary.window)] if summary.window is not None else []
    return rows + [(p.label, p.result) for p in summary.periods]


def document(summary: OpenSummary) -> dict[str, Any]:
    """The JSON document of one metric's discoveries."""
    def one(period: str, d: Discovery) -> dict[str, Any]:
        return {"period": period, "n": d.n, "min_share": d.min_share, "tested": d.tested,
                "z": d.z, "found": [{"string": f.string, "share": f.share, "lower": f.lower,
                                     "upper": f.upper} for f in d.found]}
    return {"metric": summary.metric, "kind": "open", "mechanism": summary.mechanism,
            "epsilon": summary.epsilon, "confidence": summary.confidence,
            "period": summary.period, "periods": [one(period, d) for period, d in _rows(summary)]}


def render_open(summaries: list[OpenSummary], fmt: str = "table") -> str:
    """Text (``table``), ``json`` or ``csv`` of open-domain metrics' discoveries."""
    if fmt == "json":
        return json.dumps({"open": [document(s) for s in summaries]}, indent=2) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["metric", "period", "n", "string", "share", "lower", "upper",
                         "min_share"])
        for s in summaries:
            for period, d in _rows(s):
                for f in d.found:
                    writer.writerow([s.metric, period, d.n, f.string, f"{f.share:.6f}",
                                     f"{f.lower:.6f}", f"{f.upper:.6f}", f"{d.min_share:.6f}"])
        return out.getvalue()
    lines: list[str] = []
    for s in summaries:
        lines.append(f"{s.metric} (open, {s.mechanism}, epsilon {s.epsilon:.3g}, per "
                     f"{s.period}): strings "
                     f"whose share's lower bound is above 0 at {s.confidence:.4g} family-wise "
                     f"confidence")
        if s.window is None:
            lines.append("  no reports in this range")
        for period, d in _rows(s):
            lines.append(f"  {period}: {d.n:,} reports; smallest discoverable share "
                         f"{d.min_share:.2%} (found half the time); {len(d.found)} found of "
                         f"{d.tested} tested")
            width = max([len(repr(f.string)) for f in d.found] + [6])
            for f in d.found:
                lines.append(f"    {f.string!r:<{width}}  {f.share:7.2%}  "
                             f"[{max(f.lower, 0):.2%}, {min(f.upper, 1):.2%}]")
        lines.append("")
    return "\n".join(lines)


def render_open_html(summaries: list[OpenSummary]) -> str:
    """An HTML section per open-domain metric: the window's and each period's discovered strings
    as tables. Every string is escaped (it came from devices)."""
    parts = []
    for s in summaries:
        parts.append(f'<section class="open"><h2>{html.escape(s.metric)} (open, '
                     f"epsilon {s.epsilon:.3g})</h2><p>Strings whose share's lower bound is "
                     f"above 0 at {s.confidence:.4g} family-wise confidence.</p>")
        if s.window is None:
            parts.append("<p>No reports in this range.</p>")
        for period, d in _rows(s):
            parts.append(f"<h3>{html.escape(period)}: {d.n:,} reports; smallest discoverable "
                         f"share {d.min_share:.2%}</h3><table><thead><tr><th>string</th>"
                         "<th>share</th><th>interval</th></tr></thead><tbody>")
            parts.extend(f"<tr><td><code>{html.escape(f.string)}</code></td>"
                         f"<td>{f.share:.2%}</td><td>[{max(f.lower, 0):.2%}, "
                         f"{min(f.upper, 1):.2%}]</td></tr>" for f in d.found)
            parts.append("</tbody></table>")
        parts.append("</section>")
    return "".join(parts)


def html_page(body: str) -> str:
    """A standalone page around ``render_open_html``'s sections."""
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            "<title>deniable report: open-domain metrics</title></head><body>"
            f"{body}</body></html>\n")
