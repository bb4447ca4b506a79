"""What the privacy-over-time layer adds to one perturbation, measured side by side.

    ./dev bench privacy [--calls N]

One call at a time, as an app makes them, each variant timed in the same run and interleaved
over several rounds (the best round counts). Prints calls/s and the ratio to a plain
``RandomizedResponse.perturb`` with the secure source. Then what a persistent privacy state
costs a Reporter's start, against the in-memory state, side by side (median of interleaved
starts, state dir in a temp dir).
"""
from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from deniable.client import Storage
from deniable.client.budget import Budget
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import DEFAULT, RandomizedResponse


def best_rate(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return calls / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        guard = LongitudinalGuard(
            state, irr={"layered": RandomizedResponse.from_id("rr:3/4:1/2")},
            fresh={"fresh", "fresh_budgeted"},
            budgets={"budgeted": Budget(10.0), "fresh_budgeted": Budget(1e12)})
        variants: dict[str, Callable[[], object]] = {
            "plain perturb (fresh coins)": lambda: DEFAULT.perturb(True),
            "guard: memoized repeat": lambda: guard.perturb("memo", DEFAULT, True),
            "guard: memoized + budget, repeat": lambda: guard.perturb("budgeted", DEFAULT, True),
            "guard: memoized + instantaneous": lambda: guard.perturb("layered", DEFAULT, True),
            "guard: fresh, unbudgeted": lambda: guard.perturb("fresh", DEFAULT, True),
        }
        best = {name: 0.0 for name in variants}
        for _ in range(args.rounds):
            for name, fn in variants.items():
                best[name] = max(best[name], best_rate(fn, args.calls))
        # A budgeted fresh report is written to disk (fsync) before its bit is returned.
        durable = max(best_rate(lambda: guard.perturb("fresh_budgeted", DEFAULT, True),
                                max(1, args.calls // 1000)) for _ in range(args.rounds))
        guard.close()
    best["guard: fresh, budgeted (fsync each)"] = durable
    base = best["plain perturb (fresh coins)"]
    print(f"{'variant':36} {'calls/s':>12} {'vs plain':>9}")
    for name, rate in best.items():
        print(f"{name:36} {rate:12,.0f} {rate / base:8.2f}x")


def reporter_starts(rounds: int) -> None:
    """Median start (construct + close) of a Reporter with a persistent state dir, and with
    the in-memory state, interleaved; also the first report of a new value with each."""
    from deniable.client.reporter import Reporter  # requests; only for this part

    logging.getLogger("deniable.client").setLevel(logging.ERROR)  # the in-memory warning
    metrics = {f"m{i}": "rr:1/2:1/2" for i in range(10)}
    url = "http://127.0.0.1:9"  # never contacted: metrics are given and nothing is flushed
    with tempfile.TemporaryDirectory() as tmp:
        times: dict[str, list[float]] = {"persistent state dir": [], "in memory": []}
        firsts: dict[str, list[float]] = {name: [] for name in times}
        for i in range(rounds * 10):
            for name in times:
                state = str(Path(tmp) / f"s{i}") if name == "persistent state dir" \
                    else ":memory:"
                start = time.perf_counter()
                reporter = Reporter(url, metrics=metrics, storage=Storage(privacy_dir=state))
                built = time.perf_counter()
                reporter.report("m0", True)  # the first report of a value: paid, written
                firsts[name].append(time.perf_counter() - built)
                reporter.close(timeout=0)
                times[name].append(built - start)
    print(f"\n{'Reporter start':36} {'median ms':>12} {'first report ms':>16}")
    for name in times:
        print(f"{name:36} {statistics.median(times[name]) * 1e3:12.2f} "
              f"{statistics.median(firsts[name]) * 1e3:16.3f}")


if __name__ == "__main__":
    main()
    reporter_starts(3)
