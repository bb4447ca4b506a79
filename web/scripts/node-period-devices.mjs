// Devices opening an app several times a day over simulated days (the period gate's clock),
// each run a new Reporter on the device's directory calling report() several times:
//     node scripts/node-period-devices.mjs <collector url> <dir> <devices> <day> [runs] [calls]
// <day> is a Unix day number (UTC); run k of the day starts at 08:00 + 12 h * k / runs.
// Prints per device the reports sent so far (all runs) and the calls skipped today, as JSON.
import {join} from "node:path";

import {Reporter} from "../dist/index.js";
import {nodeStorage} from "../dist/node.js";

const [url, dir, devices, day, runs = "2", calls = "3"] = process.argv.slice(2);
// The app's declarations (the test's metrics file): the period is the declared one.
const metrics = {dark_mode: {mechanism: "rr:3/4:1/2"},
                 weekly_opt_in: {mechanism: "rr:1/2:1/2", period: "week"}};
const out = [];
for (let i = 0; i < Number(devices); i++) out.push({sent: 0, periodSkipped: 0});
for (let run = 0; run < Number(runs); run++) {
  const now = Number(day) * 86_400_000 + 8 * 3_600_000 + run * 43_200_000 / Number(runs);
  await Promise.all(out.map(async (total, i) => {
    const reporter = new Reporter(url, {
      metrics, log: () => undefined, retry: {backoff: 50}, clock: () => now,
      ...nodeStorage(join(dir, String(i))),
    });
    if (!await reporter.waitReady(10_000)) throw new Error("no catalogue");
    for (let c = 0; c < Number(calls); c++) {
      reporter.report("dark_mode", c % 2 === 0);
      reporter.report("weekly_opt_in", c % 2 === 1);
    }
    if (!await reporter.close(10_000)) throw new Error("not sent");
    total.sent = reporter.stats().sent;  // kept in the store: every run's so far
    total.periodSkipped += reporter.stats().periodSkipped;
  }));
}
process.stdout.write(JSON.stringify(out) + "\n");
