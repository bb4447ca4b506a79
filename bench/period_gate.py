"""What the period gate costs ``Reporter.report()``, measured side by side in one run.

    ./dev bench period_gate [--calls 200000] [--rounds 3]

Three subjects, each ``--calls`` calls of ``report()`` on one metric, in-memory queue, nothing
listening (uploads back off; report() never waits for them):
1. the gate off (``one_per_period=False``): every call perturbed and queued;
2. the gate on, extra calls of the day: each a no-op counted in ``stats().period_skipped``;
3. ``PeriodGate.admit`` alone, the check every call pays.
The best round counts (the machine is shared).
"""
from __future__ import annotations

import argparse
import logging
import tempfile
import time

from deniable.client import Privacy, Reporter, Storage
from deniable.client.period import DEFAULT_POLICY, PeriodGate

URL = "http://127.0.0.1:9"  # nothing listens: uploads fail and back off


def _time(calls: int, fn) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    fn(calls)
    return calls / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    logging.getLogger("deniable").setLevel(logging.ERROR)
    best = {"gate off: every call queued": 0.0, "gate on: extra calls (no-ops)": 0.0,
            "PeriodGate.admit alone": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        off = Reporter(URL, metrics={"m": "rr:1/2:1/2"},
                       storage=Storage(max_queued_reports=10 * args.calls,
                                       privacy_dir=f"{tmp}/off"),
                       privacy=Privacy(one_per_period=False))
        on = Reporter(URL, metrics={"m": "rr:1/2:1/2"}, storage=Storage(privacy_dir=f"{tmp}/on"))
        on.report("m", True)  # the day's one report; the rest are no-ops
        gate = PeriodGate(f"{tmp}/gate")
        gate.admit("m", DEFAULT_POLICY)

        def run_off(n: int) -> None:
            for i in range(n):
                off.report("m", i & 1 == 0)

        def run_on(n: int) -> None:
            for i in range(n):
                on.report("m", i & 1 == 0)

        def run_gate(n: int) -> None:
            for _ in range(n):
                gate.admit("m", DEFAULT_POLICY)

        for _ in range(args.rounds):
            for name, fn in zip(best, (run_off, run_on, run_gate)):
                best[name] = max(best[name], _time(args.calls, fn))
        skipped = on.stats().period_skipped
        off.close(timeout=0)
        on.close(timeout=0)
    base = best["gate off: every call queued"]
    for name, rate in best.items():
        print(f"{name:34} {rate / 1e6:6.2f} M calls/s   {rate / base:5.2f}x the gate off")
    print(f"no-op calls counted in stats().period_skipped: {skipped:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
