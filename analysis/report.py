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
from deniable.collector.explain import bucket_flags
from deniable.analysis.window import coverage_notes

FORMATS = ("table", "json", "csv")
COLUMNS = ("metric", "version", "mechanism", "epsilon", "start", "end", "n", "ones",
           "yes_rate", "estimate", "stderr", "ci_low", "ci_high", "confidence", "clipped",
           "interval_clipped", "wide", "unclipped", "periods", "design_effect", "policy",
           "estimand", "flags")


def flags(summary: MetricSummary) -> str:
    """The honest caveats of an estimate, in words."""
    notes = []
    if summary.n == 0:
        notes.append("no reports")
    elif summary.clipped:
        notes.append(f"clipped (unclipped {summary.unclipped:+.4f})")
    if summary.n and summary.interval_clipped:
        notes.append("interval clipped to [0, 1]")
    if summary.n and summary.wide:
        notes.append("too few reports: interval spans half of [0, 1]")
    return "; ".join(notes)


def _number(x: float) -> float | None:
    return None if math.isnan(x) else x


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def summary_row(summary: MetricSummary) -> dict[str, Any]:
    """One summary as a JSON/CSV-ready dict: its fields, times in ISO 8601, and ``flags``."""
    row = {k: _plain(v) for k, v in dataclasses.asdict(summary).items()}
    row["flags"] = flags(summary)
    return row


def _range(summaries: Sequence[MetricSummary]) -> dict[str, Any]:
    first = summaries[0] if summaries else None
    return {"from": _plain(first.start) if first else None,
            "to": _plain(first.end) if first else None,
            "confidence": first.confidence if first else None}


def to_json(summaries: Sequence[MetricSummary]) -> str:
    """A JSON document: {"range": {"from", "to", "confidence"}, "metrics": [{column: value,
    ..., "flags": ...}, ...]}. NaN is written as null."""
    return json.dumps({"range": _range(summaries),
                       "metrics": [summary_row(s) for s in summaries]}, indent=2)


def to_csv(summaries: Sequence[MetricSummary]) -> str:
    """CSV with a header row of COLUMNS (the range in ``start``/``end`` on every row)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for s in summaries:
        writer.writerow(summary_row(s))
    return out.getvalue()


def text_table(title: str, columns: Sequence[tuple[str, str]],
               rows: Sequence[Sequence[str]]) -> str:
    """An aligned plain-text table: a title, a header, a rule, one line per row. Columns are
    (header, "left" | "right"). Plain string work: a thousand rows take milliseconds."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, (h, _) in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if j == "left" else c.rjust(w)
                         for c, w, (_, j) in zip(cells, widths, columns)).rstrip()

    out = [title, line([h for h, _ in columns]), "  ".join("\u2500" * w for w in widths)]
    out.extend(line(r) for r in rows)
    return "\n".join(out) + "\n"


def range_title(start: datetime | None, end: datetime | None) -> str:
    """"2026-11-16 14:00 to 2026-11-23 14:00 UTC", or "" if unknown."""
    if start is None or end is None:
        return ""
    return f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"


def render_table(summaries: Sequence[MetricSummary], title: str = "Deniable report") -> str:
    """An aligned terminal table (plain text, no colours): the range and confidence in the
    title, each metric's version, and below the table what each estimate is a share of and
    how its interval was made."""
    first = summaries[0] if summaries else None
    pct = f"{first.confidence:.0%}" if first else "95%"
    when = range_title(first.start, first.end) if first else ""
    columns = (("metric", "left"), ("version", "right"), ("epsilon", "right"), ("n", "right"),
               ("periods", "right"), ("raw yes-rate", "right"), ("estimate", "right"),
               (f"{pct} CI", "right"), ("notes", "left"))
    rows = [(s.metric, "-" if s.version is None else str(s.version), f"{s.epsilon:.3f}",
             f"{s.n:,}", f"{s.periods:,}",
             "-" if s.n == 0 else f"{s.yes_rate:.4f}",
             "-" if s.n == 0 else f"{s.estimate:.4f}",
             f"[{s.ci_low:.4f}, {s.ci_high:.4f}]", flags(s)) for s in summaries]
    notes = [f"{s.metric}: {s.policy}. Estimate: {s.estimand or 'share of devices'}."
             + (f" The interval holds when the same devices report in all {s.periods} "
                f"periods (design effect {s.design_effect:.2f}); when devices differ it is "
                f"conservative, at most {s.periods ** 0.5:.1f}x too wide (docs/analysis.md)."
                if s.periods > 1 else "") for s in summaries]
    return (text_table(f"{title}: {when}" if when else title, columns, rows)
            + "".join(f"{line}\n" for line in notes))


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

SERIES_COLUMNS = ("metric", "version", "mechanism", "epsilon", "granularity", "window", "start",
                  "end", "n", "ones", "yes_rate", "estimate", "stderr", "ci_low", "ci_high",
                  "confidence", "clipped", "interval_clipped", "wide", "unclipped", "periods",
                  "partial", "flags", "range_from", "range_to")
SPARKS = "▁▂▃▄▅▆▇█"


