// Headless Chromium for the e2e scripts: Debian's (or $CHROMIUM), driven by playwright-core,
// with the flags every script uses.
import {chromium} from "playwright-core";

/** Launch headless Chromium; the caller closes it. */
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run",
           "--disable-dev-shm-usage"],
  });
}
