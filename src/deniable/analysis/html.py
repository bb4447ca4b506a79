"""A self-contained HTML report: one section per metric with its chart (inline SVG from
matplotlib), a summary table and a plain-language note on what epsilon means for it, then the
comparisons. No scripts, fonts, styles or images are fetched: the file opens offline."""
from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deniable.analysis import plain
from deniable.analysis.bars import category_svg
from deniable.analysis.compare import Comparison
from deniable.analysis.estimate import MetricSummary, debias_values, numeric_range
from deniable.analysis.report import (category_flags, category_text, estimate_text, flags,
                                      plain_flags, reading_notes)
from deniable.client.mechanism import RandomizedResponse
from deniable.core.explain import epsilon_note
from deniable.core.window import kind_note
from deniable.analysis.report import range_title, zoomed_axis
from deniable.analysis.window import coverage_notes, estimand
from deniable.analysis.timeseries import TimeSeries

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:60rem;
color:#222;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem}h2{margin-top:2.5rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.8rem 0;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #e4e4e4;padding:.25rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}
td.flags{text-align:left;color:#a33}.note{background:#f5f7fa;padding:.7rem 1rem;border-radius:6px}
.sig{color:#a33;font-weight:600}svg{max-width:100%;height:auto}
small{color:#666}td svg.trend{display:block}.bars svg{width:100%;height:auto}details.metric{border-bottom:1px solid #eee;padding:.4rem 0}
details.metric>summary{cursor:pointer}.chart svg{width:100%;height:auto}
table.summary td,table.summary th{padding:.15rem .5rem}
"""

SCRIPT = r"""
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }
  function decode(box) {
    var raw = atob(box.dataset.series), count = +box.dataset.buckets, nb = +box.dataset.nbytes;
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    var view = new DataView(bytes.buffer), out = {est: [], low: [], high: [], n: [], flags: []};
    for (var j = 0; j < count; j++) {
      out.est.push(view.getUint16(2 * j, true) / 65535);
      out.low.push(view.getUint16(2 * (count + j), true) / 65535);
      out.high.push(view.getUint16(2 * (2 * count + j), true) / 65535);
      out.n.push(nb === 2 ? view.getUint16(6 * count + 2 * j, true)
                          : view.getUint32(6 * count + 4 * j, true));
      out.flags.push(bytes[(6 + nb) * count + j]);
    }
    return out;
  }
  function ticks(lo, hi) {
    var span = hi - lo, raw = span / 4, power = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * power; })
      .filter(function (v) { return v >= raw; })[0], out = [];
    for (var t = Math.ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
      out.push(Math.round(t * 1e9) / 1e9);
    return out;
  }
  function draw(box) {
    var d = decode(box), count = d.n.length, W = 900, H = 330, top = 230, pad = 66;
    var lo = box.dataset.lower === undefined ? null : +box.dataset.lower;
    var hi = lo === null ? null : +box.dataset.upper;
    var unit = box.dataset.unit || "";
    var shown = function (v) {
      return lo === null ? v.toFixed(3) : (lo + v * (hi - lo)).toPrecision(5);
    };
    // The axis: zoomed to the estimates and their intervals, at least a tenth of the range
    // (10 points of a share), so a shift of a few points shows; its ends on round numbers.
    var a = Infinity, b = -Infinity;
    for (var m = 0; m < count; m++) if (!(d.flags[m] & 1)) {
      a = Math.min(a, d.est[m], d.low[m]); b = Math.max(b, d.est[m], d.high[m]);
    }
    if (!(a <= b)) { a = 0; b = 1; }
    var width = Math.max(b - a, 0.1) * 1.15, mid = (a + b) / 2;
    var y0 = Math.max(0, mid - width / 2), y1 = Math.min(1, mid + width / 2);
    if (y1 - y0 < 0.1) { if (y0 <= 0) y1 = 0.1; else y0 = 0.9; }
    var svg = el("svg", {viewBox: "0 0 " + W + " " + H, role: "img", class: "series",
                         "font-family": "system-ui,sans-serif"});
    var x = function (i) { return pad + (i + 0.5) * (W - pad - 10) / Math.max(count, 1); };
    var y = function (v) {
      return 10 + (1 - (Math.min(Math.max(v, y0), y1) - y0) / (y1 - y0)) * (top - 40);
    };
    var inUnits = function (v) { return lo === null ? v : lo + v * (hi - lo); };
    var span = inUnits(y1) - inUnits(y0);
    ticks(inUnits(y0), inUnits(y1)).forEach(function (t) {
      var v = lo === null ? t : (t - lo) / (hi - lo);
      el("line", {x1: pad, x2: W - 10, y1: y(v), y2: y(v), stroke: "#e4e4e4"}, svg);
      el("text", {x: pad - 6, y: y(v) + 4, "font-size": 11, fill: "#555", "text-anchor": "end",
                  class: "y-tick"}, svg).textContent = lo === null
        ? (t * 100).toFixed(span >= 0.1 ? 0 : 1) + " %"
        : t.toLocaleString("en", {maximumFractionDigits: span >= 10 ? 0 : 2});
    });
    el("text", {x: 14, y: 10 + (top - 40) / 2, "font-size": 11, fill: "#333",
                "text-anchor": "middle", class: "y-title",
                transform: "rotate(-90 14 " + (10 + (top - 40) / 2) + ")"}, svg).textContent =
      box.dataset.ytitle || "";
    var band = [], back = [], line = [], maxN = Math.max.apply(null, d.n.concat([1]));
    var flushBand = function () {  // one band per run of buckets with reports
      if (band.length > 1) el("polygon", {points: band.concat(back).join(" "), fill: "#1f5fa8",
        "fill-opacity": 0.25, stroke: "#1f5fa8", "stroke-opacity": 0.4, "stroke-width": 0.7,
        class: "band"}, svg);
      else if (band.length === 1) el("line", {x1: band[0].split(",")[0],
        x2: band[0].split(",")[0], y1: band[0].split(",")[1], y2: back[0].split(",")[1],
        stroke: "#1f5fa8", "stroke-opacity": 0.4, "stroke-width": 6, class: "band"}, svg);
      band = []; back = [];
    };
    for (var i = 0; i < count; i++) {
      if (d.flags[i] & 1) { flushBand(); continue; }
      band.push(x(i) + "," + y(d.high[i])); back.unshift(x(i) + "," + y(d.low[i]));
      line.push(x(i) + "," + y(d.est[i]));
    }
    flushBand();
    el("polyline", {points: line.join(" "), fill: "none", stroke: "#1f5fa8", "stroke-width": 2,
                    class: "line"}, svg);
    var first0 = Date.parse(box.dataset.first), step0 = +box.dataset.step * 1000;
    var every = Math.max(1, Math.ceil(count / 8)), base = top - 30;
    el("line", {x1: pad, x2: W - 10, y1: base, y2: base, stroke: "#888"}, svg);
    for (var t = 0; t < count; t += every) {
      var iso = new Date(first0 + t * step0).toISOString();
      el("text", {x: x(t), y: base + 14, "font-size": 11, fill: "#555", "text-anchor": "middle",
                  class: "x-tick"}, svg).textContent = box.dataset.granularity === "hour"
        ? iso.slice(5, 13).replace("T", " ") + "h" : iso.slice(5, 10);
    }
    el("text", {x: pad + (W - pad - 10) / 2, y: base + 28, "font-size": 11, fill: "#333",
                "text-anchor": "middle", class: "x-title"}, svg).textContent =
      box.dataset.granularity + " (UTC) " + box.dataset.first.slice(0, 4);
    var bw = Math.max((W - pad - 10) / Math.max(count, 1) * 0.8, 0.5);
    for (var k = 0; k < count; k++) {
      var h = d.n[k] / maxN * (H - top - 20);
      el("rect", {x: x(k) - bw / 2, y: H - 10 - h, width: bw, height: h, fill: "#b9c7d6"}, svg);
      if (d.flags[k] & 1) continue;
      if (count <= 400) el("circle", {cx: x(k), cy: y(d.est[k]), r: 2.5, fill:
        d.flags[k] & 4 ? "white" : "#1f5fa8", stroke: "#1f5fa8"}, svg);
      if (d.flags[k] & 2) el("circle", {cx: x(k), cy: y(d.est[k]), r: 5, fill: "none",
        stroke: "#c0392b"}, svg);
    }
    el("text", {x: pad - 6, y: H - 10, "font-size": 10, fill: "#666", "text-anchor": "end"},
       svg).textContent = "reports";
    el("text", {x: pad, y: H - 1, "font-size": 10, fill: "#666"}, svg).textContent =
      "reports per " + box.dataset.granularity + " (max " + maxN.toLocaleString("en") + ")";
    box.appendChild(svg);
    var rows = ["<table class=\"buckets\"><thead><tr><th>" + box.dataset.granularity +
      " (UTC)</th><th>n</th><th>estimate</th><th>CI low</th><th>CI high</th><th>notes</th>" +
      "</tr></thead><tbody>"];
    var first = Date.parse(box.dataset.first), step = +box.dataset.step * 1000;
    for (var b = 0; b < count; b++) {
      var empty = d.flags[b] & 1, notes = empty ? "no reports" :
        [d.flags[b] & 2 ? "clipped" : "", d.flags[b] & 4 ? "too few reports" : ""]
          .filter(Boolean).join("; ");
      rows.push("<tr><td>" + new Date(first + b * step).toISOString().slice(0, 16)
        .replace("T", " ") + "</td><td>" + d.n[b].toLocaleString() + "</td><td>" +
        (empty ? "-" : shown(d.est[b])) + "</td><td>" + shown(d.low[b]) + "</td><td>" +
        shown(d.high[b]) + "</td><td class=\"flags\">" + notes + "</td></tr>");
    }
    var fold = document.createElement("details");
    fold.innerHTML = "<summary>Every bucket (3 decimals)</summary>" + rows.join("") +
      "</tbody></table>";
    box.appendChild(fold);
  }
  document.querySelectorAll("details.metric").forEach(function (details) {
    details.addEventListener("toggle", function () {
      var box = details.querySelector(".chart");
      if (details.open && box && !box.firstChild) draw(box);
    });
  });
  function openHash() {
    var target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (target && target.tagName === "DETAILS") target.open = true;
  }
  window.addEventListener("hashchange", openHash);
  openHash();
})();
"""


@dataclass(frozen=True)
class MetricSection:
    """What the report shows for one metric: its series and its pooled summary."""

    series: TimeSeries
    summary: MetricSummary


def _cell(value: float | int | str, field: str, fmt: str = "{:.4f}") -> str:
    if isinstance(value, float) and math.isnan(value):
        shown = "-"
    elif isinstance(value, str):
        shown = html.escape(value)
    else:
        shown = fmt.format(value)
    return f'<td data-field="{field}">{shown}</td>'


TREND_CATEGORIES = 64
"""Up to this many categories, each category's row draws its share over time."""

