"""Categorical mechanisms: k-ary randomized response, optimized unary encoding and subset
selection.

Each reports one of ``d`` categories (a category list declared with the metric; its digest,
the *tag*, is part of the id, so a changed list is a new metric version). Each is defined
here once, beside its exact epsilon, its ``from_epsilon`` and the per-category channel
(P1, Q) the analysis debiases with:

- ``KaryRandomizedResponse`` (GRR, "direct encoding"), ``grr:<d>:<p>:<tag>``: the true
  category with probability p, otherwise one of the other d - 1 uniformly. epsilon =
  ln(p (d - 1) / (1 - p)). For d = 2, p = 3/4 it is the two-coin scheme.
- ``UnaryEncoding`` (OUE, Wang et al., USENIX Security 2017), ``oue:<d>:<q>:<tag>``: one bit
  per category; the true category's bit is 1 with probability 1/2, every other bit is 1 with
  probability q (about 1 / (e^epsilon + 1)). epsilon = ln((1 - q) / q).
- ``SubsetSelection`` (SS, Wang et al. 2016, Ye & Barg 2018), ``ss:<d>:<k>:<r>:<tag>``: a set
  of k categories, P(S) proportional to r if it holds the true one, else to 1; on the wire a
  bitset as OUE's. epsilon = ln r. With k ~ d / (e^epsilon + 1) it has the smallest variance
  of the three for middling d (e.g. d = 8 at epsilon 0.5 or 1, d = 64 below epsilon 4).

Counters: per hour, slot 0 counts reports and slot 1 + i counts how often category i was
reported (GRR) or had its bit set (OUE, SS). For each, the expected count of slot i is
n (Q + f_i (P1 - Q)), with (P1, Q) = ``channel``: so f_i = (c_i / n - Q) / (P1 - Q), exactly
as a boolean metric's share, and the variance is pi (1 - pi) / (n (P1 - Q)^2).

Sampling is exact and fast: a coin of probability p compares a uniform number read from
random bytes with p's base-256 expansion (``ByteCoin``: P(1) = p exactly), many coins at once
through one ``bytes.translate``. With the system source, answers are drawn ahead in blocks
from ``os.urandom`` (``Pool``), every random byte serving one report only; pools are dropped
in a forked child and never copied with a mechanism (tests/client/test_categorical_exact.py
enumerates the draws).
"""
from __future__ import annotations

import array
import functools
import hashlib
import itertools
import json
import math
import os
import re
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from fractions import Fraction

from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import (epsilon_target, fraction_field, fraction_text,
                                       largest_admissible, log_ratio_exceeds, natural_log,
                                       smallest_admissible, below)
from deniable.client.randomness import SYSTEM_BITS, RandomBits, SecureBits

MIN_CATEGORIES = 2
MAX_CATEGORIES = 1024
TAG = re.compile(r"^[0-9a-f]{8}\Z")
DENOMINATOR_BITS = 32
"""Probabilities chosen by ``from_epsilon`` have the denominator 2**32."""
_ID = re.compile(r"^(grr|oue):([0-9]{1,4}):([0-9/]{1,41}):([0-9a-f]{8})\Z")


