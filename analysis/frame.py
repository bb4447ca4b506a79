"""pandas DataFrames for notebooks and pipelines. pandas is imported only when asked for."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deniable.analysis.compare import Comparison
from deniable.analysis.estimate import MetricSummary
from deniable.analysis.report import series_rows
from deniable.analysis.timeseries import TimeSeries

if TYPE_CHECKING:
    import pandas as pd

Framable = TimeSeries | MetricSummary | Comparison


def to_frame(data: Framable | Sequence[Framable]) -> pd.DataFrame:
    """A DataFrame with one row per bucket (time series), metric (summaries) or comparison.

    Time series get the columns of ``report.SERIES_COLUMNS``, with ``start`` and ``end`` as
    UTC timestamps and NaN where a bucket has no reports; the ``clipped``, ``wide`` and
    ``flags`` columns carry the honest caveats. Summaries and comparisons get one column per
    field.

    Raises:
        ImportError: pandas is not installed (``pip install 'deniable[analysis]'``).
        TypeError: something that is not a TimeSeries, MetricSummary or Comparison.
    """
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - pandas ships with the analysis extra
        raise ImportError("to_frame needs pandas: pip install 'deniable[analysis]'") from exc
    items = [data] if isinstance(data, (TimeSeries, MetricSummary, Comparison)) else list(data)
    rows: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, TimeSeries):
            rows.extend(series_rows(item))
        elif isinstance(item, (MetricSummary, Comparison)):
            rows.append(dataclasses.asdict(item))
        else:
            raise TypeError(f"to_frame takes TimeSeries, MetricSummary or Comparison objects. "
                            f"Got {type(item).__name__} instead.")
    frame = pd.DataFrame(rows)
    for column in ("start", "end", "range_from", "range_to"):
        if column in frame:
            frame[column] = pd.to_datetime(frame[column], utc=True)
    for column in ("yes_rate", "estimate", "stderr", "unclipped"):
        if column in frame:
            frame[column] = frame[column].astype("float64")
    return frame