FULL_CHANGES_TABLE = 50
"""Up to this many comparisons the Changes table lists them all; beyond, the significant ones
(every metric's change, interval and p-values stay in its overview row)."""


def _p_cell(p: float, field: str) -> str:
    shown = "-" if math.isnan(p) else "&lt;0.0001" if p < 1e-4 else f"{p:.4f}"
    return f'<td data-field="{field}">{shown}</td>'


def _comparisons(comparisons: Sequence[Comparison], family: str = "metric") -> str:
    """"What changed": one line per metric in plain words and the correction's family, then
    every comparison's numbers, folded."""
    from deniable.analysis.changes import family_note, what_changed

    if not comparisons:
        return ""
    c0 = comparisons[0]
    listed = list(comparisons)
    shown_note = ""
    if len(listed) > FULL_CHANGES_TABLE:
        listed = [c for c in comparisons if c.significant]
        shown_note = (f" Of the {plain.count(len(comparisons), 'comparison')}, the "
                      f"{len(listed)} significant ones are listed; every metric\u2019s change "
                      "is in its overview row (its interval and p-values on hover).")
    lines = what_changed(comparisons)
    sig = ' class="sig"'
    items = "".join(f'<li data-metric="{html.escape(line.metric)}" '
                    f'data-changed="{int(line.changed)}"{sig if line.changed else ""}>'
                    f"{html.escape(line.text)}</li>" for line in lines)
    rows = "".join(
        f'<tr data-label="{html.escape(c.label)}"><td>{html.escape(c.label)}</td>'
        f"<td>{html.escape(c.a)}</td><td>{html.escape(c.b)}</td>"
        f"{_cell(c.difference, 'difference', '{:+.4f}')}{_cell(c.ci_low, 'ci_low', '{:+.4f}')}"
        f"{_cell(c.ci_high, 'ci_high', '{:+.4f}')}{_p_cell(c.p_value, 'p_value')}"
        f"{_p_cell(c.p_adjusted, 'p_adjusted')}"
        f'<td data-field="significant" class="{"sig" if c.significant else ""}">'
        f'{"yes" if c.significant else "no"}</td></tr>' for c in listed)
    return (
        f'<h2>What changed</h2><p>The later part of the range ({html.escape(c0.b)}) against '
        f"the earlier ({html.escape(c0.a)}), UTC.</p>"
        f'<ul class="changes" data-family="{html.escape(family)}">{items}</ul>'
        f'<p class="family"><small>{html.escape(family_note(comparisons, family))} The '
        f"intervals are {c0.confidence:.0%} intervals of the change.</small></p>"
        "<details><summary>Every comparison, in numbers</summary><p>Each row is b minus a: "
        "the later window minus the earlier, on the "
        "debiased (unclipped) estimates (a share; for a categorical metric one row per "
        "category, labelled \u201cmetric: category\u201d; a numeric metric\u2019s mean, in "
        "its units), with a normal-approximation interval and two-sided "
        f"p-value, adjusted by the {html.escape(c0.correction)} method; "
        f"\u201csignificant\u201d means adjusted p \u2264 "
        f"{c0.alpha}. Each side's interval counts the devices behind it, by the metric's "
        "collection policy; the two windows are taken as independent, which is conservative "
        f"when the same memoized devices report in both.{shown_note}</p>"
        '<table class="comparisons"><thead><tr><th>metric</th><th>a</th><th>b</th>'
        f"<th>difference</th><th>{c0.confidence:.0%} CI low</th><th>CI high</th><th>p</th>"
        "<th>p adjusted</th><th>significant</th></tr></thead><tbody>" + rows
        + "</tbody></table></details>")


