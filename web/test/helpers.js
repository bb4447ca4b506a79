// A real HTTP server on loopback (a free port) whose answers a test scripts.
import {createServer} from "node:http";

export const CATALOGUE = {metrics: [
  {name: "feature_x_enabled", description: "", mechanism: "rr:1/2:1/2",
   p_yes_given_yes: "3/4", p_yes_given_no: "1/4", epsilon: Math.log(3)},
  {name: "dark_mode", description: "", mechanism: "rr:3/4:1/2",
   p_yes_given_yes: "7/8", p_yes_given_no: "1/8", epsilon: Math.log(7)},
]};

/**
 * Start a server. `answer(req, body)` returns [status, headers, body] or null to stall (never
 * answer). Every POST body is kept in `posts`, with its arrival time.
 */
export async function startServer(answer) {
  const posts = [];
  const gets = [];
  const sockets = new Set();
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString();
      if (req.method === "POST") posts.push({body, at: Date.now(), headers: req.headers});
      else gets.push({url: req.url, headers: req.headers});
      const out = answer(req, body);
      if (out === null) return;  // stall
      const [status, headers, text] = out;
      res.writeHead(status, {"Content-Type": "application/json", ...headers});
      res.end(text ?? "{}");
    });
  });
  server.on("connection", (s) => { sockets.add(s); s.on("close", () => sockets.delete(s)); });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    posts, gets,
    close: () => new Promise((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(resolve);
    }),
  };
}

/** A collector-like answer: the catalogue (CATALOGUE by default) on GET, 202 on POST, counting each batch id once. */
export function collectorLike(catalogue = CATALOGUE) {
  const seen = new Map();
  const answer = (req, body) => {
    if (req.method === "GET") return [200, {}, JSON.stringify(catalogue)];
    const doc = JSON.parse(body);
    if (seen.has(doc.batch_id)) return [200, {}, JSON.stringify({duplicate: true})];
    seen.set(doc.batch_id, doc.reports);
    return [202, {}, JSON.stringify({accepted: doc.reports.length})];
  };
  const counted = () => [...seen.values()].flat();
  return {answer, seen, counted};
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The fields of a metrics-file table (what `deniable metrics json` writes for the web client). */
const DECLARATION_FIELDS = ["kind", "mechanism", "edges", "lower", "upper", "clamp",
  "memoization", "period", "dimensions", "combinations"];

/**
 * The declarations an app would ship for the metrics of a served catalogue `doc` (name ->
 * metrics-file table as JSON), for the names in `only` if given: tests declare what a loopback
 * collector serves.
 */
export function declarations(doc, only) {
  const found = {};
  for (const e of doc.metrics) {
    if (only !== undefined ? !only.includes(e.name)
      : !["boolean", "categorical", "histogram", "numeric", undefined].includes(e.kind) ||
        !/^(rr|grr|oue|ss|bm):/.test(e.mechanism)) continue;
    const table = {};
    for (const field of DECLARATION_FIELDS) if (field in e) table[field] = e[field];
    if (e.kind === "categorical") table.categories = e.categories;
    found[e.name] = table;
  }
  return found;
}
