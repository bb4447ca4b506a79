// Report through the web client in Node, with its file queue and file secret, then close.
//     node scripts/node-reporter.mjs <collector url> <token> <dir> <n> [close timeout ms]
// Reports `n` true values of feature_x_enabled and `n` false values of dark_mode (declared),
// and prints the reporter's stats as JSON.
import {Reporter} from "../dist/index.js";
import {nodeStorage} from "../dist/node.js";

const [url, token, dir, n, closeTimeout = "5000"] = process.argv.slice(2);
const reporter = new Reporter(url, {
  // n reports of each metric stand for n devices' or days': the period gate is off.
  token, batchSize: 40, retry: {backoff: 50}, log: () => undefined, ...nodeStorage(dir),
  onePerPeriod: false,
  metrics: {feature_x_enabled: "rr:1/2:1/2", dark_mode: "rr:3/4:1/2"},
});
for (let i = 0; i < Number(n); i++) {
  reporter.report("feature_x_enabled", true);
  reporter.report("dark_mode", false);
}
const sent = await reporter.close(Number(closeTimeout));
process.stdout.write(JSON.stringify({sent, stats: reporter.stats(),
                                     lastError: reporter.lastError ?? null}) + "\n");
