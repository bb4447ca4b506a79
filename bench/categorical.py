"""Categorical and numeric metrics against the peers: accuracy and perturbation speed, one run.

    ./dev bench categorical             # the full run (about a minute on 2 cores)
    ./dev bench categorical --quick     # a smoke run: fewer trials, points and seconds

1. Accuracy, for epsilon in {0.5, 1, 2, 4}, d in {2, 8, 64, 1024}, and two populations of
   ``--n`` users (Zipf with exponent 1.1, and uniform) whose category counts are fixed:
   - ours: the mechanism ``choose_categorical`` picks (GRR, OUE or subset selection, by exact
     variance; exact p, q or r = m/2**32), debiased per category as the analysis does,
     f = (c/n - Q) / (P1 - Q). Its MSE (mean over
     categories of the squared error, averaged over ``--trials`` trials) over the exact
     theoretical variance for this fixed population,
     mean_i [n_i P1 (1 - P1) + (n - n_i) Q (1 - Q)] / (n^2 (P1 - Q)^2), with a 95% CI: 1.00
     means the estimates are unbiased and their variance is exactly what the analysis states.
   - each peer's best unbiased protocol at the same epsilon: the one of its frequency oracles
     with the smallest exact MSE on this population (pure-ldp: direct encoding, OUE, OLH;
     multi-freq-ldpy: GRR, OUE, OLH, subset selection), with the peer's own (float)
     probabilities read from its objects, debiased the same way (pure-ldp's own server
     estimate is checked to give the same numbers). Ratio = our MSE / theirs, measured (95%
     CI, paired trials) and exact (from the two theories).
   - multi-freq-ldpy's default estimate (its MI aggregator: clip negatives to 0, renormalise
     to sum 1) on the same reports as its best protocol: its MSE against ours, and its bias,
     as the largest |mean error| of a category in standard errors of that mean (an unbiased
     estimator stays near the 3-4 that chance gives the worst of up to 1024 categories).
   Trials are drawn from the exact distribution of the aggregate counts, which is faithful
   for these estimators (they read only the counts): OUE's per-category counts are
   independent binomials, Bin(n_i, P1) + Bin(n - n_i, Q); GRR's are exact too (each report
   keeps its category with probability P1 - Q and is otherwise uniform over all d, which is
   GRR, so counts = Bin(n_i, P1 - Q) + Multinomial(rest, 1/d)). For OLH and subset selection
   (theirs and ours) the simulation draws each category's count from its exact marginal, independently across
   categories; that gives the exact expected MSE (the MSE reads only the marginals), but
   their CIs ignore the correlation between categories. The simulation's randomness is
   numpy's (it plays the population, not a client); the same seed serves ours and each peer,
   so where the protocols coincide the comparison is paired (common random numbers).
   A real-perturbation check runs ``perturb`` itself for every report at two small points.
2. Numeric: 1BitMean's mean estimate on [0, 100] (two populations), MSE over the exact
   variance for the fixed population, range^2 sum_j pi_j (1 - pi_j) / (n^2 (1 - 2a)^2).
3. Speed: per-report perturbation, one call at a time as an app makes it, ours with the
   secure system source (``perturb(index)``: os.urandom, pooled) against pure-ldp's and
   multi-freq-ldpy's clients of the same protocol (their Mersenne Twister, not secure), all
   measured side by side in this run, interleaved rounds, best round counts; and 1BitMean.

Peers that are not installed are named and skipped (``./dev bench categorical`` installs them).
"""
from __future__ import annotations

import argparse
import functools
import math
import sys
import time
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deniable.client.categorical import (BITSET_MECHANISMS, KaryRandomizedResponse,
                                         SubsetSelection, UnaryEncoding, choose_categorical)
from deniable.client.numeric import BitMean

# Run as a script, bench/ is first on sys.path, and its coverage.py would shadow the package
# numba (under multi-freq-ldpy) imports: drop it.
if sys.path and sys.path[0] and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

EPSILONS = (0.5, 1.0, 2.0, 4.0)
SIZES = (2, 8, 64, 1024)
TAG = "0123abcd"
Z95 = 1.959963984540054
ZIPF_EXPONENT = 1.1

Channel = tuple[float, float]  # (P1, Q): P(slot counts | its category), P(... | another)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- populations --------------------------------------------------------------------------

