// Deniable dashboard: fetch the catalogue from /v1/metrics and each metric's series from
// /dashboard/data, and draw them as SVG. The page itself holds no data. The server computes
// every number (the mechanism's one estimator); this script only draws.
// The read key comes in the URL fragment (#token=..., never sent to the server) or from the
// key form; it is kept in this tab's sessionStorage and removed from the URL at once, so it
// does not linger in the address bar, the history or a copied link.
"use strict";
(function () {
  const SVGNS = "http://www.w3.org/2000/svg";
  const W = 900, H = 230, BARS = 70, LEFT = 48, RIGHT = 12, TOP = 10, GAP = 26;
  const KEY = "deniable-read-key";
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given) sessionStorage.setItem(KEY, given);
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  let token = sessionStorage.getItem(KEY);
  const keyForm = document.getElementById("key");
  const form = document.getElementById("range");
  const params = new URLSearchParams(location.search);

  function el(name, attrs, parent, ns) {
    const node = ns ? document.createElementNS(SVGNS, name) : document.createElement(name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(x, digits) { return x === null || x === undefined ? "-" : x.toFixed(digits); }
  function toInput(iso) { return iso ? iso.slice(0, 16) : ""; }
  function fromInput(v) { return v ? v + ":00+00:00" : ""; }

  function chart(doc) {
    const b = doc.buckets, n = b.length, plotW = W - LEFT - RIGHT;
    const svg = el("svg", {viewBox: `0 0 ${W} ${H + GAP + BARS + 20}`, class: "chart",
                           role: "img", "aria-label": `${doc.metric} over time`}, null, true);
    const x = i => LEFT + (i + 0.5) * plotW / Math.max(n, 1);
    const y = v => TOP + (1 - v) * (H - TOP);
    for (const t of [0, 0.25, 0.5, 0.75, 1]) {
      el("line", {x1: LEFT, x2: W - RIGHT, y1: y(t), y2: y(t), stroke: "#e5e5e5"}, svg, true);
      el("text", {x: LEFT - 6, y: y(t) + 4, "text-anchor": "end"}, svg, true).textContent = t;
    }
    // CI band: one polygon per run of non-empty buckets.
    let run = [];
    const flush = () => {
      if (run.length) {
        const pts = run.map(i => `${x(i)},${y(b[i].ci_high)}`)
          .concat(run.slice().reverse().map(i => `${x(i)},${y(b[i].ci_low)}`));
        el("polygon", {points: pts.join(" "), fill: "#1f5fa8", "fill-opacity": 0.18,
                       class: "band"}, svg, true);
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
    line("yes_rate", {stroke: "#9a9a9a", "stroke-dasharray": "4 3", class: "raw"});
    line("estimate", {stroke: "#1f5fa8", "stroke-width": 2, class: "estimate"});
    b.forEach((bk, i) => {
      if (bk.n === 0) return;
      el("circle", {cx: x(i), cy: y(bk.estimate), r: 3.5, stroke: "#1f5fa8",
                    fill: bk.wide ? "white" : "#1f5fa8", class: "point"}, svg, true);
      if (bk.clipped) el("circle", {cx: x(i), cy: y(bk.estimate), r: 7, fill: "none",
                                    stroke: "#c0392b"}, svg, true);
    });
    const maxN = Math.max(1, ...b.map(bk => bk.n)), base = H + GAP + BARS;
    el("text", {x: LEFT - 6, y: H + GAP + 8, "text-anchor": "end"}, svg, true).textContent =
      maxN.toLocaleString("en");
    el("text", {x: LEFT - 6, y: base, "text-anchor": "end"}, svg, true).textContent = "n 0";
    b.forEach((bk, i) => {
      const h = BARS * bk.n / maxN, w = 0.8 * plotW / Math.max(n, 1);
      el("rect", {x: x(i) - w / 2, y: base - h, width: w, height: h, fill: "#b9c7d6",
                  class: "bar"}, svg, true);
    });
    const every = Math.max(1, Math.ceil(n / 10));
    b.forEach((bk, i) => {
      if (i % every) return;
      el("text", {x: x(i), y: base + 14, "text-anchor": "middle"}, svg, true).textContent =
        doc.granularity === "hour" ? bk.start.slice(5, 13).replace("T", " ") + "h"
                                   : bk.start.slice(0, 10);
    });
    return svg;
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

  async function show(name, query, into) {
    const section = el("section", {class: "metric", "data-metric": name}, into);
    el("h2", {}, section).textContent = name;
    const q = new URLSearchParams(query); q.set("metric", name);
    try {
      const r = await fetch(`${into.dataset.endpoint}?${q}`, {headers: auth()});
      const doc = await r.json();
      if (!r.ok) throw new Error(doc.detail || r.statusText);
      if (doc.description) el("p", {}, section).textContent = doc.description;
      el("p", {class: "policy"}, section).textContent =
        (doc.version == null ? "" : `Version ${doc.version}. `) + `${doc.policy}. ` +
        `Each value is the ${doc.estimand}. Range ${doc.from} to ${doc.to}` +
        (doc.window > 1 ? `, rolling ${doc.window} ${doc.granularity}s.` : ".");
      section.appendChild(chart(doc));
      const s = doc.summary, sum = el("p", {class: "summary", "data-n": s.n}, section);
      const pct = `${Math.round(doc.confidence * 100)}%`;
      sum.textContent = `Whole range: n = ${s.n.toLocaleString("en")} over ${s.periods} ` +
        `periods, estimate ${fmt(s.estimate, 4)}, ${pct} CI [${fmt(s.ci_low, 4)}, ` +
        `${fmt(s.ci_high, 4)}]` + (s.clipped ? " (clipped)" : "") +
        (s.interval_clipped ? " (interval clipped to [0, 1])" : "") +
        (s.wide ? " (too few reports)" : "") + `; the ${s.estimand}.`;
      el("p", {class: "note"}, section).textContent = doc.note;
      section.appendChild(table(doc));
    } catch (err) {
      el("p", {class: "error"}, section).textContent = `Could not load ${name}: ${err.message}`;
    }
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
    for (const key of ["from", "to", "every", "rolling"]) {
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
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const next = new URLSearchParams();
    if (form.from.value) next.set("from", fromInput(form.from.value));
    if (form.to.value) next.set("to", fromInput(form.to.value));
    next.set("every", form.every.value);
    if (form.rolling.value !== "1") next.set("rolling", form.rolling.value);
    document.querySelectorAll("#metrics input:checked").forEach(b => next.append("metric", b.value));
    location.search = next.toString();
  });
  render();
})();
