"""Reports for analysts: a terminal table, JSON and CSV, from ``MetricSummary`` objects."""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Sequence

from deniable.analysis.estimate import MetricSummary

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
