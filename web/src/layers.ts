/**
 * The instantaneous layer (RAPPOR's IRR) of boolean metrics, mirroring
 * deniable.client.composition and the Python guard's `Layers` (client/longitudinal.py).
 *
 * A metric declared `memoization: "instantaneous"` with the layer `instantaneous: I` reports
 * under its wire mechanism W (the one the collector debiases with) in two layers: the
 * device's permanent answer follows the memo layer M = split(W, I), derived from the device
 * secret as every memoized answer (memo.ts) and paid for once in the ledger at M's epsilon;
 * every report then re-perturbs it with fresh secure coins of I (`I.perturb(answer, rng)`,
 * exact integer draws, the same draw for draw as Python's). compose(M, I) == W exactly, so
 * one report costs W's epsilon, and any number of reports of one value at most M's
 * (`repeatedLoss`). Shared vectors (`instantaneous`) check the layers, the answers and the
 * draws against Python's. In deniable-client/all only (docs/web.md).
 */
import {InvalidParameterError} from "./errors.js";
import {add, cmp, div, frac, type Fraction, fracToString, mul, sub, toNumber} from "./fraction.js";
import {kindName} from "./kinds/kind.js";
import {kindNamed} from "./kinds/table.js";
import {Rr} from "./mechanism.js";

const ONE = frac(1n);

/** The forced-response mechanism with exactly these P1 and Q (0 < Q < P1 < 1). */
function fromProbabilities(p1: Fraction, q: Fraction): Rr {
  const truth = sub(p1, q);
  return new Rr(truth, div(q, sub(ONE, truth)));
}

/** The mechanism equivalent to `second.perturb(first.perturb(v))` (Python's compose). */
export function compose(first: Rr, second: Rr): Rr {
  const [p1a, qa, p1b, qb] = [first.pYesGivenYes, first.pYesGivenNo, second.pYesGivenYes,
    second.pYesGivenNo];
  return fromProbabilities(add(mul(p1a, p1b), mul(sub(ONE, p1a), qb)),
                           add(mul(qa, p1b), mul(sub(ONE, qa), qb)));
}

/**
 * The memo layer M with compose(M, irr) == wire exactly (Python's split).
 * @throws InvalidParameterError no such layer: it needs Q_irr < Q_wire < P1_wire < P1_irr.
 */
export function split(wire: Rr, irr: Rr): Rr {
  const [p1w, qw, p1b, qb] = [wire.pYesGivenYes, wire.pYesGivenNo, irr.pYesGivenYes,
    irr.pYesGivenNo];
  if (!(cmp(qb, qw) < 0 && cmp(qw, p1w) < 0 && cmp(p1w, p1b) < 0)) {
    throw new InvalidParameterError(
      `the instantaneous layer ${irr.id} (P1 = ${fracToString(p1b)}, Q = ${fracToString(qb)}) ` +
      `cannot produce reports that follow ${wire.id} (P1 = ${fracToString(p1w)}, Q = ` +
      `${fracToString(qw)}): it needs Q_layer < Q_wire < P1_wire < P1_layer, i.e. a less ` +
      "noisy instantaneous layer");
  }
  const spread = sub(p1b, qb);
  return fromProbabilities(div(sub(p1w, qb), spread), div(sub(qw, qb), spread));
}

/**
 * The exact worst-case loss (nats) of `n` reports of one true value, each a fresh draw of
 * `irr` over the same memoized answer of `memo` (Python's repeated_loss, in the same float
 * steps). It grows with n towards memo's epsilon, which it never exceeds; n = 1 gives
 * compose(memo, irr)'s epsilon. The reports share the answer, so they do not compose like
 * independent ones (docs/privacy.md).
 */
export function repeatedLoss(memo: Rr, irr: Rr, n: number): number {
  if (n === 0) return 0;
  const p1m = toNumber(memo.pYesGivenYes), notP1m = toNumber(sub(ONE, memo.pYesGivenYes));
  const qm = toNumber(memo.pYesGivenNo), notQm = toNumber(sub(ONE, memo.pYesGivenNo));
  const logG = (logRho: number): number => {
    // ln g(e^x), scaled so that the exponential never overflows nor cancels.
    if (logRho >= 0) {
      const w = Math.exp(-logRho);
      return Math.log(p1m + notP1m * w) - Math.log(qm + notQm * w);
    }
    const w = Math.exp(logRho);
    return Math.log(p1m * w + notP1m) - Math.log(qm * w + notQm);
  };
  const p1i = irr.pYesGivenYes, qi = irr.pYesGivenNo;
  const allOnes = n * Math.log(toNumber(div(p1i, qi)));
  const allZeros = n * Math.log(toNumber(div(sub(ONE, p1i), sub(ONE, qi))));
  return Math.min(memo.epsilon, Math.max(logG(allOnes), -logG(allZeros)));
}

/**
 * A declaration table's collection policy fields as Python's CollectionPolicy/parse_policy
 * take them: `memoization` one of memoized, instantaneous, fresh; `instantaneous` a mechanism
 * id, given exactly when memoization is "instantaneous", on a metric of a kind that takes a
 * layer (`layered`: booleans).
 * @returns the layer, or undefined for a metric without one.
 * @throws InvalidParameterError naming the metric and the field.
 */
export function declaredLayer(name: string, table: Readonly<Record<string, unknown>>): Rr | undefined {
  const fail = (field: string, why: string): never => {
    throw new InvalidParameterError(`metric '${name}': ${field}: ${why}`);
  };
  const memoization = table.memoization ?? "memoized";
  const id = table.instantaneous ?? null;
  if (!["memoized", "instantaneous", "fresh"].includes(memoization as string)) {
    fail("memoization", "must be one of memoized, instantaneous, fresh");
  }
  if ((memoization === "instantaneous") !== (id !== null)) {
    fail("instantaneous", "give a layer's mechanism id exactly when memoization is " +
         `'instantaneous'. Got memoization '${String(memoization)}' and layer ${JSON.stringify(id)}`);
  }
  if (id === null) return undefined;
  if (!kindNamed(kindName(table))?.layered) {
    fail("instantaneous", "an instantaneous layer is defined for boolean metrics only");
  }
  try {
    return Rr.fromId(id as string);
  } catch (error) {
    return fail("instantaneous", (error as Error).message);
  }
}
