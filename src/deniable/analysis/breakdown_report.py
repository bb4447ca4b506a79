"""Breakdowns for analysts: terminal tables, JSON and CSV (and pandas rows).

Every output names the suppressed cells and why (fewer than ``min_reports`` reports: such an
estimate is mostly noise and a tiny cell can single people out), shows the "not stated" count,
and says that the dimension itself is public: sent and counted in clear, not protected by
local differential privacy.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Sequence
from typing import Any

from deniable.analysis.breakdown import NOT_STATED, Breakdown, cell_row
from deniable.analysis import plain
from deniable.analysis.report import (_p, _plain, category_text, estimate_text, flags,
                                      plain_flags, summary_rows, text_table)
from deniable.core.window import category_flags

BREAKDOWN_COLUMNS = ("metric", "kind", "by", "value", "label", "n", "suppressed", "reason",
                     "category", "estimate", "stderr", "ci_low", "ci_high", "sim_low",
                     "sim_high", "lower", "upper", "flags", "confidence", "min_reports",
                     "start", "end")
COMPARISON_ROWS = 30
"""The terminal table lists every comparison up to this many, else the significant ones."""


def breakdown_document(b: Breakdown) -> dict[str, Any]:
    """One breakdown, JSON-ready: its cells (``estimate`` null when suppressed, with
    ``reason``), ``not_stated``, the comparisons, and the notes in words."""
    return {"metric": b.metric, "kind": b.kind, "mechanism": b.total.mechanism,
            "version": b.total.version, "by": b.by, "from": _plain(b.start),
            "to": _plain(b.end), "confidence": b.confidence, "min_reports": b.min_reports,
            "n": b.total.n, "not_stated": b.not_stated,
            "suppressed": [c.label for c in b.suppressed],
            "suppression": b.note or None, "dimensions": b.dimensions_note,
            "cells": [cell_row(b, c) for c in b.cells],
            "comparisons": [{k: _plain(v) for k, v in dataclasses.asdict(c).items()}
                            for c in b.comparisons]}


def to_json(breakdowns: Sequence[Breakdown]) -> str:
    """{"breakdowns": [breakdown_document, ...]}; NaN is written as null."""
    return json.dumps({"breakdowns": [breakdown_document(b) for b in breakdowns]}, indent=2)


def breakdown_rows(b: Breakdown) -> list[dict[str, Any]]:
    """Flat rows (CSV, pandas): one per cell, one per (cell, category) of a categorical
    metric; a suppressed cell is one row with no estimate and its ``reason``; then the
    "not stated" row (n only)."""
    common = {"metric": b.metric, "kind": b.kind, "by": b.by, "confidence": b.confidence,
              "min_reports": b.min_reports, "start": _plain(b.start), "end": _plain(b.end)}
    rows: list[dict[str, Any]] = []
    for cell in b.cells:
        head = {**common, "value": cell.value, "label": cell.label, "n": cell.n,
                "suppressed": cell.suppressed, "reason": cell.reason}
        if cell.summary is None:
            rows.append({**head, "flags": "suppressed: " + cell.reason})
            continue
        for r in summary_rows(cell.summary):
            rows.append({**head, **{k: r.get(k) for k in (
                "category", "estimate", "stderr", "ci_low", "ci_high", "sim_low", "sim_high",
                "lower", "upper", "flags")}})
    rows.append({**common, "value": NOT_STATED, "label": "", "n": b.not_stated,
                 "suppressed": False,
                 "reason": b.not_stated_reason,
                 "flags": "no estimate"})
    return rows


def to_csv(breakdowns: Sequence[Breakdown]) -> str:
    """CSV with a header of BREAKDOWN_COLUMNS, ``breakdown_rows`` of each breakdown."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=BREAKDOWN_COLUMNS, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for b in breakdowns:
        writer.writerows(breakdown_rows(b))
    return out.getvalue()


