"""Reports for analysts: terminal tables, JSON and CSV, for summaries, time series and
comparisons. Every output carries the honest flags: no reports, clipped, too few reports.

Every kind: a boolean metric's share of yes; a numeric metric's mean, in its units (``lower``,
``upper`` say the range); a categorical or histogram metric's unbiased share per category, one
row per category in tables and CSV (``category``), with both kinds of interval named:
``ci_low``/``ci_high`` per category (marginal), ``sim_low``/``sim_high`` simultaneous over all
categories (Bonferroni). The biased simplex projection appears only when asked for
(``projected_biased``)."""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Sequence

import numpy as np
from datetime import datetime
from typing import Any

from deniable.client.kinds import kind_of
from deniable.analysis import plain
from deniable.analysis.compare import Comparison
from deniable.analysis.estimate import MetricSummary
from deniable.analysis.timeseries import TimeSeries
from deniable.core.explain import bucket_flags
from deniable.analysis.window import coverage_notes
from deniable.core.window import INTERVAL_NOTE, category_flags, in_units

FORMATS = ("table", "json", "csv")
COLUMNS = ("metric", "version", "mechanism", "epsilon", "start", "end", "n", "ones",
           "yes_rate", "estimate", "stderr", "ci_low", "ci_high", "confidence", "clipped",
           "interval_clipped", "wide", "unclipped", "periods", "design_effect", "policy",
           "estimand", "flags", "kind", "category", "sim_low", "sim_high", "lower", "upper",
           "total", "total_low", "total_high", "projected_biased")
CATEGORY_FIELDS = ("category", "sim_low", "sim_high", "projected_biased")


def flags(summary: MetricSummary, *, intervals: bool = True) -> str:
    """The honest caveats of an estimate, in words (``intervals``: for a categorical metric,
    which interval is which)."""
    notes = []
    if summary.n == 0:
        notes.append("no reports")
    elif summary.clipped:
        notes.append(f"clipped (unclipped {summary.unclipped:+.4f})")
    if summary.n and summary.interval_clipped:
        notes.append("interval clipped to [0, 1]")
    if summary.n and summary.wide:
        notes.append("too few reports: interval spans half of [0, 1]")
    if summary.categories is not None and summary.n and intervals:
        notes.append(summary.categories.interval_note)
    return in_units("; ".join(notes), summary.lower, summary.upper)


def _number(x: float) -> float | None:
    return None if math.isnan(x) else x


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def summary_row(summary: MetricSummary, *, projected: bool = False) -> dict[str, Any]:
    """One summary as a JSON-ready dict: its fields, times in ISO 8601, and ``flags``; a
    categorical metric's ``categories`` as one dict per category (``CategoryEstimates.rows``)
    and ``intervals`` saying which interval is which."""
    row = {k: _plain(v) for k, v in dataclasses.asdict(summary).items() if k != "categories"}
    row["flags"] = flags(summary)
    row["display"] = estimate_text(summary)  # the plain reading: "53 % (29–78 %)"
    if not kind_of(summary.kind).percent:
        row["unit"] = plain.unit_of(summary.metric)
    if not kind_of(summary.kind).percent:  # the sum over the reports: n times the mean
        row["total"] = _number(summary.n * summary.unclipped) if summary.n else None
        row["total_low"] = summary.n * summary.ci_low if summary.n else None
        row["total_high"] = summary.n * summary.ci_high if summary.n else None
    cats = summary.categories
    if cats is not None:
        row["intervals"] = cats.interval_note
        if projected:
            row["projection"] = "projected_biased: " + _PROJECTION
        row["categories"] = [{**r, "flags": category_flags(
            float(cats.value[i]), cats.n, float(cats.ci_low[i]), float(cats.ci_high[i])),
            "display": category_text(cats, i) if cats.n else "-"}
            for i, r in enumerate(cats.rows(projected=projected))]
    else:
        row.pop("categories", None)
    return row


def summary_rows(summary: MetricSummary, *, projected: bool = False) -> list[dict[str, Any]]:
    """Flat rows for CSV and pandas: one per metric, or one per category of a categorical
    metric (its share in ``estimate``, with ``category``, ``sim_low``, ``sim_high``)."""
    row = summary_row(summary, projected=projected)
    cats = row.pop("categories", None)
    row.pop("intervals", None)
    row.pop("projection", None)
    if cats is None:
        return [row]
    return [{**row, "category": c["category"], "ones": c["count"], "estimate": c["estimate"],
             "unclipped": c["estimate"], "stderr": c["stderr"], "ci_low": c["ci_low"],
             "ci_high": c["ci_high"], "sim_low": c["sim_low"], "sim_high": c["sim_high"],
             "yes_rate": c["count"] / summary.n if summary.n else None,
             "wide": c["ci_high"] - c["ci_low"] >= 0.5,
             "projected_biased": c.get("projected_biased"),
             "flags": "; ".join(x for x in (c["flags"], summary.categories.interval_note  # type: ignore[union-attr]
                                            if summary.n else "") if x)}
            for c in cats]


