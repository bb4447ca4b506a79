"""The ``Kind`` protocol every metric kind implements, and the mechanism families.

A kind is one object, registered once in ``deniable.client.kinds.REGISTRY``. It owns what
differs between kinds: the declaration it takes, the mechanism families it accepts and its
automatic choice from epsilon, the encoding of a true value, the rule that substitutes a
paid answer for a refused new one, the wire payload, the counter width, the estimator and
the presentation hints. The rest of the code asks the kind (``kind_of(name)``) instead of
testing its name.

Stdlib only (the client ships with ``requests`` and nothing else).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar, Union

from deniable.client.categorical import KaryRandomizedResponse, SubsetSelection, UnaryEncoding
from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import RandomizedResponse, fraction_text
from deniable.client.numeric import BitMean, exact_number
from deniable.client.open_domain import OpenDomainSketch
from deniable.client.period import CollectionPolicy, parse_policy

if TYPE_CHECKING:
    from deniable.client.kinds import MetricSpec

Mechanism = Union[RandomizedResponse, KaryRandomizedResponse, UnaryEncoding, SubsetSelection,
                  BitMean, OpenDomainSketch]
Substitute = Literal["other", "lowest", "nearest"]
Field = Literal["bit", "index", "bits", "cell"]
Declared = Literal["categories", "edges", "lower", "upper", "clamp", "max_bytes"]
Num = TypeVar("Num")  # a float or a numpy array: the estimator hooks are plain arithmetic


@dataclass(frozen=True)
class Family:
    """One mechanism family: the id prefix, its parser and its wire field.

    Attributes:
        prefix: the id's prefix before the first ``:`` (``rr``, ``grr``, ``oue``, ``ss``,
            ``bm``).
        type: the family's mechanism class (its ``from_id`` parses canonical ids).
        field: the wire field that carries a report's perturbed value.
        bitset: the answer is a bitset (an int) sent as a hex string (``encode_bits``).
    """

    prefix: str
    type: type[Mechanism]
    field: Field
    bitset: bool = False

    def parse(self, mechanism_id: str) -> Mechanism:
        """The mechanism of a canonical id of this family; other spellings are refused."""
        parsed: Mechanism = self.type.from_id(mechanism_id)
        return parsed

    def width(self, mechanism_id: str) -> int:
        """Counter slots per hour: 2 ({n, ones}) for one bit, d + 1 for d categories."""
        if self.field == "bit":
            return 2
        return int(mechanism_id.split(":", 2)[1]) + 1


RR = Family("rr", RandomizedResponse, "bit")
GRR = Family("grr", KaryRandomizedResponse, "index")
OUE = Family("oue", UnaryEncoding, "bits", bitset=True)
SS = Family("ss", SubsetSelection, "bits", bitset=True)
BM = Family("bm", BitMean, "bit")


class Guard(Protocol):
    """The privacy layer a kind hands its encoded value to (``LongitudinalGuard``)."""

    def perturb(self, metric: str, mechanism: Any, true_value: bool) -> int: ...

    def perturb_value(self, metric: str, mechanism: Any, value: int | Fraction, *,
                      ordered: bool = False) -> int: ...


class Kind:
    """What one metric kind is. Subclasses set the class attributes and the hooks.

    Attributes:
        name: the kind's name in declarations, catalogues and reports.
        families: the mechanism families a metric of this kind may follow.
        declares: the declaration fields it takes beyond kind/mechanism/epsilon.
        requires: the declaration fields it must have.
        substitute: the paid answer sent for a refused new one (cap or budget), a rule that
            never reads the value: ``other`` (the other boolean's), ``lowest`` (the lowest
            paid category) or ``nearest`` (the nearest paid bucket or grid point).
        percent: estimates are shares (shown as percents) rather than means in the unit.
        slot_word: the word for one counted slot after ``n`` ("yes", "category",
            "bucket", "mean").
        per_category: one counter slot and one estimate per declared category or bucket.
        bare: a bare mechanism id declares a metric of this kind fully (no labels needed).
        channel_names: the historical names its catalogue entry also states (P1, Q) under,
            required on the wire (booleans: ``p_yes_given_yes``, ``p_yes_given_no``).
        buckets: its slots are ordered buckets of a number line (drawn as a histogram).
        layered: its memoized answer may take an instantaneous layer (``irr``): a second
            randomized response over a memoized bit.
        fresh_only: every report draws fresh coins; its collection policy is ``policy(doc)``
            even when the table states none, and a declared memo is refused (open).
        discovered: its values are discovered (``deniable.analysis.discovery``), not
            estimated slot by slot; reports show them apart (open).
        memo_note: what one permanent answer is kept for, when it is not simply the value
            (numeric: " (numeric: each grid point of alpha-point rounding)"), for the
            privacy-loss statement.
    """

    name: ClassVar[str]
    families: ClassVar[tuple[Family, ...]]
    declares: ClassVar[frozenset[Declared]] = frozenset()
    requires: ClassVar[tuple[Declared, ...]] = ()
    substitute: ClassVar[Substitute]
    percent: ClassVar[bool] = True
    slot_word: ClassVar[str]
    per_category: ClassVar[bool] = False
    bare: ClassVar[bool] = True
    layered: ClassVar[bool] = False
    buckets: ClassVar[bool] = False
    channel_names: ClassVar[tuple[str, str] | None] = None
    fresh_only: ClassVar[bool] = False
    discovered: ClassVar[bool] = False
    memo_note: ClassVar[str] = ""

    # -- declaration ---------------------------------------------------------------------

    def check(self, spec: MetricSpec) -> None:
        """Check a spec of this kind beyond its mechanism family (``MetricSpec`` calls it).

        Raises:
            InvalidParameterError: the declaration does not hold.
        """
        if spec.categories or spec.edges:
            raise InvalidParameterError(f"a {self.name} metric takes no categories or edges")

    def labels(self, spec: MetricSpec) -> tuple[str, ...]:
        """The spec's category labels as stored (``MetricSpec.categories``)."""
        return ()

    def choose(self, epsilon: float, declared: Declaration) -> tuple[Mechanism, str]:
        """The mechanism chosen for ``epsilon`` (nats), and why ("" if there was no choice)."""
        raise NotImplementedError

    def check_mechanism(self, mechanism: Mechanism, declared: Declaration) -> None:
        """Refuse a given mechanism that does not match the declaration."""

    def describe(self, spec: MetricSpec) -> dict[str, Any]:
        """The kind's own catalogue fields (after ``kind``)."""
        return {}

    def policy(self, doc: Mapping[str, Any]) -> CollectionPolicy:
        """The collection policy a metric table declares (memoization, instantaneous,
        period); ``parse_policy`` unless the kind restricts it.

        Raises:
            InvalidParameterError: a malformed or, for this kind, refused policy.
        """
        return parse_policy(doc)

    # -- use -----------------------------------------------------------------------------

    def encode(self, spec: MetricSpec, value: object) -> bool | int | Fraction:
        """The true value as the mechanism takes it.

        Raises:
            InvalidParameterError: a value this kind does not take; never echoes it.
        """
        raise NotImplementedError

    def answer(self, guard: Guard, metric: str, mechanism: Mechanism,
               value: bool | int | Fraction) -> int:
        """The perturbed answer to an encoded value, from the privacy layer: memoized or
        fresh, with this kind's rule for a refused new answer (``substitute``).

        Raises:
            BudgetExceededError, MetricCapError: as the guard raises them.
        """
        return guard.perturb_value(metric, mechanism, value,
                                   ordered=self.substitute == "nearest")

    def refusal(self, spec: MetricSpec, value: object) -> str:
        """Why ``encode`` refused ``value``, for the reporter's message: only its type and
        what the metric takes, never the value (it is the secret)."""
        raise NotImplementedError

    def refusal_message(self, metric: str, spec: MetricSpec, value: object) -> str:
        """The reporter's whole message for a refused value (``refusal`` in context)."""
        return f"metric {metric!r} ({spec.kind}) {self.refusal(spec, value)}. Nothing was reported."

    def slot_labels(self, spec: MetricSpec) -> tuple[str, ...]:
        """The label of each counted slot after ``n``."""
        return (self.slot_word,)

    def estimate(self, spec: MetricSpec, ones: Num, n: Num) -> Num:
        """The unbiased estimate from ``ones`` perturbed ones (per slot) in ``n`` reports:
        a share in [0, 1] (before clipping) or a mean in the metric's unit. Plain arithmetic:
        floats or numpy arrays alike; ``n`` must be positive."""
        p1, q = (float(x) for x in spec.mechanism.channel)  # type: ignore[union-attr]
        return (ones / n - q) / (p1 - q)  # type: ignore[operator, no-any-return]

    def scale(self, spec: MetricSpec) -> tuple[float, float] | None:
        """The [lower, upper] a debiased share is scaled into (a mean), or None (a share)."""
        return None

    def estimand(self, text: str) -> str:
        """What an estimate is, in words, from the boolean wording ``text`` ("share of
        devices ... answering yes", ``deniable.core.window.estimand``): per category for a
        ``per_category`` kind, a mean for a kind whose estimates are not shares."""
        if self.per_category:
            return text.replace("answering yes", "in each category")
        if not self.percent:
            return (text.replace("share of the devices", "mean value of the devices")
                    .replace("share of devices", "mean value of devices")
                    .replace(" answering yes", "").replace("not a share", "not a mean"))
        return text

    def value_range(self, spec: MetricSpec) -> tuple[float, float]:
        """The range an estimate is shown in: [0, 1] for shares, [lower, upper] for means."""
        return (0.0, 1.0)


