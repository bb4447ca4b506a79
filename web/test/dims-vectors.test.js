// The shared test vectors of public dimensions (tests/vectors/vectors.json, sections dims_*,
// written from the Python client) checked entry by entry against deniable-client/all.
import assert from "node:assert/strict";
import {test} from "node:test";

import {DimensionError, InvalidParameterError, MemoryStore, Reporter} from "../dist/all.js";
import {vectors} from "./vectors.js";
import {Dimensions} from "../dist/dimensions.js";
import {parseAllCatalogue} from "../dist/kinds.js";
import {encodeBatch} from "../dist/wire.js";

const describe = (dims) => {
  if (dims.dimensions.length === 0) return {};
  const doc = {dimensions: Object.fromEntries(dims.dimensions.map(
    (d) => [d.name, {values: [...d.values], other: d.other}]))};
  if (dims.combinations.length > 0) doc.combinations = dims.combinations.map((c) => [...c]);
  return doc;
};

test("dims vectors: there are some of every section", () => {
  for (const name of ["dims_normalize", "dims_report", "dims_wire"]) {
    assert.ok(vectors[name].length > 0, name);
  }
  assert.ok(vectors.dims_declarations.good.length > 0 && vectors.dims_declarations.bad.length > 0);
  assert.ok(vectors.dims_report.some((v) => "error" in v) &&
            vectors.dims_report.some((v) => "counted" in v && Object.keys(v.counted).length > 0));
});

test("dims vectors: declarations read as Python reads them; bad ones are refused", () => {
  for (const v of vectors.dims_declarations.good) {
    assert.deepEqual(describe(Dimensions.parse(v.dimensions, v.combinations)), v.parsed);
  }
  for (const v of vectors.dims_declarations.bad) {
    assert.throws(() => Dimensions.parse(v.dimensions, v.combinations), InvalidParameterError,
                  JSON.stringify(v));
  }
});

test("dims vectors: stated values as counted (other applied, names sorted), or refused", () => {
  const declaration = vectors.dims_declarations.good[0];
  const dims = Dimensions.parse(declaration.dimensions, declaration.combinations);
  for (const v of vectors.dims_normalize) {
    if ("error" in v) {
      assert.throws(() => dims.normalize(v.stated),
                    (e) => e instanceof DimensionError && e.field === v.error, JSON.stringify(v));
      continue;
    }
    const counted = dims.normalize(v.stated);
    assert.equal(JSON.stringify(counted), JSON.stringify(v.counted));  // the order too
    assert.deepEqual(dims.series(counted), v.series);
  }
});

test("dims vectors: the dims a Reporter attaches (device-wide, per call, refused)", async () => {
  const declaration = vectors.dims_declarations.good[0];
  const declared = {
    all: {mechanism: "rr:1/2:1/2", dimensions: declaration.dimensions,
          combinations: declaration.combinations},
    platform_only: {mechanism: "rr:1/2:1/2",
                    dimensions: {platform: declaration.dimensions.platform}},
    none: "rr:1/2:1/2",
  };
  const reporters = new Map();
  for (const v of vectors.dims_report) {
    const key = JSON.stringify([v.declared, v.device]);
    let reporter = reporters.get(key);
    if (reporter === undefined) {
      reporter = new Reporter("http://127.0.0.1:9", {
        metrics: {m: declared[v.declared]}, dimensions: v.device, fresh: ["m"],
        store: new MemoryStore(), fetch: async () => { throw new Error("offline"); },
        log: () => undefined, flushOnHide: false});
      reporter.core.put = (...item) => reporter.items.push(item);  // what the queue would get
      reporter.items = [];
      reporters.set(key, reporter);
    }
    reporter.items.length = 0;
    const call = () => reporter.report("m", true, v.dims ?? undefined);
    if ("error" in v) {
      assert.throws(call, (e) => e instanceof DimensionError && e.field === v.error,
                    JSON.stringify(v));
      assert.equal(reporter.items.length, 0);
      continue;
    }
    call();
    assert.equal(reporter.items.length, 1, JSON.stringify(v));
    const dims = reporter.items[0][3];
    assert.equal(JSON.stringify(dims ?? {}), JSON.stringify(v.counted), JSON.stringify(v));
    if (dims !== undefined) assert.ok(Object.keys(dims).length > 0);  // never an empty one
  }
  for (const reporter of reporters.values()) await reporter.close(100);
});

test("dims vectors: a catalogue with dimensions; entries with malformed ones withheld", () => {
  const v = vectors.dims_catalogue;
  const withheld = [];
  const found = new Map();
  const parsed = parseAllCatalogue(v.doc, (name, kind, why) => {
    assert.match(why, /public dimensions are malformed/);
    withheld.push(name);
  }, found);
  assert.deepEqual([...parsed.keys()].sort(), v.parsed);
  assert.deepEqual(withheld.sort(), v.withheld);
  assert.deepEqual(Object.fromEntries([...found].map(([name, d]) => [name, describe(d)])),
                   v.dimensions);
});

test("dims vectors: wire bodies with dims, byte for byte", async () => {
  for (const v of vectors.dims_wire) {
    const body = encodeBatch(v.batch_id, v.reports);
    assert.equal(body, v.body);
    const digest = Buffer.from(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(body)));
    assert.equal(digest.toString("hex"), v.sha256);
  }
});
