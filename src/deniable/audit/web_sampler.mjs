// The web client's half of `deniable audit --client web` (deniable.audit.web runs it):
//
//     node web_sampler.mjs <web client package dir> '<job JSON>'
//
// It imports the built web client from <dir>/dist (the modules its Reporter uses: kinds.js's
// declareMetric and MetricSpec, mechanism.js, layers.js's split, memo.js's memoBit and
// importSecret, random.js's SYSTEM_BITS) and either streams reports drawn by that code (op
// "reports") or enumerates its samplers over scripted random words and prints their exact
// probabilities (op "exact"), or checks its random source (op "randomness"). No mechanism is
// re-implemented here: this file only calls the client's own functions as all.ts does.
//
// It ships with the Python package, not with the npm package: it is the audit's tool (an app
// never runs it), and it audits any built web client, the repo's or an installed one.
import {pathToFileURL} from "node:url";
import {join} from "node:path";

const [dir, jobText] = process.argv.slice(2);
const job = JSON.parse(jobText);
const load = (name) => import(pathToFileURL(join(dir, "dist", name)).href);
const [kinds, mech, layers, memo, random, fraction, open] = await Promise.all(
  ["kinds.js", "mechanism.js", "layers.js", "memo.js", "random.js", "fraction.js", "open.js"]
    .map(load));
const {fracToString, parseFraction} = fraction;
const out = [];
const flush = () => { if (out.length) { process.stdout.write(out.join("")); out.length = 0; } };
const emit = (line) => { out.push(line + "\n"); if (out.length >= 64) flush(); };

/** The metric as the web Reporter declares it (all.ts: declareMetric). */
function metricOf(job) {
  return kinds.declareMetric(job.metric, job.declaration);
}

/** A value as the Reporter's kind takes it, encoded: a boolean's bit, a category's index
 * (the mechanism's input), a numeric value's exact Fraction, an open string's padded bytes
 * (the kind's encode, as report() calls it). */
function encoded(metric, value) {
  if (metric instanceof mech.Rr) return value ? 1 : 0;
  if (metric.kind === "open") return metric.encode(value);
  if (metric.kind === "numeric") return parseFraction(String(value));
  return value;  // categorical and histogram: the category (bucket) index
}

/** A fresh device secret, as the Node reporter makes one: 32 bytes of crypto.getRandomValues
 * imported as an HMAC key (memo.js importSecret). */
async function newDevice() {
  return memo.importSecret(globalThis.crypto.getRandomValues(new Uint8Array(memo.SECRET_BYTES)));
}

// -- reports ------------------------------------------------------------------------------------

/** Streams, per value: "V <i>", then lines of comma-separated reports (booleans: the ones among
 * a device's k reports), 1,000 per line, then "E". */
async function reports(job) {
  const metric = metricOf(job);
  const rng = random.SYSTEM_BITS;
  const chunk = 1000;
  for (const [i, value] of job.values.entries()) {
    emit(`V ${i}`);
    const x = encoded(metric, value);
    if (!(metric instanceof mech.Rr)) {
      // all.ts: an open metric, or a fresh one, reports perturb(m, encoded, r.rng).
      for (let start = 0; start < job.devices; start += chunk) {
        const line = [];
        for (let j = 0; j < Math.min(chunk, job.devices - start); j++) {
          line.push(metric.perturb(x, rng));
        }
        emit(line.join(","));
      }
    } else if (job.mode === "fresh") {
      for (let start = 0; start < job.devices; start += chunk) {
        const line = [];
        for (let j = 0; j < Math.min(chunk, job.devices - start); j++) {
          let ones = 0;
          for (let r = 0; r < job.k; r++) ones += metric.perturb(x, rng);
          line.push(ones);
        }
        emit(line.join(","));
      }
    } else {
      // all.ts: the permanent answer derive(secret, metric, memo, key) (memo = the wire
      // mechanism, or split(wire, irr) under an instantaneous layer), then per report
      // layered(): a fresh draw of the layer over it, or the answer itself.
      const irr = job.mode === "instantaneous" ? mech.Rr.fromId(job.irr) : undefined;
      const memoLayer = irr ? layers.split(metric, irr) : metric;
      for (let start = 0; start < job.devices; start += chunk) {
        const size = Math.min(chunk, job.devices - start);
        const answers = await Promise.all(Array.from({length: size}, async () =>
          memo.memoBit(await newDevice(), job.metric, memoLayer, x)));
        const line = answers.map((answer) => {
          let ones = 0;
          for (let r = 0; r < job.k; r++) ones += irr ? irr.perturb(answer, rng) : answer;
          return ones;
        });
        emit(line.join(","));
      }
    }
    emit("E");
  }
}