_PROJECTION = ("BIASED: the Euclidean projection of the unbiased shares onto the probability "
               "simplex (non-negative, summing to 1); for drawing, not for inference")


def _range(summaries: Sequence[MetricSummary]) -> dict[str, Any]:
    first = summaries[0] if summaries else None
    return {"from": _plain(first.start) if first else None,
            "to": _plain(first.end) if first else None,
            "confidence": first.confidence if first else None}


def to_json(summaries: Sequence[MetricSummary], *, projected: bool = False) -> str:
    """A JSON document: {"range": {"from", "to", "confidence"}, "metrics": [{column: value,
    ..., "flags": ...}, ...]}. NaN is written as null."""
    return json.dumps({"range": _range(summaries),
                       "metrics": [summary_row(s, projected=projected) for s in summaries]},
                      indent=2)


def to_csv(summaries: Sequence[MetricSummary], *, projected: bool = False) -> str:
    """CSV with a header row of COLUMNS (the range in ``start``/``end`` on every row); a
    categorical metric takes one row per category."""
    out = io.StringIO()
    fields = COLUMNS if projected else COLUMNS[:-1]
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for s in summaries:
        writer.writerows(summary_rows(s, projected=projected))
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


def render_table(summaries: Sequence[MetricSummary], title: str = "Deniable report", *,
                 projected: bool = False, detailed: bool = False) -> str:
    """An aligned terminal table (plain text, no colours): the range and confidence in the
    title, each metric's version, and below the table what each estimate is a share of and
    how its interval was made.

    By default the plain reading (``render_plain``): shares in percent with their interval,
    means in their unit, categories as shares of devices, notes once. ``detailed``: the
    analyst's table, with reports, periods, raw yes-rates, perturbed counts and 4 decimals."""
    if not detailed:
        return render_plain(summaries, title, projected=projected)
    first = summaries[0] if summaries else None
    pct = f"{first.confidence:.0%}" if first else "95%"
    when = range_title(first.start, first.end) if first else ""
    columns = (("metric", "left"), ("version", "right"), ("epsilon", "right"), ("n", "right"),
               ("periods", "right"), ("raw yes-rate", "right"), ("estimate", "right"),
               (f"{pct} CI", "right"), ("notes", "left"))
    plain = [s for s in summaries if s.categories is None]
    rows = [(s.metric, "-" if s.version is None else str(s.version), f"{s.epsilon:.3f}",
             f"{s.n:,}", f"{s.periods:,}",
             "-" if s.n == 0 else f"{s.yes_rate:.4f}",
             "-" if s.n == 0 else _value(s.estimate, s.lower),
             f"[{_value(s.ci_low, s.lower)}, {_value(s.ci_high, s.lower)}]", flags(s))
            for s in plain]
    notes = [f"{s.metric}: {s.policy}. Estimate: {_what(s)}."
             + (f" The interval holds when the same devices report in all {s.periods} "
                f"periods (design effect {s.design_effect:.2f}); when devices differ it is "
                f"conservative, at most {s.periods ** 0.5:.1f}x too wide (docs/analysis.md)."
                if s.periods > 1 else "") for s in summaries]
    heading = f"{title}: {when}" if when else title
    out = text_table(heading, columns, rows) if plain else heading + "\n"
    for s in summaries:
        if s.categories is not None:
            out += "\n" + category_table(s, projected=projected)
    return out + "".join(f"{line}\n" for line in notes)


def estimate_text(s: MetricSummary) -> str:
    """A boolean metric's share in percent with its interval, "53 % (29–78 %)"; a numeric
    metric's mean in its unit, "812 ms (700–926 ms)"; "-" without reports."""
    if s.n == 0 or s.categories is not None:
        return "-"
    if not kind_of(s.kind).percent:
        return plain.mean(s.estimate, s.ci_low, s.ci_high, plain.unit_of(s.metric))
    return plain.share(s.estimate, s.ci_low, s.ci_high)


def plain_flags(s: MetricSummary) -> str:
    """The caveats of an estimate in plain words ("" when there are none)."""
    notes = []
    if s.n == 0:
        notes.append("no reports in this range")
    elif s.wide:
        notes.append("too few reports to say much")
    if s.n and s.clipped and kind_of(s.kind).percent:
        notes.append("near " + ("0 %" if s.unclipped < 0.5 else "100 %")
                     + " (noise pushed the raw estimate past it)")
    elif s.n and s.clipped:
        notes.append(f"at the edge of its range [{plain.exact(s.lower)}, "
                     f"{plain.exact(s.upper)}]")
    return "; ".join(notes)


