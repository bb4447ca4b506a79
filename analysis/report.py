"""Reports for analysts: terminal tables, JSON and CSV, for summaries, time series and
comparisons. Every output carries the honest flags: no reports, clipped, too few reports."""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from deniable.analysis.compare import Comparison
from deniable.analysis.estimate import MetricSummary
from deniable.analysis.timeseries import TimeSeries

FORMATS = ("table", "json", "csv")
COLUMNS = ("metric", "mechanism", "epsilon", "n", "ones", "yes_rate", "estimate", "stderr",
           "ci_low", "ci_high", "confidence", "clipped", "wide", "unclipped")


def flags(summary: MetricSummary) -> str:
    """The honest caveats of an estimate, in words."""
    notes = []
    if summary.n == 0:
        notes.append("no reports")
    elif summary.clipped:
        notes.append(f"clipped (unclipped {summary.unclipped:+.4f})")
    if summary.n and summary.wide:
        notes.append("too few reports: interval spans half of [0, 1]")
    return "; ".join(notes)


def _number(x: float) -> float | None:
    return None if math.isnan(x) else x


def to_json(summaries: Sequence[MetricSummary]) -> str:
    """A JSON document: {"metrics": [{column: value, ...}, ...]}. NaN is written as null."""
    rows = [{k: (_number(v) if isinstance(v, float) else v)
             for k, v in dataclasses.asdict(s).items()} for s in summaries]
    return json.dumps({"metrics": rows}, indent=2)


