"""Randomized response: THE mechanism, its privacy loss and its estimator, defined once.

Client, collector and analysis all use this module. A mechanism is forced-response randomized
response with exact rational parameters: flip the *truth* coin; with probability ``truth``
report the true bit, otherwise report 1 with probability ``forced_yes``. The default
(1/2, 1/2) is the two-coin scheme: P(1 | 1) = 3/4, P(1 | 0) = 1/4, epsilon = ln 3, and the
debiased share is p = 2 * ones / n - 1/2.
"""
from __future__ import annotations

import decimal
import functools
import math
import numbers
import re
from dataclasses import dataclass, field
from fractions import Fraction
from statistics import NormalDist
from typing import Any, Union

from deniable.client.errors import InvalidParameterError
from deniable.client.randomness import SYSTEM_BITS, RandomBits, SecureBits

Probability = Union[Fraction, str]
"""An exact probability: a ``Fraction`` or a string such as ``"1/2"``. Floats are refused."""

ID_PREFIX = "rr"
MAX_ID_DENOMINATOR = 1 << 64
"""Largest denominator (and so numerator) a mechanism id may hold: every coin is then one
draw of at most 64 bits (``SecureBits.below``), and an id is at most 47 characters."""
_ID_PATTERN = re.compile(r"^rr:([0-9]{1,20}/[0-9]{1,20}):([0-9]{1,20}/[0-9]{1,20})\Z")
_MAX_TABLE_BITS = 12  # precompute the output for every draw when the coins need <= 12 bits


def _exact(name: str, value: Probability) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (Fraction, str, int)):
        raise InvalidParameterError(
            f"{name} must be an exact probability, a Fraction or a string such as '1/2'. "
            f"Got {value!r} ({type(value).__name__}) instead.")
    try:
        return Fraction(value)
    except (ValueError, ZeroDivisionError) as exc:
        raise InvalidParameterError(
            f"{name} must be a fraction such as '1/2'. Got {value!r} instead.") from exc


_FRACTION_TEXT = re.compile(r"^(-?)([0-9]{1,20})(?:/([0-9]{1,20}))?\Z")


def fraction_field(name: str, text: str, *, signed: bool = False,
                   whole: bool = False) -> Fraction:
    """One exact number of a mechanism id, ``num/den`` (or ``num`` where ``whole`` allows it),
    in lowest terms with a denominator of at most ``MAX_ID_DENOMINATOR``; negative only if
    ``signed``. Every id parser reads its numbers here, so all refuse the same spellings.

    Raises:
        InvalidParameterError: any other spelling.
    """
    match = _FRACTION_TEXT.match(text) if isinstance(text, str) else None
    if match is None or (match.group(1) and not signed) or (
            match.group(3) is None and not whole):
        raise InvalidParameterError(
            f"{name} in a mechanism id must be {'a number or ' if whole else ''}a fraction "
            f"such as '1/2'{', maybe negative' if signed else ''}. Got {str(text)[:60]!r}.")
    den = int(match.group(3) or 1)
    if den == 0 or den > MAX_ID_DENOMINATOR or int(match.group(2)) > MAX_ID_DENOMINATOR:
        raise InvalidParameterError(
            f"{name} in a mechanism id must have a denominator in [1, 2**64]. Got {text!r}.")
    value = Fraction(int(match.group(1) + match.group(2)), den)
    if fraction_text(value) != text:
        raise InvalidParameterError(
            f"{name} in a mechanism id must be in lowest terms: {fraction_text(value)!r}. "
            f"Got {text!r} instead.")
    return value


def fraction_text(value: Fraction) -> str:
    """The canonical spelling of an exact number in a mechanism id: ``n`` or ``n/m``."""
    return str(value.numerator) if value.denominator == 1 else \
        f"{value.numerator}/{value.denominator}"


