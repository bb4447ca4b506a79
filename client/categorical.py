"""Categorical mechanisms: k-ary randomized response and optimized unary encoding.

Both report one of ``d`` categories (a category list declared with the metric; its digest,
the *tag*, is part of the id, so a changed list is a new metric version). Each is defined
here once, beside its exact epsilon, its ``from_epsilon`` and the per-category channel
(P1, Q) the analysis debiases with:

- ``KaryRandomizedResponse`` (GRR, "direct encoding"), ``grr:<d>:<p>:<tag>``: the true
  category with probability p, otherwise one of the other d - 1 uniformly. epsilon =
  ln(p (d - 1) / (1 - p)). For d = 2, p = 3/4 it is the two-coin scheme.
- ``UnaryEncoding`` (OUE, Wang et al., USENIX Security 2017), ``oue:<d>:<q>:<tag>``: one bit
  per category; the true category's bit is 1 with probability 1/2, every other bit is 1 with
  probability q (about 1 / (e^epsilon + 1)). epsilon = ln((1 - q) / q).

Counters: per hour, slot 0 counts reports and slot 1 + i counts how often category i was
reported (GRR) or had its bit set (OUE). For either, the expected count of slot i is
n (Q + f_i (P1 - Q)), with (P1, Q) = ``channel``: so f_i = (c_i / n - Q) / (P1 - Q), exactly
as a boolean metric's share, and the variance is pi (1 - pi) / (n (P1 - Q)^2).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import (epsilon_target, fraction_field, fraction_text,
                                       largest_admissible, log_ratio_exceeds, natural_log,
                                       smallest_admissible, below)
from deniable.client.randomness import RandomBits

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

    def perturb(self, index: int, rng: RandomBits | None = None) -> int:
        """The reported category index for the true ``index``; integer draws only."""
        _check_index(index, self.d)
        keep = below(rng, self.p.denominator) < self.p.numerator
        other = below(rng, self.d - 1)
        other += other >= index  # uniform over the d - 1 other categories
        return index if keep else other

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
        return -(-self.d // 4)

    def perturb(self, index: int, rng: RandomBits | None = None) -> int:
        """The reported bitset (bit i = category i) for the true ``index``."""
        _check_index(index, self.d)
        num, den = self.q.numerator, self.q.denominator
        bits = 0
        for i in range(self.d):
            bits |= (below(rng, den) < num) << i
        truth = below(rng, 2)
        return (bits & ~(1 << index)) | (truth << index)

    def encode_bits(self, bits: int) -> str:
        """The wire spelling of a bitset: lowercase hex, exactly ``hex_digits`` long."""
        return format(bits, f"0{self.hex_digits}x")

    def counts_of(self, payload: object) -> tuple[int, ...]:
        """One report's counter increments (n, then per category) from its wire ``bits``."""
        if type(payload) is not str or len(payload) != self.hex_digits or not _HEX.match(payload):
            raise InvalidParameterError(
                f"bits must be {self.hex_digits} lowercase hex digits (bit i = category i).")
        bits = int(payload, 16)
        if bits >> self.d:
            raise InvalidParameterError(f"bits sets a bit at or above d = {self.d}.")
        row = [0] * (self.d + 1)
        row[0] = 1
        while bits:
            low = bits & -bits
            row[low.bit_length()] = 1
            bits ^= low
        return tuple(row)

    def variance(self, f: float, n: int) -> float:
        """Exact variance of the unbiased estimate of a category whose true share is f."""
        return _variance(self.channel, f, n)


_HEX = re.compile(r"^[0-9a-f]+\Z")


def _variance(channel: tuple[Fraction, Fraction], f: float, n: int) -> float:
    p1, q = float(channel[0]), float(channel[1])
    pi = q + f * (p1 - q)
    return pi * (1 - pi) / (n * (p1 - q) ** 2)


CategoricalMechanism = KaryRandomizedResponse | UnaryEncoding


def choose_categorical(epsilon: float, d: int, tag: str) -> tuple[CategoricalMechanism, str]:
    """GRR or OUE for ``d`` categories at ``epsilon``, whichever has the smaller exact variance
    for a rare category (f -> 0, the usual case in telemetry), and why in plain words.

    At equal epsilon GRR's variance is (d - 2 + e^eps) / (n (e^eps - 1)^2) and OUE's is
    4 e^eps / (n (e^eps - 1)^2): GRR wins while d < 3 e^eps + 2 (Wang et al. 2017).
    """
    grr = KaryRandomizedResponse.from_epsilon(epsilon, d, tag)
    oue = UnaryEncoding.from_epsilon(epsilon, d, tag)
    v_grr, v_oue = grr.variance(0.0, 1), oue.variance(0.0, 1)
    if v_grr <= v_oue:
        return grr, (f"k-ary randomized response: with d = {d} categories at epsilon "
                     f"{epsilon:g} its variance per report ({v_grr:.4g}) is below unary "
                     f"encoding's ({v_oue:.4g}); GRR wins while d < 3e^eps + 2 = "
                     f"{3 * math.exp(float(epsilon)) + 2:.1f}")
    return oue, (f"optimized unary encoding: with d = {d} categories at epsilon {epsilon:g} "
                 f"its variance per report ({v_oue:.4g}) is below k-ary randomized "
                 f"response's ({v_grr:.4g}); OUE wins once d >= 3e^eps + 2 = "
                 f"{3 * math.exp(float(epsilon)) + 2:.1f}")
