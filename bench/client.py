"""Client speed, one call at a time as an app makes it, against peers, all in one run.

    ./dev bench client [--seconds S] [--rounds R]

1. Perturbation alone (randomized response on one boolean, epsilon = ln 3), per call:
   ours with the secure source (the Reporter's path: answers drawn ahead from os.urandom in
   4 KiB blocks; and RandomizedResponse.perturb on buffered SecureBits, two bits a report) against
   pure-ldp's direct encoding (d=2), multi-freq-ldpy's GRR (k=2), OpenDP's
   make_randomized_response_bool, diffprivlib's Binary, and ``secrets.randbits(2)`` once per
   report. Peers that are not installed are named and skipped.
2. ``Reporter.report()`` with the durable queue on: group commit (in memory and to a SQLite
   file) and sync mode (one thread and four), plus the rate at which reports reach SQLite.

Each subject is timed for ``--seconds`` per round, rounds interleaved; the best round counts
(the machine is shared, so the best round is the least disturbed). Ratios are ours over theirs.
"""
from __future__ import annotations

import argparse
import functools
import logging
import math
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deniable.client import Delivery, Privacy, Reporter, Storage
from deniable.client.mechanism import DEFAULT
from deniable.client.pool import PerturbationPool

Subject = tuple[Callable[[Any], object], Any, Any]
"""A peer's per-report call, as direct as its API allows, and its inputs for a false and a
true value."""


def ours() -> Subject:
    """What Reporter.report() calls: answers drawn ahead from os.urandom in 4 KiB blocks."""
    return PerturbationPool(DEFAULT).perturb, 0, 1  # two-coin: P(1|1) = 3/4, P(1|0) = 1/4


def ours_plain() -> Subject:
    """RandomizedResponse.perturb with the buffered SecureBits: two bits per call, a lock."""
    return DEFAULT.perturb, 0, 1


def secrets_randbits() -> Subject:
    randbits = secrets.randbits

    def perturb(true_bit: int) -> int:
        draw = randbits(2)  # truth coin, then forced coin: the two-coin scheme
        return true_bit if draw & 1 else draw >> 1
    return perturb, 0, 1


def pure_ldp() -> Subject:
    from pure_ldp.frequency_oracles.direct_encoding import DEClient

    return DEClient(epsilon=math.log(3), d=2).privatise, 1, 2  # its items are 1..d


def multi_freq_ldpy() -> Subject:
    from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Client

    return functools.partial(GRR_Client, k=2, epsilon=math.log(3)), 0, 1


def opendp() -> Subject:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    return dp.m.make_randomized_response_bool(prob=0.75), False, True


def diffprivlib() -> Subject:
    from diffprivlib.mechanisms import Binary

    return Binary(epsilon=math.log(3), value0="0", value1="1").randomise, "0", "1"


PEERS: dict[str, tuple[Callable[[], Subject], str]] = {
    "deniable (secure)": (ours, "os.urandom, 4 KiB blocks"),
    "deniable perturb() alone": (ours_plain, "os.urandom via SecureBits"),
    "secrets.randbits(2)": (secrets_randbits, "secure"),
    "pure-ldp DE d=2": (pure_ldp, "Mersenne Twister"),
    "multi-freq-ldpy GRR k=2": (multi_freq_ldpy, "numba Mersenne Twister"),
    "diffprivlib Binary": (diffprivlib, "SystemRandom, float compare"),
    "OpenDP rr_bool": (opendp, "OpenSSL"),
}


def rate(subject: Subject, seconds: float) -> float:
    """Calls per second, one call at a time, in chunks of 1000 until ``seconds`` pass."""
    call, no, yes = subject
    values = [yes if i & 1 else no for i in range(1000)]
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


def bench_perturbation(seconds: float, rounds: int) -> dict[str, float]:
    calls: dict[str, Subject] = {}
    for name, (make, _) in PEERS.items():
        try:
            calls[name] = make()
        except Exception as exc:  # ImportError, or a peer broken by its dependencies
            print(f"  {name}: not measured ({type(exc).__name__}: {exc})".rstrip()[:160])
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, call in calls.items():
            best[name] = max(best.get(name, 0.0), rate(call, seconds))
    return best


