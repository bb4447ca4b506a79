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

Every kind is memoized the same way (``memo_answer``): a categorical metric's permanent answer
for a category is ``mechanism.perturb(index, HmacBits(...))`` (a GRR index or an OUE bitset);
a numeric metric's value is first rounded to a grid by **α-point rounding** (Ding, Kulkarni,
Yekhanin, NeurIPS 2017; ``grid_point``) and each grid point gets its permanent 1BitMean bit.
The value bytes of the context are then 4 big-endian bytes of the index, or of (grid size m,
grid point g); the mechanism id in the context keeps every kind's streams apart.

α-point rounding: per device and metric a secret threshold α = j / 2**64, j uniform in
[0, 2**64) from the HMAC stream of ("alpha", metric). The scaled value s in [0, 1] sits at grid
position t = s m between the points k = floor(t) and k + 1; it rounds up exactly when its
fraction t - k exceeds α. So a value held constant always lands on the same point (its
reports repeat one memoized bit), a value drifting inside one cell touches at most two
points, and over the secret's randomness P(up) = ceil((t - k) 2**64) / 2**64: the rounded
point's mean is s plus a bias in [0, 2**-64 / m), nothing more. Grid points are values
lower + (upper - lower) g / m, so the bit of point g is exactly 1BitMean's at that value.

Nothing here stores anything: the memoized bit is recomputed from the secret on every report,
so no file ever holds it, let alone the true value. ``spend_tag`` names a (metric, mechanism,
value) for the budget ledger by a second, domain-separated HMAC, which reveals nothing about
the value to anyone without the secret. Anyone holding the secret can recompute the tag and
the bit for both candidate values; see docs/privacy.md.
"""
from __future__ import annotations

import hmac
import os
from fractions import Fraction
from typing import Union

from deniable.client.categorical import KaryRandomizedResponse, SubsetSelection, UnaryEncoding
from deniable.client.errors import InvalidParameterError, PrivacyStateError
from deniable.client.mechanism import RandomizedResponse
from deniable.client.numeric import BitMean

# The isinstance tests below are on the mechanism, not the kind: a 1BitMean answer is keyed
# by its grid point, every categorical mechanism's by the index.

ValueMechanism = Union[KaryRandomizedResponse, UnaryEncoding, SubsetSelection, BitMean]
"""The mechanisms of the kinds beyond boolean: memoized per value (``memo_answer``)."""

MemoMechanism = Union[RandomizedResponse, ValueMechanism]
"""Every mechanism a memoized answer follows: ``memo_answer`` and ``value_tag`` take each, a
boolean's keyed by its true bit (the same answer and tag as ``memo_bit`` and ``spend_tag``)."""

SECRET_BYTES = 32
"""Length of the device secret in bytes (256 bits, the HMAC-SHA256 key size)."""

DEFAULT_GRID = 32
"""Grid intervals m of α-point rounding for numeric metrics: values are rounded to one of
m + 1 = 33 points, lower + (upper - lower) g / m. A value held constant costs one memoized
answer; each further point its reports reach costs another (see ``memo_answer``)."""
MAX_GRID = 1 << 16

ALPHA_BITS = 64
"""Resolution of the secret rounding threshold α: the rounding's bias is below 2**-64 / m."""

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
    return _prefix(label, metric, mechanism_id) + bytes((true_bit,))


def _prefix(label: bytes, metric: str, mechanism_id: str) -> bytes:
    fields = (_DOMAIN, label, metric.encode("utf-8"), mechanism_id.encode("ascii"))
    return b"".join(len(f).to_bytes(4, "big") + f for f in fields)


def _value_context(label: bytes, metric: str, mechanism: MemoMechanism, key: int,
                   grid: int) -> bytes:
    """The context of a true bit (one byte), a categorical index (``key``, 4 bytes), or grid
    point ``key`` of ``grid`` (4 + 4 bytes)."""
    if isinstance(mechanism, RandomizedResponse):
        return _context(label, metric, mechanism.id, 1 if key else 0)
    if isinstance(mechanism, BitMean):
        value = grid.to_bytes(4, "big") + key.to_bytes(4, "big")
    else:
        value = key.to_bytes(4, "big")
    return _prefix(label, metric, mechanism.id) + value


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
    """The device's permanent perturbed answer for (metric, mechanism, true_bit)
    (``memo_answer`` of a boolean).

    Always the same for the same secret; over random secrets, 1 with probability exactly
    ``mechanism.p_yes_given_yes`` (true 1) or ``mechanism.p_yes_given_no`` (true 0).
    """
    return memo_answer(secret, metric, mechanism, true_bit)


def spend_tag(secret: bytes, metric: str, mechanism: RandomizedResponse, true_bit: int) -> str:
    """An opaque 128-bit name (hex) for (metric, mechanism, true_bit), for the budget ledger
    (``value_tag`` of a boolean).

    Independent of the memoized bit (a separate HMAC input), so the tag says nothing about
    the answer; without the secret it says nothing about the value either.
    """
    return value_tag(secret, metric, mechanism, true_bit)