@dataclass(frozen=True)
class Declaration:
    """A declaration's fields, exact, as ``MetricSpec.build`` received them."""

    labels: tuple[str, ...]
    edges: tuple[Fraction, ...]
    lower: object
    upper: object
    max_bytes: int | None = None


def out_of_range(spec: MetricSpec, value: object, low: Fraction, high: Fraction) -> str:
    """``Kind.refusal`` for a number metric (histogram, numeric)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        return f"takes a number (int, float or Fraction). Got a {type(value).__name__}"
    if isinstance(value, float) and not math.isfinite(value):
        return "takes a finite number; NaN and infinities are refused"
    return (f"takes a number in [{_text(low)}, {_text(high)}] and does not declare clamp; "
            f"the value given lies outside")


def in_range(spec: MetricSpec, value: object, low: Fraction, high: Fraction) -> Fraction:
    """An exact number in [low, high], clamped if the spec declares clamp.

    Raises:
        InvalidParameterError: not a finite number, or out of range without clamp.
    """
    number = exact_number("the value", value, secret=True)  # never echo the value
    if not low <= number <= high:
        if not spec.clamp:
            raise InvalidParameterError(
                f"the value must lie in [{label(low)}, {label(high)}] (the metric does "
                "not declare clamp)")
        number = min(high, max(low, number))
    return number


def number(name: str, value: object) -> Fraction:
    """A declared number, exact: a float is read as the decimal it prints as (0.1 is 1/10),
    which is what a declaration means; a string as a fraction or decimal."""
    if isinstance(value, str):
        try:
            parsed = Fraction(value)
        except (ValueError, ZeroDivisionError) as exc:
            raise InvalidParameterError(f"{name} must be a number. Got {value!r}.") from exc
        return parsed
    if isinstance(value, float) and math.isfinite(value):
        return Fraction(repr(value))
    return exact_number(name, value)


def label(value: Fraction) -> str:
    """A bucket edge as people write it: an integer, a short decimal, or a fraction."""
    if value.denominator == 1:
        return str(value.numerator)
    as_float = float(value)
    return repr(as_float) if Fraction(repr(as_float)) == value else fraction_text(value)


def _text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


def shown(labels: Sequence[str]) -> str:
    """The first few labels, for a message."""
    return ", ".join(labels[:8]) + (", ..." if len(labels) > 8 else "")
