// npm's `prepare`: build dist/ whenever the package is installed from source, so that
// `npm install <path to web/>` and `npm install <git URL>` give a working package (issue 27).
// A git install has the devDependencies (TypeScript) already; a path install does not, so they
// come from the lockfile first (npm ci without scripts, which would run this again).
import {execFileSync} from "node:child_process";
import {existsSync} from "node:fs";

const here = new URL("..", import.meta.url).pathname;
const npm = process.env.npm_execpath ? [process.execPath, process.env.npm_execpath] : ["npm"];
const run = (cmd, args) => execFileSync(cmd, args, {cwd: here, stdio: "inherit"});
if (!existsSync(new URL("../node_modules/typescript/bin/tsc", import.meta.url))) {
  run(npm[0], [...npm.slice(1), "ci", "--ignore-scripts", "--no-audit", "--no-fund",
               "--loglevel=error"]);
}
run(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"]);
