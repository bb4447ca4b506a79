// Report metrics of every kind through deniable-client/all in Node, with its file queue and
// file secret, then close.
//     node scripts/node-kinds-reporter.mjs <collector url> <dir> <reports.json> <metrics.json>
//         [close timeout ms]
// reports.json is a list of [metric, true value] pairs; metrics.json the app's declarations
// (the metrics file's tables as JSON). Prints the reporter's stats as JSON.
import {readFileSync} from "node:fs";

import {Reporter} from "../dist/all.js";
import {nodeStorage} from "../dist/node.js";

const [url, dir, reportsPath, metricsPath, closeTimeout = "10000"] = process.argv.slice(2);
const reports = JSON.parse(readFileSync(reportsPath, "utf8"));
const metrics = JSON.parse(readFileSync(metricsPath, "utf8"));
// One process stands in for a device reporting many values of each metric: the cap over
// versions (maxMetricEpsilon, tested in test_web_version_churn.py) would refuse most of their
// new answers, so it is off here.
const reporter = new Reporter(url, {
  metrics, batchSize: 100, retry: {backoff: 50}, log: () => undefined, maxMetricEpsilon: Infinity,
  onePerPeriod: false,  // and so is the period gate (tested in test_web_period.py)
  ...nodeStorage(dir),
});
if (!await reporter.waitReady(10_000)) throw new Error("no catalogue");
for (const [metric, value] of reports) reporter.report(metric, value);
const sent = await reporter.close(Number(closeTimeout));
process.stdout.write(JSON.stringify({sent, stats: reporter.stats(),
                                     metrics: reporter.metrics,
                                     lastError: reporter.lastError ?? null}) + "\n");
