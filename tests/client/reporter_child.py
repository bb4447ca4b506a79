"""An app process for tests that kill apps: reports from threads and prints its progress.

    python -m tests.client.reporter_child URL QUEUE --reports N [--threads T] [--durability D]

Every ``--every`` returned ``report()`` calls it prints ``progress <count> <monotonic>`` (the
count of calls that have *returned*, and CLOCK_MONOTONIC, shared by all processes on Linux).
At the end it closes the reporter (``--close-timeout``) and prints ``done <drained>``, unless
``--exit-without-close`` asks it to leave through the atexit hook instead.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

from deniable.client import Connection, Delivery, Privacy, Reporter, Storage

METRICS = {"feature_x_enabled": "rr:1/2:1/2", "dark_mode": "rr:3/4:1/2"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("queue")
    parser.add_argument("--reports", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--durability", default="group")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--max-batch-age", type=float, default=0.5)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds each thread sleeps after every --every of its reports")
    parser.add_argument("--close-timeout", type=float, default=30.0)
    parser.add_argument("--exit-without-close", action="store_true")
    args = parser.parse_args(argv)

    reporter = Reporter(args.url, storage=Storage(durability=args.durability),
                        delivery=Delivery(batch_size=args.batch_size,
                                          max_batch_age=args.max_batch_age, backoff=0.1,
                                          max_backoff=1.0, close_timeout=args.close_timeout),
                        privacy=Privacy(one_per_period=False),
                        connection=Connection(timeout=(1.0, 3.0)), metrics=METRICS,
                        queue_path=args.queue)
    lock = threading.Lock()
    returned = [0]

    def work(share: int, offset: int) -> None:
        for i in range(share):
            reporter.report("feature_x_enabled" if (i + offset) % 2 else "dark_mode",
                            (i + offset) % 3 == 0)
            with lock:
                returned[0] += 1
                if returned[0] % args.every == 0:
                    print(f"progress {returned[0]} {time.monotonic():.6f}", flush=True)
            if args.pause and i % args.every == args.every - 1:
                time.sleep(args.pause)

    shares = [args.reports // args.threads + (t < args.reports % args.threads)
              for t in range(args.threads)]
    threads = [threading.Thread(target=work, args=(share, t)) for t, share in enumerate(shares)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"progress {returned[0]} {time.monotonic():.6f}", flush=True)
    if args.exit_without_close:
        print("exiting", flush=True)
        return 0  # the atexit hook flushes
    drained = reporter.close()
    print(f"done {drained}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