def category_text(cats: Any, i: int) -> str:
    """Category ``i``'s share of devices with its per-category interval, in percent (a share
    below 0 by noise reads as 0 %: its notes say so; the unbiased value is in the details)."""
    return plain.share(min(max(float(cats.value[i]), 0.0), 1.0), float(cats.ci_low[i]),
                       float(cats.ci_high[i]))


def reading_notes(summaries: Sequence[Any], *, detailed_hint: str = "--detailed or --format "
                  "json") -> list[str]:
    """The notes of a whole report, once, in plain words: what an estimate is, what the
    interval means, how days of the same devices count, and where the method is."""
    if not summaries:
        return []
    first = summaries[0]
    pct = f"{first.confidence:.0%}".replace("%", " %")
    kinds = [kind_of(k) for k in {s.kind for s in summaries}]
    what = ["a yes/no metric's estimate is the share of devices whose true answer is yes"]
    if any(k.per_category for k in kinds):
        what.append("a categorical metric's, each category's share of devices")
    if not all(k.percent for k in kinds):
        what.append("a numeric metric's, the mean over devices, in its unit")
    notes = [
        "How to read this: " + "; ".join(what) + ". Each device adds random noise to its "
        "answer before sending it, and the numbers here are worked back from the noisy "
        f"reports. The range in brackets is the {pct} interval: the true value lies inside it "
        f"{_odds(first.confidence)}.",
    ]
    many = [s for s in summaries if s.periods > 1]
    if many:
        notes.append(
            "Over several days, a device that reports every day counts once, not once a "
            "day (its answers repeat), so the intervals are as wide as the number of devices "
            "says, whatever the number of reports.")
    if any(s.categories is not None for s in summaries):
        notes.append("Category shares are each category's own interval; they need not add "
                     "up to exactly 100 % (noise).")
    notes.append(f"Perturbed counts, raw rates and standard errors: {detailed_hint}. The "
                 "method: docs/analysis.md.")
    return notes


def _odds(confidence: float) -> str:
    if abs(confidence - 0.95) < 1e-9:
        return "19 times out of 20"
    if abs(confidence - 0.99) < 1e-9:
        return "99 times out of 100"
    if abs(confidence - 0.9) < 1e-9:
        return "9 times out of 10"
    return f"with probability {confidence:.0%}"


def render_plain(summaries: Sequence[MetricSummary], title: str = "Deniable report", *,
                 projected: bool = False) -> str:
    """The plain reading of pooled estimates: per metric its reports and its estimate in
    percent (or its unit) with the interval; per categorical metric each category's share of
    devices; the notes once, below."""
    first = summaries[0] if summaries else None
    when = range_title(first.start, first.end) if first else ""
    pct = f"{first.confidence:.0%}".replace("%", " %") if first else "95 %"
    heading = f"{title}: {when}" if when else title
    scalar = [s for s in summaries if s.categories is None]
    out = heading + "\n"
    if scalar:
        rows = [(s.metric + ("" if s.version is None or s.version == 1 else f" (v{s.version})"),
                 f"{s.n:,}", kind_of(s.kind).slot_word, estimate_text(s),
                 plain_flags(s)) for s in scalar]
        out = text_table(heading, (("metric", "left"), ("reports", "right"),
                                   ("of", "left"), (f"estimate ({pct} interval)", "right"),
                                   ("notes", "left")), rows)
    for s in summaries:
        cats = s.categories
        if cats is None:
            continue
        simplex = cats.project_to_simplex() if projected and cats.n else None
        columns = [(kind_of(s.kind).slot_word, "left"),
                   (f"share of devices ({pct} interval)", "right")]
        if projected:
            columns.append(("drawn (BIASED)", "right"))
        columns.append(("notes", "left"))
        cat_rows: list[list[str]] = []
        for i, label in enumerate(cats.labels):
            row = [label, category_text(cats, i) if cats.n else "-"]
            if projected:
                row.append("-" if simplex is None else plain.percent(float(simplex[i]), 1))
            v = float(cats.value[i])
            row.append("too few reports to say much" if cats.n and
                       cats.ci_high[i] - cats.ci_low[i] >= 0.5 else
                       "below 0 by noise: near 0 %" if cats.n and v < 0 else "")
            cat_rows.append(row)
        out += "\n" + text_table(f"{s.metric} ({s.kind}, {s.n:,} reports)", columns, cat_rows)
        if projected:
            out += f"drawn: {_PROJECTION}.\n"
    return out + "\n" + "".join(f"{line}\n" for line in reading_notes(summaries))


