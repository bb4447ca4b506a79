// Load the e2e page's "hide" phase, then leave the page (navigate away: the page is hidden and
// unloaded, as when a user closes the tab or follows a link), and print what the page said
// before leaving. The caller checks the collector.
//     node scripts/hide.mjs <url> [timeout ms]
import {launch} from "./chromium.mjs";

const [url, timeout = "20000"] = process.argv.slice(2);
const browser = await launch();
try {
  const page = await browser.newPage();
  await page.goto(url);
  await page.waitForFunction(() => /^(done|error) /.test(document.title), null,
                             {timeout: Number(timeout), polling: 100});
  const before = await page.title();
  await page.goto("about:blank");
  await new Promise((resolve) => setTimeout(resolve, 1000));  // keepalive requests finish
  process.stdout.write(JSON.stringify({before}) + "\n");
} finally {
  await browser.close();
}
