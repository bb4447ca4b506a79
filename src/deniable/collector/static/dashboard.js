// Deniable dashboard: fetch the catalogue from /v1/metrics and each metric's series from
// /dashboard/data, and draw them as SVG. The page itself holds no data. The server computes
// every number (the mechanism's one estimator); this script only draws.
// The read key comes in the URL fragment (#token=..., never sent to the server) or from the
// key form; it is kept in this tab's sessionStorage and removed from the URL at once, so it
// does not linger in the address bar, the history or a copied link.
"use strict";
(function () {
  const SVGNS = "http://www.w3.org/2000/svg";
  const W = 900, H = 230, BARS = 70, LEFT = 66, RIGHT = 12, TOP = 10, GAP = 26;
  const KEY = "deniable-read-key";
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given) sessionStorage.setItem(KEY, given);
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  let token = sessionStorage.getItem(KEY);
  const keyForm = document.getElementById("key");
  const form = document.getElementById("range");
  const params = new URLSearchParams(location.search);
  const meta = {};  // metric name -> its catalogue entry (dimensions, combinations)

  function el(name, attrs, parent, ns) {
    const node = ns ? document.createElementNS(SVGNS, name) : document.createElement(name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(x, digits) { return x === null || x === undefined ? "-" : x.toFixed(digits); }
  // A time as people read it: "2026-11-19 14:39 UTC" (no seconds, no microseconds).
  function when(iso) { return iso ? `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC` : ""; }
  // Numbers for people: a share in percent with its interval, "53 % (29–78 %)"; a mean in its
  // unit, "812 ms (700–926 ms)". The digits follow the interval's width.
  function digitsFor(width) {
    return width > 0 && isFinite(width) ? Math.max(0, Math.min(2, 1 - Math.floor(Math.log10(width)))) : 1;
  }
  function share(v, lo, hi) {
    if (v === null || v === undefined) return "-";
    const d = digitsFor((hi - lo) * 100), p = t => (t * 100).toFixed(d);
    return `${p(Math.min(Math.max(v, 0), 1))} % (${p(lo)}\u2013${p(hi)} %)`;
  }
  function mean(v, lo, hi, unit) {
    if (v === null || v === undefined) return "-";
    const d = Math.max(0, 1 - Math.floor(Math.log10(Math.max(hi - lo, 1e-9))));
    const f = t => t.toLocaleString("en", {minimumFractionDigits: d, maximumFractionDigits: d});
    const u = unit ? ` ${unit}` : "";
    return `${f(v)}${u} (${f(lo)}\u2013${f(hi)}${u})`;
  }
  function toInput(iso) { return iso ? iso.slice(0, 16) : ""; }
  function fromInput(v) { return v ? v + ":00+00:00" : ""; }

  // Round tick values over [lo, hi]: steps of 1, 2 or 5 times a power of ten.
  function ticks(lo, hi) {
    const raw = (hi - lo) / 4, power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(m => m * power).find(v => v >= raw), out = [];
    for (let t = Math.ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
      out.push(Math.round(t * 1e9) / 1e9 || 0);  // never -0 (it prints "-0")
    return out;
  }
  // An axis zoomed to the values and their intervals, at least a tenth of [lo, hi] (10 points
  // of a share), inside [lo, hi]: a shift of a few points shows.
  function zoom(values, lo, hi) {
    const finite = values.filter(v => v !== null && v !== undefined && isFinite(v));
    if (!finite.length) return [lo, hi];
    const a = Math.min(...finite), b = Math.max(...finite), least = (hi - lo) / 10;
    const width = Math.max(b - a, least) * 1.15, mid = (a + b) / 2;
    let y0 = Math.max(lo, mid - width / 2), y1 = Math.min(hi, mid + width / 2);
    if (y1 - y0 < least) { if (y0 <= lo) y1 = lo + least; else y0 = hi - least; }
    return [y0, y1];
  }
  function dateTick(doc, iso) {
    if (doc.granularity === "week") return `week of ${iso.slice(0, 10)}`;
    return doc.granularity === "hour" ? iso.slice(5, 13).replace("T", " ") + "h" : iso.slice(5, 10);
  }
  // The axes every time chart carries: y ticks and title, dated x ticks and title.
  function axes(svg, doc, y, y0, y1, percent, title, n, x, right = W - RIGHT) {
    const span = y1 - y0;
    for (const t of ticks(y0, y1)) {
      el("line", {x1: LEFT, x2: right, y1: y(t), y2: y(t), stroke: "#e5e5e5"}, svg, true);
      el("text", {x: LEFT - 6, y: y(t) + 4, "text-anchor": "end", class: "y-tick"}, svg, true)
        .textContent = percent ? `${(t * 100).toFixed(span >= 0.1 ? 0 : 1)} %`
                               : t.toLocaleString("en", {maximumFractionDigits: span >= 10 ? 0 : 2});
    }
    el("text", {x: 12, y: TOP + (H - TOP) / 2, "text-anchor": "middle", class: "y-title",
                transform: `rotate(-90 12 ${TOP + (H - TOP) / 2})`}, svg, true).textContent = title;
    el("line", {x1: LEFT, x2: right, y1: H, y2: H, stroke: "#888"}, svg, true);
    // Every k-th tick, so that labels (about 6.5 px a character at 11 px) never overlap.
    const longest = Math.max(1, ...doc.buckets.map(bk => dateTick(doc, bk.start).length));
    const every = Math.max(1, Math.ceil(n / 10),
                           Math.ceil(n * (longest * 6.5 + 10) / (right - LEFT)));
    doc.buckets.forEach((bk, i) => {
      if (i % every) return;
      el("text", {x: x(i), y: H + 14, "text-anchor": "middle", class: "x-tick"}, svg, true)
        .textContent = dateTick(doc, bk.start);
    });
    el("text", {x: LEFT + (right - LEFT) / 2, y: H + 28, "text-anchor": "middle",
                class: "x-title"}, svg, true).textContent =
      `${doc.granularity} (UTC) ${(doc.buckets[0] || {start: doc.from}).start.slice(0, 4)}`;
  }
  function unitOf(name) {
    for (const [suffix, unit] of [["_ms", "ms"], ["_seconds", "s"], ["_s", "s"],
                                  ["_bytes", "bytes"], ["_kb", "KB"], ["_mb", "MB"]])
      if (name.toLowerCase().endsWith(suffix)) return unit;
    return "";
  }

  function chart(doc) {
    const b = doc.buckets, n = b.length, plotW = W - LEFT - RIGHT;
    const svg = el("svg", {viewBox: `0 0 ${W} ${H + GAP + BARS + 40}`, class: "chart",
                           role: "img", "aria-label": `${doc.metric} over time`}, null, true);
    const x = i => LEFT + (i + 0.5) * plotW / Math.max(n, 1);
    // A mean is drawn in its unit, on an axis zoomed inside its declared range (the
    // server's value_range); shares in percent, zoomed inside [0, 1].
    const [low, high] = doc.value_range;
    const older = doc.history || [];  // older versions' buckets, each debiased on its own
    const all = [b, ...older.map(p => p.buckets)];
    const [lo, hi] = zoom(all.flatMap(bs => bs.filter(bk => bk.n > 0)
                            .flatMap(bk => [bk.estimate, bk.ci_low, bk.ci_high])),
                          low, high);
    const y = v => TOP + (1 - (Math.min(Math.max(v, lo), hi) - lo) / (hi - lo)) * (H - TOP);
    const unit = unitOf(doc.metric);
    axes(svg, doc, y, lo, hi, doc.percent, doc.percent
      ? `share of devices answering ${doc.slot_word} (%)`
      : `${doc.slot_word}${unit ? ` (${unit})` : ""} over devices`, n, x);
    // CI band: one polygon per run of non-empty buckets.
    let run = [];
    const flush = () => {
      if (run.length) {
        const pts = run.map(i => `${x(i)},${y(b[i].ci_high)}`)
          .concat(run.slice().reverse().map(i => `${x(i)},${y(b[i].ci_low)}`));
        el("polygon", {points: pts.join(" "), fill: "#1f5fa8", "fill-opacity": 0.25,
                       stroke: "#1f5fa8", "stroke-opacity": 0.4, class: "band"}, svg, true);
      }
      run = [];
    };
    b.forEach((bk, i) => { if (bk.n > 0) run.push(i); else flush(); });
    flush();
    const line = (field, attrs) => {
      let d = "", pen = "M";
      b.forEach((bk, i) => {
        if (bk.n > 0 && bk[field] !== null) { d += `${pen}${x(i)},${y(bk[field])} `; pen = "L"; }
        else pen = "M";
      });
      if (d) el("path", Object.assign({d, fill: "none"}, attrs), svg, true);
    };
    line("estimate", {stroke: "#1f5fa8", "stroke-width": 2, class: "estimate"});
    // History across versions: each older version's part in its own colour, and a marker
    // where the current version's reports begin.
    older.forEach((part, k) => {
      const colour = ["#d9622b", "#2e8b57", "#8e44ad", "#7f8c8d"][k % 4];
      const idx = part.buckets.map((bk, i) => i).filter(i => part.buckets[i].n > 0);
      if (!idx.length) return;
      const pts = idx.map(i => `${x(i)},${y(part.buckets[i].ci_high)}`).concat(
        idx.slice().reverse().map(i => `${x(i)},${y(part.buckets[i].ci_low)}`));
      el("polygon", {points: pts.join(" "), fill: colour, "fill-opacity": 0.2, class: "band"},
         svg, true);
      el("polyline", {points: idx.map(i => `${x(i)},${y(part.buckets[i].estimate)}`).join(" "),
                      fill: "none", stroke: colour, "stroke-width": 2, class: "history",
                      "data-version": part.version}, svg, true);
      el("text", {x: x(idx[0]) + 4, y: TOP + 12 + 14 * k, fill: colour, class: "mark-label"},
         svg, true).textContent = `version ${part.version} (${part.mechanism})`;
    });
    const firstNow = b.findIndex(bk => bk.n > 0);
    if (older.length && firstNow >= 0) {
      const xm = x(firstNow) - plotW / Math.max(n, 1) / 2;
      el("line", {x1: xm, x2: xm, y1: TOP, y2: H, stroke: "#444", "stroke-dasharray": "4 3",
                  class: "mark"}, svg, true);
      el("text", {x: xm + 4, y: H - 6, class: "mark-label"}, svg, true).textContent =
        `version ${doc.version} from here`;
    }
    b.forEach((bk, i) => {
      if (bk.n === 0) return;
      const lone = !(b[i - 1] && b[i - 1].n > 0) && !(b[i + 1] && b[i + 1].n > 0);
      if (lone) el("line", {x1: x(i), x2: x(i), y1: y(bk.ci_low), y2: y(bk.ci_high),
                            stroke: "#1f5fa8", "stroke-opacity": 0.4, "stroke-width": 6,
                            class: "band-lone"}, svg, true);  // its band has no width
      el("circle", {cx: x(i), cy: y(bk.estimate), r: 3.5, stroke: "#1f5fa8",
                    fill: bk.wide ? "white" : "#1f5fa8", class: "point"}, svg, true);
      if (bk.clipped) el("circle", {cx: x(i), cy: y(bk.estimate), r: 7, fill: "none",
                                    stroke: "#c0392b"}, svg, true);
    });
    const maxN = Math.max(1, ...b.map(bk => bk.n)), base = H + GAP + 20 + BARS;
    el("text", {x: LEFT - 6, y: base - BARS + 8, "text-anchor": "end"}, svg, true).textContent =
      maxN.toLocaleString("en");
    el("text", {x: LEFT - 6, y: base, "text-anchor": "end"}, svg, true).textContent = "0";
    el("text", {x: LEFT, y: base + 14}, svg, true).textContent =
      `reports per ${doc.granularity}`;
    b.forEach((bk, i) => {
      const h = BARS * bk.n / maxN, w = 0.8 * plotW / Math.max(n, 1);
      el("rect", {x: x(i) - w / 2, y: base - h, width: w, height: h, fill: "#b9c7d6",
                  class: "bar"}, svg, true);
    });
    return svg;
  }

  // Categorical and histogram metrics over time: one line per category (the 10 largest),
  // each with its per-category interval as a band, on a dated axis zoomed to the shares.
  const PALETTE = ["#1f5fa8", "#d9622b", "#2e8b57", "#8e44ad", "#c0392b", "#7f8c8d",
                   "#b8860b", "#17a2b8", "#e83e8c", "#343a40"];
  function categoryChart(doc) {
    const b = doc.buckets, n = b.length, plotW = W - LEFT - RIGHT - 110;
    const svg = el("svg", {viewBox: `0 0 ${W} ${H + 40}`, class: "chart categories-time",
                           role: "img", "aria-label": `${doc.metric}: each category over time`},
                   null, true);
    const order = doc.summary.categories.map((k, j) => [k.estimate || 0, j])
      .sort((p, q) => q[0] - p[0]).slice(0, PALETTE.length).map(p => p[1]);
    const busy = b.filter(bk => bk.n > 0);
    const [lo, hi] = zoom(busy.flatMap(bk => order.flatMap(j => [bk.categories[j].estimate,
      bk.categories[j].ci_low, bk.categories[j].ci_high])), 0, 1);
    const x = i => LEFT + (i + 0.5) * plotW / Math.max(n, 1);
    const y = v => TOP + (1 - (Math.min(Math.max(v, lo), hi) - lo) / (hi - lo)) * (H - TOP);
    axes(svg, doc, y, lo, hi, true, `share of devices in each ${doc.slot_word} (%)`, n, x,
         LEFT + plotW);
    order.forEach((j, k) => {
      const colour = PALETTE[k], idx = b.map((bk, i) => i).filter(i => b[i].n > 0);
      if (idx.length) {
        const pts = idx.map(i => `${x(i)},${y(b[i].categories[j].ci_high)}`).concat(
          idx.slice().reverse().map(i => `${x(i)},${y(b[i].categories[j].ci_low)}`));
        el("polygon", {points: pts.join(" "), fill: colour, "fill-opacity": 0.2,
                       class: "band"}, svg, true);
        el("polyline", {points: idx.map(i => `${x(i)},${y(b[i].categories[j].estimate)}`)
          .join(" "), fill: "none", stroke: colour, "stroke-width": 2, class: "line",
                        "data-category": doc.categories[j]}, svg, true);
        if (idx.length <= 60) idx.forEach(i => {  // points, and a lone bucket's interval
          const c = b[i].categories[j];
          el("line", {x1: x(i), x2: x(i), y1: y(c.ci_low), y2: y(c.ci_high), stroke: colour,
                      "stroke-opacity": 0.5, "stroke-width": 3}, svg, true);
          el("circle", {cx: x(i), cy: y(c.estimate), r: 3, fill: colour}, svg, true);
        });
      }
      const ly = TOP + 8 + k * 16, lx = LEFT + plotW + 14;
      el("rect", {x: lx, y: ly - 8, width: 12, height: 8, fill: colour, class: "legend"}, svg, true);
      el("text", {x: lx + 16, y: ly}, svg, true).textContent = doc.categories[j];
    });
    return svg;
  }

  // Categorical and histogram metrics: the whole range's share per category as bars, with
  // the per-category interval (dark whisker) and the simultaneous one (orange band).
  function bars(doc) {
    const c = doc.summary.categories, d = c.length, plotW = W - LEFT - RIGHT;
    const labelled = d <= 40, bottom = labelled ? 60 : 20;
    const svg = el("svg", {viewBox: `0 0 ${W} ${H + bottom}`, class: "chart bars", role: "img",
                           "aria-label": `${doc.metric}: share of each category`}, null, true);
    const peak = Math.min(1, 1.08 * Math.max(0.05, ...c.map(k => k.sim_high),
                                             ...c.map(k => k.estimate || 0)));
    const y = v => TOP + (1 - Math.min(Math.max(v, 0), peak) / peak) * (H - TOP);
    const slot = plotW / d, gap = doc.contiguous ? 0 : 0.15 * slot;
    for (const t of ticks(0, peak)) {
      el("line", {x1: LEFT, x2: W - RIGHT, y1: y(t), y2: y(t), stroke: "#e5e5e5"}, svg, true);
      el("text", {x: LEFT - 6, y: y(t) + 4, "text-anchor": "end", class: "y-tick"}, svg,
         true).textContent = `${(t * 100).toFixed(peak >= 0.2 ? 0 : 1)} %`;
    }
    el("text", {x: 12, y: TOP + (H - TOP) / 2, "text-anchor": "middle", class: "y-title",
                transform: `rotate(-90 12 ${TOP + (H - TOP) / 2})`}, svg, true).textContent =
      `share of devices over the range (%)`;
    c.forEach((k, i) => {
      const x0 = LEFT + i * slot, cx = x0 + slot / 2;
      if (doc.summary.n > 0 && k.estimate !== null) {
        el("rect", {x: x0 + gap, y: y(k.estimate), width: Math.max(slot - 2 * gap, 0.6),
                    height: Math.max(y(0) - y(k.estimate), 0), fill: "#8fb0d6", class: "bar",
                    "data-category": k.category}, svg, true);
        el("rect", {x: cx - slot * 0.18, y: y(k.sim_high), width: Math.max(slot * 0.36, 2),
                    height: Math.max(y(k.sim_low) - y(k.sim_high), 0.5), fill: "#f0a35e",
                    "fill-opacity": 0.55, class: "sim"}, svg, true);
        el("line", {x1: cx, x2: cx, y1: y(k.ci_low), y2: y(k.ci_high), stroke: "#0b2f5a",
                    "stroke-width": 1.5, class: "ci"}, svg, true);
      }
      if (labelled) el("text", {x: cx, y: H + 14, "text-anchor": "end",
                                transform: `rotate(-35 ${cx} ${H + 14})`}, svg, true)
        .textContent = k.category;
    });
    el("line", {x1: LEFT, x2: W - RIGHT, y1: y(0), y2: y(0), stroke: "#888"}, svg, true);
    return svg;
  }

  function categoryTable(doc) {
    const t = el("table", {class: "categories"}), pct = `${Math.round(doc.confidence * 100)}%`;
    const head = el("tr", {}, el("thead", {}, t));
    for (const h of ["category", `share of devices (${pct.replace("%", " %")} interval)`,
                     "share (unbiased)", `${pct} CI per category`, `${pct} CI simultaneous`,
                     "perturbed count", "notes"]) el("th", {}, head).textContent = h;
    const body = el("tbody", {}, t);
    for (const k of doc.summary.categories) {
      const tr = el("tr", {"data-category": k.category}, body);
      el("td", {}, tr).textContent = k.category;
      el("td", {"data-field": "display"}, tr).textContent = share(k.estimate, k.ci_low, k.ci_high);
      el("td", {"data-field": "estimate"}, tr).textContent = fmt(k.estimate, 4);
      el("td", {"data-field": "ci"}, tr).textContent = `[${fmt(k.ci_low, 4)}, ${fmt(k.ci_high, 4)}]`;
      el("td", {"data-field": "sim"}, tr).textContent =
        `[${fmt(k.sim_low, 4)}, ${fmt(k.sim_high, 4)}]`;
      el("td", {"data-field": "ones"}, tr).textContent = String(k.ones);
      el("td", {"data-field": "flags", class: "flags"}, tr).textContent = k.flags;
    }
    return t;
  }

  function table(doc) {
    const t = el("table", {class: "buckets"});
    const head = el("tr", {}, el("thead", {}, t));
    for (const h of [`${doc.granularity} (UTC)`, "n", "raw yes-rate", "estimate", "CI low",
                     "CI high", "notes"]) el("th", {}, head).textContent = h;
    const body = el("tbody", {}, t);
    for (const bk of doc.buckets) {
      const tr = el("tr", {"data-start": bk.start}, body);
      el("td", {}, tr).textContent = bk.start.slice(0, 16).replace("T", " ");
      el("td", {"data-field": "n"}, tr).textContent = String(bk.n);
      el("td", {"data-field": "yes_rate"}, tr).textContent = fmt(bk.yes_rate, 4);
      el("td", {"data-field": "estimate"}, tr).textContent = fmt(bk.estimate, 4);
      el("td", {"data-field": "ci_low"}, tr).textContent = fmt(bk.ci_low, 4);
      el("td", {"data-field": "ci_high"}, tr).textContent = fmt(bk.ci_high, 4);
      el("td", {"data-field": "flags", class: "flags"}, tr).textContent = bk.flags;
    }
    return t;
  }

  // Breakdowns: one row per value of a public dimension (or a declared combination); cells
  // under min_reports reports come back without an estimate, only n and the reason.
  function breakdownTable(doc) {
    const box = el("div", {class: "breakdown", "data-by": doc.by});
    el("h3", {}, box).textContent = `By ${doc.by} (cells under ` +
      `${doc.min_reports.toLocaleString("en")} devices suppressed)`;
    const t = el("table", {class: "breakdown"}, box), pct = `${Math.round(doc.confidence * 100)}%`;
    const cats = doc.categories, digits = doc.digits;
    const head = el("tr", {}, el("thead", {}, t));
    for (const h of [doc.by, ...(cats ? ["category"] : []), "n",
                     cats ? "share (unbiased)" : doc.percent ? "estimate" : doc.slot_word,
                     `${pct} CI`, ...(cats ? [`${pct} CI simultaneous`] : []), "notes"])
      el("th", {}, head).textContent = h;
    const body = el("tbody", {}, t);
    const row = (cells, attrs) => {
      const tr = el("tr", attrs, body);
      cells.forEach(([field, text]) => {
        el("td", field ? {"data-field": field} : {}, tr).textContent = text;
      });
      return tr;
    };
    for (const c of doc.cells) {
      const attrs = {"data-label": c.label, "data-suppressed": c.suppressed ? "1" : "0"};
      if (c.suppressed) {
        row([[null, c.value], ...(cats ? [[null, "-"]] : []), ["n", String(c.n)],
             ["estimate", "-"], ["ci", "-"], ...(cats ? [["sim", "-"]] : []),
             ["flags", `SUPPRESSED: ${c.reason}`]], Object.assign(attrs, {class: "suppressed"}));
      } else if (cats) {
        c.categories.forEach((k, i) => row([
          [null, i ? "" : c.value], [null, k.category], ["n", i ? "" : String(c.n)],
          ["estimate", fmt(k.estimate, 4)], ["ci", `[${fmt(k.ci_low, 4)}, ${fmt(k.ci_high, 4)}]`],
          ["sim", `[${fmt(k.sim_low, 4)}, ${fmt(k.sim_high, 4)}]`], ["flags", k.flags || ""]],
          i ? {} : attrs));
      } else {
        row([[null, c.value], ["n", String(c.n)], ["estimate", fmt(c.estimate, digits)],
             ["ci", `[${fmt(c.ci_low, digits)}, ${fmt(c.ci_high, digits)}]`],
             ["flags", (c.clipped ? "clipped; " : "") + (c.wide ? "too few reports" : "")]],
            attrs);
      }
    }
    row([[null, "not stated"], ...(cats ? [[null, "-"]] : []), ["n", String(doc.not_stated)],
         ["estimate", "-"], ["ci", "-"], ...(cats ? [["sim", "-"]] : []),
         ["flags", `no estimate: reports that did not state ${doc.by}`]],
        {"data-label": "not stated"});
    if (doc.note) el("p", {class: "note suppression"}, box).textContent = doc.note;
    el("p", {class: "note"}, box).textContent = doc.dimensions;
    return box;
  }

  function declares(name, by) {
    const m = meta[name];
    if (!by || !m || !m.dimensions) return false;
    const names = by.split(",").sort();
    if (names.length === 1) return names[0] in m.dimensions;
    return (m.combinations || []).some(c => c.slice().sort().join(",") === names.join(","));
  }

  async function showBreakdown(name, query, section) {
    const q = new URLSearchParams();
    for (const key of ["from", "to", "by", "min_reports"]) if (query[key]) q.set(key, query[key]);
    q.set("metric", name);
    const r = await fetch(`${document.getElementById("charts").dataset.breakdown}?${q}`,
                          {headers: auth()});
    const doc = await r.json();
    if (!r.ok) throw new Error(doc.detail || r.statusText);
    section.appendChild(breakdownTable(doc));
  }

  async function show(name, query, into) {
    const section = el("section", {class: "metric", "data-metric": name}, into);
    el("h2", {}, section).textContent = name;
    const q = new URLSearchParams(query); q.set("metric", name);
    const picked = params.get(`v.${name}`);  // a version picked in this section
    if (picked) q.set("version", picked);
    try {
      const r = await fetch(`${into.dataset.endpoint}?${q}`, {headers: auth()});
      const doc = await r.json();
      if (!r.ok) throw new Error(doc.detail || r.statusText);
      if (doc.description) el("p", {}, section).textContent = doc.description;
      if (doc.versions && doc.versions.length > 1) {
        const line = el("p", {class: "versions"}, section);
        const label = el("label", {}, line);
        label.append("version ");
        const pick = el("select", {name: `v.${name}`, class: "version-picker"}, label);
        el("option", {value: ""}, pick).textContent = doc.joins_versions === false
          ? `latest (${doc.current_version})` : "all, joined";
        for (const v of doc.versions)
          el("option", {value: String(v.version)}, pick).textContent =
            `${v.version} (${v.mechanism}, \u03b5 ${v.epsilon.toFixed(3)})`;
        pick.value = picked || "";
        pick.addEventListener("change", () => {
          const next = new URLSearchParams(location.search);
          if (pick.value) next.set(`v.${name}`, pick.value); else next.delete(`v.${name}`);
          location.search = next.toString();
        });
        line.append(doc.joins_versions === false ? " Each version is its own sketch, " +
          "shown on its own" + (picked ? `: version ${picked}.` : ": pick one to see its strings.")
          : (doc.history || []).length ? " The chart joins the versions: each " +
          "version's reports are debiased with its own mechanism." : picked ?
          ` Version ${picked} alone.` : " Only the current version has reports here.");
      }
      el("p", {class: "policy"}, section).textContent =
        (doc.version == null ? "" : `Version ${doc.version}. `) + `${doc.policy}. ` +
        `Each value is the ${doc.estimand}. Range ${when(doc.from)} to ${when(doc.to)}` +
        (doc.window > 1 ? `, rolling ${doc.window} ${doc.granularity}s.` : ".");
      const s = doc.summary, pct = `${Math.round(doc.confidence * 100)}%`;
      if (doc.view === "discovery") {  // strings from no list: no per-slot estimate
        await discovery(doc, name, query, section);
        return;
      }
      if (doc.view === "categories") {  // one share per declared category or bucket
        section.appendChild(bars(doc));
        if (doc.buckets.length > 1) section.appendChild(categoryChart(doc));
        el("p", {class: "summary", "data-n": s.n}, section).textContent =
          `Whole range: n = ${s.n.toLocaleString("en")} over ${s.periods} periods; the ` +
          `${s.estimand}. ${doc.intervals}. Shares are unbiased, not clipped or projected.`;
        privacy(section, doc);
        section.appendChild(categoryTable(doc));
        if (declares(name, query.by)) await showBreakdown(name, query, section);
        return;
      }
      section.appendChild(chart(doc));
      const digits = doc.digits;
      const plainText = doc.percent
        ? share(s.estimate, s.ci_low, s.ci_high)
        : mean(s.estimate, s.ci_low, s.ci_high, unitOf(doc.metric));
      el("p", {class: "plain", "data-field": "display"}, section).textContent =
        `Whole range: ${plainText}` + (doc.percent ? ` of devices answer ${doc.slot_word}` :
        ` (${doc.slot_word} over devices)`) + ` (${pct.replace("%", " %")} interval), from ` +
        `${s.n.toLocaleString("en")} reports.`;
      const sum = el("p", {class: "summary", "data-n": s.n}, section);
      sum.textContent = `Details: n = ${s.n.toLocaleString("en")} over ${s.periods} ` +
        `periods, ${doc.percent ? "estimate" : doc.slot_word} ${fmt(s.estimate, digits)}, ` +
        `${pct} CI [${fmt(s.ci_low, digits)}, ` +
        `${fmt(s.ci_high, digits)}]` + (s.clipped ? " (clipped)" : "") +
        (s.interval_clipped ? ` (interval clipped to [${doc.value_range.join(", ")}])` : "") +
        (s.wide ? " (too few reports)" : "") + `; the ${s.estimand}.`;
      privacy(section, doc);
      if (declares(name, query.by)) await showBreakdown(name, query, section);
      // Every bucket's numbers (the raw, perturbed rate too) one click away.
      const fold = el("details", {class: "buckets"}, section);
      el("summary", {}, fold).textContent = `Every ${doc.granularity}, in numbers`;
      fold.appendChild(table(doc));
    } catch (err) {
      el("p", {class: "error"}, section).textContent = `Could not load ${name}: ${err.message}`;
    }
  }

  // Open-domain metrics: the strings discovered over the range (the window) and, one click
  // away, on each UTC day. Strings come from devices: they are only ever set as textContent.
  function printable(text) {
    return text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g,
                        c => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  }
  function foundTable(found, doc) {
    const t = el("table", {class: "found"}), pct = `${Math.round(doc.confidence * 100)} %`;
    const head = el("tr", {}, el("thead", {}, t));
    for (const h of ["string", `share of reports (${pct} simultaneous interval)`,
                     "share (unbiased)", "lower", "upper"]) el("th", {}, head).textContent = h;
    const body = el("tbody", {}, t);
    for (const f of found.found) {
      const tr = el("tr", {"data-string": f.string}, body);
      el("code", {}, el("td", {"data-field": "string"}, tr)).textContent = printable(f.string);
      el("td", {"data-field": "display"}, tr).textContent =
        share(f.share, Math.max(f.lower, 0), Math.min(f.upper, 1));
      el("td", {"data-field": "share"}, tr).textContent = fmt(f.share, doc.digits);
      el("td", {"data-field": "lower"}, tr).textContent = fmt(f.lower, doc.digits);
      el("td", {"data-field": "upper"}, tr).textContent = fmt(f.upper, doc.digits);
    }
    if (!found.found.length) {
      el("td", {colspan: 5}, el("tr", {class: "none"}, body)).textContent =
        "No string's lower bound is above 0 yet.";
    }
    return t;
  }
  function foundLine(found, doc, where) {
    return `${where}: ${found.n.toLocaleString("en")} reports; ${found.found.length} ` +
      `${found.found.length === 1 ? "string" : "strings"} found of ` +
      `${found.tested.toLocaleString("en")} tested; the smallest discoverable share is ` +
      `${(found.min_share * 100).toFixed(2)} % (found half the time at this n and \u03b5).`;
  }
  // Every period of [from, to) in the metric's own period (hour, UTC day or ISO week from its
  // Monday), oldest first, as ISO starts: the dated axis of the open-metric charts.
  const SPAN = {hour: 3600000, day: 86400000, week: 7 * 86400000};
  function periodStarts(doc) {
    const span = SPAN[doc.granularity] || SPAN.day, from = Date.parse(doc.from), out = [];
    let t = from - from % SPAN.hour;
    if (doc.granularity !== "hour") t = from - from % SPAN.day;
    if (doc.granularity === "week") t -= ((new Date(t).getUTCDay() + 6) % 7) * SPAN.day;
    for (; t < Date.parse(doc.to); t += span) out.push(new Date(t).toISOString());
    return out;
  }
  function periodAxis(doc, svg, y, y0, y1, percent, title, rows, plotW) {
    const n = rows.length;
    const x = i => LEFT + (i + 0.5) * plotW / Math.max(n, 1);
    axes(svg, {granularity: doc.granularity, buckets: rows, from: doc.from}, y, y0, y1, percent,
         title, n, x, LEFT + plotW);
    return x;
  }
  // Reports per period (hour, day or week: one bar a period wide), empty periods at 0.
  function dayChart(doc) {
    const seen = new Map(doc.days.map(d => [Date.parse(d.start), d]));
    const days = periodStarts(doc).map(start => seen.get(Date.parse(start)) ||
                                                {day: start.slice(0, 10), start, n: 0});
    const n = days.length, plotW = W - LEFT - RIGHT;
    const svg = el("svg", {viewBox: `0 0 ${W} ${H + 40}`, class: "chart days", role: "img",
                           "aria-label": `${doc.metric}: reports per ${doc.granularity}`},
                   null, true);
    const maxN = Math.max(1, ...days.map(d => d.n));
    const y = v => TOP + (1 - v / maxN) * (H - TOP);
    const x = periodAxis(doc, svg, y, 0, maxN, false, `reports per ${doc.granularity}`, days,
                         plotW);
    days.forEach((d, i) => {
      const w = 0.8 * plotW / Math.max(n, 1);
      el("rect", {x: x(i) - w / 2, y: y(d.n), width: w, height: H - y(d.n), fill: "#b9c7d6",
                  class: "bar", "data-day": d.day}, svg, true);
    });
    return svg;
  }
  // One string's share of reports per period, with its interval (simultaneous over the
  // periods shown) as whiskers and a band, on a dated axis in percent. The string is set as
  // text only (title, legend), never as markup.
  function trendChart(doc, trend) {
    const seen = new Map(trend.periods.map(p => [Date.parse(p.start), p]));
    const rows = periodStarts(doc).map(start => seen.get(Date.parse(start)) ||
                                                {start, n: 0, share: null});
    const n = rows.length, plotW = W - LEFT - RIGHT;
    const svg = el("svg", {viewBox: `0 0 ${W} ${H + 40}`, class: "chart trend", role: "img"},
                   null, true);
    svg.setAttribute("aria-label", `share of reports holding ${printable(trend.string)} per ` +
                     doc.granularity);
    const busy = rows.filter(r => r.share !== null);
    const [lo, hi] = zoom(busy.flatMap(r => [r.share, r.lower, r.upper]), 0, 1);
    const y = v => TOP + (1 - (Math.min(Math.max(v, lo), hi) - lo) / (hi - lo)) * (H - TOP);
    const x = periodAxis(doc, svg, y, lo, hi, true,
                         `share of reports (%)`, rows, plotW);
    const idx = rows.map((r, i) => i).filter(i => rows[i].share !== null);
    // A band and a line per run of adjacent periods with reports: none across a gap.
    const runs = [];
    idx.forEach(i => { if (runs.length && runs[runs.length - 1].slice(-1)[0] === i - 1)
                         runs[runs.length - 1].push(i); else runs.push([i]); });
    for (const run of runs.filter(r => r.length > 1)) {
      const pts = run.map(i => `${x(i)},${y(Math.min(rows[i].upper, 1))}`).concat(run.slice()
        .reverse().map(i => `${x(i)},${y(Math.max(rows[i].lower, 0))}`));
      el("polygon", {points: pts.join(" "), fill: "#1f5fa8", "fill-opacity": 0.2,
                     class: "band"}, svg, true);
      el("polyline", {points: run.map(i => `${x(i)},${y(rows[i].share)}`).join(" "),
                      fill: "none", stroke: "#1f5fa8", "stroke-width": 2, class: "estimate"},
         svg, true);
    }
    for (const i of idx) {
      const r = rows[i];
      el("line", {x1: x(i), x2: x(i), y1: y(Math.max(r.lower, 0)), y2: y(Math.min(r.upper, 1)),
                  stroke: "#1f5fa8", "stroke-opacity": 0.5, "stroke-width": 3}, svg, true);
      const dot = el("circle", {cx: x(i), cy: y(r.share), r: 3.5, fill: "#1f5fa8",
                                class: "point", "data-day": r.day}, svg, true);
      el("title", {}, dot).textContent = `${printable(trend.string)}: ${r.label}: ` +
        `${share(r.share, Math.max(r.lower, 0), Math.min(r.upper, 1))} of ` +
        `${r.n.toLocaleString("en")} reports`;
    }
    if (y(0) <= H && y(0) >= TOP) el("line", {x1: LEFT, x2: LEFT + plotW, y1: y(0), y2: y(0),
                                             stroke: "#888", "stroke-dasharray": "3 3"},
                                     svg, true);
    el("text", {x: LEFT + 8, y: TOP + 12, class: "legend"}, svg, true).textContent =
      printable(trend.string);
    return svg;
  }
  /** One more view of an open metric's data (`key`=`value`: a period or a string), for the
   * version shown; throws the problem document's detail when the collector refuses it. */
  async function fetchOpen(doc, name, query, key, value) {
    const q = new URLSearchParams(query); q.set("metric", name); q.set(key, value);
    if (doc.version !== doc.current_version) q.set("version", String(doc.version));
    const r = await fetch(`${document.getElementById("charts").dataset.endpoint}?${q}`,
                          {headers: auth()});
    const one = await r.json();
    if (!r.ok) throw new Error(one.detail || r.statusText);
    return one;
  }
  async function showTrend(doc, name, query, value, box) {
    box.textContent = "";
    box.removeAttribute("data-ready");
    try {
      const one = await fetchOpen(doc, name, query, "string", value);
      el("h3", {}, box).textContent = `\u201c${printable(value)}\u201d per ${doc.granularity}`;
      box.appendChild(trendChart(one, one.trend));
      el("p", {class: "summary"}, box).textContent = `Share of each ${doc.granularity}'s ` +
        `reports holding this string, unbiased (it may be below 0 where the string is ` +
        `rare), with ${one.trend.intervals} intervals; every ${doc.granularity} with ` +
        `reports has an estimate, also where the string was not discovered.`;
    } catch (err) {
      el("p", {class: "error"}, box).textContent = `Could not load the trend: ${err.message}`;
    }
    box.setAttribute("data-ready", "1");
  }
  async function discovery(doc, name, query, section) {
    if (doc.shortened) el("p", {class: "note"}, section).textContent =
      `Shortened to the latest ${doc.read_budget.periods.toLocaleString("en")} ` +
      `${doc.granularity}s with reports (the most one request reads); pick from/to for ` +
      `another range.`;
    if (!doc.discovery) {
      el("p", {class: "summary", "data-n": 0}, section).textContent = "No reports in this range.";
      privacy(section, doc);
      return;
    }
    section.appendChild(dayChart(doc));
    el("p", {class: "summary", "data-n": doc.discovery.n}, section).textContent =
      foundLine(doc.discovery, doc, "Whole range") + " Only strings whose lower bound is " +
      `above 0 at ${Math.round(doc.confidence * 100)} % family-wise confidence are listed.`;
    const table = section.appendChild(foundTable(doc.discovery, doc));
    table.setAttribute("data-period", "window");
    const trendBox = el("div", {class: "trend"}, section);
    table.querySelectorAll("tbody tr[data-string]").forEach(tr => {
      const button = el("button", {type: "button", class: "trend-button"},
                        el("td", {"data-field": "trend"}, tr));
      button.textContent = "over time";
      button.addEventListener("click", () => showTrend(doc, name, query, tr.dataset.string,
                                                       trendBox));
    });
    el("th", {}, table.querySelector("thead tr")).textContent = `per ${doc.granularity}`;
    privacy(section, doc);
    // Each period on its own, decoded when opened (a decode takes seconds; a closed
    // period's is kept by the server).
    for (const d of doc.days.slice().reverse()) {
      const fold = el("details", {class: "day", "data-day": d.day}, section);
      el("summary", {}, fold).textContent =
        `${d.label || d.day}: ${d.n.toLocaleString("en")} reports`;
      fold.addEventListener("toggle", async () => {
        if (!fold.open || fold.dataset.loaded) return;
        fold.dataset.loaded = "1";
        try {
          const one = await fetchOpen(doc, name, query, "day", d.day);
          el("p", {class: "summary"}, fold).textContent =
            foundLine(one.discovery, one, d.label || d.day);
          fold.appendChild(foundTable(one.discovery, one)).setAttribute("data-period", d.day);
        } catch (err) {
          el("p", {class: "error"}, fold).textContent = `Could not load ${d.day}: ${err.message}`;
        }
        fold.setAttribute("data-ready", "1");
      });
    }
  }

  // What epsilon means for this metric, one click away (not a paragraph under every chart).
  function privacy(section, doc) {
    const fold = el("details", {class: "privacy"}, section);
    el("summary", {}, fold).textContent = `Privacy: what \u03b5 = ${doc.epsilon.toFixed(3)} means here`;
    el("p", {class: "note"}, fold).textContent = doc.note;
  }

  function auth() { return token ? {Authorization: `Bearer ${token}`} : {}; }

  async function catalogue(nav) {
    const r = await fetch(document.body.dataset.catalogue, {headers: auth()});
    const doc = await r.json();
    if (r.status === 401 || r.status === 403) {
      sessionStorage.removeItem(KEY);
      keyForm.hidden = false;
    }
    if (!r.ok) throw new Error(doc.detail || r.statusText);
    nav.textContent = "";
    // The "by" choice: every dimension and declared combination of any metric.
    const choices = new Set();
    for (const m of doc.metrics) {
      meta[m.name] = m;
      for (const d of Object.keys(m.dimensions || {})) choices.add(d);
      for (const c of m.combinations || []) choices.add(c.slice().sort().join(","));
    }
    const by = form.by;
    by.textContent = "";
    el("option", {value: ""}, by).textContent = "(none)";
    for (const c of Array.from(choices).sort()) el("option", {value: c}, by).textContent = c;
    by.value = params.get("by") || "";
    document.getElementById("by-choice").hidden = choices.size === 0;
    for (const m of doc.metrics) {
      const label = el("label", {}, nav);
      el("input", {type: "checkbox", name: "metric", value: m.name, checked: ""}, label);
      label.append(` ${m.name} `);
      el("small", {}, label).textContent = `(\u03b5 ${m.epsilon.toFixed(3)})`;
    }
  }

  async function render() {
    const main = document.getElementById("charts");
    main.textContent = "";
    document.body.removeAttribute("data-ready");
    try {
      await catalogue(document.getElementById("metrics"));
    } catch (err) {
      el("p", {class: "error"}, main).textContent = `Could not load the metrics: ${err.message}`;
      document.body.setAttribute("data-ready", "1");
      return;
    }
    const query = {};
    for (const key of ["from", "to", "every", "rolling", "by", "min_reports"]) {
      const v = params.get(key); if (v) query[key] = v;
    }
    const chosen = params.getAll("metric");
    const boxes = Array.from(document.querySelectorAll("#metrics input"));
    if (chosen.length) boxes.forEach(box => { box.checked = chosen.includes(box.value); });
    for (const box of boxes.filter(b => b.checked)) await show(box.value, query, main);
    document.body.setAttribute("data-ready", "1");
  }

  keyForm.addEventListener("submit", ev => {
    ev.preventDefault();
    token = keyForm.token.value;
    sessionStorage.setItem(KEY, token);
    keyForm.reset();
    keyForm.hidden = true;
    render();
  });
  form.from.value = toInput(params.get("from"));
  form.to.value = toInput(params.get("to"));
  if (params.get("every")) form.every.value = params.get("every");
  if (params.get("rolling")) form.rolling.value = params.get("rolling");
  if (params.get("min_reports")) form.min_reports.value = params.get("min_reports");
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const next = new URLSearchParams();
    if (form.from.value) next.set("from", fromInput(form.from.value));
    if (form.to.value) next.set("to", fromInput(form.to.value));
    next.set("every", form.every.value);
    if (form.rolling.value !== "1") next.set("rolling", form.rolling.value);
    if (form.by.value) next.set("by", form.by.value);
    if (form.by.value && form.min_reports.value && form.min_reports.value !== "100")
      next.set("min_reports", form.min_reports.value);
    document.querySelectorAll("#metrics input:checked").forEach(b => next.append("metric", b.value));
    for (const [k, v] of params) if (k.startsWith("v.")) next.set(k, v);  // versions picked
    location.search = next.toString();
  });
  render();
})();