def _value(x: float, lower: float | None) -> str:
    """A share to 4 decimals; a numeric metric's mean to 4 significant digits more."""
    if lower is None:
        return f"{x:.4f}"
    return plain.number(x, 6)


def _what(s: MetricSummary) -> str:
    estimand_text = s.estimand or "share of devices"
    if not kind_of(s.kind).percent:
        total = (f"; total over the {s.n:,} reports {plain.number(s.n * s.unclipped, 6)} "
                 f"[{plain.number(s.n * s.ci_low, 6)}, {plain.number(s.n * s.ci_high, 6)}]"
                 if s.n else "")
        return (f"{estimand_text}, in [{plain.exact(s.lower)}, {plain.exact(s.upper)}]"
                f"{total}")
    return estimand_text


def category_table(s: MetricSummary, *, projected: bool = False) -> str:
    """One categorical metric's shares: a row per category with both kinds of interval."""
    cats = s.categories
    assert cats is not None
    pct = f"{s.confidence:.0%}"
    columns = [("category", "left"), ("count", "right"), ("share (unbiased)", "right"),
               ("SE", "right"), (f"{pct} CI per category", "right"),
               (f"{pct} CI simultaneous", "right")]
    if projected:
        columns.append(("projected (BIASED)", "right"))
    columns.append(("notes", "left"))
    simplex = cats.project_to_simplex() if projected and cats.n else None
    rows = []
    for i, label in enumerate(cats.labels):
        v = float(cats.value[i])
        row = [label, f"{int(cats.counts[i]):,}", "-" if not cats.n else f"{v:+.4f}",
               "-" if not cats.n else f"{float(cats.stderr[i]):.4f}",
               f"[{cats.ci_low[i]:.4f}, {cats.ci_high[i]:.4f}]",
               f"[{cats.sim_low[i]:.4f}, {cats.sim_high[i]:.4f}]"]
        if projected:
            row.append("-" if simplex is None else f"{simplex[i]:.4f}")
        row.append(category_flags(v, cats.n, float(cats.ci_low[i]), float(cats.ci_high[i])))
        rows.append(row)
    version = "" if s.version is None else f" v{s.version}"
    title = (f"{s.metric}{version} ({s.kind}, d = {cats.d}, epsilon {s.epsilon:.3f}, "
             f"n = {s.n:,})")
    foot = f"{s.metric}: {cats.interval_note}."
    if projected:
        foot += f" projected: {_PROJECTION}."
    return text_table(title, columns, rows) + foot + "\n"


def render(summaries: Sequence[MetricSummary], fmt: str, *, projected: bool = False,
           detailed: bool = False) -> str:
    """Render in one of FORMATS; ``projected`` adds the biased simplex projection of each
    categorical metric's shares, flagged as such; ``detailed``: the analyst's table (JSON and
    CSV always carry every number)."""
    if fmt == "json":
        return to_json(summaries, projected=projected)
    if fmt == "csv":
        return to_csv(summaries, projected=projected)
    if fmt == "table":
        return render_table(summaries, projected=projected, detailed=detailed)
    raise ValueError(f"format must be one of {FORMATS}. Got {fmt!r} instead.")


# -- time series ----------------------------------------------------------------------------

SERIES_COLUMNS = ("metric", "version", "mechanism", "epsilon", "granularity", "window", "start",
                  "end", "n", "ones", "yes_rate", "estimate", "stderr", "ci_low", "ci_high",
                  "confidence", "clipped", "interval_clipped", "wide", "unclipped", "periods",
                  "partial", "flags", "range_from", "range_to", "kind", "category", "sim_low",
                  "sim_high")
SPARKS = "▁▂▃▄▅▆▇█"


def series_rows(ts: TimeSeries) -> list[dict[str, Any]]:
    """One dict per bucket with SERIES_COLUMNS; NaN becomes None, times are ISO 8601 UTC.
    Categorical and histogram metrics: one dict per (bucket, category), the category's
    unbiased share in ``estimate``, its per-category interval in ``ci_low``/``ci_high`` and the
    simultaneous one in ``sim_low``/``sim_high``. Boolean rows have no ``kind`` key (their
    shape is the collector dashboard's); numeric rows carry the mean, in the metric's units."""
    if ts.simultaneous is not None:
        return _category_series_rows(ts)
    lower, upper = (ts.metric.mechanism.lower, ts.metric.mechanism.upper) \
        if not kind_of(ts.kind).percent else (None, None)  # type: ignore[union-attr]
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
            "flags": in_units(bucket_flags(n, bool(e.clipped[i]), bool(e.wide[i]),
                                           float(e.unclipped[i]), interval_clipped, partial[i]),
                              None if lower is None else float(lower),
                              None if upper is None else float(upper)),
            "range_from": _plain(ts.range_start), "range_to": _plain(ts.range_end),
        })
    return rows


