"""Request-metrics bench: what the closed label set and the process gauges cost per request.

Run as ``./dev bench request_metrics`` (a few seconds). In one process, side by side, it times
one million calls of each:

1. ``RequestRecorder.record`` as served (methods and statuses mapped into closed sets, the
   process gauges' once-a-second check), request logging off;
2. the same counter and histogram updates with the labels passed through unchecked (the code
   before the closed sets, which let any method become a series);

and prints ns per call and their ratio, plus the cost of one ``ProcessStats.update`` (a read of
``/proc/self``), which runs at most once per second per worker and at each scrape.
"""
from __future__ import annotations

import time

from deniable.collector.observability import (LATENCY, REQUESTS, ProcessStats, RequestLineHandler,
                                              RequestRecorder, _child)

CALLS = 1_000_000


def unchecked(method: str, route: str, status: int, elapsed: float) -> None:
    _child(REQUESTS, method, route, str(status)).inc()
    _child(LATENCY, method, route).observe(elapsed)


def per_call_ns(fn, rounds: int = 3) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(CALLS):
            fn("POST", "/v1/reports", 202, 0.0004)
        best = min(best, (time.perf_counter() - started) / CALLS * 1e9)
    return best


def main() -> None:
    recorder = RequestRecorder(False, RequestLineHandler(0))
    served = per_call_ns(recorder.record)
    raw = per_call_ns(unchecked)
    stats = ProcessStats()
    started = time.perf_counter()
    for _ in range(1000):
        stats.update()
    update_us = (time.perf_counter() - started) / 1000 * 1e6
    print(f"record, closed labels + process check: {served:8.0f} ns/request")
    print(f"record, labels unchecked (before):      {raw:8.0f} ns/request")
    print(f"ratio closed / unchecked:               {served / raw:8.2f}")
    print(f"ProcessStats.update (once a second):    {update_us:8.1f} us")


if __name__ == "__main__":
    main()
