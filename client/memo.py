"""Memoized (permanent) randomized response, derived from a device secret as RAPPOR does.

For each (metric, mechanism, true value) the device's perturbed answer is drawn once, from an
HMAC-SHA256 stream keyed by a 32-byte device secret:

    block_i = HMAC-SHA256(secret, context || i)    (i = 0, 1, ... as 8 big-endian bytes)
    context = length-prefixed ("deniable/memo/v1", "prr", metric, mechanism id) || value byte

``HmacBits`` spends those blocks bit by bit as a ``RandomBits`` source and the memoized bit is
``mechanism.perturb(true_bit, HmacBits(...))``: the mechanism is defined once, and its integer
draws (with rejection for denominators that are not powers of two) are exact. If HMAC-SHA256
is a pseudorandom function, then over the secret's randomness the memoized bit is 1 with
probability exactly P1 (true 1) or Q (true 0), and the bits for the two values are
independent.

Nothing here stores anything: the memoized bit is recomputed from the secret on every report,
so no file ever holds it, let alone the true value. ``spend_tag`` names a (metric, mechanism,
value) for the budget ledger by a second, domain-separated HMAC, which reveals nothing about
the value to anyone without the secret. Anyone holding the secret can recompute the tag and
the bit for both candidate values; see docs/privacy.md.
"""
from __future__ import annotations

import hmac
import os

from deniable.client.errors import PrivacyStateError
from deniable.client.mechanism import RandomizedResponse

SECRET_BYTES = 32
"""Length of the device secret in bytes (256 bits, the HMAC-SHA256 key size)."""

_DOMAIN = b"deniable/memo/v1"
_BLOCK_BITS = 256


def new_secret() -> bytes:
    """32 fresh bytes from the operating system's CSPRNG."""
    return os.urandom(SECRET_BYTES)


def check_secret(secret: bytes) -> bytes:
    """Return ``secret`` if it is exactly 32 bytes, else raise ``PrivacyStateError``."""
    if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
        raise PrivacyStateError(
            f"the device secret must be {SECRET_BYTES} bytes. "
            f"Got {len(secret) if isinstance(secret, bytes) else type(secret).__name__} instead.")
    return secret


def _context(label: bytes, metric: str, mechanism_id: str, true_bit: int) -> bytes:
    fields = (_DOMAIN, label, metric.encode("utf-8"), mechanism_id.encode("ascii"))
    return b"".join(len(f).to_bytes(4, "big") + f for f in fields) + bytes((true_bit,))


class HmacBits:
    """Uniform bits from the HMAC-SHA256 stream of (secret, context): a ``RandomBits``.

    Deterministic: the same secret and context always give the same bits. Not thread-safe;
    make one per derivation.
    """

    __slots__ = ("_key", "_context", "_counter", "_pool", "_avail")

    def __init__(self, secret: bytes, context: bytes) -> None:
        self._key = secret
        self._context = context
        self._counter = 0
        self._pool = 0
        self._avail = 0

    def bits(self, k: int) -> int:
        """Return the next ``k`` bits of the stream as an integer in [0, 2**k)."""
        if k < 0:
            raise ValueError(f"k must be at least 0. Got {k} instead.")
        while self._avail < k:
            block = hmac.digest(self._key, self._context + self._counter.to_bytes(8, "big"),
                                "sha256")
            self._counter += 1
            self._pool |= int.from_bytes(block, "little") << self._avail
            self._avail += _BLOCK_BITS
        value = self._pool & ((1 << k) - 1)
        self._pool >>= k
        self._avail -= k
        return value


def memo_bit(secret: bytes, metric: str, mechanism: RandomizedResponse, true_bit: int) -> int:
    """The device's permanent perturbed answer for (metric, mechanism, true_bit).

    Always the same for the same secret; over random secrets, 1 with probability exactly
    ``mechanism.p_yes_given_yes`` (true 1) or ``mechanism.p_yes_given_no`` (true 0).
    """
    bit = 1 if true_bit else 0
    return mechanism.perturb(bit, HmacBits(secret, _context(b"prr", metric, mechanism.id, bit)))


def spend_tag(secret: bytes, metric: str, mechanism: RandomizedResponse, true_bit: int) -> str:
    """An opaque 128-bit name (hex) for (metric, mechanism, true_bit), for the budget ledger.

    Independent of the memoized bit (a separate HMAC input), so the tag says nothing about
    the answer; without the secret it says nothing about the value either.
    """
    bit = 1 if true_bit else 0
    return hmac.digest(secret, _context(b"tag", metric, mechanism.id, bit), "sha256")[:16].hex()