def to_csv(summaries: Sequence[MetricSummary]) -> str:
    """CSV with a header row of COLUMNS."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for s in summaries:
        writer.writerow(dataclasses.asdict(s))
    return out.getvalue()


def render_table(summaries: Sequence[MetricSummary], title: str = "Deniable report") -> str:
    """An aligned terminal table, rendered to text (rich, no colours when not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for header, justify in (("metric", "left"), ("epsilon", "right"), ("n", "right"),
                            ("raw yes-rate", "right"), ("estimate", "right"),
                            ("95% CI", "right"), ("notes", "left")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for s in summaries:
        table.add_row(s.metric, f"{s.epsilon:.3f}", f"{s.n:,}",
                      "-" if s.n == 0 else f"{s.yes_rate:.4f}",
                      "-" if s.n == 0 else f"{s.estimate:.4f}",
                      f"[{s.ci_low:.4f}, {s.ci_high:.4f}]", flags(s))
    console = Console(file=io.StringIO(), width=120, force_terminal=False)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def render(summaries: Sequence[MetricSummary], fmt: str) -> str:
    """Render in one of FORMATS."""
    if fmt == "json":
        return to_json(summaries)
    if fmt == "csv":
        return to_csv(summaries)
    if fmt == "table":
        return render_table(summaries)
    raise ValueError(f"format must be one of {FORMATS}. Got {fmt!r} instead.")


# -- time series ----------------------------------------------------------------------------

SERIES_COLUMNS = ("metric", "mechanism", "epsilon", "granularity", "window", "start", "end",
                  "n", "ones", "yes_rate", "estimate", "stderr", "ci_low", "ci_high",
                  "confidence", "clipped", "wide", "unclipped", "flags")
SPARKS = "▁▂▃▄▅▆▇█"


def bucket_flags(n: int, clipped: bool, wide: bool, unclipped: float) -> str:
    """The honest caveats of one bucket, in words (as ``flags`` does for a summary)."""
    notes = []
    if n == 0:
        return "no reports"
    if clipped:
        notes.append(f"clipped (unclipped {unclipped:+.4f})")
    if wide:
        notes.append("too few reports: interval spans half of [0, 1]")
    return "; ".join(notes)


def series_rows(ts: TimeSeries) -> list[dict[str, Any]]:
    """One dict per bucket with SERIES_COLUMNS; NaN becomes None, times are ISO 8601 UTC."""
    e = ts.estimates
    mechanism = ts.metric.mechanism
    rows = []
    for i, (start, end) in enumerate(zip(ts.starts, ts.ends)):
        n = int(e.n[i])
        rows.append({
            "metric": ts.metric.name, "mechanism": mechanism.id, "epsilon": mechanism.epsilon,
            "granularity": ts.granularity, "window": ts.window,
            "start": start.isoformat(), "end": end.isoformat(),
            "n": n, "ones": int(e.ones[i]),
            "yes_rate": _number(float(e.yes_rate[i])), "estimate": _number(float(e.estimate[i])),
            "stderr": _number(float(e.stderr[i])), "ci_low": float(e.ci_low[i]),
            "ci_high": float(e.ci_high[i]), "confidence": e.confidence,
            "clipped": bool(e.clipped[i]), "wide": bool(e.wide[i]),
            "unclipped": _number(float(e.unclipped[i])),
            "flags": bucket_flags(n, bool(e.clipped[i]), bool(e.wide[i]),
                                  float(e.unclipped[i])),
        })
    return rows


def series_document(ts: TimeSeries) -> dict[str, Any]:
    """One series as a JSON-ready document: the metric, its mechanism and its buckets."""
    mechanism = ts.metric.mechanism
    return {"metric": ts.metric.name, "description": ts.metric.description,
            "mechanism": mechanism.id, "epsilon": mechanism.epsilon,
            "granularity": ts.granularity, "window": ts.window,
            "confidence": ts.estimates.confidence,
            "buckets": [{k: v for k, v in row.items()
                         if k not in ("metric", "mechanism", "epsilon", "granularity",
                                      "window", "confidence")}
                        for row in series_rows(ts)]}


def series_to_json(series: Sequence[TimeSeries]) -> str:
    """{"series": [series_document, ...]}."""
    return json.dumps({"series": [series_document(ts) for ts in series]}, indent=2)


def series_to_csv(series: Sequence[TimeSeries]) -> str:
    """CSV, one row per (metric, bucket), with a header row of SERIES_COLUMNS."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=SERIES_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for ts in series:
        writer.writerows(series_rows(ts))
    return out.getvalue()


def sparkline(values: Sequence[float]) -> str:
    """One block character per value, scaled between the values' min and max; NaN is a space."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return " " * len(values)
    low, high = min(finite), max(finite)
    span = high - low
    return "".join(" " if math.isnan(v) else
                   SPARKS[0 if span == 0 else min(len(SPARKS) - 1,
                                                  int((v - low) / span * len(SPARKS)))]
                   for v in values)


def _label(moment: datetime, granularity: str) -> str:
    if granularity == "hour":
        return f"{moment:%Y-%m-%d %H:00}"
    if granularity == "week":
        iso = moment.isocalendar()
        return f"{iso.year}-W{iso.week:02d} ({moment:%m-%d})"
    return f"{moment:%Y-%m-%d}"


def render_series_table(series: Sequence[TimeSeries], width: int = 120) -> str:
    """Per metric: a sparkline of the estimate, then an aligned row per bucket."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), width=width, force_terminal=False)
    for ts in series:
        e = ts.estimates
        window = f", rolling {ts.window} {ts.granularity}s" if ts.window > 1 else ""
        pct = f"{e.confidence:.0%}"
        table = Table(title=f"{ts.metric.name} per {ts.granularity}{window} "
                            f"(epsilon {ts.metric.mechanism.epsilon:.3f})  "
                            f"{sparkline([float(v) for v in e.estimate])}")
        for header, justify in (("bucket (UTC)", "left"), ("n", "right"),
                                ("raw yes-rate", "right"), ("estimate", "right"),
                                (f"{pct} CI", "right"), ("notes", "left")):
            table.add_column(header, justify=justify)  # type: ignore[arg-type]
        for row, start in zip(series_rows(ts), ts.starts):
            empty = row["n"] == 0
            table.add_row(_label(start, ts.granularity), f"{row['n']:,}",
                          "-" if empty else f"{row['yes_rate']:.4f}",
                          "-" if empty else f"{row['estimate']:.4f}",
                          f"[{row['ci_low']:.4f}, {row['ci_high']:.4f}]", row["flags"])
        console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def render_series(series: Sequence[TimeSeries], fmt: str) -> str:
    """Render time series in one of FORMATS."""
    if fmt == "json":
        return series_to_json(series)
    if fmt == "csv":
        return series_to_csv(series)
    if fmt == "table":
        return render_series_table(series)
    raise ValueError(f"format must be one of {FORMATS}. Got {fmt!r} instead.")


# -- comparisons ----------------------------------------------------------------------------

def comparisons_to_json(comparisons: Sequence[Comparison]) -> str:
    """{"comparisons": [...]}: each Comparison's fields; NaN is written as null."""
    rows = [{k: (_number(v) if isinstance(v, float) else v)
             for k, v in dataclasses.asdict(c).items()} for c in comparisons]
    return json.dumps({"comparisons": rows}, indent=2)


def render_comparisons_table(comparisons: Sequence[Comparison], width: int = 120) -> str:
    """An aligned table of differences, their CIs, raw and adjusted p-values."""
    from rich.console import Console
    from rich.table import Table

    correction = comparisons[0].correction if comparisons else "none"
    table = Table(title=f"Changes (b - a), {correction} correction")
    for header in ("metric", "a", "b", "change", f"{correction_pct(comparisons)} CI", "p",
                   "p adj.", "signif."):
        table.add_column(header, justify="left" if header == "metric" else "right")
    for c in comparisons:
        table.add_row(c.label, f"{c.estimate_a:.4f}", f"{c.estimate_b:.4f}",
                      f"{c.difference:+.4f}", f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}]",
                      _p(c.p_value), _p(c.p_adjusted), "yes" if c.significant else "no")
    console = Console(file=io.StringIO(), width=width, force_terminal=False)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def correction_pct(comparisons: Sequence[Comparison]) -> str:
    return f"{comparisons[0].confidence:.0%}" if comparisons else "95%"


def _p(p: float) -> str:
    if math.isnan(p):
        return "-"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"