def _category_series_rows(ts: TimeSeries) -> list[dict[str, Any]]:
    e, sim = ts.estimates, ts.simultaneous
    assert sim is not None and ts.values is not None
    mechanism = ts.metric.mechanism
    labels = ts.metric.spec.labels
    partial = coverage_notes(ts.starts, ts.step.total_seconds(), ts.window, ts.range_start,
                             ts.range_end)
    note = INTERVAL_NOTE.format(pct=f"{e.confidence:.0%}", d=len(labels))
    rows = []
    for i, (start, end) in enumerate(zip(ts.starts, ts.ends)):
        n = int(ts.values[i, 0])
        periods = int(e.periods[i].max()) if e.periods is not None else 1
        for j, label in enumerate(labels):
            value = float(e.unclipped[i, j])
            caveat = category_flags(value, n, float(e.ci_low[i, j]), float(e.ci_high[i, j]))
            rows.append({
                "metric": ts.metric.name, "version": ts.metric.version,
                "mechanism": mechanism.id, "epsilon": mechanism.epsilon,
                "granularity": ts.granularity, "window": ts.window,
                "start": start.isoformat(), "end": end.isoformat(), "n": n,
                "ones": int(ts.values[i, 1 + j]), "yes_rate": _number(float(e.yes_rate[i, j])),
                "estimate": _number(value), "stderr": _number(float(e.stderr[i, j])),
                "ci_low": float(e.ci_low[i, j]), "ci_high": float(e.ci_high[i, j]),
                "confidence": e.confidence, "clipped": False,
                "interval_clipped": bool(e.interval_clipped[i, j])
                if e.interval_clipped is not None else False,
                "wide": bool(e.wide[i, j]), "unclipped": _number(value), "periods": periods,
                "partial": bool(partial[i]),
                "flags": "; ".join(x for x in (partial[i], caveat, note if n else "") if x),
                "range_from": _plain(ts.range_start), "range_to": _plain(ts.range_end),
                "kind": ts.kind, "category": label, "sim_low": float(sim.ci_low[i, j]),
                "sim_high": float(sim.ci_high[i, j])})
    return rows


def _most_periods(ts: TimeSeries) -> int:
    p = ts.estimates.periods
    return int(p.max()) if p is not None and p.size else 1


def series_document(ts: TimeSeries) -> dict[str, Any]:
    """One series as a JSON-ready document: the metric, its mechanism and its buckets."""
    mechanism = ts.metric.mechanism
    from deniable.analysis.window import estimand

    doc = {"metric": ts.metric.name, "version": ts.metric.version,
           "description": ts.metric.description,
           "mechanism": mechanism.id, "epsilon": mechanism.epsilon,
           "policy": ts.metric.policy.summary(),
           "estimand": estimand(ts.metric.policy, _most_periods(ts), ts.step.total_seconds(),
                                 ts.kind),
           "from": _plain(ts.range_start), "to": _plain(ts.range_end),
           "granularity": ts.granularity, "window": ts.window,
           "confidence": ts.estimates.confidence, "kind": ts.kind}
    shared = ("metric", "version", "mechanism", "epsilon", "granularity", "window",
              "confidence", "range_from", "range_to", "kind")
    if not kind_of(ts.kind).percent:
        doc["lower"] = float(mechanism.lower)  # type: ignore[union-attr]
        doc["upper"] = float(mechanism.upper)  # type: ignore[union-attr]
    if ts.simultaneous is None:
        doc["buckets"] = [{k: v for k, v in row.items() if k not in shared}
                          for row in series_rows(ts)]
        return doc
    # Categorical: per bucket its n and flags, and one entry per category.
    labels = ts.metric.spec.labels
    doc["categories"] = list(labels)
    doc["intervals"] = INTERVAL_NOTE.format(pct=f"{ts.estimates.confidence:.0%}", d=len(labels))
    rows = series_rows(ts)
    buckets = []
    for i in range(len(ts)):
        chunk = rows[i * len(labels):(i + 1) * len(labels)]
        first = chunk[0]
        buckets.append({
            "start": first["start"], "end": first["end"], "n": first["n"],
            "periods": first["periods"], "partial": first["partial"],
            "categories": [{k: row[k] for k in ("category", "ones", "yes_rate", "estimate",
                                                "stderr", "ci_low", "ci_high", "sim_low",
                                                "sim_high", "wide", "flags")}
                           for row in chunk]})
    doc["buckets"] = buckets
    return doc


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


