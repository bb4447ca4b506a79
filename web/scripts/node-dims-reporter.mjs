// Report with public dimensions through deniable-client/all in Node, one Reporter per device,
// each with its own file queue and file secret (<dir>/<i>), then close.
//     node scripts/node-dims-reporter.mjs <collector url> <dir> <devices.json> <metrics.json>
//         [close timeout ms]
// devices.json is a list of {dimensions, reports: [[metric, true value, dims or null], ...]};
// metrics.json the app's declarations (the metrics file's tables as JSON). A call that throws DimensionError is counted
// in `refused` and goes on. Prints each device's result as one JSON list.
import {readFileSync} from "node:fs";
import {join} from "node:path";

import {DimensionError, Reporter} from "../dist/all.js";
import {nodeStorage} from "../dist/node.js";

const [url, dir, devicesPath, metricsPath, closeTimeout = "10000"] = process.argv.slice(2);
const devices = JSON.parse(readFileSync(devicesPath, "utf8"));
const metrics = JSON.parse(readFileSync(metricsPath, "utf8"));
const results = [];
for (const [i, device] of devices.entries()) {
  const reporter = new Reporter(url, {
    metrics, dimensions: device.dimensions, batchSize: 25, retry: {backoff: 50}, log: () => undefined,
    onePerPeriod: false,  // many reports per device stand for many days
    ...nodeStorage(join(dir, String(i))),
  });
  if (!await reporter.waitReady(10_000)) throw new Error("no catalogue");
  let refused = 0;
  for (const [metric, value, dims] of device.reports) {
    try {
      reporter.report(metric, value, dims ?? undefined);
    } catch (error) {
      if (!(error instanceof DimensionError)) throw error;
      refused++;
    }
  }
  const sent = await reporter.close(Number(closeTimeout));
  results.push({sent, refused, stats: reporter.stats(), lastError: reporter.lastError ?? null});
}
process.stdout.write(JSON.stringify(results) + "\n");
