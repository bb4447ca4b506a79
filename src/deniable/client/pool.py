"""Perturbed answers drawn ahead in blocks: the Reporter's fast path for one mechanism.

``RandomizedResponse.perturb`` spends a couple of secure random bits per report, but pays two
Python calls and a lock for them. ``PerturbationPool`` draws the coins for thousands of
reports at once: one ``os.urandom`` block becomes, through the mechanism's own outcome table,
a ``bytes`` string of perturbed answers for a true 1 and another for a true 0. A report then
costs one ``next()`` on the matching iterator.

Exactness: the outcome table is derived by running ``mechanism.perturb`` itself on every
possible draw of ``t`` bits (the smallest t in 1, 2, 4, 8 that works), and is used only if no
draw makes ``perturb`` ask for more than ``t`` bits. The answer is then a function of a
uniform t-bit draw that equals what ``perturb`` returns on any random stream starting with
those bits, so each answer has exactly the mechanism's probability; and all answers are
independent, since every random bit serves one report only. Mechanisms whose coins do not fit
(e.g. denominators that are not powers of two) keep the plain ``perturb`` path.

Guarantees: thread-safe (``next()`` on a bytes iterator is one atomic step under the GIL, so no
two reports ever share an answer; a refill race only discards unused answers); fork-safe (a
forked child discards every pool, so parent and child never share randomness).
"""
from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Iterator

from deniable.client.mechanism import RandomizedResponse

BLOCK_BYTES = 4096
"""Random bytes per refill: 4096 bytes are 16,384 answers for the two-coin scheme."""
_WIDTHS = (1, 2, 4, 8)
_POOLS: weakref.WeakSet[PerturbationPool] = weakref.WeakSet()


class _Draw:
    """A RandomBits that serves the bits of one fixed draw, LSB first, and counts them."""

    def __init__(self, value: int, width: int) -> None:
        self.value, self.width, self.used = value, width, 0

    def bits(self, k: int) -> int:
        if self.used + k > self.width:
            raise _Overdrawn
        out = (self.value >> self.used) & ((1 << k) - 1)
        self.used += k
        return out


class _Overdrawn(Exception):
    pass


def outcome_table(mechanism: RandomizedResponse) -> tuple[bytes, bytes, int] | None:
    """(answers for a true 0, for a true 1, draw width t), indexed by every t-bit draw.

    None if for every width in (1, 2, 4, 8) some draw makes ``perturb`` ask for more bits.
    """
    for width in _WIDTHS:
        rows: list[bytearray] = [bytearray(), bytearray()]
        try:
            for true_bit in (0, 1):
                for value in range(1 << width):
                    rows[true_bit].append(mechanism.perturb(true_bit, _Draw(value, width)))
        except _Overdrawn:
            continue
        return bytes(rows[0]), bytes(rows[1]), width
    return None


@functools.lru_cache(maxsize=256)
def _translations(mechanism: RandomizedResponse) -> tuple[tuple[bytes, bytes], ...] | None:
    """Per draw position i in a byte: (answers for a true 0, for a true 1) of every byte
    value, from the mechanism's outcome table; None if it has none. Computed once per
    mechanism: immutable, so every pool of that mechanism shares it."""
    table = outcome_table(mechanism)
    if table is None:
        return None
    no, yes, width = table
    per_byte = 8 // width
    mask = (1 << width) - 1
    return tuple(
        (bytes(no[(b >> (i * width)) & mask] for b in range(256)),
         bytes(yes[(b >> (i * width)) & mask] for b in range(256)))
        for i in range(per_byte))


class PerturbationPool:
    """Perturbed answers for one mechanism, drawn ahead from ``os.urandom``.

    Args:
        mechanism: the mechanism; see ``PerturbationPool.create`` for ones that cannot pool.
        read: the entropy source (``os.urandom``); it takes a byte count.
    """

    def __init__(self, mechanism: RandomizedResponse,
                 read: Callable[[int], bytes] = os.urandom) -> None:
        translations = _translations(mechanism)
        if translations is None:
            raise ValueError(f"{mechanism.id} has no outcome table of 1, 2, 4 or 8 bits")
        # For each byte and each of its draws: the answer that draw gives (shared, read-only).
        self._translations = translations
        self._read = read
        # [answers for a true 0, for a true 1]: indexed by the value, never branched on, so a
        # report takes the same time for either value.
        self._streams: list[Iterator[int]] = [iter(()), iter(())]
        _POOLS.add(self)

    @classmethod
    def create(cls, mechanism: RandomizedResponse) -> PerturbationPool | None:
        """A pool for ``mechanism``, or None if its coins do not fit a pool."""
        try:
            return cls(mechanism)
        except ValueError:
            return None

    def perturb(self, true_bit: bool | int) -> int:
        """The perturbed answer, 0 or 1, for ``true_bit``: each answer used once."""
        try:
            return next(self._streams[true_bit])
        except StopIteration:
            return self._refill(int(true_bit))

    def _refill(self, true_bit: int) -> int:
        # Answers for a true 1 and a true 0 come from separate blocks: they are spent at
        # different rates, and no random bit ever serves two reports.
        block = self._read(BLOCK_BYTES)
        answers = b"".join(block.translate(pair[true_bit]) for pair in self._translations)
        stream = iter(answers)
        first = next(stream)
        self._streams[true_bit] = stream
        return first

    def discard(self) -> None:
        """Drop every answer drawn ahead."""
        self._streams = [iter(()), iter(())]


def _discard_all_after_fork() -> None:
    for pool in list(_POOLS):
        pool.discard()


os.register_at_fork(after_in_child=_discard_all_after_fork)
