"""The numeric mechanism: 1BitMean (Ding, Kulkarni, Yekhanin, NeurIPS 2017), defined once.

A value x in the metric's declared range [lower, upper] is reported as one bit with

    P(1 | x) = a + (1 - 2a) s,   s = (x - lower) / (upper - lower),

decided exactly: s is the exact rational of x (a float at its exact binary value) and the
bit is one integer draw below the probability's denominator, never a float compared with a
random float. epsilon = ln((1 - a) / a): the two ends of the range are the most different.
The id is ``bm:<a>:<lower>:<upper>``.

As a channel on s it is randomized response with (P1, Q) = (1 - a, a): the mean of s is
(ones / n - a) / (1 - 2a), and the population mean is lower + (upper - lower) times that.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from fractions import Fraction

from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import (below, epsilon_target, fraction_field, fraction_text,
                                       log_ratio_exceeds, smallest_admissible)
from deniable.client.mechanism import natural_log
from deniable.client.randomness import RandomBits

DENOMINATOR_BITS = 32
_ID = re.compile(r"^bm:([0-9/]{1,41}):(-?[0-9/]{1,42}):(-?[0-9/]{1,42})\Z")


def exact_number(name: str, value: object, *, secret: bool = False) -> Fraction:
    """A finite real number as an exact Fraction (a float at its exact binary value).

    Args:
        secret: ``value`` is a user's true value: the error names its type, never the value.

    Raises:
        InvalidParameterError: a bool, NaN, an infinity, or not a real number.
    """
    shown = f"a {type(value).__name__}" if secret else f"{value!r} ({type(value).__name__})"
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise InvalidParameterError(
            f"{name} must be a number (int, float or Fraction). Got {shown} instead.")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameterError(f"{name} must be a finite number. Got {shown} instead.")
    return Fraction(value)


@dataclass(frozen=True)
class BitMean:
    """1BitMean over [lower, upper].

    Args:
        a: P(1) at ``lower`` (and P(0) at ``upper``), exact, in (0, 1/2).
        lower, upper: the declared range, exact, lower < upper.
    """

    a: Fraction
    lower: Fraction
    upper: Fraction

    kind = "numeric"
    width = 2

    def __post_init__(self) -> None:
        for name in ("a", "lower", "upper"):
            value = getattr(self, name)
            if isinstance(value, (bool, float)) or not isinstance(value, (Fraction, int)):
                raise InvalidParameterError(f"{name} must be exact (a Fraction or an int). "
                                            f"Got {value!r} instead.")
            object.__setattr__(self, name, Fraction(value))
        if not 0 < self.a < Fraction(1, 2):
            raise InvalidParameterError(
                f"a must lie strictly between 0 (infinite epsilon) and 1/2 (no information). "
                f"Got {self.a} instead.")
        if not self.lower < self.upper:
            raise InvalidParameterError(
                f"lower must be below upper. Got [{self.lower}, {self.upper}] instead.")

    @classmethod
    def from_id(cls, mechanism_id: str) -> BitMean:
        """Parse ``bm:<a>:<lower>:<upper>`` (canonical spelling only)."""
        match = _ID.match(mechanism_id) if isinstance(mechanism_id, str) else None
        if match is None:
            raise InvalidParameterError(
                "a numeric mechanism id looks like 'bm:<a>:<lower>:<upper>', e.g. "
                f"'bm:1/4:0:10000'. Got {str(mechanism_id)[:80]!r} instead.")
        return cls(fraction_field("a", match.group(1)),
                   fraction_field("lower", match.group(2), signed=True, whole=True),
                   fraction_field("upper", match.group(3), signed=True, whole=True))

    @classmethod
    def from_epsilon(cls, epsilon: float, lower: object, upper: object) -> BitMean:
        """The 1BitMean with a = k / 2**32 for the smallest k whose exact epsilon,
        ln((2**32 - k) / k), is at most ``epsilon``."""
        target = epsilon_target(epsilon)
        den = 1 << DENOMINATOR_BITS
        k = smallest_admissible(
            1, den // 2 - 1, lambda k: not log_ratio_exceeds(Fraction(den - k, k), target))
        if k is None:
            raise InvalidParameterError(f"epsilon {epsilon} is too small for 1BitMean.")
        return cls(Fraction(k, den), exact_number("lower", lower), exact_number("upper", upper))

    @property
    def id(self) -> str:
        return f"bm:{fraction_text(self.a)}:{fraction_text(self.lower)}:" \
               f"{fraction_text(self.upper)}"

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        """(P1, Q) on the scaled value s: (1 - a, a)."""
        return 1 - self.a, self.a

    @functools.cached_property
    def likelihood_ratio(self) -> Fraction:
        """(1 - a) / a: the odds between the range's two ends."""
        return (1 - self.a) / self.a

    @functools.cached_property
    def epsilon(self) -> float:
        """ln((1 - a) / a), in nats."""
        return natural_log(self.likelihood_ratio)

    def scaled(self, value: Fraction) -> Fraction:
        """s = (value - lower) / (upper - lower), exact; ``value`` must lie in the range."""
        if not self.lower <= value <= self.upper:
            raise InvalidParameterError(
                f"the value must lie in [{self.lower}, {self.upper}]. Got {value} instead.")
        return (value - self.lower) / (self.upper - self.lower)

    def p_one(self, value: Fraction) -> Fraction:
        """P(report 1 | value), exact."""
        return self.a + (1 - 2 * self.a) * self.scaled(value)

    @functools.cached_property
    def _terms(self) -> tuple[int, int, int, int, int, int, int, int]:
        span = self.upper - self.lower
        return (self.lower.numerator, self.lower.denominator, self.upper.numerator,
                self.upper.denominator, span.numerator, span.denominator,
                self.a.numerator, self.a.denominator)

    def perturb(self, value: Fraction, rng: RandomBits | None = None) -> int:
        """The reported bit for the exact ``value`` in [lower, upper]: one integer draw.

        P(1) = ``p_one(value)`` exactly, computed in integers as num / den without reducing
        the fraction (``below(den) < num`` has probability num / den either way).
        """
        raw: object = value
        if type(raw) is int:  # the common case, without building a Fraction
            xn, xd = raw, 1
        else:
            exact = exact_number("value", value)
            xn, xd = exact.numerator, exact.denominator
        ln, ld, un, ud, sn, sd, an, ad = self._terms
        offset = xn * ld - ln * xd  # (x - lower) xd ld, and xd, ld > 0
        if offset < 0 or xn * ud > un * xd:
            self.scaled(Fraction(xn, xd))  # raises, with the usual message
        # p = a + (1 - 2a) s,  s = offset sd / (xd ld sn)
        scale = xd * ld * sn
        num = an * scale + (ad - 2 * an) * offset * sd
        return int(below(rng, ad * scale) < num)

    def counts_of(self, payload: object) -> tuple[int, int]:
        """One report's counter increments (n, ones) from its wire ``bit``."""
        if type(payload) is not int or payload not in (0, 1):
            raise InvalidParameterError("bit must be the integer 0 or 1")
        return 1, payload

    def mean(self, ones: int, n: int) -> float:
        """The unbiased estimate of the population mean behind ``ones`` ones in ``n``."""
        share = (Fraction(ones, n) - self.a) / (1 - 2 * self.a)
        return float(self.lower + (self.upper - self.lower) * share)

    def variance_of_mean(self, mean: float, n: int) -> float:
        """Variance of the mean's estimate over ``n`` reports whose values average ``mean``.

        Exact when every value equals ``mean``, and an upper bound otherwise: report j is
        Bernoulli(pi_j) and sum pi_j (1 - pi_j) <= n pi (1 - pi) for the average pi, so
        spread-out values only lower it. (upper - lower)^2 pi (1 - pi) / (n (1 - 2a)^2).
        """
        span = float(self.upper - self.lower)
        s = (mean - float(self.lower)) / span
        a = float(self.a)
        pi = a + (1 - 2 * a) * s
        return span * span * pi * (1 - pi) / (n * (1 - 2 * a) ** 2)