def _title(b: Breakdown) -> str:
    version = f"version {b.total.version}, " if b.total.version is not None else ""
    return (f"{b.metric} by {b.by} ({b.kind}, {version}n = {b.total.n:,}, "
            f"{b.start:%Y-%m-%d %H:%M} to "
            f"{b.end:%Y-%m-%d %H:%M} UTC, cells under {b.min_reports:,} devices suppressed)")


def _fmt(x: float, numeric: bool) -> str:
    return plain.number(x, 6) if numeric else f"{x:.4f}"


def breakdown_table(b: Breakdown) -> str:
    """One breakdown as an aligned table, then its comparisons and notes."""
    pct = f"{b.confidence:.0%}"
    numeric = b.kind == "numeric"
    categorical = b.kind in ("categorical", "histogram")
    if categorical:
        columns = [(b.by, "left"), ("category", "left"), ("n", "right"),
                   ("share (unbiased)", "right"), (f"{pct} CI per category", "right"),
                   (f"{pct} CI simultaneous", "right"), ("notes", "left")]
    else:
        columns = [(b.by, "left"), ("n", "right"), ("mean" if numeric else "estimate", "right"),
                   (f"{pct} CI", "right"), ("notes", "left")]
    rows: list[list[str]] = []
    for cell in b.cells:
        s = cell.summary
        if s is None:
            rows.append([cell.value, *(["-"] if categorical else []), f"{cell.n:,}",
                         *["-"] * (len(columns) - (4 if categorical else 3)),
                         "SUPPRESSED: " + cell.reason])
            continue
        if s.categories is not None:
            cats = s.categories
            for i, label in enumerate(cats.labels):
                v = float(cats.value[i])
                rows.append([cell.value if i == 0 else "", label, f"{cell.n:,}" if i == 0 else "",
                             f"{v:+.4f}", f"[{cats.ci_low[i]:.4f}, {cats.ci_high[i]:.4f}]",
                             f"[{cats.sim_low[i]:.4f}, {cats.sim_high[i]:.4f}]",
                             category_flags(v, cats.n, float(cats.ci_low[i]),
                                            float(cats.ci_high[i]))])
        else:
            rows.append([cell.value, f"{cell.n:,}", _fmt(s.estimate, numeric),
                         f"[{_fmt(s.ci_low, numeric)}, {_fmt(s.ci_high, numeric)}]",
                         flags(s)])
    stated = [NOT_STATED, *(["-"] if categorical else []), f"{b.not_stated:,}",
              *["-"] * (len(columns) - (4 if categorical else 3)),
              "no estimate: " + b.not_stated_reason]
    rows.append(stated)
    out = text_table(_title(b), columns, rows)
    out += comparisons_table(b)
    notes = [b.note, b.dimensions_note]
    if numeric and b.total.lower is not None:
        notes.append(f"{b.metric}: means in [{plain.exact(b.total.lower)}, "
                     f"{plain.exact(b.total.upper)}].")
    if categorical and b.total.categories is not None:
        notes.append(f"{b.metric}: {b.total.categories.interval_note}.")
    return out + "".join(f"{n}\n" for n in notes if n)


def comparisons_table(b: Breakdown) -> str:
    """The pairwise comparisons: all of them up to COMPARISON_ROWS, else the significant."""
    if not b.comparisons:
        return (f"No comparisons: fewer than two cells with an estimate.\n"
                if len([c for c in b.cells if not c.suppressed]) < 2 else "")
    listed = list(b.comparisons)
    significant = [c for c in listed if c.significant]
    shown = listed if len(listed) <= COMPARISON_ROWS else significant
    first = listed[0]
    pct = f"{first.confidence:.0%}"
    columns = [("b - a", "left"), *([("category", "left")] if first.category else []),
               ("difference", "right"), (f"{pct} CI", "right"), ("p", "right"),
               (f"p ({first.correction})", "right"), ("significant", "left")]
    rows = [[f"{_short(c.b)} - {_short(c.a)}", *([c.category or ""] if first.category else []),
             _signed(c.difference), f"[{_signed(c.ci_low)}, {_signed(c.ci_high)}]",
             _p(c.p_value), _p(c.p_adjusted),
             "yes" if c.significant else "no"] for c in shown]
    title = (f"Comparisons between {b.by} values: {len(significant)} of {len(listed)} "
             f"significant at {first.alpha:g} ({first.correction.capitalize()} over every pair"
             f"{' and category' if first.category else ''})"
             + ("" if shown is listed else "; the significant ones:"))
    return text_table(title, columns, rows) if shown else title + "\n"


