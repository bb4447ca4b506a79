import {build} from "esbuild";
const out = await build({stdin: {contents: `export {Reporter} from "${process.argv[2] ?? "./src/index.ts"}";`, resolveDir: process.cwd(), loader: "js"},
  bundle: true, minify: process.argv[3] !== "nomin", format: "esm", platform: "browser", target: "es2022", write: false, logLevel: "error"});
process.stdout.write(out.outputFiles[0].text);
