"""Doorbell: a ``threading.Event`` that a KeyboardInterrupt cannot jam.

``threading.Event.set()`` enters a Condition written in Python. An exception raised by a signal
handler (Ctrl-C's KeyboardInterrupt) can land just after that Condition's lock is taken and
before the ``with`` block that would release it, and the next ``set()`` (in ``close()``, or
the atexit flush) then blocks for ever. Apps call ``report()`` from their main thread, where
signals land, so the client's wake-ups use this class instead: ``set()`` is one attribute
store and one C call (``SimpleQueue.put``), and holds no lock that could be left behind.

It is level-triggered like an Event (``wait`` returns at once while set, until ``clear``),
and meant for one waiting thread: with several, one ``set`` may wake only one of them.
"""
from __future__ import annotations

import queue


class Doorbell:
    """Set by any thread, waited on by one."""

    __slots__ = ("_rung", "_tokens")

    def __init__(self) -> None:
        self._rung = False
        self._tokens: queue.SimpleQueue[None] = queue.SimpleQueue()

    def set(self) -> None:
        """Ring: wake the waiter, and stay rung until ``clear``."""
        self._rung = True
        self._tokens.put(None)

    def is_set(self) -> bool:
        return self._rung

    def clear(self) -> None:
        """Un-ring, dropping any pending wake-ups."""
        self._rung = False
        try:
            while True:
                self._tokens.get_nowait()
        except queue.Empty:
            pass

    def wait(self, timeout: float | None = None) -> bool:
        """Block until rung or ``timeout`` seconds pass; return whether it is rung."""
        if self._rung:
            return True
        try:
            self._tokens.get(timeout=timeout)
        except queue.Empty:
            pass
        return self._rung