def population(kind: str, d: int, n: int) -> NDArray[np.int64]:
    """Fixed category counts n_i summing to n (largest remainders)."""
    weights = (1.0 / np.arange(1, d + 1) ** ZIPF_EXPONENT) if kind == "zipf" else np.ones(d)
    shares = weights / weights.sum() * n
    counts = np.floor(shares).astype(np.int64)
    counts[np.argsort(counts - shares)[: n - counts.sum()]] += 1
    return counts


# -- protocols ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Protocol:
    """A frequency oracle as its per-category channel, and how to simulate its counts."""

    name: str
    channel: Channel
    family: str  # "grr" (exact joint), "oue" (exact joint), "marginal" (exact marginals)

    def theory(self, counts: NDArray[np.int64]) -> float:
        """Exact expected MSE of the debiased estimates for this fixed population."""
        p1, q = self.channel
        n = counts.sum()
        var = (counts * p1 * (1 - p1) + (n - counts) * q * (1 - q)) / (n * n * (p1 - q) ** 2)
        return float(var.mean())

    def simulate(self, counts: NDArray[np.int64], trials: int,
                 rng: np.random.Generator) -> NDArray[np.int64]:
        """Aggregate counts of ``trials`` independent runs: shape (trials, d)."""
        p1, q = self.channel
        n, d = int(counts.sum()), len(counts)
        if self.family == "grr":
            kept = rng.binomial(np.broadcast_to(counts, (trials, d)), p1 - q)
            rest = n - kept.sum(axis=1)
            return kept + rng.multinomial(rest, np.full(d, 1.0 / d))
        return (rng.binomial(np.broadcast_to(counts, (trials, d)), p1)
                + rng.binomial(np.broadcast_to(n - counts, (trials, d)), q))

    def estimate(self, reported: NDArray[np.int64], n: int) -> NDArray[np.float64]:
        p1, q = self.channel
        return (reported / n - q) / (p1 - q)


def ours(epsilon: float, d: int) -> tuple[Protocol, Any]:
    mechanism, _ = choose_categorical(epsilon, d, TAG)
    p1, q = (float(x) for x in mechanism.channel)
    if isinstance(mechanism, SubsetSelection):  # exact marginals, as the peers' SS
        return Protocol(f"SS{mechanism.k}", (p1, q), "marginal"), mechanism
    family = "grr" if isinstance(mechanism, KaryRandomizedResponse) else "oue"
    return Protocol(f"{family.upper()}", (p1, q), family), mechanism


def pure_ldp_protocols(epsilon: float, d: int) -> list[Protocol]:
    from pure_ldp.frequency_oracles.direct_encoding import DEServer
    from pure_ldp.frequency_oracles.local_hashing import LHServer
    from pure_ldp.frequency_oracles.unary_encoding import UEServer
    de, ue = DEServer(epsilon, d), UEServer(epsilon, d, use_oue=True)
    lh = LHServer(epsilon, d, use_olh=True)
    e = math.exp(epsilon)
    return [Protocol("DE", (de.p, de.q), "grr"), Protocol("OUE", (ue.p, ue.q), "oue"),
            Protocol("OLH", (e / (e + lh.g - 1), 1 / lh.g), "marginal")]


def mfl_protocols(epsilon: float, d: int) -> list[Protocol]:
    """multi-freq-ldpy's protocols with its own formulas (its clients compute them inline)."""
    import multi_freq_ldpy  # noqa: F401  (installed: the formulas below are its code's)
    e = np.exp(epsilon)
    p = e / (e + d - 1)
    out = [Protocol("GRR", (float(p), float((1 - p) / (d - 1))), "grr"),
           Protocol("OUE", (0.5, float(1 / (e + 1))), "oue")]
    g = int(round(e)) + 1
    out.append(Protocol("OLH", (float(e / (e + g - 1)), 1 / g), "marginal"))
    k = int(max(1, np.rint(d / (e + 1))))
    if 1 < k < d:
        pv = k * e / (k * e + d - k)
        out.append(Protocol(f"SS(k={k})", (float(pv), float(pv * (k - 1) / (d - 1)
                                                              + (1 - pv) * k / (d - 1))),
                            "marginal"))
    return out


def mfl_default(reported: NDArray[np.int64], protocol: Protocol, n: int) -> NDArray[np.float64]:
    """multi-freq-ldpy's MI aggregator (clip at 0, renormalise), trial by trial."""
    from multi_freq_ldpy.estimators.Histogram_estimator import MI
    p1, q = protocol.channel
    return np.array([MI(row.astype(float), n, p1, q) for row in reported])