// -- exact: enumeration over scripted words -----------------------------------------------------

class NeedBits extends Error {
  constructor(k) { super(`need ${k} bits`); this.k = k; }
}

/** A RandomBits that serves scripted words; a position `fixed(position, k)` answers (a number)
 * is served that value instead; past the script, NeedBits (or `tail`, if given). */
class Script {
  constructor(words, fixed, tail) {
    this.words = words; this.fixed = fixed; this.tail = tail; this.next = 0; this.position = 0;
  }

  bits(k) {
    const position = this.position++;
    const fixed = this.fixed?.(position, k);
    if (fixed !== undefined) return fixed;
    if (this.next === this.words.length) {
      if (this.tail !== undefined) return this.tail;
      throw new NeedBits(k);
    }
    const [value, width] = this.words[this.next++];
    if (width !== k) throw new Error(`the sampler asked for ${k} bits where the script has ${width}`);
    return value;
  }

  bigBits(k) {
    return BigInt(this.bits(k));  // words wider than 20 bits are never enumerated (unfinished)
  }
}

const ZERO = fraction.frac(0n);
const ONE = fraction.frac(1n);

/**
 * Every sequence of scripted words `run` can read (each word of k bits at its 2**k values),
 * depth first, in exact fractions: {outcomes: {key: "num/den"}, unfinished: "num/den", paths}.
 *
 * A rejection loop (src/random.ts below: mask, reject, draw again) would make the tree
 * infinite. Where the words that make `run` ask again for the same k bits are the top range
 * [n, 2**k) and, after such a word, `run` does word for word what it does at the start of the
 * draw (checked for every such word, or for 16 of them spread over the range when that would
 * take more than 2**16 runs), those words restart the draw: their mass goes to the others in
 * proportion (the geometric series, exact). Any other sequence is followed to `maxWords` words
 * and `maxRuns` runs; the mass left is `unfinished` (the exact value lies within it).
 */
function enumerate(run, {fixed, maxRuns = 1 << 18, maxWords = 64} = {}) {
  let runs = 0;
  let paths = 0;
  let unfinished = ZERO;
  const outcomes = new Map();
  const probe = (words) => {
    runs++;
    try {
      return {out: String(run(new Script(words, fixed)))};
    } catch (error) {
      if (!(error instanceof NeedBits)) throw error;
      return {need: error.k};
    }
  };
  const same = (a, b) => a.out === b.out && a.need === b.need;
  const visit = (words, k, weight) => {
    const size = 2 ** k;
    if (k > 20 || words.length >= maxWords || runs + size > maxRuns) {
      unfinished = fraction.add(unfinished, weight);
      return;
    }
    const results = Array.from({length: size}, (_, w) => probe([...words, [w, k]]));
    let n = size;
    while (n > 0 && results[n - 1].need === k) n--;
    let restarts = 0;
    if (n > 0 && n < size) {
      const count = size - n;
      const checked = count * size <= 1 << 16 ? Array.from({length: count}, (_, i) => n + i)
        : Array.from({length: 16}, (_, i) => n + Math.floor((i * (count - 1)) / 15));
      const renews = checked.every((w) =>
        results.every((r, x) => same(probe([...words, [w, k], [x, k]]), r)));
      if (renews) restarts = count;
    }
    const share = fraction.mul(weight, fraction.frac(1n, BigInt(size - restarts)));
    for (let w = 0; w < size - restarts; w++) {
      const r = results[w];
      if (r.out !== undefined) {
        outcomes.set(r.out, fraction.add(outcomes.get(r.out) ?? ZERO, share));
        paths++;
      } else {
        visit([...words, [w, k]], r.need, share);
      }
    }
  };
  const first = probe([]);
  if (first.out !== undefined) outcomes.set(first.out, ONE);
  else visit([], first.need, ONE);
  return {outcomes: Object.fromEntries([...outcomes].map(([k, v]) => [k, fracToString(v)])),
          unfinished: fracToString(unfinished), paths};
}

