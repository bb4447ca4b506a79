// The kinds table (src/kinds/table.ts): booleans are one kind among the others, and no code
// outside src/kinds/ tests a kind's name (issue 31; as tests/client/test_kinds_registry.py for
// the Python client). Deterministic: no statistics.
import assert from "node:assert/strict";
import {readdirSync, readFileSync} from "node:fs";
import {test} from "node:test";

import {InvalidParameterError} from "../dist/errors.js";
import {bit, isBit, owns, reporting} from "../dist/kinds/boolean.js";
import {kindName} from "../dist/kinds/kind.js";
import {alwaysFresh, KIND_TABLE, kindNamed} from "../dist/kinds/table.js";

const SRC = new URL("../src/", import.meta.url);
const KINDS = Object.keys(KIND_TABLE);
const NAME = `"(?:${KINDS.join("|")})"`;
// A comparison with a kind's name as a string: x === "open", "boolean" !== y, e.kind ?? "boolean",
// case "numeric":, [..].includes("histogram"). `typeof x === "boolean"` tests a JS type, not a kind.
const COMPARISON = new RegExp(
  `(?:[!=]==?\\s*${NAME})|(?:${NAME}\\s*[!=]==?)|(?:\\?\\?\\s*${NAME})|(?:case\\s+${NAME})|` +
  `(?:includes\\(\\s*${NAME})`);
const TYPE_TEST = /typeof\s+[\w$.?[\]]+\s*[!=]==?\s*"boolean"/g;

/** The lines of `text` (comments left out) that compare something with a kind's name. */
function nameTests(text) {
  return text.split("\n").map((line, i) => [i + 1, line.trim()])
    .filter(([, line]) => !/^(?:\*|\/\/|\/\*)/.test(line))
    .filter(([, line]) => COMPARISON.test(line.replace(TYPE_TEST, "")));
}

test("the scan finds a kind-name comparison and lets a type test through", () => {
  // The detector itself: a scan that could not find anything would prove nothing.
  for (const line of ['if ((table.kind ?? "boolean") !== "boolean") {', 'm.kind === "open"',
                      'if ("categorical" === kind) x();', 'case "numeric":',
                      'kinds.includes("histogram")', 'String(e.kind ?? "boolean")']) {
    assert.equal(nameTests(line).length, 1, line);
  }
  for (const line of ['if (typeof value !== "boolean" && value !== 0) {',
                      'typeof e.x === "boolean" || isBit(v)', ' * kind "boolean" (or none)',
                      'fail(`a boolean metric needs a rr mechanism`)']) {
    assert.equal(nameTests(line).length, 0, line);
  }
});

test("no module outside src/kinds/ compares anything with a kind's name", () => {
  const found = [];
  for (const file of readdirSync(SRC, {recursive: true})) {
    if (!file.endsWith(".ts") || file.startsWith("kinds/")) continue;
    for (const [n, line] of nameTests(readFileSync(new URL(file, SRC), "utf8"))) {
      found.push(`src/${file}:${n}: ${line}`);
    }
  }
  assert.deepEqual(found, [], "ask the kind (src/kinds/) instead:\n" + found.join("\n"));
});

test("the table holds every kind, booleans among them, each in one module of its own", () => {
  assert.deepEqual(KINDS, ["boolean", "categorical", "histogram", "numeric", "open"]);
  const modules = readdirSync(new URL("kinds/", SRC)).filter((f) => f.endsWith(".ts"))
    .map((f) => f.slice(0, -3)).filter((f) => !["kind", "table", "values"].includes(f));
  assert.deepEqual(modules.sort(), [...KINDS].sort());
  for (const name of KINDS) {
    const k = kindNamed(name);
    assert.ok(k.families.length > 0 && typeof k.encode === "function" &&
              typeof k.instead === "function", name);
  }
  assert.equal(kindNamed("nominal"), undefined);
  assert.equal(kindNamed("toString"), undefined);  // own names only
});

test("booleans are the kind an entry without a kind states, and say which entries are theirs", () => {
  assert.equal(kindName({}), "boolean");
  assert.equal(kindName(undefined), "boolean");
  assert.equal(kindName({kind: null}), "boolean");
  assert.equal(kindName({kind: "open"}), "open");
  assert.ok(owns({mechanism: "rr:1/2:1/2"}) && owns({kind: "boolean"}) && owns(undefined));
  assert.ok(!owns({kind: "boolean", mechanism: "grr:6:1/2:0a1b2c3d"}));
  assert.ok(!owns({kind: "numeric", mechanism: "rr:1/2:1/2"}));
});

test("each kind states its rules: layers, fresh coins, substitutes", () => {
  const layered = KINDS.filter((name) => kindNamed(name).layered === true);
  const fresh = KINDS.filter((name) => kindNamed(name).fresh === true);
  assert.deepEqual(layered, ["boolean"]);
  assert.deepEqual(fresh, ["open"]);
  assert.ok(alwaysFresh({kind: "open"}) && alwaysFresh({mechanism: "od:16:1:1024:10:1/2"}));
  assert.ok(!alwaysFresh({kind: "numeric", mechanism: "bm:1:0:10"}) && !alwaysFresh({}));
  assert.deepEqual(kindNamed("boolean").instead(undefined, 1), [0]);
  assert.deepEqual([0, 1].map((key) => reporting.instead(undefined, key)), [[1], [0]]);
  // The default entry's booleans report as the registered kind does: the same functions.
  for (const hook of ["encode", "instead"]) {
    assert.equal(reporting[hook], kindNamed("boolean")[hook], hook);
  }
  assert.deepEqual(kindNamed("open").instead(undefined, 3), []);
});

test("a boolean metric takes a boolean or 0/1, and says so without showing the value", () => {
  assert.deepEqual([true, false, 1, 0].map((v) => bit(v)), [1, 0, 1, 0]);
  assert.deepEqual([true, 0, "1", 2, null].map(isBit), [true, true, false, false, false]);
  assert.equal(kindNamed("boolean").encode(undefined, true), 1);
  for (const value of ["secret-true", 2, null, {}]) {
    assert.throws(() => bit(value), (e) => e instanceof InvalidParameterError &&
      /^trueValue must be a boolean\. Got a \w+ instead\.$/.test(e.message) &&
      !e.message.includes("secret"));
  }
});