def check_pure_ldp_estimator(epsilon: float, d: int, n: int) -> None:
    """pure-ldp's own server estimate equals the debiasing used here (on one count vector)."""
    from pure_ldp.frequency_oracles.direct_encoding import DEServer
    from pure_ldp.frequency_oracles.unary_encoding import UEServer
    rng = np.random.default_rng(1)
    for server, family in ((DEServer(epsilon, d), "grr"),
                           (UEServer(epsilon, d, use_oue=True), "oue")):
        protocol = Protocol("x", (server.p, server.q), family)
        counts = protocol.simulate(population("zipf", d, n), 1, rng)[0]
        server.aggregated_data = counts.astype(float)
        server.n = n
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = np.array(server.estimate_all(range(1, d + 1), suppress_warnings=True)) / n
        if not np.allclose(theirs, protocol.estimate(counts, n), atol=1e-9):
            raise AssertionError(f"pure-ldp's {type(server).__name__} debiases differently")


# -- statistics ---------------------------------------------------------------------------

def mse_rows(estimates: NDArray[np.float64], truth: NDArray[np.float64]) -> NDArray[np.float64]:
    return ((estimates - truth) ** 2).mean(axis=1)


def ratio_ci(a: NDArray[np.float64], b: NDArray[np.float64]) -> tuple[float, float, float]:
    """mean(a) / mean(b) over paired trials, with a 95% delta-method CI."""
    r = a.mean() / b.mean()
    se = math.sqrt(np.var(a - r * b, ddof=1) / len(a)) / b.mean()
    return float(r), float(r - Z95 * se), float(r + Z95 * se)


def mean_ci(values: NDArray[np.float64], scale: float) -> tuple[float, float, float]:
    m = values.mean() / scale
    se = values.std(ddof=1) / math.sqrt(len(values)) / scale
    return float(m), float(m - Z95 * se), float(m + Z95 * se)


def worst_bias(estimates: NDArray[np.float64], truth: NDArray[np.float64]) -> float:
    """The largest |mean error| of a category, in standard errors of that mean."""
    err = estimates - truth
    se = err.std(axis=0, ddof=1) / math.sqrt(len(err))
    return float(np.max(np.abs(err.mean(axis=0)) / np.where(se > 0, se, np.inf)))


def ci_text(r: tuple[float, float, float]) -> str:
    return f"{r[0]:.3f} [{r[1]:.3f}, {r[2]:.3f}]"


# -- 1. accuracy --------------------------------------------------------------------------

