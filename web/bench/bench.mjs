// The web client's size and speed, measured in one run (./dev bench web runs this).
//
// Size: what a page ships for `import {Reporter} from "deniable-client"` (boolean metrics) and
// for `import {Reporter} from "deniable-client/all"` (every metric kind), bundled, minified
// (esbuild) and gzipped (level 9). Speed: perturbations per second, one call at a time, of
// the web client against Math.random-based randomized response (the code issue 15 warns
// about: insecure and float-compared) and against one crypto.getRandomValues call per report;
// interleaved over rounds, the best round of each counts.

import {MemoryStore, RandomizedResponse, Reporter} from "../dist/index.js";
import {BUDGET, bundleSize} from "./size.mjs";

const args = Object.fromEntries(process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=")));
const calls = Number(args.calls ?? 2_000_000);
const rounds = Number(args.rounds ?? 5);


const sizes = {
  "Reporter (a page's import)": await bundleSize(
    'export {Reporter} from "./src/index.ts";'),
  "Reporter from deniable-client/all": await bundleSize(
    'export {Reporter} from "./src/all.ts";'),
  "RandomizedResponse only": await bundleSize(
    'export {RandomizedResponse} from "./src/mechanism.ts";'),
  "everything in index": await bundleSize('export * from "./src/index.ts";'),
};
console.log("Bundle size (esbuild --minify, gzip -9):");
for (const [name, s] of Object.entries(sizes)) {
  console.log(`  ${name.padEnd(34)} ${String(s.minified).padStart(7)} B minified  ` +
              `${String(s.gzipped).padStart(6)} B gzipped  (${(s.gzipped / 1024).toFixed(2)} KiB)`);
}
const target = sizes["Reporter (a page's import)"].gzipped;
console.log(`  budget 12 KiB gzipped (deniable-client): ${target <= BUDGET ? "met" : "NOT met"}`);

// -- speed ------------------------------------------------------------------------------
const twoCoin = RandomizedResponse.fromId("rr:1/2:1/2");
const oneThird = RandomizedResponse.fromId("rr:1/3:1/2");
const word = new Uint32Array(1);
let sink = 0;
const variants = {
  "deniable rr:1/2:1/2 (secure, exact)": (b) => twoCoin.perturb(b),
  "deniable rr:1/3:1/2 (rejection)": (b) => oneThird.perturb(b),
  "Math.random() < 0.5 (insecure, float)": (b) =>
    Math.random() < 0.5 ? b : (Math.random() < 0.5 ? 1 : 0),
  "getRandomValues per report": (b) => {
    crypto.getRandomValues(word);
    return (word[0] & 1) ? b : ((word[0] >>> 1) & 1);
  },
};
const reporter = new Reporter("http://127.0.0.1:9", {
  metrics: {dark_mode: "rr:1/2:1/2"}, store: new MemoryStore(), flushOnHide: false,
  maxQueuedReports: Number.MAX_SAFE_INTEGER, log: () => undefined, commitInterval: 60_000,
  onePerPeriod: false});  // every call queued, not skipped
await reporter.waitReady(1000);
// Both values' answers derived and paid for first (each a new answer, derived asynchronously):
// the calls timed below are the synchronous path of a paid answer, each one queued.
reporter.report("dark_mode", true);
reporter.report("dark_mode", false);
await reporter.flush(5000);
const reportCalls = Math.min(calls, 200_000);
const best = Object.fromEntries(Object.keys(variants).map((k) => [k, 0]));
best["Reporter.report() (memoized, queued)"] = 0;
for (let round = 0; round < rounds; round++) {
  for (const [name, fn] of Object.entries(variants)) {
    const start = performance.now();
    for (let i = 0; i < calls; i++) sink += fn(i & 1);
    best[name] = Math.max(best[name], calls / ((performance.now() - start) / 1000));
  }
  const start = performance.now();
  for (let i = 0; i < reportCalls; i++) reporter.report("dark_mode", (i & 1) === 1);
  best["Reporter.report() (memoized, queued)"] = Math.max(
    best["Reporter.report() (memoized, queued)"],
    reportCalls / ((performance.now() - start) / 1000));
}
const base = best["Math.random() < 0.5 (insecure, float)"];
console.log(`\nPerturbations per second (Node ${process.version}, one call at a time, best of ` +
            `${rounds} rounds of ${calls}; report() ${reportCalls}):`);
for (const [name, rate] of Object.entries(best)) {
  console.log(`  ${name.padEnd(40)} ${(rate / 1e6).toFixed(2).padStart(7)} M/s  ` +
              `${(rate / base).toFixed(2)}x Math.random`);
}
const {droppedEarly} = reporter.stats();
if (droppedEarly > 0) throw new Error(`report() timed the drop path: ${droppedEarly} dropped`);
await reporter.close(0);

// -- the kinds beyond boolean (deniable-client/all): secure, exact, the reference sampler ------
const all = await import("../dist/all.js");
const os = ["android", "ios", "windows", "macos", "linux", "other"];
const tag = all.domainTag(os);
const grr = all.KaryRandomizedResponse.fromId(`grr:6:1280797909/2147483648:${tag}`);
const oue = all.UnaryEncoding.fromId(`oue:6:1/4:${tag}`);
const ss = all.SubsetSelection.fromId(`ss:6:2:5:${tag}`);
const bm = all.BitMean.fromId("bm:1/4:0:10000");
const x = all.frac(8125n, 10n);
const kindsReporter = new all.Reporter("http://127.0.0.1:9", {
  metrics: {os: {kind: "categorical", mechanism: grr.id, categories: os},
            startup_ms: bm.id},
  store: new MemoryStore(), flushOnHide: false, maxQueuedReports: Number.MAX_SAFE_INTEGER,
  onePerPeriod: false,
  log: () => undefined, commitInterval: 60_000});
await kindsReporter.waitReady(1000);
kindsReporter.report("os", "ios");
kindsReporter.report("startup_ms", 812.5);
await kindsReporter.flush(0).catch(() => undefined);
await new Promise((resolve) => setTimeout(resolve, 200));  // the first answers are derived
const kindCalls = Math.min(calls, 200_000);
const kinds = {
  "GRR d=6 perturb": () => grr.perturb(1),
  "OUE d=6 perturb": () => oue.perturb(1),
  "SS d=6 k=2 perturb": () => ss.perturb(1),
  "1BitMean perturb (812.5)": () => bm.perturb(x),
  "Reporter(all).report() categorical": () => kindsReporter.report("os", "ios"),
  "Reporter(all).report() numeric": () => kindsReporter.report("startup_ms", 812.5),
};
const kindBest = Object.fromEntries(Object.keys(kinds).map((k) => [k, 0]));
for (let round = 0; round < rounds; round++) {
  for (const [name, fn] of Object.entries(kinds)) {
    const start = performance.now();
    for (let i = 0; i < kindCalls; i++) fn();
    kindBest[name] = Math.max(kindBest[name], kindCalls / ((performance.now() - start) / 1000));
  }
}
console.log(`\nKinds beyond boolean (deniable-client/all), per second, best of ${rounds} rounds ` +
            `of ${kindCalls}:`);
for (const [name, rate] of Object.entries(kindBest)) {
  console.log(`  ${name.padEnd(40)} ${(rate / 1e6).toFixed(3).padStart(7)} M/s`);
}
await kindsReporter.close(0);
if (sink === 0.5) console.log(sink);
process.exit(0);
