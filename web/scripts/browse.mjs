// Open a page in headless Chromium (Debian's, by playwright-core) and print its title once it
// starts with "done " or "error " (the e2e page's way to answer), as JSON on stdout.
//     node scripts/browse.mjs <url> [timeout ms]
import {launch} from "./chromium.mjs";

const [url, timeout = "60000"] = process.argv.slice(2);
const browser = await launch();
try {
  const page = await browser.newPage();
  const logs = [];
  page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
  await page.goto(url);
  await page.waitForFunction(() => /^(done|error) /.test(document.title), null,
                             {timeout: Number(timeout), polling: 100});
  const title = await page.title();
  process.stdout.write(JSON.stringify({title, url: page.url(), logs}) + "\n");
} finally {
  await browser.close();
}
