// Devices against a hostile collector (issue 26 items 1, 2, 4): each device of devices.json
// starts the app once, all at the same time: a Reporter on the device's own directory (file
// queue, secret and ledger) with the app's declarations, which waits for the catalogue,
// reports the device's true values, catches whatever report() throws (as any app must) and
// closes. Every batch it sends is recorded as the operator sees it on the wire.
//     node scripts/node-contract-reporter.mjs <collector url> <token> <metrics.json> <devices.json>
// devices.json is a list of {dir, entry ("default" or "all"), dimensions, reports: [[metric,
// true value], ...]}. Prints, per device, {sent, thrown, stats, metrics, wire (the reports
// sent, each batch once), ledger (the store's, after close)} as one JSON list.
import {readFileSync} from "node:fs";
import {join} from "node:path";

import * as all from "../dist/all.js";
import * as core from "../dist/index.js";
import {nodeStorage} from "../dist/node.js";

const [url, token, metricsPath, devicesPath] = process.argv.slice(2);
const metrics = JSON.parse(readFileSync(metricsPath, "utf8"));
const devices = JSON.parse(readFileSync(devicesPath, "utf8"));

async function start(device) {
  const batches = new Map();  // batch id -> reports: a retried batch is one batch
  const recording = (input, init) => {
    if (init?.method === "POST") {
      const doc = JSON.parse(init.body);
      batches.set(doc.batch_id, doc.reports);
    }
    return fetch(input, init);
  };
  const {Reporter} = device.entry === "all" ? all : core;
  const reporter = new Reporter(url, {
    token, metrics, dimensions: device.dimensions, fetch: recording, batchSize: 50,
    retry: {backoff: 50}, log: () => undefined, ...nodeStorage(device.dir),
    // Each call stands for a period of its own, so that every round's attack version meets
    // reports on the wire (the gate, which would send one a day, is tested in test_web_period).
    onePerPeriod: false,
  });
  await reporter.waitReady(10_000);
  let thrown = 0;
  for (const [metric, value] of device.reports) {
    try {
      reporter.report(metric, value);
    } catch {
      thrown++;
    }
  }
  const sent = await reporter.close(10_000);
  const ledger = JSON.parse(readFileSync(join(device.dir, "queue.json"), "utf8")).ledger ?? {};
  return {sent, thrown, stats: reporter.stats(), metrics: reporter.metrics,
          wire: [...batches.values()].flat(), ledger};
}

process.stdout.write(JSON.stringify(await Promise.all(devices.map(start))) + "\n");
