"""Open-domain discovery (``od:``): recall, share error, client cost, decode cost, and pure-LDP.

    ./dev bench discovery            # the full run (a few minutes on 2 shared cores)
    ./dev bench discovery --quick    # a smoke run: one trial, 20,000 devices

1. Recall: ``--n`` devices (100,000), each holding one of 10,000 distinct strings of at most
   16 bytes, drawn from Zipf(1.1) over them (the 10th holds about 1.2 %), for two workloads
   (``--workload``): random strings of 4 to 16 bytes ([a-z0-9], no shared structure beyond
   chance) and realistic ones (crash signatures, URL paths, search terms: shared prefixes, low
   entropy; ``realistic_strings``). Each trial draws its own strings and population. Every
   device runs the real client (``perturb``: NFC, UTF-8, padding, the secure system source),
   its cell is added to the counters, and ``discover`` decodes them (keep = 64, ``--keep``). recall@k = |the decoder's top k ∩ the true top k| / k; RMSE of
   the shares over the true top 10 (a string the decoder did not rank counts as 0); the number
   of strings shown (lower bound > 0 at 95 %, Bonferroni) and how many of those are outside
   the population. Per epsilon in {1, 2, ln 9, 4}, mean ± sd over ``--trials`` trials.
2. Client cost: bytes of the wire field (``"cell": 123456``) and microseconds per report.
3. Decode: 1,000,000 reports (the same Zipf workload at ln 9) decoded; seconds and peak
   memory (tracemalloc: numpy reports its buffers to it) plus the counters' own bytes.
4. pure-LDP: its PEM at its own size (12-bit values, 20,000 users, Zipf(1.1) over 1,024
   values, top 10), at epsilon 2 and 4, against ours on the same values written as two
   characters (chr(1 + v // 64) + chr(1 + v % 64): 2 bytes, no NUL; ``from_epsilon`` makes a
   2-byte metric one level, so the decoder scores all 65,280 two-byte strings: a larger
   search than the 4,096 values PEM knows). Five seeds, mean (min-max).
5. Scale (``--part scale``): recall@10 at ln 9 against n (100,000, 300,000, 1,000,000 or
   ``--scale-n``), with one level's standard error, the bound (``bound_share``), the decoder's
   min share, and the smallest true share shown / largest of the true top 50 not shown.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
import tracemalloc
import warnings
from collections.abc import Sequence

import numpy as np

from deniable.analysis.discovery import Discovery, discover
from deniable.client.open_domain import OpenDomainSketch

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
EPSILONS = (1.0, 2.0, math.log(9), 4.0)


def zipf_shares(size: int, exponent: float = 1.1) -> np.ndarray:
    weights = np.arange(1, size + 1, dtype=np.float64) ** -exponent
    return weights / weights.sum()


def random_strings(count: int, rng: random.Random) -> list[str]:
    out: set[str] = set()
    while len(out) < count:
        out.add("".join(rng.choice(ALPHABET) for _ in range(rng.randint(4, 16))))
    strings = sorted(out)
    rng.shuffle(strings)
    return strings


_CLASSES = ("Net", "Db", "Ui", "Io", "Gfx", "Auth", "Sync", "Pay", "Map", "Feed")
_CLASS_TAILS = ("", "Pool", "View", "Mgr", "Task", "Job")
_METHODS = ("get", "put", "run", "load", "init", "draw", "sync", "open", "read", "post")
_SECTIONS = ("app", "shop", "help", "api", "blog", "docs")
_PAGES = ("home", "settings", "cart", "search", "login", "orders", "profile", "items")
_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")


def _words(count: int, rng: random.Random) -> list[str]:
    """``count`` distinct pseudo-words of 1-3 syllables (a generated word list)."""
    out: set[str] = set()
    while len(out) < count:
        out.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))))
    return sorted(out)


def realistic_strings(count: int, rng: random.Random) -> list[str]:
    """``count`` distinct strings of at most 16 bytes with shared prefixes and low entropy, a
    third each of: crash signatures ``ClassName.method:line`` (``NetPool.load:231``), URL
    paths (``/app/settings/7``, ``/shop/items/42``) and search terms (one or two words of a
    generated list of 600 pseudo-words, weighted to the first: ``kama`` , ``lo zupe``)."""
    vocabulary = _words(600, rng)
    weights = zipf_shares(len(vocabulary), 1.0)

    def crash() -> str:
        name = rng.choice(_CLASSES) + rng.choice(_CLASS_TAILS)
        return f"{name}.{rng.choice(_METHODS)}:{rng.randint(1, 400)}"

    def url() -> str:
        path = f"/{rng.choice(_SECTIONS)}/{rng.choice(_PAGES)}"
        return path if rng.random() < 0.1 else f"{path}/{rng.randint(1, 300)}"

    def term() -> str:
        chosen = [vocabulary[i] for i in rng.choices(range(len(vocabulary)), weights,
                                                     k=rng.randint(1, 2))]
        return " ".join(chosen)

    out: set[str] = set()
    makers = (crash, url, term)
    while len(out) < count:
        text = makers[len(out) % 3]()
        if len(text.encode()) <= 16:
            out.add(text)
    strings = sorted(out)
    rng.shuffle(strings)
    return strings


WORKLOADS = {"random": random_strings, "realistic": realistic_strings}


def collect(sketch: OpenDomainSketch, values: Sequence[str], population: np.ndarray
            ) -> tuple[np.ndarray, float]:
    """Counters from one real report per device (``population`` holds value indexes), and
    the mean microseconds per ``perturb`` call (normalisation included)."""
    counters = np.zeros(sketch.width, dtype=np.int64)
    cells = np.empty(population.size, dtype=np.int64)
    perturb = sketch.perturb
    start = time.perf_counter()
    for i, v in enumerate(population.tolist()):
        cells[i] = perturb(values[v])
    elapsed = time.perf_counter() - start
    np.add.at(counters, 1 + cells, 1)
    counters[0] = population.size
    return counters, 1e6 * elapsed / max(population.size, 1)


def recall(result: Discovery, truth: Sequence[str], k: int) -> float:
    return len({f.string for f in result.ranked[:k]} & set(truth[:k])) / k


def rmse_top(result: Discovery, truth: Sequence[str], shares: np.ndarray, k: int) -> float:
    estimate = {f.string: f.share for f in result.ranked}
    errors = [estimate.get(s, 0.0) - shares[i] for i, s in enumerate(truth[:k])]
    return float(np.sqrt(np.mean(np.square(errors))))


def _spread(values: Sequence[float], digits: int = 2) -> str:
    """mean ± standard deviation over trials (sample sd; 0 for one trial)."""
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return f"{np.mean(values):.{digits}f} ± {sd:.{digits}f}"


def _label(epsilon: float) -> str:
    return "ln 9" if abs(epsilon - math.log(9)) < 1e-12 else f"{epsilon:g}"


def bench_recall(n: int, trials: int, seed: int, workload: str = "random",
                 epsilons: Sequence[float] = EPSILONS, keep: int = 64) -> None:
    """Per epsilon, ``trials`` trials, each with its own string set and population (seeds
    seed, seed + 1, ...): mean ± sd over the trials."""
    print(f"1. Recall ({workload}): {n:,} devices, Zipf(1.1) over 10,000 {workload} strings "
          f"of at most 16 bytes, keep {keep}, {trials} trial(s) each (mean ± sd)")
    print(f"   {'epsilon':>7} {'id':>22} {'recall@10':>11} {'recall@50':>11} "
          f"{'RMSE top10':>15} {'shown':>11} {'wrong':>5} {'min share':>9} {'decode s':>8}")
    for epsilon in epsilons:
        sketch = OpenDomainSketch.from_epsilon(epsilon)
        r10, r50, rmse, shown, wrong, mins, decode_s = [], [], [], [], [], [], []
        for trial in range(trials):
            strings, shares, counters = _trial(sketch, workload, n, seed + trial)
            start = time.perf_counter()
            result = discover(sketch, counters, keep=keep)
            decode_s.append(time.perf_counter() - start)
            r10.append(recall(result, strings, 10))
            r50.append(recall(result, strings, 50))
            rmse.append(rmse_top(result, strings, shares, 10))
            shown.append(len(result.found))
            known = set(strings)
            wrong.append(sum(f.string not in known for f in result.found))
            mins.append(result.min_share)
        print(f"   {_label(epsilon):>7} {sketch.id[:22]:>22} {_spread(r10):>11} "
              f"{_spread(r50):>11} {_spread(rmse, 4):>15} {_spread(shown, 1):>11} "
              f"{sum(wrong):5d} {np.mean(mins):9.4f} {np.mean(decode_s):8.1f}", flush=True)
    print("   shown: strings whose lower bound is above 0 (95 %, Bonferroni over the candidates);"
          " wrong: shown but outside the population (summed over trials)")


def _trial(sketch: OpenDomainSketch, workload: str, n: int, seed: int
           ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """One trial's 10,000 strings of ``workload``, their Zipf(1.1) shares and the counters of
    ``n`` devices drawn from them, all seeded by ``seed``."""
    strings = WORKLOADS[workload](10_000, random.Random(seed))
    shares = zipf_shares(len(strings))
    population = np.random.default_rng(seed).choice(len(strings), size=n, p=shares)
    counters, _ = collect(sketch, strings, population)
    return strings, shares, counters


def bound_share(n: int, epsilon: float, domain_log: float) -> float:
    """The share a string needs to stand out of every null candidate of a domain of
    e^domain_log strings, with all n reports on one oracle of OLH's variance
    V = 4 e^eps / (e^eps - 1)^2: sqrt(2 domain_log) standard errors sqrt(V / n)."""
    variance = 4 * math.exp(epsilon) / (math.exp(epsilon) - 1) ** 2
    return math.sqrt(2 * domain_log) * math.sqrt(variance / n)


def bench_scale(ns: Sequence[int], trials: int, seed: int, workload: str = "random") -> None:
    """Recall@10 at ln 9 against n, and the shares found against min_share and the bound."""
    epsilon = math.log(9)
    sketch = OpenDomainSketch.from_epsilon(epsilon)
    print(f"5. Scale ({workload}, {sketch.id}): recall against n, {trials} trial(s) each; "
          "bound: sqrt(2 ln 256^16) sd of all n (16-byte strings); level sd: one level's "
          "standard error at share 0")
    print(f"   {'n':>9} {'recall@10':>11} {'10th share':>10} {'level sd':>8} {'bound':>6} "
          f"{'min share':>9} {'smallest shown':>14} {'largest top-50 not shown':>24}")
    for n in ns:
        r10, smallest, missed, mins = [], [], [], []
        for trial in range(trials):
            strings, shares, counters = _trial(sketch, workload, n, seed + trial)
            result = discover(sketch, counters)
            r10.append(recall(result, strings, 10))
            rank = {s: i for i, s in enumerate(strings)}
            shown = {f.string for f in result.found}
            smallest.append(min((shares[rank[s]] for s in shown if s in rank), default=math.nan))
            missed.append(max((shares[i] for i in range(50) if strings[i] not in shown),
                              default=math.nan))
            mins.append(result.min_share)
        base = 1 / sketch.g
        level_sd = math.sqrt(base * (1 - base) / (n / sketch.levels)) / (float(sketch.p) - base)
        print(f"   {n:9,} {_spread(r10):>11} {zipf_shares(10_000)[9]:10.4f} {level_sd:8.4f} "
              f"{bound_share(n, epsilon, 16 * math.log(256)):6.4f} {np.mean(mins):9.4f} "
              f"{np.nanmin(smallest):14.4f} {np.nanmax(missed):24.4f}", flush=True)
    print("   smallest shown: the smallest true share among strings shown (lower bound > 0), "
          "over the trials; largest not shown: the largest true share among the true top 50 "
          "that was not shown")


def bench_client_cost() -> None:
    sketch = OpenDomainSketch.from_epsilon(math.log(9))
    rng = random.Random(5)
    values = random_strings(2000, rng)
    for value in values:  # warm the hash constants' cache as a running app would
        sketch.perturb(value)
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for value in values * 5:
            sketch.perturb(value)
        rounds.append((time.perf_counter() - start) / (len(values) * 5))
    cells = [sketch.perturb(v) for v in values]
    wire = np.mean([len(f'"cell":{c}') for c in cells])
    print(f"2. Client cost ({sketch.id}): {1e6 * min(rounds):.1f} us per report (best of 5 "
          f"rounds of 10,000; secure system source), {wire:.1f} bytes of wire field "
          f"('\"cell\":<int>'); state: none beyond the memo")


def bench_decode(reports: int, seed: int) -> None:
    sketch = OpenDomainSketch.from_epsilon(math.log(9))
    rng = random.Random(seed)
    strings = random_strings(10_000, rng)
    population = np.random.default_rng(seed).choice(len(strings), size=reports,
                                                    p=zipf_shares(len(strings)))
    counters, per_report = collect(sketch, strings, population)
    tracemalloc.start()
    start = time.perf_counter()
    result = discover(sketch, counters)
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"3. Decode: {reports:,} reports ({sketch.id}, {sketch.width:,} counters = "
          f"{counters.nbytes / 2**20:.1f} MiB as int64, {sketch.width * 4 / 2**20:.1f} MiB as "
          f"u32) in {elapsed:.1f} s, peak {peak / 2**20:.0f} MiB above the counters; "
          f"recall@10 {recall(result, strings, 10):.1f}, shown {len(result.found)}, "
          f"min share {result.min_share:.4f}; the reports took {per_report:.1f} us each")


def _pem_peer(epsilon: float, values: np.ndarray, k: int) -> list[int] | str:
    try:
        warnings.simplefilter("ignore")
        from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer
    except Exception as exc:  # the peer is optional: say why it is missing
        return f"pure-ldp unavailable ({type(exc).__name__}: {exc})"
    client = PEMClient(epsilon=epsilon, start_length=2, max_string_length=12,
                       fragment_length=2)
    server = PEMServer(epsilon=epsilon, start_length=2, max_string_length=12,
                       fragment_length=2)
    for v in values.tolist():
        server.aggregate(client.privatise(format(v, "012b")))
    top, _ = server.find_heavy_hitters(k=k)
    return [int(s, 2) for s in top]


def bench_pem(seed: int, trials: int, users: int = 20_000) -> None:
    print(f"4. pure-LDP PEM at its own size: 12-bit values, {users:,} users, Zipf(1.1) over "
          f"1,024 values, top 10; {trials} seed(s): mean (min-max)")
    as_text = [chr(1 + v // 64) + chr(1 + v % 64) for v in range(4096)]
    for epsilon in (2.0, 4.0):
        sketch = OpenDomainSketch.from_epsilon(epsilon, max_bytes=2)
        ours_r, theirs_r, ours_s, theirs_s = [], [], [], []
        missing = ""
        for trial in range(trials):
            nprng = np.random.default_rng(seed + trial)
            domain = nprng.choice(4096, size=1024, replace=False)
            values = domain[nprng.choice(1024, size=users, p=zipf_shares(1024))]
            truth = set(domain[:10].tolist())
            counters, _ = collect(sketch, as_text, values)
            start = time.perf_counter()
            result = discover(sketch, counters)
            ours_s.append(time.perf_counter() - start)
            two = [f.string for f in result.ranked if len(f.string) == 2][:10]  # values only
            ours_r.append(len({(ord(t[0]) - 1) * 64 + ord(t[1]) - 1 for t in two} & truth) / 10)
            start = time.perf_counter()
            theirs = _pem_peer(epsilon, values, 10)
            theirs_s.append(time.perf_counter() - start)
            if isinstance(theirs, str):
                missing = theirs
            else:
                theirs_r.append(len(set(theirs) & truth) / 10)
        theirs_text = missing or (f"{np.mean(theirs_r):.2f} ({min(theirs_r):.1f}-"
                                  f"{max(theirs_r):.1f}), {np.mean(theirs_s):.0f} s per run")
        print(f"   epsilon {epsilon:g}: ours ({sketch.id}) recall@10 {np.mean(ours_r):.2f} "
              f"({min(ours_r):.1f}-{max(ours_r):.1f}), {np.mean(ours_s):.1f} s decode; "
              f"PEM {theirs_text}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--n", type=int, default=100_000, help="devices for the recall table")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--keep", type=int, default=64, help="the decoder's beam width")
    parser.add_argument("--workload", choices=("both", *WORKLOADS), default="both")
    parser.add_argument("--epsilon", type=float, action="append",
                        help="only this epsilon in the recall table (repeatable)")
    parser.add_argument("--scale-n", type=int, action="append",
                        help="n for the scale table (repeatable; default 100k, 300k, 1M)")
    parser.add_argument("--part", choices=("all", "recall", "client", "decode", "pem", "scale"),
                        default="all", help="run one part only")
    args = parser.parse_args(argv)
    n, trials, day = (20_000, 1, 100_000) if args.quick else (args.n, args.trials, 1_000_000)
    workloads = tuple(WORKLOADS) if args.workload == "both" else (args.workload,)
    epsilons = tuple(args.epsilon) if args.epsilon else EPSILONS
    if args.part in ("all", "recall"):
        for workload in workloads:
            bench_recall(n, trials, args.seed, workload, epsilons, args.keep)
    if args.part in ("all", "client"):
        bench_client_cost()
    if args.part in ("all", "decode"):
        bench_decode(day, args.seed)
    if args.part in ("all", "pem"):
        bench_pem(args.seed, 1 if args.quick else 5, 2_000 if args.quick else 20_000)
    if args.part in ("all", "scale"):
        ns = args.scale_n or ([20_000, 60_000] if args.quick else [100_000, 300_000, 1_000_000])
        for workload in workloads:
            bench_scale(ns, trials, args.seed, workload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