def check_grid(grid: object) -> int:
    """``grid`` as a number of grid intervals m in [1, 65536]."""
    if isinstance(grid, bool) or not isinstance(grid, int) or not 1 <= grid <= MAX_GRID:
        raise InvalidParameterError(
            f"grid must be an int in [1, {MAX_GRID}]. Got {grid!r} instead.")
    return grid


def alpha_threshold(secret: bytes, metric: str) -> int:
    """The device's secret rounding threshold for ``metric``: j in [0, 2**64), α = j / 2**64.

    One per device and metric (every version of the metric shares it), from the HMAC stream
    of ("alpha", metric), independent of every memoized answer.
    """
    return HmacBits(secret, _prefix(b"alpha", metric, "")).bits(ALPHA_BITS)


def grid_point(scaled: Fraction, grid: int, alpha: int) -> int:
    """α-point rounding of ``scaled`` in [0, 1] to a point g in [0, grid]: up from
    floor(scaled * grid) exactly when the fraction exceeds α = alpha / 2**64. Exact."""
    position = scaled * grid
    low = position.numerator // position.denominator
    fraction = position - low
    return low + (fraction * (1 << ALPHA_BITS) > alpha)


class Grid:
    """α-point rounding of one 1BitMean's values, in integer arithmetic (the hot path of a
    memoized numeric report): ``point(v, alpha) == grid_point(mechanism.scaled(v), grid,
    alpha)`` for every v in range, exactly.

    With v = n/d, lower = a/b and upper - lower = e/f, the position s m is
    num/den = (n b - a d) f m / (d b e); it rounds up when (num mod den) 2**64 > alpha den.
    """

    __slots__ = ("_a", "_b", "_e", "_f", "_grid")

    def __init__(self, mechanism: BitMean, grid: int = DEFAULT_GRID) -> None:
        span = mechanism.upper - mechanism.lower
        self._a, self._b = mechanism.lower.numerator, mechanism.lower.denominator
        self._e, self._f = span.numerator, span.denominator
        self._grid = check_grid(grid)

    def point(self, value: Fraction, alpha: int) -> int:
        """The grid point ``value`` rounds to under threshold ``alpha``.

        Raises:
            InvalidParameterError: ``value`` outside [lower, upper] (never shown).
        """
        n, d = value.numerator, value.denominator
        den = d * self._b * self._e
        num = (n * self._b - self._a * d) * self._f * self._grid
        if not 0 <= num <= self._grid * den:
            raise InvalidParameterError("the value lies outside the metric's [lower, upper]")
        low, rest = divmod(num, den)
        return low + ((rest << ALPHA_BITS) > alpha * den)


def grid_value(mechanism: BitMean, point: int, grid: int) -> Fraction:
    """The value of grid point ``point``: lower + (upper - lower) point / grid, exact."""
    return mechanism.lower + (mechanism.upper - mechanism.lower) * Fraction(point, grid)


def memo_key(secret: bytes, metric: str, mechanism: ValueMechanism, value: int | Fraction,
             grid: int = DEFAULT_GRID, alpha: int | None = None) -> int:
    """What a memoized answer is keyed by: the category index itself, or the grid point a
    numeric ``value`` (exact, in range) rounds to under the device's α for ``metric``."""
    if not isinstance(mechanism, BitMean):
        return int(value)
    if alpha is None:
        alpha = alpha_threshold(secret, metric)
    return Grid(mechanism, grid).point(Fraction(value), alpha)


def memo_answer(secret: bytes, metric: str, mechanism: MemoMechanism, key: int,
                grid: int = DEFAULT_GRID) -> int:
    """The device's permanent perturbed answer for (metric, mechanism, ``key``): a boolean's
    bit (``memo_bit``), a GRR index, an OUE bitset (as an int) or a 1BitMean bit, for the true
    bit, category index or grid point ``key`` (``memo_key``).

    Always the same for the same secret; over random secrets it follows ``mechanism`` exactly
    for the category (or the grid point's value), and the answers of different keys are
    independent.
    """
    rng = HmacBits(secret, _value_context(b"prr", metric, mechanism, key, grid))
    if isinstance(mechanism, BitMean):
        return mechanism.perturb(grid_value(mechanism, key, grid), rng)
    return mechanism.perturb(1 if key else 0, rng) if isinstance(mechanism, RandomizedResponse) \
        else mechanism.perturb(key, rng)


def value_tag(secret: bytes, metric: str, mechanism: MemoMechanism, key: int,
              grid: int = DEFAULT_GRID) -> str:
    """``spend_tag`` for any memoized answer (a true bit, category index or grid point
    ``key``): an opaque 128-bit name (hex) for the budget ledger, independent of the answer."""
    return hmac.digest(secret, _value_context(b"tag", metric, mechanism, key, grid),
                       "sha256")[:16].hex()


def memo_value(secret: bytes, metric: str, mechanism: ValueMechanism, value: int | Fraction,
               grid: int = DEFAULT_GRID) -> int:
    """The device's permanent answer for a true ``value`` (a category index, or an exact
    number in range, as ``MetricSpec.encode`` gives it), exactly as the client derives it:
    ``memo_answer`` of ``memo_key``. For simulations of many devices (one secret each)."""
    return memo_answer(secret, metric, mechanism, memo_key(secret, metric, mechanism, value, grid),
                       grid)
