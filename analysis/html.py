"""A self-contained HTML report: one section per metric with its chart (inline SVG from
matplotlib), a summary table and a plain-language note on what epsilon means for it, then the
comparisons. No scripts, fonts, styles or images are fetched: the file opens offline."""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from deniable.analysis.charts import series_svg
from deniable.analysis.compare import Comparison
from deniable.analysis.estimate import MetricSummary
from deniable.analysis.report import bucket_flags, flags
from deniable.analysis.timeseries import TimeSeries
from deniable.client.mechanism import RandomizedResponse

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:60rem;
color:#222;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem}h2{margin-top:2.5rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.8rem 0;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #e4e4e4;padding:.25rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}
td.flags{text-align:left;color:#a33}.note{background:#f5f7fa;padding:.7rem 1rem;border-radius:6px}
.sig{color:#a33;font-weight:600}svg{max-width:100%;height:auto}
small{color:#666}
"""


@dataclass(frozen=True)
class MetricSection:
    """What the report shows for one metric: its series and its pooled summary."""

    series: TimeSeries
    summary: MetricSummary


def epsilon_note(mechanism: RandomizedResponse, n: int, confidence: float = 0.95) -> str:
    """What epsilon means for a metric, in plain words (HTML-escaped text)."""
    ratio = float(mechanism.likelihood_ratio)
    posterior = ratio / (1 + ratio)
    p1, q = mechanism.p_yes_given_yes, mechanism.p_yes_given_no
    text = (
        f"Privacy: epsilon = {mechanism.epsilon:.3f} for this metric. Every device randomizes "
        f"its answer before sending it: a true \u201cyes\u201d is sent as yes with probability "
        f"{p1} ({float(p1):.0%}), a true \u201cno\u201d with probability {q} ({float(q):.0%}). "
        f"So one report shifts the odds of anyone\u2019s guess about that person by at most "
        f"e^epsilon = {ratio:.2f}\u00d7: someone who thought yes and no equally likely before "
        f"seeing a report can be at most {posterior:.0%} sure after it. ")
    if n > 0:
        text += (f"The price is noise: with these {n:,} reports the estimate is good to "
                 f"\u00b1{mechanism.margin_of_error(n, confidence):.4f} at worst "
                 f"({confidence:.0%} interval); four times as many reports halve that. ")
    else:
        text += "There are no reports in this range yet. "
    text += ("A smaller epsilon protects people more and needs more reports for the same "
             "precision.")
    return html.escape(text)


def _cell(value: float | int | str, field: str, fmt: str = "{:.4f}") -> str:
    if isinstance(value, float) and math.isnan(value):
        shown = "-"
    elif isinstance(value, str):
        shown = html.escape(value)
    else:
        shown = fmt.format(value)
    return f'<td data-field="{field}">{shown}</td>'


def _summary_table(s: MetricSummary) -> str:
    pct = f"{s.confidence:.0%}"
    return (
        '<table class="summary"><thead><tr><th>metric</th><th>n</th><th>raw yes-rate</th>'
        f"<th>estimate</th><th>{pct} CI low</th><th>{pct} CI high</th><th>notes</th>"
        f'</tr></thead><tbody><tr data-metric="{html.escape(s.metric)}">'
        f"{_cell(s.metric, 'metric')}{_cell(s.n, 'n', '{:,}')}{_cell(s.yes_rate, 'yes_rate')}"
        f"{_cell(s.estimate, 'estimate')}{_cell(s.ci_low, 'ci_low')}"
        f"{_cell(s.ci_high, 'ci_high')}"
        f'<td class="flags" data-field="flags">{html.escape(flags(s))}</td></tr></tbody></table>')


def _buckets_table(ts: TimeSeries) -> str:
    e = ts.estimates
    rows = []
    for i, start in enumerate(ts.starts):
        n = int(e.n[i])
        note = bucket_flags(n, bool(e.clipped[i]), bool(e.wide[i]), float(e.unclipped[i]))
        rows.append(
            f'<tr data-start="{start.isoformat()}"><td>{start:%Y-%m-%d %H:%M}</td>'
            f"{_cell(n, 'n', '{:,}')}{_cell(float(e.yes_rate[i]), 'yes_rate')}"
            f"{_cell(float(e.estimate[i]), 'estimate')}{_cell(float(e.ci_low[i]), 'ci_low')}"
            f"{_cell(float(e.ci_high[i]), 'ci_high')}"
            f'<td class="flags">{html.escape(note)}</td></tr>')
    return ('<details><summary>Every bucket</summary><table class="buckets"><thead><tr>'
            f"<th>{ts.granularity} (UTC)</th><th>n</th><th>raw yes-rate</th><th>estimate</th>"
            "<th>CI low</th><th>CI high</th><th>notes</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></details>")


def _comparisons(comparisons: Sequence[Comparison]) -> str:
    if not comparisons:
        return ""
    c0 = comparisons[0]
    rows = "".join(
        f'<tr data-label="{html.escape(c.label)}"><td>{html.escape(c.label)}</td>'
        f"<td>{html.escape(c.a)}</td><td>{html.escape(c.b)}</td>"
        f"{_cell(c.difference, 'difference', '{:+.4f}')}{_cell(c.ci_low, 'ci_low', '{:+.4f}')}"
        f"{_cell(c.ci_high, 'ci_high', '{:+.4f}')}{_cell(c.p_value, 'p_value', '{:.4g}')}"
        f"{_cell(c.p_adjusted, 'p_adjusted', '{:.4g}')}"
        f'<td data-field="significant" class="{"sig" if c.significant else ""}">'
        f'{"yes" if c.significant else "no"}</td></tr>' for c in comparisons)
    return (
        "<h2>Changes</h2><p>Each row is b minus a: the later window minus the earlier, on the "
        "debiased (unclipped) estimates, with a normal-approximation interval and two-sided "
        f"p-value. With {len(comparisons)} comparisons at once, p-values are adjusted by the "
        f"{html.escape(c0.correction)} method; \u201csignificant\u201d means adjusted p \u2264 "
        f"{c0.alpha}. The two windows are taken as independent samples.</p>"
        '<table class="comparisons"><thead><tr><th>metric</th><th>a</th><th>b</th>'
        f"<th>difference</th><th>{c0.confidence:.0%} CI low</th><th>CI high</th><th>p</th>"
        "<th>p adjusted</th><th>significant</th></tr></thead><tbody>" + rows
        + "</tbody></table>")


def render_html(sections: Sequence[MetricSection], comparisons: Sequence[Comparison] = (),
                title: str = "Deniable report", generated_at: datetime | None = None) -> str:
    """The whole report as one HTML document (UTF-8 text), with nothing fetched from anywhere."""
    generated_at = generated_at or datetime.now(timezone.utc)
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p><small>Generated {generated_at:%Y-%m-%d %H:%M} UTC. Buckets are UTC, by the time "
        "the collector received the reports. Estimates are debiased shares of true \u201cyes\u201d "
        "answers; the band is the interval (Wilson on the perturbed yes-rate, mapped through "
        "the debiasing line and clipped to [0, 1]); the dashed line is the raw, perturbed "
        "yes-rate; bars are reports per bucket. Hollow points had too few reports for their "
        "interval to mean much; red rings were clipped to [0, 1].</small></p>",
    ]
    for section in sections:
        ts, s = section.series, section.summary
        parts.append(f'<section class="metric" id="metric-{html.escape(s.metric)}">'
                     f"<h2>{html.escape(s.metric)}</h2>")
        if s.description:
            parts.append(f"<p>{html.escape(s.description)}</p>")
        parts.append(f'<figure>{series_svg(ts)}<figcaption><small>{html.escape(s.metric)} per '
                     f"{ts.granularity}, {len(ts)} buckets</small></figcaption></figure>")
        parts.append(_summary_table(s))
        parts.append(f'<p class="note">{epsilon_note(ts.metric.mechanism, s.n, s.confidence)}'
                     "</p>")
        parts.append(_buckets_table(ts))
        parts.append("</section>")
    parts.append(_comparisons(comparisons))
    parts.append("</body></html>\n")
    return "".join(parts)