def _packed_series(ts: TimeSeries) -> str:
    """A series as compact base64 for the page's script: per bucket, the estimate and its
    interval as uint16 (value * 65535, so within 1e-5 of the numbers above), n as uint32 and
    flag bits (1 no reports, 2 clipped, 4 too few reports), little-endian arrays one after
    another; n as uint16 when every n fits (``n_bytes``), else uint32. About 9 bytes a
    bucket: a year of days is 4.4 KB of text."""
    e = ts.estimates
    has = e.n > 0
    lower, upper = numeric_range(ts.metric.mechanism)  # numeric: drawn on [lower, upper]

    def scaled(values: NDArray[np.float64]) -> bytes:
        clean = np.where(has & np.isfinite(values), (values - lower) / (upper - lower), 0.0)
        return np.round(np.clip(clean, 0.0, 1.0) * 65535).astype("<u2").tobytes()

    flags_bits = ((~has).astype(np.uint8) | (e.clipped.astype(np.uint8) << 1)
                  | ((e.wide & has).astype(np.uint8) << 2))
    n = e.n.astype("<u2" if n_bytes(ts) == 2 else "<u4").tobytes()
    return base64.b64encode(scaled(e.estimate) + scaled(e.ci_low) + scaled(e.ci_high) + n
                            + flags_bits.tobytes()).decode()


def n_bytes(ts: TimeSeries) -> int:
    """Bytes per bucket count in the packed series: 2 when every n fits, else 4."""
    return 2 if not len(ts.estimates.n) or int(ts.estimates.n.max()) < 2 ** 16 else 4


