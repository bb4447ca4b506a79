"""The open kind: one string from no list (a crash signature, a domain, a search term), under
the open-domain sketch (``od:``, wire field ``cell``; ``deniable.client.open_domain``).

The value is normalised (NFC, UTF-8, at most ``max_bytes`` bytes, NUL-padded; ``clamp`` cuts
a longer one at a character boundary instead of refusing it).

Always fresh: every report charges the metric's epsilon and draws fresh coins
(``LongitudinalGuard.perturb_string``); there is no memoized answer. Why: a memoized cell
(level, seed, bucket) out of ~163,840 is unique to 74-77 % of 20,000 devices holding the same
string (the 1 % unique-share rule fails), so it would link one device's reports across
periods; and past a cap a memo answers a paid string but refuses a new one, so silence would
say "the value changed". Fresh, a budget refusal is raised for every value alike. A table
that declares ``memoization = "memoized"`` or ``"instantaneous"`` (or an ``instantaneous``
layer) is refused (``open_policy``); unstated means fresh.
The server adds each report to ``width = 1 + cells`` counters (slot 0 = n, slot 1 + cell) and
discovers the frequent strings (``deniable.analysis.discovery``).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from deniable.client.errors import InvalidParameterError
from deniable.client.kinds.base import (Declaration, Declared, Family, Guard, Kind, Mechanism,
                                        Substitute)
from deniable.client.open_domain import DEFAULT_MAX_BYTES, OpenDomainSketch, normalise
from deniable.client.period import CollectionPolicy, parse_policy

if TYPE_CHECKING:
    from deniable.client.kinds import MetricSpec


@dataclass(frozen=True)
class OpenFamily(Family):
    """The ``od:`` family: its width is ``1 + levels * seeds * g``, read from the id."""

    def width(self, mechanism_id: str) -> int:
        return OpenDomainSketch.from_id(mechanism_id).width


OD = OpenFamily("od", OpenDomainSketch, "cell")


class Open(Kind):
    """A string; the server discovers the frequent ones with their shares."""

    name: ClassVar[str] = "open"
    families: ClassVar[tuple[Family, ...]] = (OD,)
    declares: ClassVar[frozenset[Declared]] = frozenset({"max_bytes", "clamp"})
    substitute: ClassVar[Substitute] = "lowest"  # unused: always fresh, nothing stands in
    slot_word: ClassVar[str] = "cell"
    bare: ClassVar[bool] = True
    fresh_only: ClassVar[bool] = True
    discovered: ClassVar[bool] = True

    def check(self, spec: MetricSpec) -> None:
        super().check(spec)

    def choose(self, epsilon: float, declared: Declaration) -> tuple[Mechanism, str]:
        max_bytes = declared.max_bytes or DEFAULT_MAX_BYTES
        sketch = OpenDomainSketch.from_epsilon(epsilon, max_bytes=max_bytes)
        return sketch, f"od: g = {sketch.g} buckets (e^epsilon + 1), {sketch.seeds} seeds"

    def check_mechanism(self, mechanism: Mechanism, declared: Declaration) -> None:
        given = getattr(mechanism, "max_bytes", None)
        if declared.max_bytes is not None and given != declared.max_bytes:
            raise InvalidParameterError(
                f"mechanism {mechanism.id!r} takes {given} bytes; the metric declares "
                f"max_bytes = {declared.max_bytes}")

    def describe(self, spec: MetricSpec) -> dict[str, Any]:
        return {"max_bytes": self.sketch(spec).max_bytes}

    def policy(self, doc: Mapping[str, Any]) -> CollectionPolicy:
        return open_policy(doc)

    def encode(self, spec: MetricSpec, value: object) -> bytes:  # type: ignore[override]
        return normalise(value, self.sketch(spec).max_bytes, spec.clamp)

    def answer(self, guard: Guard, metric: str, mechanism: Mechanism,
               value: bool | int | Fraction | bytes) -> int:
        return guard.perturb_string(metric, mechanism, value)  # type: ignore[attr-defined, no-any-return]

    def refusal(self, spec: MetricSpec, value: object) -> str:
        if not isinstance(value, str):
            return f"takes a str. Got a {type(value).__name__}"
        return (f"takes a non-empty string of at most {self.sketch(spec).max_bytes} UTF-8 "
                "bytes after NFC, without U+0000" + ("" if spec.clamp else
                                                     " (it does not declare clamp)")
                + "; the value given is not one")

    def estimate(self, spec: MetricSpec, ones: Any, n: Any) -> Any:
        raise InvalidParameterError(
            "an open metric has no per-slot estimate: discover its strings "
            "(deniable.analysis.discovery.discover)")

    @staticmethod
    def sketch(spec: MetricSpec) -> OpenDomainSketch:
        assert isinstance(spec.mechanism, OpenDomainSketch)
        return spec.mechanism


def open_policy(doc: Mapping[str, Any]) -> CollectionPolicy:
    """The collection policy of an open metric's table: always fresh, with its period.

    Raises:
        InvalidParameterError: the table declares ``memoization`` other than ``"fresh"`` or an
            ``instantaneous`` layer (naming the field), or a malformed period.
    """
    why = ("an open metric always draws fresh coins: a memoized cell is unique to ~75 % of "
           "devices holding the same string and would link a device's reports (docs/privacy.md)")
    memoization = doc.get("memoization")
    if memoization is not None and memoization != "fresh":
        raise InvalidParameterError(f"memoization: cannot be {memoization!r}; {why}")
    if doc.get("instantaneous") is not None:
        raise InvalidParameterError(f"instantaneous: no layer can be declared; {why}")
    return parse_policy({**doc, "memoization": "fresh"})


KIND = Open()