UNREACHABLE = "http://127.0.0.1:9"
"""Nothing listens there: uploads fail and back off, so report() and the queue are measured
alone, without an HTTP server competing for the same two cores."""
METRICS = {"feature_x_enabled": "rr:1/2:1/2"}


def reporter_rate(folder: Path, *, durability: str, to_file: bool, threads: int,
                  n: int) -> tuple[float, float]:
    """(report() calls/s seen by the app's threads, reports/s committed to the queue)."""
    path = folder / f"q-{durability}-{threads}-{time.monotonic_ns()}.db" if to_file else None
    reporter = Reporter(UNREACHABLE, metrics=METRICS, queue_path=path,
                        storage=Storage(durability=durability, max_queued_reports=10_000_000),
                        delivery=Delivery(batch_size=1000, backoff=60, max_backoff=60),
                        privacy=Privacy(one_per_period=False))  # every call reaches the queue
    try:
        per_thread = n // threads
        report = reporter.report

        def work() -> None:
            for i in range(per_thread):
                report("feature_x_enabled", i & 1 == 0)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        calls_done = time.perf_counter()
        reporter._queue.commit()  # what is still in the group-commit buffer
        committed = time.perf_counter()
        total = per_thread * threads
        assert sum(e.handed_n for e in reporter.ledger().values()) == total
        return total / (calls_done - started), total / (committed - started)
    finally:
        reporter.close(timeout=0)


def bench_reporter(rounds: int, n_group: int, n_sync: int) -> dict[str, tuple[float, float]]:
    folder = Path(tempfile.mkdtemp(prefix="deniable-bench-", dir=os.getcwd()))
    configs = {
        "report(), group commit, in-memory queue": ("group", False, 1, n_group),
        "report(), group commit, SQLite file": ("group", True, 1, n_group),
        "report(), group commit, file, 4 threads": ("group", True, 4, n_group),
        "report(), sync, SQLite file (fsync)": ("sync", True, 1, n_sync),
        "report(), sync, file, 4 threads": ("sync", True, 4, n_sync),
    }
    best: dict[str, tuple[float, float]] = {}
    try:
        for _ in range(rounds):
            for name, (durability, to_file, threads, n) in configs.items():
                calls, committed = reporter_rate(folder, durability=durability,
                                                 to_file=to_file, threads=threads, n=n)
                old = best.get(name, (0.0, 0.0))
                best[name] = (max(old[0], calls), max(old[1], committed))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=0.5, help="per subject per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reports", type=int, default=300_000,
                        help="report() calls per group-commit run")
    parser.add_argument("--sync-reports", type=int, default=4_000,
                        help="report() calls per sync run")
    args = parser.parse_args(argv)
    # Closing a reporter whose target is unreachable warns "reports still queued": expected.
    logging.getLogger("deniable.client").setLevel(logging.ERROR)

    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; best of {args.rounds} rounds\n")
    print("1. Perturbation alone, one call at a time")
    rates = bench_perturbation(args.seconds, args.rounds)
    mine = rates["deniable (secure)"]
    print(f"  {'subject':<26} {'reports/s':>12}  {'ours is':>9}  random source")
    for name, value in sorted(rates.items(), key=lambda kv: -kv[1]):
        ratio = "" if name == "deniable (secure)" else f"{mine / value:8.2f}x"
        print(f"  {name:<26} {value:>12,.0f}  {ratio:>9}  {PEERS[name][1]}")
    slower = [n for n, v in rates.items() if not n.startswith("deniable") and v >= mine]
    print("  ours is faster than every peer measured" if not slower
          else f"  NOT faster than: {', '.join(slower)}")

    print("\n2. Reporter.report() with the durable queue (upload target unreachable)")
    results = bench_reporter(args.rounds, args.reports, args.sync_reports)
    print(f"  {'configuration':<42} {'calls/s':>11} {'committed/s':>12}  vs 100k/s target")
    for name, (calls, committed) in results.items():
        print(f"  {name:<42} {calls:>11,.0f} {committed:>12,.0f}  {calls / 100_000:6.2f}x")
    group = results["report(), group commit, SQLite file"][0]
    print(f"\n  group commit to a file costs {mine / group:.1f}x the bare perturbation; "
          f"sync (one thread) costs {group / results['report(), sync, SQLite file (fsync)'][0]:.0f}x "
          f"group commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