def bench_accuracy(args: argparse.Namespace) -> dict[str, Any]:
    peers: dict[str, Callable[[float, int], list[Protocol]]] = {}
    for name, make in (("pure-ldp", pure_ldp_protocols), ("multi-freq-ldpy", mfl_protocols)):
        try:
            make(1.0, 8)
            peers[name] = make
        except Exception as exc:  # ImportError, or a peer broken by its dependencies
            print(f"  {name}: not compared ({type(exc).__name__}: {exc})"[:160])
    if "pure-ldp" in peers:
        check_pure_ldp_estimator(1.0, 8, args.n)
        print("  pure-ldp's own DEServer/UEServer estimates equal the debiasing used here")
    points = [(e, d, pop) for e in args.epsilons for d in args.sizes for pop in ("zipf", "uniform")]
    print(f"\n1. Accuracy: n = {args.n:,} users, {args.trials:,} trials per point; ratios are "
          f"MSE over MSE (95% CI)")
    header = (f"{'eps':>4} {'d':>5} {'pop':7} {'ours':5} {'MSE/theory':>22} "
              f"{'pure-ldp best':>14} {'ours/theirs':>22} {'exact':>6} "
              f"{'mfl best':>9} {'ours/theirs':>22} {'exact':>6} "
              f"{'ours/mfl default':>17} {'bias z ours':>11} {'mfl default':>11}")
    print(header)
    summary: dict[str, list[float]] = {"theory": [], "vs_pure": [], "vs_mfl": [],
                                       "vs_default": [], "exact_pure": [], "exact_mfl": [],
                                       "bias_ours": [], "bias_default": []}
    started = time.monotonic()
    for k, (epsilon, d, pop) in enumerate(points):
        log(f"[{k + 1}/{len(points)}] accuracy eps={epsilon} d={d} {pop} "
            f"({time.monotonic() - started:.0f} s)")
        counts = population(pop, d, args.n)
        truth = counts / args.n
        seed = zlib.crc32(f"{epsilon}:{d}:{pop}".encode())
        protocol, _ = ours(epsilon, d)
        theory = protocol.theory(counts)
        mine_estimates = protocol.estimate(
            protocol.simulate(counts, args.trials, np.random.default_rng(seed)), args.n)
        mine = mse_rows(mine_estimates, truth)
        vs_theory = mean_ci(mine, theory)
        summary["theory"].append(vs_theory[0])
        cells = [f"{epsilon:>4g} {d:>5} {pop:7} {protocol.name:5} {ci_text(vs_theory):>22}"]
        mine_estimates_bias = ""
        for peer, make in (("pure-ldp", peers.get("pure-ldp")),
                           ("multi-freq-ldpy", peers.get("multi-freq-ldpy"))):
            if make is None:
                cells.append(f"{'-':>14} {'-':>22} {'-':>6}" if peer == "pure-ldp"
                             else f"{'-':>9} {'-':>22} {'-':>6}")
                continue
            best = min(make(epsilon, d), key=lambda p: p.theory(counts))
            reported = best.simulate(counts, args.trials, np.random.default_rng(seed))
            theirs = mse_rows(best.estimate(reported, args.n), truth)
            measured = ratio_ci(mine, theirs)
            exact = theory / best.theory(counts)
            key = "pure" if peer == "pure-ldp" else "mfl"
            summary[f"vs_{key}"].append(measured[0])
            summary[f"exact_{key}"].append(exact)
            width = 14 if peer == "pure-ldp" else 9
            cells.append(f"{best.name:>{width}} {ci_text(measured):>22} {exact:>6.3f}")
            if peer == "multi-freq-ldpy":
                default = mfl_default(reported, best, args.n)
                measured_default = ratio_ci(mine, mse_rows(default, truth))
                summary["vs_default"].append(measured_default[0])
                z_ours, z_default = worst_bias(mine_estimates, truth), worst_bias(default, truth)
                summary["bias_ours"].append(z_ours)
                summary["bias_default"].append(z_default)
                mine_estimates_bias = f"{z_ours:>11.1f} {z_default:>11.1f}"
                cells.append(f"{measured_default[0]:>17.3f}")
        print(" ".join(cells) + " " + mine_estimates_bias, flush=True)
    return summary


def real_perturbation_check(args: argparse.Namespace) -> None:
    """MSE over theory with every report perturbed by ``perturb`` itself (system source)."""
    print("\n   Real perturbation (every report through perturb(), os.urandom): "
          "MSE / theory (95% CI)")
    for epsilon, d in ((1.0, 8), (1.0, 64)):
        counts = population("zipf", d, args.real_n)
        truth = counts / args.real_n
        protocol, mechanism = ours(epsilon, d)
        values = np.repeat(np.arange(d), counts).tolist()
        rows = []
        for t in range(args.real_trials):
            reported = np.zeros(d, dtype=np.int64)
            if isinstance(mechanism, BITSET_MECHANISMS):
                tally = [0] * d
                for v in values:
                    bits = mechanism.perturb(v)
                    while bits:
                        low = bits & -bits
                        tally[low.bit_length() - 1] += 1
                        bits ^= low
                reported[:] = tally
            else:
                reported += np.bincount([mechanism.perturb(v) for v in values], minlength=d)
            rows.append(reported)
        mse = mse_rows(protocol.estimate(np.array(rows), args.real_n), truth)
        print(f"   eps={epsilon:g} d={d} {protocol.name}: n = {args.real_n:,}, "
              f"{args.real_trials} trials: {ci_text(mean_ci(mse, protocol.theory(counts)))}")


# -- 2. numeric ---------------------------------------------------------------------------