MIN_SPAN = 0.1
"""A share's sparkline and chart axis span at least this (10 points): a 5-point shift fills
half of it, while noise of a point or less stays within a block or two."""


def zoomed_axis(values: Sequence[float], low: float = 0.0, high: float = 1.0,
                min_span: float | None = None) -> tuple[float, float]:
    """An axis around ``values`` (NaN ignored) inside [low, high], at least ``min_span`` wide
    (default: MIN_SPAN of the [low, high] span), its ends on round numbers: a shift of a few
    points shows, and a reader sees the axis' ends beside it."""
    span = high - low
    floor_span = (min_span if min_span is not None else MIN_SPAN) * (span if min_span is None
                                                                       else 1.0)
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return low, high
    a, b = min(finite), max(finite)
    width = max(b - a, floor_span) * 1.2
    middle = (a + b) / 2
    step = 10 ** math.floor(math.log10(width / 4)) if width > 0 else span / 10
    lo = max(low, math.floor((middle - width / 2) / step) * step)
    hi = min(high, math.ceil((middle + width / 2) / step) * step)
    if hi - lo < floor_span:  # pushed against an end of the range
        lo, hi = (low, low + floor_span) if lo <= low else (high - floor_span, high)
    return lo, hi


def _label(moment: datetime, granularity: str) -> str:
    if granularity == "hour":
        return f"{moment:%Y-%m-%d %H:00}"
    if granularity == "week":
        iso = moment.isocalendar()
        return f"{iso.year}-W{iso.week:02d} ({moment:%m-%d})"
    return f"{moment:%Y-%m-%d}"


