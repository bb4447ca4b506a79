import {build} from "esbuild";
import {gzipSync} from "node:zlib";
const entry = process.argv[2] ?? "./src/index.ts";
const out = await build({stdin: {contents: `export {Reporter} from "${entry}";`, resolveDir: process.cwd(), loader: "js"},
  bundle: true, minify: true, format: "esm", platform: "browser", target: "es2022", write: false, logLevel: "error", metafile: true});
const code = out.outputFiles[0].contents;
console.log("total", code.length, gzipSync(code, {level: 9}).length);
const ins = Object.values(out.metafile.outputs)[0].inputs;
for (const [k, v] of Object.entries(ins).sort((a,b)=>b[1].bytesInOutput-a[1].bytesInOutput)) console.log(v.bytesInOutput, k);
