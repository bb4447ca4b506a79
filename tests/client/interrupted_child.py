"""An app whose main thread is interrupted over and over while it reports, then closes.

Run by tests/client/test_interrupts.py: a timer raises KeyboardInterrupt every few hundred
microseconds, wherever the main thread is, including inside the client."""
from __future__ import annotations

import signal
import sys

from deniable.client import Connection, Delivery, Privacy, Reporter, Storage


armed = False


def interrupt(signum: int, frame: object) -> None:
    """Raise KeyboardInterrupt once per arming, wherever report() happens to be."""
    global armed
    if armed:
        armed = False
        raise KeyboardInterrupt


reporter = Reporter("http://127.0.0.1:9", storage=Storage(commit_interval=0.001),
                    delivery=Delivery(batch_size=50), privacy=Privacy(one_per_period=False),
                    connection=Connection(timeout=(0.05, 0.05)),
                    metrics={"dark_mode": "rr:3/4:1/2"})
signal.signal(signal.SIGALRM, interrupt)
interrupted = 0
signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 400_000):
    try:
        armed = True
        reporter.report("dark_mode", True)
        armed = False
    except KeyboardInterrupt:
        interrupted += 1
signal.setitimer(signal.ITIMER_REAL, 0)
signal.signal(signal.SIGALRM, signal.SIG_DFL)
reporter.close(timeout=0.5)  # must return: no wake-up lock left held by an interrupt
print(interrupted)
sys.exit(0 if interrupted > 100 else 3)
