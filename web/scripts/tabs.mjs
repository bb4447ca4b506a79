// Two tabs of one origin in one Chromium profile (they share IndexedDB), both on the e2e page's
// "tab" phase: each reports a gated metric three times, at once, then an ungated one once; prints
// what each tab's Reporter said and the shared store's ledger and periods, as JSON.
//     node scripts/tabs.mjs <url> [timeout ms]
import {launch} from "./chromium.mjs";

const [url, timeout = "30000"] = process.argv.slice(2);
const browser = await launch();
try {
  const context = await browser.newContext();
  const tabs = [await context.newPage(), await context.newPage()];
  for (const tab of tabs) {
    await tab.goto(url);
    await tab.waitForFunction(() => /^(done|error) /.test(document.title), null,
                              {timeout: Number(timeout), polling: 100});
    if ((await tab.title()).startsWith("error")) throw new Error(await tab.title());
  }
  const gated = await Promise.all(tabs.map((tab) => tab.evaluate(() => window.go(true))));
  const ungated = await Promise.all(tabs.map((tab) => tab.evaluate(() => window.go(false))));
  const state = await tabs[1].evaluate(() => window.state());
  process.stdout.write(JSON.stringify({gated, ungated, state}) + "\n");
} finally {
  await browser.close();
}