def largest_admissible(low: int, high: int, admissible: Any) -> int | None:
    """The largest k in [low, high] with ``admissible(k)`` (monotone: true up to some k, then
    false); None if none. Binary search, so exact epsilon checks stay few."""
    if not admissible(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if admissible(middle):
            low = middle
        else:
            high = middle - 1
    return low


def smallest_admissible(low: int, high: int, admissible: Any) -> int | None:
    """The smallest k in [low, high] with ``admissible(k)`` (monotone: false, then true from
    some k on); None if none."""
    if not admissible(high):
        return None
    while low < high:
        middle = (low + high) // 2
        if admissible(middle):
            high = middle
        else:
            low = middle + 1
    return low


def epsilon_target(epsilon: object) -> Fraction:
    """``epsilon`` as an exact positive rational (a float at its exact binary value).

    Raises:
        InvalidParameterError: not a finite real number above 0.
    """
    target = _exact_real("epsilon", epsilon)
    if target is None or target <= 0:
        raise InvalidParameterError(
            f"epsilon must be a finite number above 0. Got {epsilon!r} instead.")
    return target


def natural_log(ratio: Fraction) -> float:
    """ln of an exact ratio >= 1, keeping relative precision near 1 (log1p below 2)."""
    return math.log(ratio) if ratio >= 2 else math.log1p(ratio - 1)


def below(source: RandomBits | None, bound: int) -> int:
    """A uniform integer in [0, bound) from ``source`` (the secure system source by default),
    exact for any bound >= 1, however large: rejection sampling on whole draws."""
    chosen = SYSTEM_BITS if source is None else source
    if bound <= 1 << 64:
        if isinstance(chosen, SecureBits):
            return chosen.below(bound)
        drawn: int = _below_from(chosen)(bound)
        return drawn
    k = (bound - 1).bit_length()
    while True:
        value, got = 0, 0
        while got < k:
            take = min(64, k - got)
            value = (value << take) | chosen.bits(take)
            got += take
        if value < bound:
            return value


def _power_of_two_bits(den: int) -> int | None:
    return den.bit_length() - 1 if den & (den - 1) == 0 else None


def z_score(confidence: float) -> float:
    """The two-sided standard-normal quantile for a confidence level in (0, 1)."""
    if not 0 < confidence < 1:
        raise InvalidParameterError(f"confidence must lie in (0, 1). Got {confidence} instead.")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


@dataclass(frozen=True)
class Estimate:
    """The debiased share of true "yes" answers behind ``ones`` perturbed ones out of ``n``.

    ``value`` and the interval are clipped to [0, 1]; ``unclipped`` keeps the raw unbiased
    estimate, and ``clipped`` says whether clipping changed it. ``interval_clipped`` says
    whether clipping changed either end of the interval (a separate flag: the point may be
    inside [0, 1] while a bound is not). ``wide`` flags an interval spanning half of [0, 1]
    or more: too few reports for the estimate to mean much.
    """

    n: int
    ones: int
    yes_rate: float
    value: float
    unclipped: float
    stderr: float
    ci_low: float
    ci_high: float
    confidence: float
    clipped: bool
    wide: bool
    interval_clipped: bool = False


@dataclass(frozen=True)
class RandomizedResponse:
    """Forced-response randomized response with exact probabilities.

    Args:
        truth: probability of reporting the true bit, strictly between 0 and 1.
        forced_yes: probability of a forced 1 when the truth is not reported, strictly
            between 0 and 1.

    Raises:
        InvalidParameterError: a parameter that is not exact, or that gives infinite epsilon
            (truth = 1, forced_yes in {0, 1}) or no information (truth = 0).
    """

    truth: Fraction = Fraction(1, 2)
    forced_yes: Fraction = Fraction(1, 2)
    kind = "boolean"
    width = 2
    """Counter slots per hour: ``n`` reports and ``ones`` perturbed ones."""
    _tables: tuple[tuple[int, ...], tuple[int, ...]] | None = field(
        default=None, init=False, repr=False, compare=False)
    _table_bits: int = field(default=0, init=False, repr=False, compare=False)
    _epsilon: float = field(default=0.0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        truth = _exact("truth", self.truth)
        forced_yes = _exact("forced_yes", self.forced_yes)
        if not 0 < truth < 1:
            raise InvalidParameterError(
                "truth must lie strictly between 0 and 1: 0 carries no information and 1 "
                f"gives infinite epsilon. Got {truth} instead.")
        if not 0 < forced_yes < 1:
            raise InvalidParameterError(
                "forced_yes must lie strictly between 0 and 1, else epsilon is infinite. "
                f"Got {forced_yes} instead.")
        object.__setattr__(self, "truth", truth)
        object.__setattr__(self, "forced_yes", forced_yes)
        ratio = self.likelihood_ratio
        object.__setattr__(self, "_epsilon",
                           math.log(ratio) if ratio >= 2 else math.log1p(ratio - 1))
        self._build_tables()

    # -- construction --------------------------------------------------------------------

    @classmethod
    def from_id(cls, mechanism_id: str) -> RandomizedResponse:
        """Parse a canonical id such as ``"rr:1/2:1/2"``. Non-canonical spellings are refused.

        Collector (registry, admin API) and client (catalogue) both parse ids here, so both
        refuse the same ids.

        Raises:
            InvalidParameterError: not ``rr:<a/b>:<c/d>`` in lowest terms, or a denominator
                above ``MAX_ID_DENOMINATOR`` (2**64).
        """
        match = _ID_PATTERN.match(mechanism_id) if isinstance(mechanism_id, str) else None
        if match is None:
            raise InvalidParameterError(
                f"mechanism id must look like 'rr:<truth>:<forced_yes>', e.g. 'rr:1/2:1/2', "
                f"with at most 20 digits per number. Got {mechanism_id[:80]!r} instead."
                if isinstance(mechanism_id, str) else
                f"mechanism id must be a string such as 'rr:1/2:1/2'. Got {mechanism_id!r} "
                "instead.")
        for name, text in (("truth", match.group(1)), ("forced_yes", match.group(2))):
            if int(text.partition("/")[2]) > MAX_ID_DENOMINATOR:
                raise InvalidParameterError(
                    f"{name} in a mechanism id must have a denominator of at most 2**64. "
                    f"Got {text} instead.")
        mechanism = cls(_exact("truth", match.group(1)), _exact("forced_yes", match.group(2)))
        if mechanism.id != mechanism_id:
            raise InvalidParameterError(
                f"mechanism id must be in lowest terms: {mechanism.id!r}. "
                f"Got {mechanism_id!r} instead.")
        return mechanism

    @classmethod
    def from_epsilon(cls, epsilon: float, denominator_bits: int = 16) -> RandomizedResponse:
        """Symmetric Warner randomized response whose exact epsilon never exceeds ``epsilon``.

        Keeps the true bit with probability (1 + t) / 2 and flips it otherwise, with
        t = k / 2**denominator_bits for the largest k whose exact epsilon,
        ln((2**b + k) / (2**b - k)), is at most the real number ``epsilon`` stands for (a
        float is taken at its exact binary value). The comparison is exact: it is decided in
        decimal arithmetic with a proven error bound, refined until the bound settles it
        (``log_ratio_exceeds``), never by comparing two rounded floats.

        Args:
            epsilon: the target, in nats: a finite real number above 0 (int, float or
                Fraction; not a bool).
            denominator_bits: b, the bits of the truth coin's denominator, in [1, 62].

        Raises:
            InvalidParameterError: ``epsilon`` is not a finite real number above 0, or so small
                that even k = 1 exceeds it; or ``denominator_bits`` is not an int in [1, 62].
        """
        target = _exact_real("epsilon", epsilon)
        if target is None or target <= 0:
            raise InvalidParameterError(
                f"epsilon must be a finite number above 0. Got {epsilon!r} instead.")
        if isinstance(denominator_bits, bool) or not isinstance(denominator_bits, int) \
                or not 1 <= denominator_bits <= 62:
            raise InvalidParameterError(
                f"denominator_bits must be an integer in [1, 62]. "
                f"Got {denominator_bits!r} instead.")
        den = 1 << denominator_bits

        def admissible(k: int) -> bool:  # exact: ln((den + k) / (den - k)) <= target
            return not log_ratio_exceeds(Fraction(den + k, den - k), target)

        # A float guess of the largest k, then exact steps to it (the guess is off by a few
        # units at most; the loops make it right whatever the guess).
        guess = den if target > 64 else math.floor(math.tanh(float(target) / 2) * den)
        num = min(den - 1, max(0, guess))
        while num < den - 1 and admissible(num + 1):
            num += 1
        while num > 0 and not admissible(num):
            num -= 1
        if num <= 0:
            raise InvalidParameterError(
                f"epsilon {epsilon} is too small for a truth coin with denominator 2**"
                f"{denominator_bits}: raise denominator_bits or epsilon.")
        return cls(Fraction(num, den), Fraction(1, 2))

    # -- the mechanism's probabilities and privacy loss ----------------------------------

    @property
    def id(self) -> str:
        """The canonical id that travels with every report, e.g. ``"rr:1/2:1/2"``."""
        return f"{ID_PREFIX}:{self.truth.numerator}/{self.truth.denominator}:" \
               f"{self.forced_yes.numerator}/{self.forced_yes.denominator}"

    @functools.cached_property
    def p_yes_given_yes(self) -> Fraction:
        """P1 = P(report 1 | true 1), exact."""
        return self.truth + (1 - self.truth) * self.forced_yes

    @functools.cached_property
    def p_yes_given_no(self) -> Fraction:
        """Q = P(report 1 | true 0), exact."""
        return (1 - self.truth) * self.forced_yes

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        """(P1, Q): the ``ones`` slot counts with P1 for a true 1 and Q for a true 0."""
        return self.p_yes_given_yes, self.p_yes_given_no

    def counts_of(self, payload: object) -> tuple[int, int]:
        """One report's counter increments (n, ones) from its wire ``bit``."""
        if type(payload) is not int or payload not in (0, 1):
            raise InvalidParameterError("bit must be the integer 0 or 1")
        return 1, payload

    @functools.cached_property
    def likelihood_ratio(self) -> Fraction:
        """max(P1 / Q, (1 - Q) / (1 - P1)), exact: the worst-case odds one report moves."""
        p, q = self.p_yes_given_yes, self.p_yes_given_no
        return max(p / q, (1 - q) / (1 - p))

    @property
    def epsilon(self) -> float:
        """The local-DP epsilon of one report, ln(likelihood_ratio), in nats, computed once at
        construction.

        Within a few units in the last place of the exact value: below a ratio of 2 it is
        ``log1p`` of the exact ratio minus 1, so a tiny epsilon keeps its relative precision
        (``log`` of the rounded ratio would lose it: 3e-12 relative at ratio 1 + 2**-15).
        """
        return self._epsilon

    # -- sampling ------------------------------------------------------------------------

    def perturb(self, true_bit: bool | int, rng: RandomBits | None = None) -> int:
        """Return the reported bit, 0 or 1. ``true_bit`` never leaves this function.

        Draws only integers from ``rng`` (the secure system source by default), so every
        outcome has exactly the probability the mechanism states.
        """
        source = SYSTEM_BITS if rng is None else rng
        tables = self._tables
        if tables is not None:
            # Indexed by the value, never branched on: the same time for either value.
            return tables[bool(true_bit)][source.bits(self._table_bits)]
        below = source.below if isinstance(source, SecureBits) else _below_from(source)
        if below(self.truth.denominator) < self.truth.numerator:
            return int(bool(true_bit))
        return 1 if below(self.forced_yes.denominator) < self.forced_yes.numerator else 0

    def _build_tables(self) -> None:
        # With power-of-two denominators one draw of kt + ky bits decides both coins; the
        # output for every draw is precomputed, exactly as the coins would decide it.
        kt = _power_of_two_bits(self.truth.denominator)
        ky = _power_of_two_bits(self.forced_yes.denominator)
        if kt is None or ky is None or kt + ky > _MAX_TABLE_BITS:
            return
        tables = tuple(
            tuple(
                true_bit if (draw & ((1 << kt) - 1)) < self.truth.numerator
                else int((draw >> kt) < self.forced_yes.numerator)
                for draw in range(1 << (kt + ky)))
            for true_bit in (0, 1))
        object.__setattr__(self, "_tables", tables)
        object.__setattr__(self, "_table_bits", kt + ky)

    # -- estimation ----------------------------------------------------------------------

    def debias(self, yes_rate: Fraction | float) -> Fraction | float:
        """Map an observed yes-rate to the unbiased true share: (rate - Q) / (P1 - Q).

        Exact for a Fraction; for the default this is 2 * rate - 1/2.
        """
        q = self.p_yes_given_no
        return (yes_rate - q) / (self.p_yes_given_yes - q)

    def estimate(self, ones: int, n: int, confidence: float = 0.95) -> Estimate:
        """Debias ``ones`` perturbed ones out of ``n`` reports, with a confidence interval.

        The interval is Wilson's score interval on the perturbed yes-rate, mapped through the
        debiasing line and clipped to [0, 1]: it keeps its coverage at small n and near 0 or 1.
        The standard error is the plug-in sqrt(r (1 - r) / n) / (P1 - Q).
        """
        if isinstance(ones, bool) or isinstance(n, bool) or not (
                isinstance(ones, int) and isinstance(n, int)):
            raise InvalidParameterError(f"ones and n must be integers. Got {ones!r}, {n!r}.")
        if n < 0 or not 0 <= ones <= n:
            raise InvalidParameterError(f"need 0 <= ones <= n. Got ones={ones}, n={n} instead.")
        if n == 0:
            nan = math.nan
            return Estimate(0, 0, nan, nan, nan, nan, 0.0, 1.0, confidence, False, True)
        z = z_score(confidence)
        rate = Fraction(ones, n)
        unclipped = float(self.debias(rate))
        r = float(rate)
        spread = float(self.p_yes_given_yes - self.p_yes_given_no)
        low, high = wilson_interval(r, n, z)
        raw_low, raw_high = float(self.debias(low)), float(self.debias(high))
        ci_low, ci_high = _clip01(raw_low), _clip01(raw_high)
        value = _clip01(unclipped)
        return Estimate(
            n=n, ones=ones, yes_rate=r, value=value, unclipped=unclipped,
            stderr=math.sqrt(r * (1 - r) / n) / spread,
            ci_low=ci_low, ci_high=ci_high, confidence=confidence,
            clipped=value != unclipped, wide=ci_high - ci_low >= 0.5,
            interval_clipped=(ci_low, ci_high) != (raw_low, raw_high))

    def margin_of_error(self, n: int, confidence: float = 0.95) -> float:
        """The worst-case (yes-rate 1/2) half-width of the interval on the true share."""
        if n < 1:
            raise InvalidParameterError(f"n must be at least 1. Got {n} instead.")
        spread = float(self.p_yes_given_yes - self.p_yes_given_no)
        return z_score(confidence) * 0.5 / (math.sqrt(n) * spread)

    def reports_for_margin(self, margin: float, confidence: float = 0.95) -> int:
        """The fewest reports whose worst-case margin of error is at most ``margin``."""
        if not 0 < margin < 1:
            raise InvalidParameterError(f"margin must lie in (0, 1). Got {margin} instead.")
        spread = float(self.p_yes_given_yes - self.p_yes_given_no)
        n = math.ceil((z_score(confidence) * 0.5 / (margin * spread)) ** 2)
        while n > 1 and self.margin_of_error(n - 1, confidence) <= margin:
            n -= 1
        while self.margin_of_error(n, confidence) > margin:
            n += 1
        return n


def wilson_interval(rate: Any, n: Any, z: float) -> tuple[Any, Any]:
    """Wilson's score interval for a binomial proportion ``rate`` observed over ``n`` trials.

    Works element-wise on floats and on numpy arrays alike (the analysis package passes
    arrays of buckets). The bounds lie in [0, 1] up to rounding; callers clip.
    """
    z2 = z * z
    denom = 1 + z2 / n
    centre = (rate + z2 / (2 * n)) / denom
    half = z / denom * (rate * (1 - rate) / n + z2 / (4 * n * n)) ** 0.5
    return centre - half, centre + half


def _clip01(x: float) -> float:
    return min(1.0, max(0.0, x))


def _exact_real(name: str, value: object) -> Fraction | None:
    """``value`` as an exact rational (a float at its exact binary value); None if it is not
    finite. Raises InvalidParameterError for a bool or anything that is not a real number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameterError(
            f"{name} must be a real number (int, float or Fraction). "
            f"Got {value!r} ({type(value).__name__}) instead.")
    if isinstance(value, numbers.Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    as_float = float(value)
    return Fraction(as_float) if math.isfinite(as_float) else None


ROUNDING_SLACK = Fraction(1, 2**40)
"""Relative allowance over a float epsilon limit (a budget, a cap, the ceiling) for the
rounding of that float itself."""

_MAX_DIGITS = 10_000


def log_ratio_exceeds(ratio: Fraction, epsilon: Fraction) -> bool:
    """Whether ln(ratio) > epsilon, decided exactly for rationals ratio > 0 and epsilon.

    ln of a rational other than 1 is irrational, so the two are never equal unless
    ratio = 1 and epsilon = 0 (then False). The difference d = ln(ratio) - epsilon is
    computed in decimal at ``p`` significant digits: four correctly rounded operations (two
    divisions, ``ln``, the subtraction), each off by at most half a unit in the last place,
    i.e. a relative u/2 with u = 10**(1 - p). The first division's relative error e moves ln
    by |ln(1 + e)| <= 2|e|, so |d_computed - d| <= u * (1 + |ln ratio| + |epsilon| + |d|),
    with the computed values (a relative u on each is absorbed by the factor 2 this bound
    keeps over the half units). When |d_computed| exceeds that bound its sign is d's;
    otherwise the digits double.
    """
    if ratio <= 0:
        raise InvalidParameterError(f"ratio must be above 0. Got {ratio} instead.")
    if ratio == 1 and epsilon == 0:
        return False
    digits = 40
    while digits <= _MAX_DIGITS:
        with decimal.localcontext() as ctx:
            ctx.prec = digits
            ctx.Emax, ctx.Emin = decimal.MAX_EMAX, decimal.MIN_EMIN
            ctx.traps[decimal.Inexact] = ctx.traps[decimal.Rounded] = False
            log_ratio = (decimal.Decimal(ratio.numerator)
                         / decimal.Decimal(ratio.denominator)).ln()
            eps = decimal.Decimal(epsilon.numerator) / decimal.Decimal(epsilon.denominator)
            diff = log_ratio - eps
            unit = decimal.Decimal(10) ** (1 - digits)
            bound = unit * (1 + abs(log_ratio) + abs(eps) + abs(diff))
            if abs(diff) > bound:
                return diff > 0
        digits *= 2
    raise InvalidParameterError(  # unreachable for rationals (see above); a guard only
        f"cannot decide ln({ratio}) against {epsilon} within {_MAX_DIGITS} digits")


def _below_from(source: RandomBits):  # type: ignore[no-untyped-def]
    def below(bound: int) -> int:
        k = (bound - 1).bit_length()
        while True:
            value = source.bits(k)
            if value < bound:
                return value
    return below


DEFAULT = RandomizedResponse()
"""The two-coin scheme, ``rr:1/2:1/2``: epsilon = ln 3."""