def bench_numeric(args: argparse.Namespace) -> list[float]:
    print(f"\n2. Numeric: 1BitMean on [0, 100], n = {args.n:,}, {args.trials:,} trials: "
          "mean's MSE / exact variance (95% CI)")
    rng = np.random.default_rng(7)
    support = np.arange(101)
    populations = {"uniform 0..100": np.ones(101), "skewed (P(v) ~ 0.9^v)": 0.9 ** support}
    out = []
    for epsilon in args.epsilons:
        bm = BitMean.from_epsilon(epsilon, 0, 100)
        a = float(bm.a)
        cells = [f"  eps={epsilon:<4g}"]
        for name, weights in populations.items():
            shares = weights / weights.sum() * args.n
            n_v = np.floor(shares).astype(np.int64)
            n_v[np.argsort(n_v - shares)[: args.n - n_v.sum()]] += 1
            pi = np.array([float(bm.p_one(Fraction(int(v)))) for v in support])
            true_mean = float((n_v * support).sum() / args.n)
            ones = rng.binomial(np.broadcast_to(n_v, (args.trials, len(n_v))), pi).sum(axis=1)
            estimates = 100 * (ones / args.n - a) / (1 - 2 * a)
            theory = 100 ** 2 * float((n_v * pi * (1 - pi)).sum()) / (args.n ** 2 * (1 - 2 * a) ** 2)
            r = mean_ci((estimates - true_mean) ** 2, theory)
            out.append(r[0])
            cells.append(f"{name}: {ci_text(r)}")
        print("   ".join(cells), flush=True)
    return out


# -- 3. speed -----------------------------------------------------------------------------

Call = Callable[[int], object]


def speed_subjects(d: int, epsilon: float) -> dict[str, tuple[str, Call | None, int, str]]:
    """name -> (protocol, per-report call, the call's first category (0 or 1), why skipped).

    Each call is the peer's own entry point, as direct as its API allows (no wrapper)."""
    grr = KaryRandomizedResponse.from_epsilon(epsilon, d, TAG)
    oue = UnaryEncoding.from_epsilon(epsilon, d, TAG)
    ss = SubsetSelection.from_epsilon(epsilon, d, TAG)
    grr.perturb(0)  # the first report builds the fast path and installs it as .perturb
    oue.perturb(0)
    ss.perturb(0)
    subjects: dict[str, tuple[str, Call | None, int, str]] = {
        "deniable GRR": ("GRR", grr.perturb, 0, ""),
        "deniable OUE": ("OUE", oue.perturb, 0, ""),
        "deniable SS": ("SS", ss.perturb, 0, ""),
    }
    try:
        from pure_ldp.frequency_oracles.direct_encoding import DEClient
        from pure_ldp.frequency_oracles.unary_encoding import UEClient
        de, ue = DEClient(epsilon, d), UEClient(epsilon, d, use_oue=True)
        subjects["pure-ldp DE"] = ("GRR", de.privatise, 1, "")  # its items are 1..d
        subjects["pure-ldp OUE"] = ("OUE", ue.privatise, 1, "")
    except Exception as exc:
        subjects["pure-ldp"] = ("", None, 0, f"{type(exc).__name__}: {exc}")
    try:
        from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Client
        from multi_freq_ldpy.pure_frequency_oracles.SS import SS_Client
        from multi_freq_ldpy.pure_frequency_oracles.UE import UE_Client
        subjects["multi-freq-ldpy GRR"] = (
            "GRR", functools.partial(GRR_Client, k=d, epsilon=epsilon), 0, "")
        subjects["multi-freq-ldpy OUE"] = (
            "OUE", functools.partial(UE_Client, k=d, epsilon=epsilon, optimal=True), 0, "")
        subjects["multi-freq-ldpy SS"] = (
            "SS", functools.partial(SS_Client, k=d, epsilon=epsilon), 0, "")
    except Exception as exc:
        subjects["multi-freq-ldpy"] = ("", None, 0, f"{type(exc).__name__}: {exc}")
    return subjects


def rate(call: Call, d: int, first: int, seconds: float) -> float:
    """Calls per second, one call at a time, in chunks of 1000 until ``seconds`` pass."""
    values = [first + (i * 7919) % d for i in range(1000)]
    for v in values[:50]:  # warm up (numba compiles on first use)
        call(v)
    n = 0
    started = time.perf_counter()
    while True:
        for v in values:
            call(v)
        n += len(values)
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return n / elapsed


