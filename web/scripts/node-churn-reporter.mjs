// One app start of one device (issue 19's version churn): a Reporter of the default entry or
// of deniable-client/all on its own directory (queue, secret and privacy ledger), which
// fetches the catalogue, reports one metric's true value twice, and closes.
//     node scripts/node-churn-reporter.mjs <collector url> <dir> <token> <metric> <value> <entry>
//         <mechanism> <declared>
// <entry> is "default" or "all"; <value> "true" or "false"; <mechanism> the id the collector
// serves now; <declared> the app's declaration of <metric> (a mechanism id): the device takes
// the served mechanism only if its epsilon is no larger. Prints the metrics it knew and its
// stats as JSON.
const [url, dir, token, metric, value, entry, mechanism, declared] = process.argv.slice(2);
const {Reporter} = await import(entry === "all" ? "../dist/all.js" : "../dist/index.js");
const {nodeStorage} = await import("../dist/node.js");

const reporter = new Reporter(url, {onePerPeriod: false, token, metrics: {[metric]: declared}, batchSize: 10, retry: {backoff: 50},
                                    log: () => undefined, ...nodeStorage(dir)});
if (!await reporter.waitReady(10_000)) throw new Error("no catalogue");
// A cached catalogue (the last version) makes the reporter ready at once: wait for the one
// fetched now, which serves <mechanism> (taken, or ignored: counted in ignoredServed).
const deadline = Date.now() + 10_000;
while (Date.now() < deadline && reporter.metrics[metric] !== mechanism &&
       reporter.stats().mechanismMismatch[metric]?.registered !== mechanism) {
  await new Promise((resolve) => setTimeout(resolve, 20));
}
reporter.report(metric, value === "true");
reporter.report(metric, value === "true");  // a repeat: the same answer, free
const sent = await reporter.close(10_000);
process.stdout.write(JSON.stringify({sent, metrics: reporter.metrics, stats: reporter.stats()}) + "\n");