/** The exact probability every one of a ByteCoin's bytes gives 1 (Python's enumerate_coin):
 * the coin `mechanism` itself decides with (its private `coin`), over <= 6 bytes. */
function coinOf(coin, levels = 6) {
  let ones = 0n;
  let unread = 0n;
  const den = 256n ** BigInt(levels);
  const stack = [[]];
  while (stack.length) {
    const prefix = stack.pop();
    for (let b = 0; b < 256; b++) {
      const values = [...prefix, b];
      const served = values.slice(1);
      const weight = 256n ** BigInt(levels - values.length);
      try {
        const mark = coin.decide(Uint8Array.of(values[0]), (n) => {
          if (served.length < n) throw new NeedBits(8);
          return Uint8Array.from(served.splice(0, n));
        });
        ones += BigInt(mark[0]) * weight;
      } catch (error) {
        if (!(error instanceof NeedBits)) throw error;
        if (values.length >= levels) unread += weight;
        else stack.push(values);
      }
    }
  }
  return {ones: fracToString(fraction.frac(ones, den)), unread: fracToString(fraction.frac(unread, den))};
}

/** The claims of a mechanism, exact. */
function claims(m) {
  return {id: m.id, likelihood_ratio: fracToString(m.likelihoodRatio), epsilon: m.epsilon};
}

/** (level, seed) words as perturbPadded draws them (below(levels), below(seeds): mask, reject,
 * draw again; src/random.ts), every sequence up to `maxPaths`, the GRR's later draws answered
 * with 0 (its truth kept): {paths: [[level, seed, "num/den", cell]], unfinished}. */
function openCells(sketch, padded, maxPaths) {
  const kLevel = random.bitsFor(BigInt(sketch.levels));
  const kSeed = random.bitsFor(BigInt(sketch.seeds));
  const found = [];
  let unfinishedBits = [];
  // A path: the words of the level draw (rejected ones, then the accepted one), then the seed's.
  const queue = [{words: [], bits: 0}];
  for (let at = 0; at < queue.length; at++) {
    const {words, bits} = queue[at];
    const state = parse(words);
    if (state.done) {
      let cell;
      try {
        cell = sketch.perturbPadded(padded, new Script(words, undefined, 0));
      } catch (error) {
        return {error: `perturbPadded does not draw (level, seed) as below(levels), ` +
                       `below(seeds) (${error.message})`};
      }
      found.push([state.level, state.seed, bits, cell]);
      continue;
    }
    const k = state.level === undefined ? kLevel : kSeed;
    if (queue.length + (1 << k) > maxPaths) { unfinishedBits.push(bits); continue; }
    for (let v = 0; v < (1 << k); v++) queue.push({words: [...words, [v, k]], bits: bits + k});
  }
  function parse(words) {
    let level;
    for (const [v, k] of words) {
      if (level === undefined) { if (v < sketch.levels) level = v; }
      else if (v < sketch.seeds) return {done: true, level, seed: v};
    }
    return {done: false, level};
  }
  const top = [...found.map((f) => f[2]), ...unfinishedBits].reduce((a, b) => Math.max(a, b), 0);
  const den = 1n << BigInt(top);
  const show = (num) => fracToString(fraction.frac(num, den));
  return {paths: found.map(([l, s, b, c]) => [l, s, show(1n << BigInt(top - b)), c]),
          unfinished: show(unfinishedBits.reduce((s, b) => s + (1n << BigInt(top - b)), 0n))};
}