def render_series_table(series: Sequence[TimeSeries], width: int = 120, *,
                        detailed: bool = False) -> str:
    """Per metric: a sparkline of the estimate (on an axis zoomed to it, its ends printed),
    then an aligned row per bucket: its reports and estimate in percent (a numeric metric's
    mean in its unit) with the interval; the notes once, below. ``detailed``: the raw
    yes-rate and 4 decimals, as analysts read them."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), width=width, force_terminal=False)
    for ts in series:
        e = ts.estimates
        if ts.simultaneous is not None:
            _category_series_table(console, ts, detailed=detailed)
            continue
        window = f", rolling {ts.window} {ts.granularity}s" if ts.window > 1 else ""
        pct = f"{e.confidence:.0%}"
        version = f" v{ts.metric.version}" if ts.metric.version is not None else ""
        when = range_title(ts.range_start, ts.range_end)
        title = (f"{ts.metric.name}{version} per {ts.granularity}{window}"
                 + (f" (epsilon {ts.metric.mechanism.epsilon:.3f})" if detailed else "")
                 + (f", {when}" if when else ""))
        table = Table(title=title, caption="trend:" + _spark(ts), caption_justify="left",
                      min_width=min(len(title) + 2, width))
        if not detailed:
            _plain_series(table, ts)
            console.print(table)
            continue
        for header, justify in (("bucket (UTC)", "left"), ("n", "right"),
                                ("raw yes-rate", "right"), ("estimate", "right"),
                                (f"{pct} CI", "right"), ("notes", "left")):
            table.add_column(header, justify=justify)  # type: ignore[arg-type]
        for row, start in zip(series_rows(ts), ts.starts):
            empty = row["n"] == 0
            table.add_row(_label(start, ts.granularity), f"{row['n']:,}",
                          "-" if empty else f"{row['yes_rate']:.4f}",
                          "-" if empty else _value(row['estimate'], _lower(ts)),
                          f"[{_value(row['ci_low'], _lower(ts))}, "
                          f"{_value(row['ci_high'], _lower(ts))}]", row["flags"])
        console.print(table)
        from deniable.analysis.window import estimand

        console.print(f"{ts.metric.policy.summary()}. Each value: "
                      f"{estimand(ts.metric.policy, _most_periods(ts), ts.step.total_seconds(), ts.kind)}.")
    if not detailed and series:
        for line in _series_notes(series):
            console.print(line)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _plain_series(table: Any, ts: TimeSeries) -> None:
    """A boolean or numeric series' rows in the plain reading."""
    pct = f"{ts.estimates.confidence:.0%}".replace("%", " %")
    for header, justify in ((f"{ts.granularity} (UTC)", "left"), ("reports", "right"),
                            (f"estimate ({pct} interval)", "right"), ("notes", "left")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    e = ts.estimates
    unit = plain.unit_of(ts.metric.name)
    partial = coverage_notes(ts.starts, ts.step.total_seconds(), ts.window, ts.range_start,
                             ts.range_end)
    for i, start in enumerate(ts.starts):
        n = int(e.n[i])
        shown = "-" if n == 0 else (
            plain.mean(float(e.estimate[i]), float(e.ci_low[i]), float(e.ci_high[i]), unit)
            if not kind_of(ts.kind).percent else
            plain.share(float(e.estimate[i]), float(e.ci_low[i]), float(e.ci_high[i])))
        notes = ["no reports" if n == 0 else "too few reports to say much"
                 if bool(e.wide[i]) else ""]
        if partial[i]:
            notes.append("partial " + partial[i].split(":", 1)[0].removeprefix("partial "))
        table.add_row(_label(start, ts.granularity), f"{n:,}", shown,
                      "; ".join(x for x in notes if x))


def _series_notes(series: Sequence[TimeSeries]) -> list[str]:
    """The notes of a series report, once: what each value is, the interval, where the
    details are."""
    from deniable.analysis.window import estimand

    notes = reading_notes([_Shown(ts) for ts in series], detailed_hint="--detailed, or "
                          "--format csv or json")
    policies: dict[str, list[str]] = {}
    for ts in series:
        what = estimand(ts.metric.policy, _most_periods(ts), ts.step.total_seconds(), ts.kind)
        policies.setdefault(f"{ts.metric.policy.summary()}: each value is the {what}",
                            []).append(ts.metric.name)
    notes[1:1] = [f"{', '.join(names)}: {text}." for text, names in policies.items()]
    return notes


@dataclasses.dataclass(frozen=True)
class _Shown:
    """What ``reading_notes`` needs of a series."""

    ts: TimeSeries

    @property
    def kind(self) -> str:
        return self.ts.kind

    @property
    def confidence(self) -> float:
        return self.ts.estimates.confidence

    @property
    def periods(self) -> int:
        return _most_periods(self.ts)

    @property
    def categories(self) -> object | None:
        return self.ts.simultaneous


def _lower(ts: TimeSeries) -> float | None:
    return float(ts.metric.mechanism.lower) if not kind_of(ts.kind).percent else None  # type: ignore[union-attr]


def _spark(ts: TimeSeries) -> str:
    """The sparkline on an axis zoomed to the estimates (at least 10 points of [0, 1], or a
    tenth of a numeric metric's range), its ends printed beside it."""
    values = [float(v) if n else math.nan for v, n in zip(ts.estimates.estimate, ts.n)]
    if not kind_of(ts.kind).percent:
        lower, upper = (float(ts.metric.mechanism.lower),  # type: ignore[union-attr]
                        float(ts.metric.mechanism.upper))  # type: ignore[union-attr]
        low, high = zoomed_axis(values, lower, upper)
        unit = plain.unit_of(ts.metric.name)
        return (f"  {plain.number(low)} {sparkline(values, low, high)} {plain.number(high)}"
                f"{' ' + unit if unit else ''} (mean)")
    low, high = zoomed_axis(values)
    return f"  {plain.percent(low)} {sparkline(values, low, high)} {plain.percent(high)}"


def _category_series_table(console: Any, ts: TimeSeries, *, detailed: bool = False) -> None:
    """A categorical series: per category a sparkline of its share (on an axis zoomed to the
    category's shares, its ends printed) and the range's first and last bucket with reports;
    ``detailed`` adds the interval note and unbiased shares to 4 decimals."""
    from rich.table import Table

    e = ts.estimates
    pct = f"{e.confidence:.0%}"
    version = f" v{ts.metric.version}" if ts.metric.version is not None else ""
    window = f", rolling {ts.window} {ts.granularity}s" if ts.window > 1 else ""
    when = range_title(ts.range_start, ts.range_end)
    table = Table(title=f"{ts.metric.name}{version} ({ts.kind}) per {ts.granularity}{window} "
                        + (f"(epsilon {ts.metric.mechanism.epsilon:.3f})" if detailed else
                           "share of devices in each category")
                        + (f", {when}" if when else ""))
    busy = np.flatnonzero(ts.n > 0)
    first = f"{_label(ts.starts[busy[0]], ts.granularity)}" if len(busy) else "first"
    last = f"{_label(ts.starts[busy[-1]], ts.granularity)}" if len(busy) else "last"
    headers = ((("category", "left"), ("share per bucket, 0 to 1", "left"),
                ("first", "right"), (f"{pct} CI (first)", "right"),
                ("last", "right"), (f"{pct} CI (last)", "right")) if detailed else
               (("category", "left"), ("share per bucket (axis)", "left"),
                (first, "right"), (last, "right")))
    for header, justify in headers:
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for j, label in enumerate(ts.metric.spec.labels):
        values = [float(v) if ts.n[i] else math.nan for i, v in enumerate(e.unclipped[:, j])]
        if detailed:
            cells = [label, sparkline(values)]
            for i in ((busy[0], busy[-1]) if len(busy) else ()):
                cells += [f"{e.unclipped[i, j]:+.4f}", f"[{e.ci_low[i, j]:.4f}, "
                          f"{e.ci_high[i, j]:.4f}]"]
            table.add_row(*(cells + ["-"] * (6 - len(cells))))
            continue
        low, high = zoomed_axis(values)
        cells = [label, f"{plain.percent(low)} {sparkline(values, low, high)} "
                        f"{plain.percent(high)}"]
        for i in ((busy[0], busy[-1]) if len(busy) else ()):
            cells.append(plain.share(float(e.unclipped[i, j]), float(e.ci_low[i, j]),
                                     float(e.ci_high[i, j])))
        table.add_row(*(cells + ["-"] * (4 - len(cells))))
    console.print(table)
    if detailed:
        console.print(f"n per bucket: {', '.join(f'{int(v):,}' for v in ts.n[:12])}"
                      f"{' ...' if len(ts) > 12 else ''}. "
                      f"{INTERVAL_NOTE.format(pct=pct, d=len(ts.metric.spec.labels))}. Every "
                      "bucket, with simultaneous intervals: --format csv or json.")
    else:
        console.print(f"Reports per {ts.granularity}: "
                      f"{', '.join(f'{int(v):,}' for v in ts.n[:12])}"
                      f"{' ...' if len(ts) > 12 else ''}.")


def render_series(series: Sequence[TimeSeries], fmt: str, *, detailed: bool = False) -> str:
    """Render time series in one of FORMATS (``detailed``: the analyst's table)."""
    if fmt == "json":
        return series_to_json(series)
    if fmt == "csv":
        return series_to_csv(series)
    if fmt == "table":
        return render_series_table(series, detailed=detailed)
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
    kinds = {kind_of(c.kind) for c in comparisons}
    what = ("the share of devices answering yes"
            if all(k.slot_word == "yes" for k in kinds) else
            "each estimate (share of yes; a category's share, per category; a numeric "
            "metric's mean, in its units)")
    return text_table(f"Changes (b - a) in {what}, {correction} correction across all "
                      f"{len(comparisons)} rows",
                      [(h, "left" if h == "metric" else "right") for h in headers], rows)


def correction_pct(comparisons: Sequence[Comparison]) -> str:
    return f"{comparisons[0].confidence:.0%}" if comparisons else "95%"


def _p(p: float) -> str:
    if math.isnan(p):
        return "-"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


# -- history across versions ----------------------------------------------------------------

def render_history_table(h: Any) -> str:
    """A metric's series across its versions (``analysis.history``), plain: per bucket its
    reports, the version its reports are of, and the estimate with its interval; a rule where
    the version changed."""
    from deniable.analysis.history import MIXED

    pct = f"{h.confidence:.0%}".replace("%", " %")
    unit = plain.unit_of(h.metric)
    rows: list[list[str]] = []
    changed = {i: (a, b) for i, a, b in h.changes}
    for i, start in enumerate(h.starts):
        if i in changed:
            a, b = changed[i]
            rows.append([f"-- version {b} from here (was {a}) --", "", "", ""])
        v = int(h.version[i])
        shown = "-" if not h.n[i] else (
            plain.mean(float(h.estimate[i]), float(h.ci_low[i]), float(h.ci_high[i]), unit)
            if not kind_of(h.kind).percent else
            plain.share(float(h.estimate[i]), float(h.ci_low[i]), float(h.ci_high[i])))
        rows.append([_label(start, h.granularity), f"{int(h.n[i]):,}",
                     "several" if v == MIXED else str(v) if v else "-", shown])
    title = (f"{h.metric} across versions {', '.join(str(v) for v in h.versions)}, per "
             f"{h.granularity}: each version's reports debiased with its own mechanism")
    out = text_table(title, ((f"{h.granularity} (UTC)", "left"), ("reports", "right"),
                             ("version", "right"), (f"estimate ({pct} interval)", "right")),
                     rows)
    notes = ["A bucket with reports of several versions pools them by their reports "
             "(docs/analysis.md, \"History across versions\")."] + list(h.left_out)
    return out + "".join(f"{n}\n" for n in notes)


def history_document(h: Any) -> dict[str, Any]:
    """A history as a JSON-ready document: its versions, where they changed, its buckets."""
    from deniable.analysis.history import history_rows

    return {"metric": h.metric, "kind": h.kind, "granularity": h.granularity,
            "versions": h.versions, "confidence": h.confidence,
            "changes": [{"start": h.starts[i].isoformat(), "from": a, "to": b}
                        for i, a, b in h.changes],
            "left_out": h.left_out, "buckets": history_rows(h)}