def series_rows(ts: TimeSeries) -> list[dict[str, Any]]:
    """One dict per bucket with SERIES_COLUMNS; NaN becomes None, times are ISO 8601 UTC."""
    e = ts.estimates
    mechanism = ts.metric.mechanism
    partial = coverage_notes(ts.starts, ts.step.total_seconds(), ts.window, ts.range_start,
                             ts.range_end)
    rows = []
    for i, (start, end) in enumerate(zip(ts.starts, ts.ends)):
        n = int(e.n[i])
        interval_clipped = bool(e.interval_clipped[i]) if e.interval_clipped is not None \
            else False
        rows.append({
            "metric": ts.metric.name, "version": ts.metric.version,
            "mechanism": mechanism.id, "epsilon": mechanism.epsilon,
            "granularity": ts.granularity, "window": ts.window,
            "start": start.isoformat(), "end": end.isoformat(),
            "n": n, "ones": int(e.ones[i]),
            "yes_rate": _number(float(e.yes_rate[i])), "estimate": _number(float(e.estimate[i])),
            "stderr": _number(float(e.stderr[i])), "ci_low": float(e.ci_low[i]),
            "ci_high": float(e.ci_high[i]), "confidence": e.confidence,
            "clipped": bool(e.clipped[i]), "interval_clipped": interval_clipped,
            "wide": bool(e.wide[i]), "unclipped": _number(float(e.unclipped[i])),
            "periods": int(e.periods[i]) if e.periods is not None else 1,
            "partial": bool(partial[i]),
            "flags": bucket_flags(n, bool(e.clipped[i]), bool(e.wide[i]),
                                  float(e.unclipped[i]), interval_clipped, partial[i]),
            "range_from": _plain(ts.range_start), "range_to": _plain(ts.range_end),
        })
    return rows


def _most_periods(ts: TimeSeries) -> int:
    p = ts.estimates.periods
    return int(p.max()) if p is not None and p.size else 1


def series_document(ts: TimeSeries) -> dict[str, Any]:
    """One series as a JSON-ready document: the metric, its mechanism and its buckets."""
    mechanism = ts.metric.mechanism
    from deniable.analysis.window import estimand

    return {"metric": ts.metric.name, "version": ts.metric.version,
            "description": ts.metric.description,
            "mechanism": mechanism.id, "epsilon": mechanism.epsilon,
            "policy": ts.metric.policy.summary(),
            "estimand": estimand(ts.metric.policy, _most_periods(ts), ts.step.total_seconds()),
            "from": _plain(ts.range_start), "to": _plain(ts.range_end),
            "granularity": ts.granularity, "window": ts.window,
            "confidence": ts.estimates.confidence,
            "buckets": [{k: v for k, v in row.items()
                         if k not in ("metric", "version", "mechanism", "epsilon",
                                      "granularity", "window", "confidence", "range_from",
                                      "range_to")}
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


def sparkline(values: Sequence[float], low: float = 0.0, high: float = 1.0) -> str:
    """One block character per value on a fixed axis from ``low`` to ``high`` (the whole
    [0, 1] by default); NaN is a space.

    The axis never stretches to the values' own min..max, so a flat metric whose buckets differ
    only by noise draws flat, and a step of one block is a change of 1/8 of the axis.
    """
    span = high - low
    if not span > 0:
        raise ValueError(f"need low < high. Got {low} and {high} instead.")
    top = len(SPARKS) - 1
    return "".join(" " if math.isnan(v) else
                   SPARKS[max(0, min(top, int((v - low) / span * len(SPARKS))))]
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
        version = f" v{ts.metric.version}" if ts.metric.version is not None else ""
        when = range_title(ts.range_start, ts.range_end)
        table = Table(title=f"{ts.metric.name}{version} per {ts.granularity}{window} "
                            f"(epsilon {ts.metric.mechanism.epsilon:.3f})"
                            + (f", {when}" if when else "") + "  "
                            f"0 {sparkline([float(v) for v in e.estimate])} 1")
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
        from deniable.analysis.window import estimand

        console.print(f"{ts.metric.policy.summary()}. Each value: "
                      f"{estimand(ts.metric.policy, _most_periods(ts), ts.step.total_seconds())}.")
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
    """An aligned table of differences, their CIs, raw and adjusted p-values (plain text)."""
    correction = comparisons[0].correction if comparisons else "none"
    headers = ("metric", "a", "b", "change", f"{correction_pct(comparisons)} CI", "p",
               "p adj.", "signif.")
    rows = [(c.label, f"{c.estimate_a:.4f}", f"{c.estimate_b:.4f}", f"{c.difference:+.4f}",
             f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}]", _p(c.p_value), _p(c.p_adjusted),
             "yes" if c.significant else "no") for c in comparisons]
    return text_table(f"Changes (b - a) in the share of devices answering yes, "
                      f"{correction} correction",
                      [(h, "left" if h == "metric" else "right") for h in headers], rows)


def correction_pct(comparisons: Sequence[Comparison]) -> str:
    return f"{comparisons[0].confidence:.0%}" if comparisons else "95%"


def _p(p: float) -> str:
    if math.isnan(p):
        return "-"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"