def trend_svg(ts: TimeSeries, points: int = 30, width: int = 150, height: int = 28,
              category: int | None = None) -> str:
    """A small inline SVG of the trend: the series pooled into at most ``points`` consecutive
    chunks (counts summed, then debiased), each with its interval as a band, on an axis
    zoomed to the pooled estimates (at least 10 points of a share, a tenth of a numeric
    metric's range; its ends printed at the left), so a shift of 5 points fills half of it.
    A categorical series draws its ``category``-th share (with its per-category interval)."""
    e = ts.estimates
    if len(ts.n) == 0 or int(ts.n.sum()) == 0 or \
            (ts.simultaneous is not None) != (category is not None):
        return f'<svg class="trend" width="{width}" height="{height}"></svg>'
    count = len(ts.n)
    edges = np.linspace(0, count, min(points, count) + 1).astype(np.int64)
    starts = edges[:-1]
    values = ts.values if ts.values is not None else np.stack([e.n, e.ones], axis=1)
    pooled, _ = debias_values(ts.metric, np.add.reduceat(values, starts, axis=0),
                              e.confidence)
    if category is not None:  # one category's column of the (chunks, d) arrays
        pooled = type(pooled)(**{f: (v[:, category] if isinstance(v, np.ndarray) and v.ndim == 2
                                     else v) for f, v in vars(pooled).items()})
    n = pooled.n
    has = n > 0
    label_w = 30  # the axis' ends, printed at the left
    xs = label_w + (np.arange(len(n)) + 0.5) * ((width - label_w) / len(n))
    lower, upper = numeric_range(ts.metric.mechanism)
    # Zoomed to the pooled estimates: at least a tenth of the range (10 points of a share).
    lo, hi = zoomed_axis([float(v) for v in pooled.estimate[has]], lower, upper)

    def y(values: NDArray[np.float64]) -> NDArray[np.float64]:
        return (1 - np.clip((values - lo) / (hi - lo), 0, 1)) * (height - 2) + 1

    est, low, high = y(pooled.estimate), y(pooled.ci_low), y(pooled.ci_high)
    xs, est, low, high = xs[has], est[has], low[has], high[has]
    line = _path(xs, est)
    band = _path(np.r_[xs, xs[::-1]], np.r_[high, low[::-1]]) + "z"
    if ts.kind == "numeric":
        top_label, bottom_label = plain.number(hi), plain.number(lo)
    else:
        top_label, bottom_label = plain.percent(hi), plain.percent(lo)
    return (f'<svg class="trend" width="{width}" height="{height}" viewBox="0 0 {width} '
            f'{height}" role="img" aria-label="trend, axis {bottom_label} to {top_label}">'
            f'<rect x="{label_w}" width="{width - label_w}" height="{height}" fill="#fafafa"/>'
            f'<g class="y-tick" font-size="8" fill="#666" text-anchor="end">'
            f'<text x="{label_w - 2}" y="8">{top_label}</text><text x="{label_w - 2}" '
            f'y="{height - 1}">{bottom_label}</text></g>'
            f'<path d="{band}" fill="#1f5fa8" fill-opacity=".25"/>'
            f'<path d="{line}" fill="none" stroke="#1f5fa8" stroke-width="1.3"/></svg>')


def _path(xs: NDArray[np.floating], ys: NDArray[np.floating]) -> str:  # type: ignore[type-arg]
    """An SVG path through the points, in whole pixels, as relative moves (short text)."""
    px, py = np.round(xs).astype(np.int64), np.round(ys).astype(np.int64)
    if not len(px):
        return ""
    steps = " ".join(f"{dx} {dy}" for dx, dy in zip(np.diff(px).tolist(), np.diff(py).tolist()))
    return f"M{px[0]} {py[0]}" + (f"l{steps}" if steps else "")


def _change(comparison: Comparison | None) -> str:
    """The overview's "what changed" cell: an arrow and the change in plain words when it is
    significant after the correction, "no clear change" otherwise; the numbers on hover."""
    if comparison is None:
        return '<td data-field="change">-</td>'
    c = comparison
    arrow = ("\u25b2" if c.difference > 0 else "\u25bc") if c.significant else "\u2013"
    css = ' class="sig"' if c.significant else ""
    size = (plain.mean(c.difference, c.ci_low, c.ci_high, plain.unit_of(c.metric or c.label),
                       signed=True) if c.kind == "numeric"
            else plain.share(c.difference, c.ci_low, c.ci_high, signed=True))
    shown = size.partition(" (")[0]
    return (f'<td data-field="change"{css} data-significant="{int(c.significant)}" '
            f'title="{html.escape(size)}; {plain.p_value(c.p_value)}, corrected '
            f'{plain.p_value(c.p_adjusted)}">'
            f"{arrow} {html.escape(shown if c.significant else 'no clear change')}</td>")