function exact(job) {
  const metric = metricOf(job);
  if (metric instanceof mech.Rr) {
    const result = {kind: "boolean", layers: {}};
    const irr = job.mode === "instantaneous" ? mech.Rr.fromId(job.irr) : undefined;
    const all = {wire: metric, memo: irr && job.mode !== "fresh" ? layers.split(metric, irr) : undefined, irr};
    for (const [name, layer] of Object.entries(all)) {
      if (!layer) continue;
      result.layers[name] = {
        id: layer.id, p_yes_given_yes: fracToString(layer.pYesGivenYes),
        p_yes_given_no: fracToString(layer.pYesGivenNo),
        given: [0, 1].map((bit) => enumerate((s) => layer.perturb(bit, s))),
      };
    }
    return result;
  }
  const m = metric.mechanism;
  const result = {kind: metric.kind, family: m.id.split(":", 1)[0], ...claims(m)};
  if (m instanceof kinds.KaryRandomizedResponse) {
    result.index0 = enumerate((s) => m.perturb(0, s));
  } else if (m instanceof kinds.UnaryEncoding) {
    // perturb(0) with every byte 255 (its coin decided 0) but the free ones: bit j's coin
    // (byte j) and the true bit (byte d), and the bytes a pending coin draws after them.
    const free = (positions) => (position, k) =>
      positions.includes(position) || position > m.d ? undefined : (k === 8 ? 255 : 0);
    const bit = (hex, i) => Number((BigInt(`0x${hex}`) >> BigInt(i)) & 1n);
    result.other_bit = enumerate((s) => bit(m.perturb(0, s), 1), {fixed: free([1])});
    result.true_bit = enumerate((s) => bit(m.perturb(0, s), 0), {fixed: free([m.d])});
    result.coin = coinOf(m.coin);
  } else if (m instanceof kinds.SubsetSelection) {
    result.coin = coinOf(m.coin);
  } else if (m instanceof kinds.BitMean) {
    // Both ends and the midpoint (P(1 | x) is linear in x between them).
    const middle = fraction.div(fraction.add(m.lower, m.upper), fraction.frac(2n));
    result.p_one = Object.fromEntries([m.lower, m.upper, middle]
      .map((x) => [fracToString(x), enumerate((s) => m.perturb(x, s))]));
  } else if (m instanceof open.OpenDomainSketch) {
    result.strings = job.values.map((value) => openCells(m, metric.encode(value), 1 << 18));
    // The GRR part at (level, seed) = (0, 0): every word it reads after those two.
    result.grr = job.values.map((value) => enumerate((s) => m.splitCell(m.perturbPadded(metric.encode(value), s))[2],
      {fixed: (position, k) => (position < 2 ? 0 : undefined)}));
  }
  return result;
}

// -- randomness ---------------------------------------------------------------------------------

/** Whether the client's system source reads crypto.getRandomValues: count its calls while a
 * new SecureBits and SYSTEM_BITS draw. */
function randomness() {
  const original = globalThis.crypto.getRandomValues.bind(globalThis.crypto);
  let calls = 0;
  globalThis.crypto.getRandomValues = (array) => { calls++; return original(array); };
  try {
    const source = new random.SecureBits();
    source.bits(8);
    const fresh = calls;
    for (let i = 0; i < 2000; i++) random.SYSTEM_BITS.bits(32);  // > one 4096-byte block
    return {secure_bits_reads: fresh, system_bits_reads: calls - fresh,
            system_is_secure_bits: random.SYSTEM_BITS instanceof random.SecureBits};
  } finally {
    globalThis.crypto.getRandomValues = original;
  }
}

if (job.op === "reports") await reports(job);
else if (job.op === "exact") emit(JSON.stringify(exact(job)));
else if (job.op === "randomness") emit(JSON.stringify(randomness()));
else throw new Error(`unknown op ${job.op}`);
flush();
