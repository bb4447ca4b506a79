"""The secure random bits every perturbation is drawn from.

``SecureBits`` reads the operating system's CSPRNG (``os.urandom``, the source behind
``secrets``) in blocks and spends it a few bits at a time, so the two-coin scheme costs exactly
two random bits per report. Every draw is an integer: ``below(den) < num`` has probability
exactly ``num / den``, with no floating-point comparison anywhere.

Guarantees:
- Thread-safe: one lock guards the pool, so no two draws ever share a bit.
- Fork-safe: buffered bits are discarded in a forked child, so parent and child never reuse
  the same randomness.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Callable, Protocol

_BLOCK_BYTES = 4096
_WORD_BITS = 64
_WORD_BYTES = _WORD_BITS // 8


class RandomBits(Protocol):
    """A source of uniform random bits. Tests inject their own to make draws reproducible."""

    def bits(self, k: int) -> int:
        """Return a uniform integer in [0, 2**k)."""
        ...


class SecureBits:
    """Uniform random bits from ``os.urandom``, buffered in blocks.

    Args:
        read: the entropy source, ``os.urandom`` by default; it takes a byte count.
    """

    _instances: "weakref.WeakSet[SecureBits]" = weakref.WeakSet()

    def __init__(self, read: Callable[[int], bytes] = os.urandom) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._block = b""
        self._offset = 0
        self._word = 0
        self._avail = 0
        SecureBits._instances.add(self)

    def bits(self, k: int) -> int:
        """Return a uniform integer in [0, 2**k). ``k`` must lie in [0, 64]."""
        if not 0 <= k <= _WORD_BITS:
            raise ValueError(f"k must lie in [0, {_WORD_BITS}]. Got {k} instead.")
        with self._lock:
            if self._avail < k:
                self._next_word()
            value = self._word & ((1 << k) - 1)
            self._word >>= k
            self._avail -= k
            return value

    def below(self, bound: int) -> int:
        """Return a uniform integer in [0, bound), by rejection: exact, with no modulo bias."""
        if bound < 1:
            raise ValueError(f"bound must be at least 1. Got {bound} instead.")
        k = (bound - 1).bit_length()
        while True:
            value = self.bits(k)
            if value < bound:
                return value

    def discard(self) -> None:
        """Drop every buffered bit; the next draw reads fresh bytes from the OS."""
        self._block, self._offset, self._word, self._avail = b"", 0, 0, 0
        self._lock = threading.Lock()  # a lock held by a parent thread at fork is unusable

    def _next_word(self) -> None:
        # Unused bits of the current word are thrown away: never stitched to the next word.
        if self._offset >= len(self._block):
            self._block = self._read(_BLOCK_BYTES)
            self._offset = 0
        end = self._offset + _WORD_BYTES
        self._word = int.from_bytes(self._block[self._offset:end], "little")
        self._offset = end
        self._avail = _WORD_BITS


def _discard_all_after_fork() -> None:
    for source in list(SecureBits._instances):
        source.discard()


os.register_at_fork(after_in_child=_discard_all_after_fork)

SYSTEM_BITS = SecureBits()
"""The process-wide secure source used when no other is injected."""