def _overview(sections: Sequence[MetricSection], changes: dict[str, Comparison]) -> str:
    rows = []
    for section in sections:
        s = section.summary
        name = html.escape(s.metric)
        if s.categories is not None:
            rows.append(_category_overview(section, changes))
            continue
        numbers = (f' data-value="{plain.exact(s.estimate, 7)}" '
                   f'data-ci-low="{plain.exact(s.ci_low, 7)}" '
                   f'data-ci-high="{plain.exact(s.ci_high, 7)}"')
        rows.append(
            f'<tr data-metric="{name}"><td data-field="metric"><a href="#metric-{name}">{name}'
            f"</a></td>{_cell(s.n, 'n', '{:,}')}"
            f'<td data-field="estimate"{numbers}>{html.escape(estimate_text(s))}</td>'
            f"<td>{trend_svg(section.series)}</td>"
            f"{_change(changes.get(s.metric))}"
            f'<td class="flags" data-field="flags">{html.escape(plain_flags(s))}</td></tr>')
    pct = f"{sections[0].summary.confidence:.0%}".replace("%", " %") if sections else "95 %"
    return ('<h2>Overview</h2><table class="summary"><thead><tr><th>metric</th><th>reports</th>'
            f"<th>estimate ({pct} interval)</th>"
            "<th>trend</th><th>what changed</th><th>notes</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _category_overview(section: MetricSection, changes: dict[str, Comparison]) -> str:
    """A categorical metric's overview row: n, its largest shares, how many changed."""
    s = section.summary
    cats = s.categories
    assert cats is not None
    name = html.escape(s.metric)
    top = np.argsort(-np.nan_to_num(cats.value, nan=-1.0))[:3] if cats.n else []
    shown = ", ".join(f"{html.escape(cats.labels[i])} {plain.percent(float(cats.value[i]))}"
                      for i in top)
    moved = [c for c in changes.values() if c.metric == s.metric and c.category is not None]
    significant = [c for c in moved if c.significant]
    change = ("-" if not moved else
              f'<span class="sig">{len(significant)} of {len(moved)} changed</span>'
              if significant else f"none of {len(moved)} changed")
    return (f'<tr data-metric="{name}"><td data-field="metric"><a href="#metric-{name}">'
            f"{name}</a></td>{_cell(s.n, 'n', '{:,}')}"
            f'<td data-field="categories">{s.kind}, {cats.d} categories'
            f"{': ' + shown if shown else ''}</td><td></td>"
            f'<td data-field="change">{change}</td>'
            f'<td class="flags" data-field="flags">{html.escape(plain_flags(s))}'
            "</td></tr>")


def _category_detail(section: MetricSection) -> str:
    """A categorical metric's bar chart (a histogram's bars touch) and its table."""
    s = section.summary
    cats = s.categories
    assert cats is not None
    spec = section.series.metric.spec
    edges = tuple(plain.exact(float(e)) for e in spec.edges)
    chart = category_svg(cats, histogram=s.kind == "histogram", edges=edges)
    pct = f"{cats.confidence:.0%}"
    trends = cats.d <= TREND_CATEGORIES and len(section.series) > 1
    word = "bucket" if s.kind == "histogram" else "category"
    plain_rows = "".join(
        f'<tr data-category="{html.escape(label)}"><td>{html.escape(label)}</td>'
        f'<td data-field="share" data-value="{plain.exact(float(cats.value[i]), 7)}">'
        f"{html.escape(category_text(cats, i)) if cats.n else '-'}</td>"
        f"<td>{html.escape(_interval_text(float(cats.sim_low[i]), float(cats.sim_high[i])))}"
        "</td>"
        + (f"<td>{trend_svg(section.series, category=i)}</td>" if trends else "")
        + f'<td class="flags">{"below 0 by noise: near 0 %" if cats.n and cats.value[i] < 0 else ""}</td></tr>'
        for i, label in enumerate(cats.labels))
    rows = "".join(
        f"<tr><td>{html.escape(label)}</td>"
        f"{_cell(int(cats.counts[i]), 'count', '{:,}')}"
        f"{_cell(float(cats.value[i]), 'estimate', '{:+.4f}')}"
        f"{_cell(float(cats.stderr[i]), 'stderr')}{_cell(float(cats.ci_low[i]), 'ci_low')}"
        f"{_cell(float(cats.ci_high[i]), 'ci_high')}{_cell(float(cats.sim_low[i]), 'sim_low')}"
        f"{_cell(float(cats.sim_high[i]), 'sim_high')}"
        + f'<td class="flags">{html.escape(category_flags(float(cats.value[i]), cats.n, float(cats.ci_low[i]), float(cats.ci_high[i])))}</td></tr>'
        for i, label in enumerate(cats.labels))
    pct_plain = pct.replace("%", " %")
    table = (f'<table class="shares"><thead><tr><th>{word}</th>'
             f"<th>share of devices ({pct_plain} interval)</th>"
             f"<th>all {cats.d} at once ({pct_plain})</th>"
             + ("<th>share over time</th>" if trends else "") +
             f"<th>notes</th></tr></thead><tbody>{plain_rows}</tbody></table>"
             '<details class="detail"><summary>Details: counts, unbiased shares, standard '
             'errors</summary><table class="categories"><thead>'
             f"<tr><th>{word}</th><th>count (perturbed)</th>"
             f"<th>share (unbiased)</th><th>SE</th><th>{pct} CI low (per category)</th>"
             f"<th>high</th><th>{pct} CI low (simultaneous)</th><th>high</th>"
             f"<th>notes</th></tr></thead><tbody>{rows}</tbody></table></details>")
    return (f'<div class="bars">{chart}</div>{_category_time_chart(section)}'
            f"<p><small>{html.escape(cats.interval_note)}. "
            "Shares are unbiased and not clipped: by noise one may fall below 0, and they need "
            "not sum to exactly 1 (no projection onto the simplex is applied; it would bias "
            f"them).</small></p>{table}")


def _interval_text(low: float, high: float) -> str:
    """An interval of shares alone, in percent: "(29–78 %)"."""
    text = plain.share((low + high) / 2, low, high)
    return "(" + text.partition(" (")[2]


TIME_CHART_LINES = 10
"""A categorical metric's time chart draws its largest categories, at most this many."""
TIME_CHART_POINTS = 60
"""Longer series are pooled into at most this many stretches (counts summed, then
debiased), so the chart stays small and its intervals readable."""


def _pooled(ts: TimeSeries, points: int) -> tuple[list[datetime], Any]:
    """The series pooled into at most ``points`` consecutive stretches: their starts and
    their estimates (each stretch's counts summed, then debiased)."""
    count = len(ts.n)
    edges = np.linspace(0, count, min(points, count) + 1).astype(np.int64)
    starts = np.unique(edges[:-1])
    values = ts.values if ts.values is not None else np.stack(
        [ts.estimates.n, ts.estimates.ones], axis=1)
    pooled, _ = debias_values(ts.metric, np.add.reduceat(values, starts, axis=0),
                              ts.estimates.confidence)
    return [ts.starts[int(i)] for i in starts], pooled


def _category_time_chart(section: MetricSection) -> str:
    """A categorical or histogram metric's shares over time: one line per category (the
    largest TIME_CHART_LINES), each with its per-category interval as a band, on a dated
    axis zoomed to the shares."""
    from deniable.analysis.timechart import Line, share_axis, time_chart_svg

    ts, cats = section.series, section.summary.categories
    if cats is None or len(ts) < 2 or not cats.n:
        return ""
    starts, pooled = _pooled(ts, TIME_CHART_POINTS)
    has = pooled.n[:, 0] > 0 if pooled.n.ndim == 2 else pooled.n > 0
    order = np.argsort(-np.nan_to_num(cats.value, nan=-1.0))[:TIME_CHART_LINES]
    lines = [Line(cats.labels[j], np.where(has, pooled.unclipped[:, j], np.nan),
                  pooled.ci_low[:, j], pooled.ci_high[:, j]) for j in order]
    word = "bucket" if section.summary.kind == "histogram" else "category"
    shown = "" if cats.d <= TIME_CHART_LINES else f" (the {TIME_CHART_LINES} largest)"
    pooled_note = "" if len(starts) == len(ts) else f", pooled into {len(starts)} stretches"
    chart = time_chart_svg(starts, ts.granularity if len(starts) == len(ts) else "day",
                           lines, y_title=f"share of devices in each {word} (%)",
                           axis=share_axis(lines),
                           title=f"Share of devices per {word} over time{shown}"
                                 f"{pooled_note}")
    return f'<div class="chart time">{chart}</div>'


def _policies(sections: Sequence[MetricSection]) -> tuple[dict[str, str], str]:
    """Each distinct collection policy once per page, as a lettered legend saying what a
    bucket's value and a metric's pooled summary estimate; returns (policy -> letter, HTML)."""
    refs: dict[str, str] = {}
    items = []
    for section in sections:
        s, ts = section.summary, section.series
        group = (s.policy, "categorical" if s.categories is not None else s.kind)
        if group in refs:
            continue
        ref = _letters(len(refs))
        refs[group] = ref  # type: ignore[index]
        periods = ts.estimates.periods
        most = int(periods.max()) if periods is not None and periods.size else 1
        items.append(
            f"<b>{ref}</b>: {html.escape(s.policy)}. Each bucket's value is the "
            f"{html.escape(estimand(ts.metric.policy, most, ts.step.total_seconds(), ts.kind))}"
            f"; a metric's summary pools its periods with reports: the "
            f"{html.escape(estimand(ts.metric.policy, None, kind=ts.kind))}.")
    return refs, ('<details class="policies"><summary>Collection policies (what each value '
                  f'estimates)</summary><p><small>{" ".join(items)}</small></p></details>')


def _letters(i: int) -> str:
    """A, B, ..., Z, AA, AB, ...: a short label for the ``i``-th policy of a page."""
    label = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        label = chr(ord("A") + r) + label
    return label


def _cuts(ts: TimeSeries) -> str:
    """The buckets that the range cuts (partial buckets and windows), in words, escaped."""
    cut = [f"{start:%Y-%m-%d %H:%M}: {note}" for start, note in zip(
        ts.starts, coverage_notes(ts.starts, ts.step.total_seconds(), ts.window,
                                  ts.range_start, ts.range_end)) if note]
    return html.escape("; ".join(cut[:8])) + (" ..." if len(cut) > 8 else "")


def _history_chart(h: Any) -> str:
    """A metric's series across its versions: one line and band, a marker where the version
    changed, each part debiased with its own version's mechanism."""
    from deniable.analysis.timechart import Line, share_axis, time_chart_svg

    line = Line(f"versions {', '.join(str(v) for v in h.versions)}", h.estimate, h.ci_low,
                h.ci_high)
    marks = [(i, f"version {b}") for i, _, b in h.changes]
    if h.kind == "numeric":
        lower, upper = float(h.parts[-1].metric.mechanism.lower), \
            float(h.parts[-1].metric.mechanism.upper)
        values = [float(v) for v in np.r_[h.estimate, h.ci_low, h.ci_high][
            np.isfinite(np.r_[h.estimate, h.estimate, h.estimate])]]
        axis = zoomed_axis(values, lower, upper)
        unit = plain.unit_of(h.metric)
        title = f"mean{f' ({unit})' if unit else ''} over devices"
    else:
        axis, title = share_axis([line]), "share of devices answering yes (%)"
    chart = time_chart_svg(h.starts, h.granularity, [line], y_title=title,
                           percent=h.kind != "numeric", axis=axis, marks=marks,
                           title="Across versions: each version's reports debiased with its "
                                 "own mechanism")
    notes = "; ".join(f"version {b} from {h.starts[i]:%Y-%m-%d %H:%M} UTC (was {a})"
                      for i, a, b in h.changes)
    return (f'<div class="chart history" data-versions="{",".join(map(str, h.versions))}">'
            f"{chart}<p><small>{html.escape(notes)}. A bucket with reports of several versions "
            "pools them by their reports.</small></p></div>")


def _section(section: MetricSection, policy_refs: dict[str, str], page_cuts: str,
             joined: Any = None) -> str:
    ts, s = section.series, section.summary
    name = html.escape(s.metric)
    first = ts.starts[0].isoformat() if len(ts) else ""
    if s.categories is not None:
        head = f"{s.kind}, {s.categories.d} categories, {s.n:,} reports"
    elif s.kind == "numeric":
        head = f"mean {html.escape(estimate_text(s))}"
    else:
        head = f"{html.escape(estimate_text(s))} <small>answer yes</small>"
    parts = [f'<details class="metric" id="metric-{name}" data-metric="{name}" '
             f'data-kind="{s.kind}"><summary><b>{name}</b> {head}</summary>']
    if s.description:
        parts.append(f"<p>{html.escape(s.description)}</p>")
    if joined is not None:
        parts.append(_history_chart(joined))
    if s.categories is not None:
        parts.append(_category_detail(section))
    else:
        unit = plain.unit_of(s.metric)
        bounds = (f' data-lower="{s.lower!r}" data-upper="{s.upper!r}"'
                  f' data-unit="{html.escape(unit)}" data-ytitle="mean{f" ({unit})" if unit else ""}'
                  f' over devices"' if s.kind == "numeric" else
                  ' data-ytitle="share of devices answering yes (%)"')
        parts.append(f'<div class="chart" data-first="{first}" '
                     f'data-step="{int(ts.step.total_seconds())}" '
                     f'data-granularity="{ts.granularity}"'
                     f' data-buckets="{len(ts)}" data-nbytes="{n_bytes(ts)}"{bounds}'
                     f' data-series="{_packed_series(ts)}"></div>')
    # The collection policies, what the values estimate and the range's cuts are written once
    # per page (``_policies``, ``_cuts``); here only this metric's own numbers, and its cuts if
    # they differ from the page's.
    version = "" if s.version is None else f"v{s.version}; "
    rolled = f" Rolling {ts.window} {ts.granularity}s." if ts.window > 1 else ""
    interval = "" if s.categories is not None else (
        f", {s.confidence:.0%} interval [{plain.number(s.ci_low, 5)}, "
        f"{plain.number(s.ci_high, 5)}]" if s.kind == "numeric"
        else f", {s.confidence:.0%} interval [{s.ci_low:.4f}, {s.ci_high:.4f}]")
    detail = "" if s.categories is not None or not s.n else (
        f"; raw (perturbed) yes-rate {s.yes_rate:.4f} of {s.n:,} reports, unbiased estimate "
        f"{plain.number(s.unclipped, 6)}, standard error {plain.number(s.stderr, 4)}")
    parts.append(f'<details class="detail"><summary>Details</summary><p class="policy"><small>'
                 f"{version}policy "
                 f"{policy_refs[(s.policy, 'categorical' if s.categories is not None else s.kind)]}; "  # type: ignore[index]
                 f"epsilon {s.epsilon:.3f}; {s.n:,} reports over {s.periods} periods"
                 f"{interval}{detail}"
                 f"{'; ' + html.escape(flags(s, intervals=False)) if flags(s, intervals=False) else ''}.{rolled}</small></p></details>")
    cut = _cuts(ts)
    if cut and cut != page_cuts:
        parts.append(f'<p class="partial"><small>{cut}</small></p>')
    parts.append("</details>")
    return "".join(parts)


def _breakdowns(breakdowns: Sequence[Any]) -> str:
    """The "by" sections: per breakdown, a table of cells (suppressed ones say why), the
    "not stated" count, the significant comparisons and the notes. Plain HTML, no script."""

    if not breakdowns:
        return ""
    parts = ["<h2>Breakdowns</h2>", '<p class="note">Each value of a public dimension is a '
             "cell: its reports pooled over the range and debiased. Dimensions are sent and "
             "counted in clear: they are <b>not</b> protected by local differential privacy "
             "(the metric\u2019s value is, in every cell). Cells with too few reports are "
             "suppressed: no estimate is shown, because such an estimate is mostly noise and a "
             "tiny cell can single people out; suppressed cells are never compared.</p>"]
    for b in breakdowns:
        name = html.escape(b.metric)
        pct = f"{b.confidence:.0%}"
        categorical = b.kind in ("categorical", "histogram")
        head = (f"<tr><th>{html.escape(b.by)}</th>" + ("<th>category</th>" if categorical
                                                        else "")
                + f"<th>reports</th><th>estimate ({pct.replace('%', ' %')} interval)</th>"
                + "<th>notes</th></tr>")
        rows = []
        for cell in b.cells:
            s = cell.summary
            klass = ' class="suppressed"' if cell.suppressed else ""
            value = html.escape(cell.value)
            if s is None:
                rows.append(f"<tr{klass}><td>{value}</td>" + ("<td>-</td>" if categorical
                                                              else "")
                            + f"<td>{cell.n:,}</td><td>hidden</td><td>"
                            f"{html.escape('SUPPRESSED: ' + cell.reason)}</td></tr>")
            elif s.categories is not None:
                for i, label in enumerate(s.categories.labels):
                    rows.append(f"<tr><td>{value if i == 0 else ''}</td>"
                                f"<td>{html.escape(label)}</td>"
                                f"<td>{f'{cell.n:,}' if i == 0 else ''}</td>"
                                f"<td>{html.escape(category_text(s.categories, i))}</td>"
                                "<td></td></tr>")
            else:
                rows.append(f"<tr><td>{value}</td><td>{cell.n:,}</td>"
                            f"<td>{html.escape(estimate_text(s))}</td>"
                            f"<td>{html.escape(plain_flags(s))}</td></tr>")
        rows.append("<tr><td>not stated</td>" + ("<td>-</td>" if categorical else "")
                    + f"<td>{b.not_stated:,}</td><td>-</td>"
                    f"<td>{html.escape(b.not_stated_reason)}</td></tr>")
        significant = [c for c in b.comparisons if c.significant]
        compared = (f"{len(significant)} of {plain.count(len(b.comparisons), 'comparison')} "
                    f"show a clear difference ({b.comparisons[0].correction.capitalize()}-"
                    f"corrected over every pair{' and category' if categorical else ''})"
                    + (": " + "; ".join(
                        html.escape(f"{_value_of(c.b)} vs {_value_of(c.a)}"
                                    + (f" [{c.category}]" if c.category else "")
                                    + f" {_difference(c, b.kind, b.metric)}, "
                                    + plain.p_value(c.p_adjusted))
                        for c in significant[:20]) if significant else "")
                    if b.comparisons else "No comparisons: fewer than two cells with an "
                    "estimate")
        parts.append(
            f'<section class="breakdown" id="by-{name}-{html.escape(b.by)}" '
            f'data-metric="{name}" data-by="{html.escape(b.by)}"><h3>{name} by '
            f"{html.escape(b.by)} <small>{b.kind}, {b.total.n:,} reports, cells under "
            f"{b.min_reports:,} devices suppressed</small></h3><table>{head}{''.join(rows)}"
            f"</table><p><small>{compared}.</small></p>"
            + (f'<p class="note"><small>{html.escape(b.note)}</small></p>' if b.note else "")
            + "</section>")
    return "".join(parts)


def _difference(c: Comparison, kind: str, metric: str) -> str:
    from deniable.analysis.breakdown_report import difference_text

    return difference_text(c, kind, metric)


def _value_of(label: str) -> str:
    return ", ".join(part.partition("=")[2] for part in label.split(","))


def render_html(sections: Sequence[MetricSection], comparisons: Sequence[Comparison] = (),
                title: str = "Deniable report", generated_at: datetime | None = None, *,
                breakdowns: Sequence[Any] = (), family: str = "metric",
                histories: dict[str, Any] | None = None) -> str:
    """The whole report as one HTML document (UTF-8 text), with nothing fetched from anywhere.

    It opens with the range and how to read it (the method one click away), an overview, one
    row per metric (estimate in percent or its unit with its interval, the trend, what
    changed), then "What changed", one line per metric (``family``: the correction's family
    the comparisons were corrected in, ``analysis.changes``), then each metric's chart,
    summary and bucket table, drawn by the page's own script when the metric is opened. A
    thousand metrics with a year of days write in about a second and weigh a few MB.
    ``breakdowns`` (``analysis.breakdown``) add a "by" section per breakdown, saying which
    cells were suppressed and why. ``histories`` (``analysis.history``, by metric) add the
    series across versions to the metrics that have one, marked where the version changed.
    """
    generated_at = generated_at or datetime.now(timezone.utc)
    changes = {c.label: c for c in comparisons}
    first_summary = sections[0].summary if sections else None
    when = html.escape(range_title(first_summary.start, first_summary.end)) \
        if first_summary else ""
    notes = reading_notes([section.summary for section in sections],
                          detailed_hint="open a metric, then \u201cDetails\u201d; or "
                          "<code>deniable report --format json</code>")
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="range"><b>{when}</b>. <small>Generated '
        f"{generated_at:%Y-%m-%d %H:%M} UTC.</small></p>" if when else "",
        '<div class="note reading">' + "".join(
            f"<p>{html.escape(n) if '<code>' not in n else n}</p>" for n in notes) + "</div>",
        "<details class=\"method\"><summary>Method</summary><p><small>Buckets are UTC, by "
        "the time the collector received the reports. Estimates are debiased: shares of "
        "true \u201cyes\u201d answers (boolean metrics), each category\u2019s share "
        "(categorical and histogram metrics: bar charts with per-category and simultaneous "
        "intervals), or the mean (numeric metrics, on their declared range); the band is the "
        "interval (Wilson on the perturbed rate, mapped through the debiasing line and "
        "clipped to the range). Trends are pooled into at most 30 stretches, each with its "
        "interval as a band, on an axis zoomed to the values (at least 10 points of a share, "
        "or a tenth of a numeric metric\u2019s range); \u25b2/\u25bc mark a change "
        "between the range\u2019s halves that is significant after the correction. Open a "
        "metric for its chart (estimate, interval band, reports as bars; hollow points had too "
        "few reports, red rings were clipped) and its buckets. Exact per-bucket numbers: "
        "<code>deniable report --every \u2026 --format csv</code>. The whole method: "
        "docs/analysis.md.</small></p></details>",
        _overview(sections, changes),
        _comparisons(comparisons, family),
        "<h2>Metrics</h2>",
    ]
    policy_refs: dict[str, str] = {}
    page_cuts = ""
    if sections:
        first = sections[0].summary
        page_cuts = _cuts(sections[0].series)
        parts.append(f'<p class="range"><small>Range: {when}; {first.confidence:.0%} '
                     "intervals."
                     f"{' Partial buckets (every metric): ' + page_cuts + '.' if page_cuts else ''}"
                     "</small></p>")
        policy_refs, legend = _policies(sections)
        parts.append(legend)
    parts.extend(_section(section, policy_refs, page_cuts, (histories or {}).get(
        section.summary.metric)) for section in sections)
    parts.append(_breakdowns(breakdowns))
    mechanisms = {section.series.metric.mechanism.id: section.series.metric.mechanism
                  for section in sections}
    if mechanisms:
        parts.append("<h2>Privacy</h2><details><summary>What each mechanism\u2019s epsilon "
                     "means</summary>")
        for mechanism_id, mechanism in sorted(mechanisms.items()):
            users = [html.escape(sec.summary.metric) for sec in sections
                     if sec.series.metric.mechanism.id == mechanism_id]
            shown = ", ".join(users[:12]) + (f" and {len(users) - 12} more" if len(users) > 12
                                             else "")
            note = epsilon_note(mechanism, None) if isinstance(mechanism, RandomizedResponse) \
                else kind_note(mechanism, None)
            parts.append(f'<p class="note"><b>{html.escape(mechanism_id)}</b> ({shown}): '
                         f"{note}</p>")
        parts.append("</details>")
    parts.append(f"<script>{SCRIPT}</script></body></html>\n")
    return "".join(parts)
