// What a page ships: a module's exports bundled (esbuild), minified and gzipped (level 9).
// Used by bench.mjs (./dev bench web) and by test/size.test.js (the budget, in the suite).
import {gzipSync} from "node:zlib";

import {build} from "esbuild";

/** The default entry's budget, gzipped bytes (12 KiB: issue 27). */
export const BUDGET = 12 * 1024;

/** Minified and gzipped bytes of `contents` (an ES module importing from ./src), bundled. */
export async function bundleSize(contents) {
  const out = await build({
    stdin: {contents, resolveDir: new URL("..", import.meta.url).pathname, loader: "js"},
    bundle: true, minify: true, format: "esm", platform: "browser", target: "es2022",
    write: false, logLevel: "error",
  });
  const code = out.outputFiles[0].contents;
  return {minified: code.length, gzipped: gzipSync(code, {level: 9}).length};
}