def domain_tag(labels: Sequence[str]) -> str:
    """The 8-hex-digit digest of a category list (order matters) that ids carry."""
    text = json.dumps(list(labels), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def check_size(d: object) -> int:
    """``d`` as a category count in [2, 1024]."""
    if isinstance(d, bool) or not isinstance(d, int) or not MIN_CATEGORIES <= d <= MAX_CATEGORIES:
        raise InvalidParameterError(
            f"a categorical metric has {MIN_CATEGORIES} to {MAX_CATEGORIES} categories. "
            f"Got {d!r} instead.")
    return d


def _check_tag(tag: object) -> str:
    if not isinstance(tag, str) or not TAG.match(tag):
        raise InvalidParameterError(
            f"tag must be 8 lowercase hex digits (domain_tag of the categories). Got {tag!r}.")
    return tag


def _check_index(index: object, d: int) -> int:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < d:
        raise InvalidParameterError(f"a category index must be an int in [0, {d}). "
                                    f"Got {index!r} instead.")
    return index


def parse_categorical_id(mechanism_id: str) -> tuple[str, int, Fraction, str]:
    """(kind prefix, d, probability, tag) of a ``grr:``/``oue:`` id; refuses other spellings."""
    match = _ID.match(mechanism_id) if isinstance(mechanism_id, str) else None
    if match is None:
        raise InvalidParameterError(
            "a categorical mechanism id looks like 'grr:<d>:<p>:<tag>' or "
            f"'oue:<d>:<q>:<tag>', e.g. 'grr:6:1/2:0a1b2c3d'. Got {str(mechanism_id)[:80]!r}.")
    d = int(match.group(2))
    if str(d) != match.group(2):
        raise InvalidParameterError(f"d must have no leading zeros. Got {mechanism_id!r}.")
    return (match.group(1), check_size(d), fraction_field("probability", match.group(3)),
            match.group(4))


@dataclass(frozen=True)
class KaryRandomizedResponse:
    """k-ary (generalized) randomized response over ``d`` categories.

    Args:
        d: the number of categories, 2..1024.
        p: probability of reporting the true category, exact, in (1/d, 1).
        tag: ``domain_tag`` of the category labels.
    """

    d: int
    p: Fraction
    tag: str

    kind = "categorical"

    def __post_init__(self) -> None:
        check_size(self.d)
        _check_tag(self.tag)
        if isinstance(self.p, (bool, float)) or not isinstance(self.p, (Fraction, int)):
            raise InvalidParameterError(f"p must be an exact Fraction. Got {self.p!r}.")
        p = Fraction(self.p)
        if not Fraction(1, self.d) < p < 1:
            raise InvalidParameterError(
                f"p must lie strictly between 1/d = 1/{self.d} (no information) and 1 "
                f"(infinite epsilon). Got {p} instead.")
        object.__setattr__(self, "p", p)
        if type(self).perturb is KaryRandomizedResponse.perturb:  # not for subclasses
            object.__setattr__(self, "perturb", _on_first_use(self, _grr_fast_path))

    def __reduce__(self) -> tuple[type, tuple[int, Fraction, str]]:
        # A copy or pickle is rebuilt from the fields: it never carries answers drawn ahead.
        return type(self), (self.d, self.p, self.tag)

    @classmethod
    def from_id(cls, mechanism_id: str) -> KaryRandomizedResponse:
        """Parse ``grr:<d>:<p>:<tag>`` (canonical spelling only)."""
        prefix, d, p, tag = parse_categorical_id(mechanism_id)
        if prefix != "grr":
            raise InvalidParameterError(f"not a GRR id: {mechanism_id!r}")
        return cls(d, p, tag)

    @classmethod
    def from_epsilon(cls, epsilon: float, d: int, tag: str) -> KaryRandomizedResponse:
        """The GRR with p = k / 2**32 for the largest k whose exact epsilon is at most
        ``epsilon`` (decided exactly, never on rounded floats)."""
        target, d = epsilon_target(epsilon), check_size(d)
        den = 1 << DENOMINATOR_BITS
        floor = den // d  # p must exceed 1/d

        def admissible(k: int) -> bool:
            return not log_ratio_exceeds(Fraction(k * (d - 1), den - k), target)

        k = largest_admissible(floor + 1, den - 1, admissible)
        if k is None:
            raise InvalidParameterError(f"epsilon {epsilon} is too small for d = {d}.")
        return cls(d, Fraction(k, den), tag)

    @property
    def id(self) -> str:
        return f"grr:{self.d}:{fraction_text(self.p)}:{self.tag}"

    @property
    def width(self) -> int:
        """Counter slots per hour: n, then one per category."""
        return self.d + 1

    @functools.cached_property
    def q(self) -> Fraction:
        """P(report category j | true category i), for j != i: (1 - p) / (d - 1)."""
        return (1 - self.p) / (self.d - 1)

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        """(P1, Q) of each category's slot: (p, q)."""
        return self.p, self.q

    @functools.cached_property
    def likelihood_ratio(self) -> Fraction:
        """p / q: the most one report moves the odds between two true categories."""
        return self.p / self.q

    @functools.cached_property
    def epsilon(self) -> float:
        """ln(p / q), in nats."""
        return natural_log(self.likelihood_ratio)

    @functools.cached_property
    def _pool(self) -> Pool[int]:
        if self.d > 256:  # one stream of shifts, added to the index at report time
            return Pool(lambda _: self.shift_block(POOL_BYTES // 8), 1)
        per_refill = max(256, POOL_BYTES // 4 // self.d)
        d = self.d

        @functools.lru_cache(maxsize=None)
        def table(i: int) -> bytes:  # shift -> the answer for true index i
            return bytes((i + s) % d for s in range(256))
        return Pool(lambda i: bytes(self.shift_block(per_refill)).translate(table(i)), d)

    def perturb(self, index: int, rng: RandomBits | None = None) -> int:
        """The reported category index for the true ``index``; integer draws only.

        The report is (index + shift) mod d with a shift that is 0 with probability p and
        otherwise uniform over 1..d-1: the true category with probability p, each other one
        with probability q. With the system source (and d <= 256) shifts are drawn ahead in
        blocks from ``os.urandom`` (``shift_block``), one stream of answers per true index
        (as ``PerturbationPool`` does for booleans), each serving one report only; the stream
        is indexed by the value, never branched on.
        """
        if index.__class__ is not int or not 0 <= index < self.d:
            _check_index(index, self.d)
        if rng is None or rng is SYSTEM_BITS:
            pool = self._pool
            if self.d <= 256:
                try:
                    return next(pool.streams[index])
                except StopIteration:
                    return pool.refill(index)
            try:
                shift = next(pool.streams[0])
            except StopIteration:
                shift = pool.refill(0)
            return (index + shift) % self.d
        keep = below(rng, self.p.denominator) < self.p.numerator
        other = below(rng, self.d - 1)
        other += other >= index  # uniform over the d - 1 other categories
        return index if keep else other

    @functools.cached_property
    def _keep_coin(self) -> ByteCoin:
        return ByteCoin(self.p)

    def shift_block(self, n: int, read: Callable[[int], bytes] = os.urandom
                    ) -> bytes | list[int]:
        """``n`` independent shifts: 0 with probability exactly p, else uniform over 1..d-1.

        Each shift takes its own keep coin (``ByteCoin(p)`` on fresh bytes) and its own
        accepted draw w < W - W mod (d - 1), mapped to 1 + w mod (d - 1) (rejection, so
        exactly uniform), with w a byte (W = 256; d <= 256: one byte per shift, and a kept
        shift's byte is masked to 0 by one big-integer AND) or a 16-bit word (W = 65536).
        """
        keep = self._keep_coin.decide(read(n), read)
        m = self.d - 1
        if self.d > 256:
            limit = 65536 - 65536 % m
            others: list[int] = []
            while len(others) < n:
                words = array.array("H", read(2 * (n - len(others))))
                others.extend(1 + w % m for w in words if w < limit)
            return [0 if k == _ONE else s for k, s in zip(keep, others)]
        limit = 256 - 256 % m
        table, rejected = _OTHER_TABLES[m], bytes(range(limit, 256))
        drawn = b""
        while len(drawn) < n:
            drawn += read(n - len(drawn)).translate(table, rejected)
        select = int.from_bytes(keep.translate(_KEEP_TO_MASK), "little")
        return (int.from_bytes(drawn, "little") & select).to_bytes(n, "little")


    def counts_of(self, payload: object) -> tuple[int, ...]:
        """One report's counter increments (n, then per category) from its wire ``index``."""
        index = _check_index(payload, self.d)
        row = [0] * (self.d + 1)
        row[0] = 1
        row[1 + index] = 1
        return tuple(row)

    def variance(self, f: float, n: int) -> float:
        """Exact variance of the unbiased estimate of a category whose true share is f."""
        return _variance(self.channel, f, n)


@dataclass(frozen=True)
class UnaryEncoding:
    """Optimized unary encoding (OUE) over ``d`` categories.

    Args:
        d: the number of categories, 2..1024.
        q: probability that a category other than the true one has its bit set, exact, in
            (0, 1/2). The true category's bit is set with probability 1/2.
        tag: ``domain_tag`` of the category labels.
    """

    d: int
    q: Fraction
    tag: str

    kind = "categorical"
    p = Fraction(1, 2)

    def __post_init__(self) -> None:
        check_size(self.d)
        _check_tag(self.tag)
        if isinstance(self.q, (bool, float)) or not isinstance(self.q, (Fraction, int)):
            raise InvalidParameterError(f"q must be an exact Fraction. Got {self.q!r}.")
        q = Fraction(self.q)
        if not 0 < q < Fraction(1, 2):
            raise InvalidParameterError(
                f"q must lie strictly between 0 (infinite epsilon) and 1/2 (no information). "
                f"Got {q} instead.")
        object.__setattr__(self, "q", q)
        if type(self).perturb is UnaryEncoding.perturb:  # not for subclasses
            object.__setattr__(self, "perturb", _on_first_use(self, _oue_fast_path))

    def __reduce__(self) -> tuple[type, tuple[int, Fraction, str]]:
        # A copy or pickle is rebuilt from the fields: it never carries answers drawn ahead.
        return type(self), (self.d, self.q, self.tag)

    @classmethod
    def from_id(cls, mechanism_id: str) -> UnaryEncoding:
        """Parse ``oue:<d>:<q>:<tag>`` (canonical spelling only)."""
        prefix, d, q, tag = parse_categorical_id(mechanism_id)
        if prefix != "oue":
            raise InvalidParameterError(f"not an OUE id: {mechanism_id!r}")
        return cls(d, q, tag)

    @classmethod
    def from_epsilon(cls, epsilon: float, d: int, tag: str) -> UnaryEncoding:
        """The OUE with q = k / 2**32 for the smallest k whose exact epsilon,
        ln((2**32 - k) / k), is at most ``epsilon``."""
        target, d = epsilon_target(epsilon), check_size(d)
        den = 1 << DENOMINATOR_BITS
        k = smallest_admissible(
            1, den // 2 - 1, lambda k: not log_ratio_exceeds(Fraction(den - k, k), target))
        if k is None:
            raise InvalidParameterError(f"epsilon {epsilon} is too small for OUE.")
        return cls(d, Fraction(k, den), tag)

    @property
    def id(self) -> str:
        return f"oue:{self.d}:{fraction_text(self.q)}:{self.tag}"

    @property
    def width(self) -> int:
        """Counter slots per hour: n, then one per category."""
        return self.d + 1

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        """(P1, Q) of each category's bit: (1/2, q)."""
        return self.p, self.q

    @functools.cached_property
    def likelihood_ratio(self) -> Fraction:
        """The most one report moves the odds between true categories i and j: the report's
        bits i and j decide it, at most (p (1 - q)) / ((1 - p) q) = (1 - q) / q."""
        return (self.p * (1 - self.q)) / ((1 - self.p) * self.q)

    @functools.cached_property
    def epsilon(self) -> float:
        """ln((1 - q) / q), in nats."""
        return natural_log(self.likelihood_ratio)

    @functools.cached_property
    def hex_digits(self) -> int:
        """Length of the wire bitset: ceil(d / 4) hex digits."""
        return bitset_digits(self.d)

    @functools.cached_property
    def _coin(self) -> ByteCoin:
        return ByteCoin(self.q)

    @functools.cached_property
    def _pools(self) -> tuple[Pool[int], Pool[int]]:
        per_block = max(1, POOL_BYTES // (8 * mask_bytes(self.d)))
        return (Pool(lambda _: self.mask_block(per_block), 1),
                Pool(lambda _: os.urandom(per_block).translate(_TOP_BIT), 1))

    def perturb(self, index: int, rng: RandomBits | None = None) -> int:
        """The reported bitset (bit i = category i) for the true ``index``.

        Every bit is decided by its own uniform bytes (``ByteCoin``: 1 with probability
        exactly q); the true category's bit is then replaced by a fair coin (the top bit of
        one more uniform byte). With the system source the bitsets and fair coins are drawn
        ahead in blocks from ``os.urandom`` (``mask_block``), each serving one report only;
        the work done does not depend on ``index``.
        """
        if index.__class__ is not int or not 0 <= index < self.d:
            _check_index(index, self.d)
        if rng is None or rng is SYSTEM_BITS:
            masks, fair = self._pools
            try:
                bits = next(masks.streams[0])
            except StopIteration:
                bits = masks.refill(0)
            try:
                truth = next(fair.streams[0])
            except StopIteration:
                truth = fair.refill(0)
        else:
            d, draw = self.d, byte_source(rng)
            raw = draw(d + 1)
            bits = int(self._coin.decide(raw[:d], draw)[::-1], 2)  # mark i is bit i
            truth = raw[d] >> 7
        guard, clear, put = self._placement
        return ((bits | guard) & clear[index] | put[index][truth]) ^ guard

    @functools.cached_property
    def _placement(self) -> tuple[int, list[int], list[tuple[int, int]]]:
        """(G, clear, put) with G = 2**d: the true category's bit is replaced by
        ((bits | G) & clear[i] | put[i][truth]) ^ G, on (d + 1)-bit integers whatever i is,
        so the time taken does not depend on the true index (``1 << i`` would be a bigger
        integer for a bigger i)."""
        d = self.d
        guard, full = 1 << d, (1 << (d + 1)) - 1
        return (guard, [full & ~(1 << i) for i in range(d)],
                [(guard, guard | (1 << i)) for i in range(d)])

    def mask_block(self, n: int, read: Callable[[int], bytes] = os.urandom
                   ) -> list[int] | bytes | array.array[int]:
        """``n`` independent bitsets of d bits, each bit 1 with probability exactly q.

        Each report takes 8 w coins, w = ``mask_bytes(d)`` (``ByteCoin(q)`` on their own
        bytes; the coins past d are drawn and dropped), so one ``int(..., 2)`` over the whole
        block packs the coins into whole bytes (a fixed one-to-one map from coins to bit
        positions, so the bits are independent and each is 1 with probability q): report
        r's bitset is bytes [r w, (r + 1) w), read little-endian, its bits past d cleared.
        """
        d, width = self.d, mask_bytes(self.d)
        coins = self._coin.decide(read(n * width * 8), read)
        packed = int(coins, 2)  # coin j -> bit 8nw - 1 - j
        if width == 1:
            return packed.to_bytes(n, "little").translate(_LOW_BITS[d]) if d < 8 \
                else packed.to_bytes(n, "little")
        if width <= 8:  # one machine word per report: no Python step per report
            if d < 8 * width:
                packed &= _repeated_mask(d, width, n)
            words = array.array(_WORD_CODES[width], packed.to_bytes(n * width, "little"))
            if sys.byteorder != "little":
                words.byteswap()
            return words
        data = packed.to_bytes(n * width, "little")
        full = (1 << d) - 1
        return [int.from_bytes(data[i:i + width], "little") & full
                for i in range(0, n * width, width)]

    def encode_bits(self, bits: int) -> str:
        """The wire spelling of a bitset: lowercase hex, exactly ``hex_digits`` long."""
        return encode_bitset(bits, self.d)

    def counts_of(self, payload: object) -> tuple[int, ...]:
        """One report's counter increments (n, then per category) from its wire ``bits``."""
        return bitset_row(bitset_of(payload, self.d), self.d)

    def variance(self, f: float, n: int) -> float:
        """Exact variance of the unbiased estimate of a category whose true share is f."""
        return _variance(self.channel, f, n)


def bitset_digits(d: int) -> int:
    """Length of a ``bits`` field for d categories: ceil(d / 4) lowercase hex digits."""
    return -(-d // 4)


def encode_bitset(bits: int, d: int) -> str:
    """The wire spelling of a bitset over d categories (bit i = category i)."""
    return format(bits, f"0{bitset_digits(d)}x")


def bitset_of(payload: object, d: int) -> int:
    """The bitset a wire ``bits`` field spells: exactly ceil(d / 4) lowercase hex digits, no
    bit at or above d (OUE and subset selection share this spelling).

    Raises:
        InvalidParameterError: any other payload.
    """
    digits = bitset_digits(d)
    if type(payload) is not str or len(payload) != digits or not _HEX.match(payload):
        raise InvalidParameterError(
            f"bits must be {digits} lowercase hex digits (bit i = category i).")
    bits = int(payload, 16)
    if bits >> d:
        raise InvalidParameterError(f"bits sets a bit at or above d = {d}.")
    return bits


def bitset_row(bits: int, d: int) -> tuple[int, ...]:
    """One report's counter increments for a bitset: n = 1, then 1 for each set category."""
    row = [0] * (d + 1)
    row[0] = 1
    while bits:
        low = bits & -bits
        row[low.bit_length()] = 1
        bits ^= low
    return tuple(row)


_SS_ID = re.compile(r"^ss:([0-9]{1,4}):([0-9]{1,4}):([0-9/]{1,41}):([0-9a-f]{8})\Z")


@dataclass(frozen=True)
class SubsetSelection:
    """k-subset selection (SS; Wang et al. 2016, Ye & Barg 2018) over ``d`` categories.

    A report is a set S of exactly k of the d categories (on the wire a bitset, as OUE's),
    with P(S) proportional to r if the true category is in S and to 1 otherwise. So the true
    category is in S with probability P1 = k r / (k r + d - k), and any other one with
    probability Q = k ((k - 1) r + d - k) / ((d - 1) (k r + d - k)). epsilon = ln r exactly:
    two true categories i, j change P(S) by the factor r at most (S holds i but not j).
    Between GRR (small d) and OUE (large d), the best k ~ d / (e^eps + 1) beats both for
    middling d (e.g. d = 8 at eps 0.5 or 1).

    Args:
        d: the number of categories, 2..1024.
        k: the size of every reported subset, 1..d-1.
        r: the likelihood ratio, exact, above 1.
        tag: ``domain_tag`` of the category labels.
    """

    d: int
    k: int
    r: Fraction
    tag: str

    kind = "categorical"

    def __post_init__(self) -> None:
        check_size(self.d)
        _check_tag(self.tag)
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k < self.d:
            raise InvalidParameterError(
                f"k (the subset size) must be an int in [1, d - 1] = [1, {self.d - 1}]. "
                f"Got {self.k!r} instead.")
        if isinstance(self.r, (bool, float)) or not isinstance(self.r, (Fraction, int)):
            raise InvalidParameterError(f"r must be an exact Fraction. Got {self.r!r}.")
        r = Fraction(self.r)
        if not r > 1:
            raise InvalidParameterError(
                f"r (the likelihood ratio) must exceed 1 (no information at 1). Got {r}.")
        object.__setattr__(self, "r", r)

    @classmethod
    def from_id(cls, mechanism_id: str) -> SubsetSelection:
        """Parse ``ss:<d>:<k>:<r>:<tag>`` (canonical spelling only)."""
        match = _SS_ID.match(mechanism_id) if isinstance(mechanism_id, str) else None
        if match is None:
            raise InvalidParameterError(
                "a subset-selection id looks like 'ss:<d>:<k>:<r>:<tag>', e.g. "
                f"'ss:8:3:3/2:0a1b2c3d'. Got {str(mechanism_id)[:80]!r}.")
        d_text, k_text = match.group(1), match.group(2)
        if str(int(d_text)) != d_text or str(int(k_text)) != k_text:
            raise InvalidParameterError(f"d and k must have no leading zeros. "
                                        f"Got {mechanism_id!r}.")
        return cls(check_size(int(d_text)), int(k_text),
                   fraction_field("r", match.group(3), whole=True), match.group(4))

    @classmethod
    def from_epsilon(cls, epsilon: float, d: int, tag: str,
                     k: int | None = None) -> SubsetSelection:
        """The SS with r = m / 2**32 for the largest m whose exact ln r is at most
        ``epsilon`` (decided exactly, never on rounded floats), and the given ``k``, or else
        the k in 1..d-1 with the smallest exact variance for a rare category (f -> 0)."""
        target, d = epsilon_target(epsilon), check_size(d)
        den = 1 << DENOMINATOR_BITS

        def admissible(m: int) -> bool:
            return not log_ratio_exceeds(Fraction(m, den), target)

        high = 2 * den
        while admissible(high):  # exact doubling: no float bound on e^eps
            high *= 2
        m = largest_admissible(den + 1, high, admissible)
        if m is None:
            raise InvalidParameterError(f"epsilon {epsilon} is too small for subset selection.")
        r = Fraction(m, den)
        if k is None:
            k = min(range(1, d), key=lambda size: (_rare_variance(cls._channel(d, size, r)),
                                                   size))
        return cls(d, k, r, tag)

    @staticmethod
    def _channel(d: int, k: int, r: Fraction) -> tuple[Fraction, Fraction]:
        total = k * r + d - k
        return k * r / total, k * ((k - 1) * r + d - k) / ((d - 1) * total)

    @property
    def id(self) -> str:
        return f"ss:{self.d}:{self.k}:{fraction_text(self.r)}:{self.tag}"

    @property
    def width(self) -> int:
        """Counter slots per hour: n, then one per category."""
        return self.d + 1

    @functools.cached_property
    def channel(self) -> tuple[Fraction, Fraction]:
        """(P1, Q) of each category's bit: (k r / (k r + d - k),
        k ((k - 1) r + d - k) / ((d - 1) (k r + d - k)))."""
        return self._channel(self.d, self.k, self.r)

    @property
    def likelihood_ratio(self) -> Fraction:
        """r: the most one report moves the odds between two true categories."""
        return self.r

    @functools.cached_property
    def epsilon(self) -> float:
        """ln r, in nats."""
        return natural_log(self.r)

    @functools.cached_property
    def hex_digits(self) -> int:
        """Length of the wire bitset: ceil(d / 4) hex digits."""
        return bitset_digits(self.d)

    @functools.cached_property
    def _include_coin(self) -> ByteCoin:
        return ByteCoin(self.channel[0])

    def __reduce__(self) -> tuple[type, tuple[int, int, Fraction, str]]:
        # A copy or pickle is rebuilt from the fields: it never carries answers drawn ahead.
        return type(self), (self.d, self.k, self.r, self.tag)

    def perturb(self, index: int, rng: RandomBits | None = None) -> int:
        """The reported subset (bitset, bit i = category i) for the true ``index``.

        The true category is included with probability exactly P1 (``ByteCoin`` on fresh
        bytes); the other k - 1 (or k) members are a uniformly random set of that size from
        the d - 1 other categories. Given the coin every such set is equally likely, so P(S)
        is proportional to r or 1 as stated. With an injected ``rng`` the set is a partial
        Fisher-Yates shuffle with ``below`` (exact by rejection). With the system source it
        is drawn from blocks read ahead from ``os.urandom`` (``_pooled``), each random byte
        serving one report only.
        """
        if index.__class__ is not int or not 0 <= index < self.d:
            _check_index(index, self.d)
        if rng is None or rng is SYSTEM_BITS:
            return self._pooled(index)
        read = byte_source(rng)
        keep = self._include_coin.decide(read(1), read)[0] == _ONE
        d = self.d
        others = list(range(d - 1))  # the d - 1 others: index's place holds d - 1
        if index < d - 1:
            others[index] = d - 1
        take = self.k - 1 if keep else self.k
        bits = (1 << index) if keep else 0
        for t in range(take):
            j = t + below(rng, d - 1 - t)
            others[t], others[j] = others[j], others[t]
            bits |= 1 << others[t]
        return bits

    @functools.cached_property
    def _tables(self) -> tuple[list[int], list[int]] | None:
        """Every set of k and of k - 1 of the d - 1 other positions (bitsets over positions
        0..d-2), if there are at most ``SUBSET_TABLE_LIMIT`` of each; else None."""
        m = self.d - 1
        if max(math.comb(m, self.k), math.comb(m, self.k - 1)) > SUBSET_TABLE_LIMIT:
            return None
        return ([sum(1 << p for p in c) for c in itertools.combinations(range(m), self.k)],
                [sum(1 << p for p in c) for c in itertools.combinations(range(m), self.k - 1)])

    @functools.cached_property
    def _table_pools(self) -> tuple[Pool[int], tuple[Pool[int], Pool[int]], list[int]]:
        """(include coins as ASCII '0'/'1', uniform indices into each table, the masks of
        the positions below each category)."""
        tables, coin = self._tables, self._include_coin
        assert tables is not None
        sizes = len(tables[0]), len(tables[1])
        return (Pool(lambda _: coin.decide(os.urandom(POOL_BYTES // 8), os.urandom), 1),
                (Pool(lambda _: uniform_block(sizes[0]), 1),
                 Pool(lambda _: uniform_block(sizes[1]), 1)),
                [(1 << i) - 1 for i in range(self.d)])

    @functools.cached_property
    def _pools(self) -> tuple[Pool[int], Pool[int], Pool[bytes]]:
        """(include coins as ASCII '0'/'1', uniform 16-bit words, d-byte marks), each read
        ahead from ``os.urandom`` in blocks; a mark is 1 with probability about k / d."""
        d, coin = self.d, self._include_coin
        cut = min(255, max(1, round(256 * self.k / d)))
        table = bytes(1 if b < cut else 0 for b in range(256))
        per_block = max(64, POOL_BYTES // d)

        def marks(_: int) -> Iterator[bytes]:
            block = os.urandom(per_block * d).translate(table)
            return map(block.__getitem__, map(slice, range(0, len(block), d),
                                              range(d, len(block) + d, d)))
        return (Pool(lambda _: coin.decide(os.urandom(POOL_BYTES // 8), os.urandom), 1),
                Pool(lambda _: array.array("H", os.urandom(POOL_BYTES)), 1),
                Pool(marks, 1))

    def _pooled(self, index: int) -> int:
        """``perturb`` with the system source. With few enough sets (``_tables``): a uniform
        row (``uniform_block``) of the table of sets of the size the coin asks for, over
        positions 0..d-2, position p standing for category p below ``index`` and p + 1 from
        it on (a bijection onto the others). Otherwise exact by symmetry: the marks of the d - 1
        other categories are independent and identically distributed; while there are too
        many, a uniformly random marked one is cleared, and while too few, a uniformly random
        unmarked other one is marked (uniform positions: 16-bit words below a multiple of d,
        reduced mod d; unsuitable positions are drawn again). Each step treats the others
        alike, so the final set's law is invariant under permuting them: uniform over the
        sets of its size."""
        tables = self._tables
        if tables is not None:  # a uniform row of a table of every set, moved past index
            coins, indices, below_mask = self._table_pools
            try:
                kept = next(coins.streams[0]) == _ONE
            except StopIteration:
                kept = coins.refill(0) == _ONE
            source = indices[kept]
            try:
                row = next(source.streams[0])
            except StopIteration:
                row = source.refill(0)
            chosen, low = tables[kept][row], below_mask[index]
            return (chosen & low) | ((chosen & ~low) << 1) | (kept << index)
        coins, words, marks = self._pools
        try:
            keep = next(coins.streams[0]) == _ONE
        except StopIteration:
            keep = coins.refill(0) == _ONE
        try:
            member = bytearray(next(marks.streams[0]))
        except StopIteration:
            member = bytearray(marks.refill(0))
        member[index] = 0
        d, want = self.d, self.k - keep
        have, limit = member.count(1), 65536 - 65536 % d
        stream = words.streams[0]
        while have != want:
            try:
                w = next(stream)
            except StopIteration:
                w = words.refill(0)
                stream = words.streams[0]
            if w >= limit:
                continue
            j = w % d
            if have > want:
                if member[j]:
                    member[j] = 0
                    have -= 1
            elif not member[j] and j != index:
                member[j] = 1
                have += 1
        member[index] = keep
        return int(member.translate(_MARK_TO_ASCII)[::-1], 2)

    def encode_bits(self, bits: int) -> str:
        """The wire spelling of a subset: lowercase hex, exactly ``hex_digits`` long."""
        return encode_bitset(bits, self.d)

    def counts_of(self, payload: object) -> tuple[int, ...]:
        """One report's counter increments (n, then per category) from its wire ``bits``:
        ``hex_digits`` lowercase hex digits with exactly k of the d bits set."""
        bits = bitset_of(payload, self.d)
        if bits.bit_count() != self.k:
            raise InvalidParameterError(f"bits must set exactly k = {self.k} categories.")
        return bitset_row(bits, self.d)

    def variance(self, f: float, n: int) -> float:
        """Exact variance of the unbiased estimate of a category whose true share is f."""
        return _variance(self.channel, f, n)


SUBSET_TABLE_LIMIT = 4096
"""Subset selection keeps a table of every set when there are at most this many of each size."""


def uniform_block(size: int, read: Callable[[int], bytes] = os.urandom) -> bytes | list[int]:
    """Independent uniform integers in [0, size), exactly: bytes (size <= 256) or 16-bit words
    (size <= 65536) below the largest multiple of size, reduced mod size; the others dropped."""
    if size == 1:
        return bytes(POOL_BYTES // 8)
    if size <= 256:
        limit = 256 - 256 % size
        return read(POOL_BYTES // 8).translate(bytes(b % size for b in range(256)),
                                               bytes(range(limit, 256)))
    limit = 65536 - 65536 % size
    return [w % size for w in array.array("H", read(POOL_BYTES // 4)) if w < limit]


BITSET_MECHANISMS = (UnaryEncoding, SubsetSelection)
"""The mechanisms whose reports are bitsets (an int in memory, hex on the wire)."""


_HEX = re.compile(r"^[0-9a-f]+\Z")
_ONE, _ZERO, _UNDECIDED = ord("1"), ord("0"), ord("?")
POOL_BYTES = 1 << 16
"""Random bytes per refill of a mechanism's pool (system source only)."""
_KEEP_TO_MASK = bytes(0 if b == _ONE else 0xFF for b in range(256))
_TOP_BIT = bytes(b >> 7 for b in range(256))
_MARK_TO_ASCII = bytes(_ONE if b else _ZERO for b in range(256))
_LOW_BITS = {d: bytes(b & ((1 << d) - 1) for b in range(256)) for d in range(1, 8)}
_OTHER_TABLES = {m: bytes(1 + b % m for b in range(256)) for m in range(1, 256)}
assert array.array("H").itemsize == 2
_POOLS: weakref.WeakSet[Pool[Any]] = weakref.WeakSet()
_T = TypeVar("_T")


def mask_bytes(d: int) -> int:
    """Bytes per OUE bitset in a pooled block: 1, 2, 4 or 8 (one machine word) for
    d <= 64, else ceil(d / 8)."""
    if d <= 64:
        return next(w for w in (1, 2, 4, 8) if d <= 8 * w)
    return -(-d // 8)


_WORD_CODES = {2: "H", 4: "I", 8: "Q"}
assert all(array.array(code).itemsize == width for width, code in _WORD_CODES.items())


@functools.lru_cache(maxsize=64)
def _repeated_mask(d: int, width: int, n: int) -> int:
    """d low bits set in each of n consecutive ``width``-byte little-endian words."""
    return int.from_bytes(((1 << d) - 1).to_bytes(width, "little") * n, "little")


class Pool(Generic[_T]):
    """Random parts of reports drawn ahead from ``os.urandom``: each value serves one report.

    ``streams[i]`` yields the values of stream i (e.g. one per true value); ``refill(i)``
    draws a new block for it. Thread-safe: ``next()`` on a stream is one atomic step under
    the GIL, so no two reports share a value (a refill race only drops unused ones).
    Fork-safe: a forked child discards every pool, so parent and child never share
    randomness.
    """

    __slots__ = ("_make", "streams", "__weakref__")

    def __init__(self, make: Callable[[int], Iterable[_T]], count: int) -> None:
        self._make = make
        self.streams: list[Iterator[_T]] = [iter(()) for _ in range(count)]
        _POOLS.add(self)

    def refill(self, i: int) -> _T:
        """Draw a new block for stream i; return its first value (the caller's report)."""
        stream = iter(self._make(i))
        first = next(stream)
        self.streams[i] = stream
        return first

    def discard(self) -> None:
        """Drop every value drawn ahead (in place: fast paths hold the list)."""
        for i in range(len(self.streams)):
            self.streams[i] = iter(())


Perturb = Callable[..., int]


def _on_first_use(mechanism: CategoricalMechanism,
                  build: Callable[[Any], Perturb]) -> Perturb:
    """A ``perturb`` that builds the fast path (its pools and tables) on the first report
    and installs it in its place: a mechanism that never reports costs no memory for them.
    A caller that kept this function (``f = mechanism.perturb`` before any report) goes on
    through the one fast path it built. Two threads racing here may each build one: each
    pool's answers still serve one report each."""
    built: list[Perturb] = []

    def perturb(index: int, rng: RandomBits | None = None) -> int:
        if not built:
            built.append(build(mechanism))
            object.__setattr__(mechanism, "perturb", built[0])
        out: int = built[0](index, rng)
        return out
    perturb.__doc__ = type(mechanism).perturb.__doc__
    return perturb


def _grr_fast_path(mechanism: KaryRandomizedResponse) -> Perturb:
    """``mechanism.perturb`` with the pooled system-source branch first, in one closure (a
    report then costs one ``next()``); every other call goes to the method itself."""
    d, pool, system = mechanism.d, mechanism._pool, SYSTEM_BITS
    streams = pool.streams
    method: Perturb = functools.partial(KaryRandomizedResponse.perturb, mechanism)

    if d <= 256:
        def perturb(index: int, rng: RandomBits | None = None) -> int:
            if (rng is None or rng is system) and index.__class__ is int and 0 <= index < d:
                try:
                    return next(streams[index])
                except StopIteration:
                    return pool.refill(index)
            out: int = method(index, rng)
            return out
    else:
        def perturb(index: int, rng: RandomBits | None = None) -> int:
            if (rng is None or rng is system) and index.__class__ is int and 0 <= index < d:
                try:
                    shift = next(streams[0])
                except StopIteration:
                    shift = pool.refill(0)
                return (index + shift) % d
            out: int = method(index, rng)
            return out
    perturb.__doc__ = KaryRandomizedResponse.perturb.__doc__
    return perturb


def _oue_fast_path(mechanism: UnaryEncoding) -> Perturb:
    """``mechanism.perturb`` with the pooled system-source branch first (see
    ``_grr_fast_path``)."""
    d, system = mechanism.d, SYSTEM_BITS
    masks, fair = mechanism._pools
    guard, clear, put = mechanism._placement
    mask_streams, fair_streams = masks.streams, fair.streams
    method: Perturb = functools.partial(UnaryEncoding.perturb, mechanism)

    def perturb(index: int, rng: RandomBits | None = None) -> int:
        if (rng is None or rng is system) and index.__class__ is int and 0 <= index < d:
            try:
                bits = next(mask_streams[0])
            except StopIteration:
                bits = masks.refill(0)
            try:
                truth = next(fair_streams[0])
            except StopIteration:
                truth = fair.refill(0)
            return ((bits | guard) & clear[index] | put[index][truth]) ^ guard
        out: int = method(index, rng)
        return out
    perturb.__doc__ = UnaryEncoding.perturb.__doc__
    return perturb


def _discard_pools_after_fork() -> None:
    for pool in list(_POOLS):
        pool.discard()


os.register_at_fork(after_in_child=_discard_pools_after_fork)


def byte_source(rng: RandomBits | None) -> Callable[[int], bytes]:
    """A function n -> n uniform random bytes.

    The system source (no ``rng``, or ``SYSTEM_BITS``) reads ``os.urandom`` directly: the OS
    CSPRNG, thread- and fork-safe with no buffer to share. Another ``SecureBits`` serves its
    buffered 64-bit words; any other ``RandomBits`` (a test's, a memo's HMAC stream) serves
    one ``bits(8)`` per byte, so a test can enumerate every draw.
    """
    if rng is None or rng is SYSTEM_BITS:
        return os.urandom
    if isinstance(rng, SecureBits):
        def words(n: int) -> bytes:
            return b"".join(rng.bits(64).to_bytes(8, "little")
                            for _ in range(-(-n // 8)))[:n]
        return words
    return lambda n: bytes([rng.bits(8) for _ in range(n)])


class ByteCoin:
    """Coins that come up 1 with probability exactly ``probability``, decided from bytes.

    A coin is a uniform number U = 0.b0 b1 b2 ... in base 256 (b_j independent uniform bytes),
    compared with the probability's base-256 expansion t0 t1 t2 ...: the coin is 1 iff U < p,
    decided at the first digit where they differ. Where the expansion ends (p = k / 256**m)
    and U's digits all agree, U >= p: 0. So P(1) = p exactly, for any rational p, and more than
    one byte is drawn only when b0 = t0 (probability 1/256). For many coins at once the first
    bytes go through one ``bytes.translate`` table; the few undecided ones draw more.
    """

    __slots__ = ("_probability", "_digits", "table")

    def __init__(self, probability: Fraction) -> None:
        if not 0 <= probability < 1:
            raise InvalidParameterError(f"a coin's probability lies in [0, 1). Got {probability}.")
        self._probability = probability
        self._digits: list[tuple[int, bool]] = []
        t0, last = self.digit(0)
        undecided = _ZERO if last else _UNDECIDED
        self.table = bytes(_ONE if b < t0 else _ZERO if b > t0 else undecided
                           for b in range(256))

    def digit(self, level: int) -> tuple[int, bool]:
        """(t_level, whether the expansion ends there): t_j = floor(p 256**(j+1)) mod 256."""
        while len(self._digits) <= level:
            scaled = self._probability * 256 ** (len(self._digits) + 1)
            whole = scaled.numerator // scaled.denominator
            self._digits.append((whole % 256, whole == scaled))
        return self._digits[level]

    def decide(self, first: bytes, draw: Callable[[int], bytes]) -> bytearray:
        """One coin per byte of ``first`` (their first digits), as ASCII '0'/'1'; undecided
        coins draw their next digits from ``draw``, all at one level in one call."""
        marks = bytearray(first.translate(self.table))
        if _UNDECIDED not in marks:
            return marks
        pending, start = [], marks.find(_UNDECIDED)
        while start >= 0:
            pending.append(start)
            start = marks.find(_UNDECIDED, start + 1)
        level = 1
        while pending:
            digit, last = self.digit(level)
            still = []
            for i, b in zip(pending, draw(len(pending))):
                if b == digit and not last:
                    still.append(i)
                else:
                    marks[i] = _ONE if b < digit else _ZERO
            pending, level = still, level + 1
        return marks


def _variance(channel: tuple[Fraction, Fraction], f: float, n: int) -> float:
    p1, q = float(channel[0]), float(channel[1])
    pi = q + f * (p1 - q)
    return pi * (1 - pi) / (n * (p1 - q) ** 2)


CategoricalMechanism = KaryRandomizedResponse | UnaryEncoding | SubsetSelection


def _rare_variance(channel: tuple[Fraction, Fraction]) -> Fraction:
    """n times the exact variance of a rare category's estimate (f -> 0): Q (1 - Q) / (P1 - Q)^2."""
    p1, q = channel
    return q * (1 - q) / (p1 - q) ** 2


UNIQUE_SHARE_DEVICES = 20_000
"""The population the unique share of a memoized answer is stated for: 20,000 devices that
hold the same value (issue 26; docs/privacy.md, "Memoized answers are not identifiers")."""

MAX_UNIQUE_SHARE = 0.01
"""The most a memoized answer may single out: the expected share of ``UNIQUE_SHARE_DEVICES``
same-valued devices whose permanent answer no other of them has (1 %; the docs' ten boolean
metrics make 0.6 % of devices unique)."""


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def unique_share(mechanism: CategoricalMechanism, devices: int = UNIQUE_SHARE_DEVICES) -> float:
    """The expected share of ``devices`` devices holding the same category whose memoized
    answer under ``mechanism`` no other of them has: sum over answers y of
    P(y) (1 - P(y))**(devices - 1), in floats (a design figure, not a privacy bound).

    The answers fall in classes of equally likely ones, so the sum has a few terms: GRR, the
    true category or one of d - 1 others; SS, k-sets with or without the true category; OUE,
    the true bit and the number of other bits set. Independent of which category is held.
    """
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise InvalidParameterError(f"devices must be a positive int. Got {devices!r} instead.")
    d = mechanism.d
    classes: list[tuple[float, float]] = []  # (ln count, ln P(answer)) per class
    if isinstance(mechanism, KaryRandomizedResponse):
        classes = [(0.0, math.log(mechanism.p)), (math.log(d - 1), math.log(mechanism.q))]
    elif isinstance(mechanism, SubsetSelection):
        k, r = mechanism.k, mechanism.r
        with_true, without = _log_comb(d - 1, k - 1) + math.log(r), _log_comb(d - 1, k)
        log_z = max(with_true, without) + math.log1p(math.exp(-abs(with_true - without)))
        classes = [(_log_comb(d - 1, k - 1), math.log(r) - log_z), (without, -log_z)]
    else:
        log_q, log_not_q = math.log(mechanism.q), math.log(1 - mechanism.q)
        for w in range(d):  # w of the d - 1 other bits set; the true bit 1 or 0 (1/2 each)
            classes.append((_log_comb(d - 1, w) + math.log(2),
                            -math.log(2) + w * log_q + (d - 1 - w) * log_not_q))
    share = 0.0
    for log_count, log_p in classes:
        share += math.exp(log_count + log_p + (devices - 1) * math.log1p(-math.exp(log_p)))
    return share


def choose_categorical(epsilon: float, d: int, tag: str) -> tuple[CategoricalMechanism, str]:
    """GRR, OUE or subset selection for ``d`` categories at ``epsilon``: of those whose
    memoized answer is no identifier (``unique_share`` at most ``MAX_UNIQUE_SHARE``), the one
    with the smallest exact variance for a rare category (f -> 0, the usual case in
    telemetry), and why in plain words.

    At equal epsilon GRR's variance is (d - 2 + e^eps) / (n (e^eps - 1)^2) and OUE's is
    4 e^eps / (n (e^eps - 1)^2): GRR wins while d < 3 e^eps + 2 (Wang et al. 2017). Subset
    selection with its best k (about d / (e^eps + 1)) is never worse than either up to the
    rounding of its parameters. But a memoized bitset of many categories is a device
    identifier: at d = 64, epsilon 2, the best k (7) and OUE leave over 99 % of 20,000
    same-valued devices with an answer nobody else has. So the sets are kept small: subset
    selection with the k of smallest variance among those whose answers stay shared, which
    is GRR itself (k = 1) for large d, and OUE only where it passes too. GRR's answers, one
    category, are always shared for d <= 1024 (docs/privacy.md).
    """
    grr = KaryRandomizedResponse.from_epsilon(epsilon, d, tag)
    oue = UnaryEncoding.from_epsilon(epsilon, d, tag)
    best = SubsetSelection.from_epsilon(epsilon, d, tag)
    sets = [SubsetSelection(d, k, best.r, tag) for k in range(2, d - 1)]
    passing = [m for m in sets if unique_share(m) <= MAX_UNIQUE_SHARE]
    ss = min(passing, key=lambda m: (_rare_variance(m.channel), m.k)) if passing else None
    v_grr, v_oue = _rare_variance(grr.channel), _rare_variance(oue.channel)
    v_ss = _rare_variance(ss.channel) if ss is not None else None
    oue_ok = unique_share(oue) <= MAX_UNIQUE_SHARE
    threshold = 3 * math.exp(float(epsilon)) + 2
    held = "" if ss is None or ss.k == best.k else (
        f"; k is kept at {ss.k} (not {best.k}, the unconstrained best) so that a memoized "
        f"answer is no device identifier (docs/privacy.md)")
    if ss is not None and v_ss is not None and v_ss < v_grr and (not oue_ok or v_ss < v_oue):
        return ss, (f"subset selection of k = {ss.k} of the {d} categories: at epsilon "
                    f"{epsilon:g} its variance per report ({float(v_ss):.4g}) is below k-ary "
                    f"randomized response's ({float(v_grr):.4g})"
                    + (f" and unary encoding's ({float(v_oue):.4g})" if oue_ok else "")
                    + f"; each report names a set of {ss.k} categories, the true one among "
                    f"them more often than chance{held}")
    if v_grr <= v_oue or not oue_ok:
        why = (f"k-ary randomized response: with d = {d} categories at epsilon {epsilon:g} its "
               f"variance per report ({float(v_grr):.4g}) is below unary encoding's "
               f"({float(v_oue):.4g}); GRR wins while d < 3e^eps + 2 = {threshold:.1f}")
        if v_grr > v_oue or (v_ss is not None and v_ss < v_grr):
            why = (f"k-ary randomized response: with d = {d} categories at epsilon "
                   f"{epsilon:g} its variance per report is {float(v_grr):.4g}; unary "
                   f"encoding ({float(v_oue):.4g}) and larger subsets would be more precise, "
                   f"but their memoized answers would single a device out among those with "
                   f"the same value (docs/privacy.md), and one category never does")
        return grr, why
    return oue, (f"optimized unary encoding: with d = {d} categories at epsilon {epsilon:g} "
                 f"its variance per report ({float(v_oue):.4g}) is below k-ary randomized "
                 f"response's ({float(v_grr):.4g}); OUE wins once d >= 3e^eps + 2 = "
                 f"{threshold:.1f}")