def bench_speed(args: argparse.Namespace) -> list[tuple[int, str, float]]:
    epsilon = 1.0
    print(f"\n3. Speed: per-report perturbation at eps = {epsilon:g}, reports/s (best of "
          f"{args.rounds} interleaved rounds of {args.seconds:g} s); ratio = ours over the "
          "fastest peer of the same protocol")
    ratios = []
    for d in args.sizes:
        subjects = speed_subjects(d, epsilon)
        for name, (_, call, _, why) in subjects.items():
            if call is None:
                print(f"  {name}: not measured ({why})"[:160])
        live = {name: s for name, s in subjects.items() if s[1] is not None}
        best = {name: 0.0 for name in live}
        for r in range(args.rounds):
            log(f"speed d={d} round {r + 1}/{args.rounds}")
            for name, (_, call, first, _) in live.items():
                assert call is not None
                best[name] = max(best[name], rate(call, d, first, args.seconds))
        for protocol in ("GRR", "OUE", "SS"):
            mine = best[f"deniable {protocol}"]
            peers = {n: r for n, r in best.items() if live[n][0] == protocol
                     and not n.startswith("deniable")}
            line = f"  d={d:<5} {protocol}: deniable {mine / 1e6:7.3f} M/s"
            if peers:
                fastest = max(peers, key=lambda n: peers[n])
                line += "; " + ", ".join(f"{n} {r / 1e6:.3f} M/s" for n, r in peers.items())
                line += f"; ours / fastest ({fastest}) = {mine / peers[fastest]:.2f}x"
                ratios.append((d, protocol, mine / peers[fastest]))
            print(line, flush=True)
    bm = BitMean.from_epsilon(epsilon, 0, 100)
    for label, values in (("int", list(range(101))), ("float", [v + 0.25 for v in range(100)])):
        n, started = 0, time.perf_counter()
        while time.perf_counter() - started < args.seconds:
            for v in values:
                bm.perturb(v)
            n += len(values)
        print(f"  1BitMean perturb({label} value): {n / (time.perf_counter() - started) / 1e6:.3f} "
              "M/s (no peer)")
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 200 trials, eps {1, 4}, d {2, 64}, short timings")
    parser.add_argument("--trials", type=int, default=2000, help="trials per point (default 2000)")
    parser.add_argument("--n", type=int, default=100_000, help="users per population")
    parser.add_argument("--seconds", type=float, default=0.3,
                        help="seconds per speed measurement (default 0.3)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved speed rounds")
    args = parser.parse_args(argv)
    args.epsilons, args.sizes = EPSILONS, SIZES
    args.real_n, args.real_trials = 2000, 1000
    if args.quick:
        args.trials, args.seconds, args.rounds = 200, 0.05, 1
        args.epsilons, args.sizes = (1.0, 4.0), (2, 64)
        args.real_n, args.real_trials = 500, 40
    started = time.monotonic()
    summary = bench_accuracy(args)
    real_perturbation_check(args)
    numeric = bench_numeric(args)
    speed = bench_speed(args)
    print(f"\nSummary ({time.monotonic() - started:.0f} s):")
    t = summary["theory"]
    print(f"  ours MSE / theory: {min(t):.3f} .. {max(t):.3f} over {len(t)} points (target 1.00)")
    for key, label in (("pure", "pure-ldp"), ("mfl", "multi-freq-ldpy")):
        if summary[f"vs_{key}"]:
            m, e = summary[f"vs_{key}"], summary[f"exact_{key}"]
            print(f"  ours / {label}'s best unbiased: measured {min(m):.3f} .. {max(m):.3f}, "
                  f"exact {min(e):.4f} .. {max(e):.4f} (target <= 1.05)")
    if summary["vs_default"]:
        v = summary["vs_default"]
        same = sum(abs(r - 1) < 1e-9 for r in v)
        better = sum(r < 1 for r in v) - sum(abs(r - 1) < 1e-9 and r < 1 for r in v)
        print(f"  ours / multi-freq-ldpy default (clip + renormalise) MSE: {min(v):.3f} .. "
              f"{max(v):.3f}; ours lower at {better}, equal at {same} (nothing clipped), "
              f"higher at {len(v) - better - same} of {len(v)} points")
        zo, zd = summary["bias_ours"], summary["bias_default"]
        print(f"  worst bias of a category, in SEs of its mean: ours {max(zo):.1f}, "
              f"multi-freq-ldpy default {max(zd):.1f} (median over points {np.median(zd):.1f})")
    print(f"  1BitMean MSE / theory: {min(numeric):.3f} .. {max(numeric):.3f}")
    if speed:
        print("  speed, ours / fastest peer: " + ", ".join(
            f"{p} d={d} {r:.2f}x" for d, p, r in speed) + " (target >= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