def _signed(x: float) -> str:
    """A difference to 4 significant digits with its sign, never in scientific notation."""
    text = plain.number(x, 4)
    return text if text.startswith("-") else "+" + text


def _short(label: str) -> str:
    return ", ".join(part.partition("=")[2] for part in label.split(","))


def difference_text(c: Any, kind: str, metric: str = "") -> str:
    """A difference in plain words: "+5.5 points (+3.1 to +7.9)" for shares, "-201 ms
    (-344 to -59 ms)" for a numeric metric's mean."""
    if kind == "numeric":
        return plain.mean(c.difference, c.ci_low, c.ci_high, plain.unit_of(metric or c.metric),
                          signed=True)
    return plain.share(c.difference, c.ci_low, c.ci_high, signed=True)


def plain_breakdown(b: Breakdown) -> str:
    """One breakdown in the plain reading: per value its reports and estimate in percent (a
    mean in its unit; a categorical metric's share per category), the values that differ
    clearly, and what was suppressed and why."""
    pct = f"{b.confidence:.0%}".replace("%", " %")
    categorical = b.kind in ("categorical", "histogram")
    columns = [(b.by, "left"), *([("category", "left")] if categorical else []),
               ("reports", "right"), (f"estimate ({pct} interval)", "right"), ("notes", "left")]
    rows: list[list[str]] = []
    for cell in b.cells:
        s = cell.summary
        if s is None:
            rows.append([cell.value, *(["-"] if categorical else []), f"{cell.n:,}", "hidden",
                         cell.reason])
            continue
        if s.categories is not None:
            for i, label in enumerate(s.categories.labels):
                rows.append([cell.value if i == 0 else "", label,
                             f"{cell.n:,}" if i == 0 else "", category_text(s.categories, i),
                             ""])
        else:
            rows.append([cell.value, f"{cell.n:,}", estimate_text(s), plain_flags(s)])
    rows.append([NOT_STATED, *(["-"] if categorical else []), f"{b.not_stated:,}", "-",
                 b.not_stated_reason])
    version = f", version {b.total.version}" if b.total.version not in (None, 1) else ""
    title = (f"{b.metric} by {b.by}{version}: {b.start:%Y-%m-%d %H:%M} to "
             f"{b.end:%Y-%m-%d %H:%M} UTC")
    out = text_table(title, columns, rows)
    significant = [c for c in b.comparisons if c.significant]
    if b.comparisons:
        family = (f"{plain.count(len(b.comparisons), 'comparison')}: every pair"
                  + (" and category" if categorical else "") + ", "
                  + b.comparisons[0].correction.capitalize() + "-corrected together")
        if significant:
            out += f"Clear differences ({family}):\n" + "".join(
                f"  {_short(c.b)} vs {_short(c.a)}" + (f" [{c.category}]" if c.category else "")
                + f": {difference_text(c, b.kind, b.metric)}, {plain.p_value(c.p_adjusted)}\n"
                for c in significant[:COMPARISON_ROWS])
        else:
            out += f"No clear difference between {b.by} values ({family}).\n"
    notes = [b.note, b.dimensions_note]
    return out + "".join(f"{n}\n" for n in notes if n)


def render_breakdowns(breakdowns: Sequence[Breakdown], fmt: str, *,
                      detailed: bool = False) -> str:
    """Render in ``table``, ``json`` or ``csv`` (``detailed``: the analyst's table)."""
    if fmt == "json":
        return to_json(breakdowns)
    if fmt == "csv":
        return to_csv(breakdowns)
    if fmt == "table":
        return "\n".join((breakdown_table if detailed else plain_breakdown)(b)
                          for b in breakdowns)
    raise ValueError(f"format must be table, json or csv. Got {fmt!r} instead.")
