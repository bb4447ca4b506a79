"""Private over time: memoized reports, an optional instantaneous layer, and a budget ledger.

    guard = LongitudinalGuard("/var/lib/myapp/deniable",
                              budgets={"dark_mode": Budget(epsilon=2.2)})
    bit = guard.perturb("dark_mode", RandomizedResponse.from_id("rr:1/2:1/2"), True)

``perturb(metric, mechanism, true_value)`` returns a bit that follows ``mechanism`` exactly:
``mechanism`` is the metric's *wire* mechanism, the one registered at the collector and sent
with the report, so neither the wire format nor the collector changes. Per metric the guard
reports in one of three ways:

- memoized (the default): the bit is the device's permanent answer for (metric, mechanism,
  value), derived from the device secret (deniable.client.memo). Repeats reveal nothing new:
  the loss of any number of reports of one value is ``mechanism.epsilon``.
- memoized with an instantaneous layer ``irr[metric] = I``: the permanent answer follows the
  memo layer M = split(mechanism, I) and every report re-perturbs it with fresh secure coins of
  I. compose(M, I) == mechanism exactly, so one report costs ``mechanism.epsilon`` while any
  number of reports of one value cost at most ``M.epsilon`` (the long-run epsilon).
- fresh (``fresh={metric}``): a fresh draw of ``mechanism`` per report, no memory; every
  report costs ``mechanism.epsilon`` and the budget is the only limit.

Budget accounting (deniable.client.budget): a memoized report charges the memo layer's
epsilon the first time its (metric, mechanism, value) appears and nothing ever after; a fresh
report charges ``mechanism.epsilon`` every time. With an instantaneous layer the whole long-run
epsilon M.epsilon is charged up front, on the first report of the value: the reports of one
value share the memoized bit, so their losses do not add up like independent reports and
charging the one-report epsilon each time would not be a sound bound (docs/privacy.md).
The memoized charges of one metric name are capped over every version of its mechanism
(``max_metric_epsilon``), so a collector cannot draw new answers by publishing new versions.

Categorical, histogram and numeric metrics (``perturb_value``, with the value already encoded
by ``MetricSpec.encode``: a category index or an exact number in range) follow the same
policies, with these differences:

- memoized: a categorical metric's permanent answer (a GRR index or an OUE bitset) is drawn
  once per (metric, mechanism, category); a numeric metric's value is first rounded by
  α-point rounding to one of ``grid`` + 1 points (``DEFAULT_GRID`` = 32 intervals) and each
  point gets its permanent 1BitMean bit (deniable.client.memo). The ledger charges
  ``mechanism.epsilon`` once per new category or grid point: a value held constant costs
  epsilon once, a numeric value drifting within one grid cell at most twice. A numeric
  value whose grid point is new when the cap (or a budget) refuses new answers is reported as
  the nearest grid point already paid for, so a drifting number never goes silent; a refused
  new category as the lowest category index paid for, and a refused boolean value as the
  other value's paid answer (the same rule). Only while no answer of the mechanism is paid
  is the report refused, and then for every value alike.
- fresh: a fresh secure draw of the mechanism on the exact value (no rounding), charged
  ``mechanism.epsilon`` every report.
- an instantaneous layer is defined for boolean metrics only (a randomized-response layer
  re-perturbs one bit): asking for one on another kind raises ``InvalidParameterError``.
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import cast

from deniable.client.budget import DEFAULT_MAX_METRIC_EPSILON, Budget, MetricSpend, PrivacyLedger
from deniable.client.composition import repeated_loss, split
from deniable.client.errors import BudgetExceededError, InvalidParameterError
from deniable.client.categorical import (MAX_UNIQUE_SHARE, UNIQUE_SHARE_DEVICES,
                                         KaryRandomizedResponse, SubsetSelection, UnaryEncoding,
                                         unique_share)
from deniable.client.mechanism import RandomizedResponse
from deniable.client.kinds import kind_of_mechanism
from deniable.client.memo import (DEFAULT_GRID, Grid, MemoMechanism, ValueMechanism,
                                  alpha_threshold, check_grid, memo_answer, new_secret,
                                  value_tag)
from deniable.client.numeric import BitMean
from deniable.client.open_domain import OpenDomainSketch
from deniable.client.period import CollectionPolicy
from deniable.client.pool import PerturbationPool
from deniable.client.randomness import RandomBits
from deniable.client.state import IN_MEMORY, StateDir

# The isinstance tests below are on mechanism families, not kinds: the privacy layer's
# mathematics (the boolean memo and its instantaneous layer, 1BitMean's alpha grid, the
# categorical answers' uniqueness and change probability) is per mechanism. Which path a
# metric's value takes is its kind's choice (``Kind.answer``, ``Kind.substitute``).

log = logging.getLogger("deniable.client")


_MAX_IDENTITY_ROUTES = 4096
_BOOLS = (False, True)
_MECHANISMS = (RandomizedResponse, KaryRandomizedResponse, UnaryEncoding, SubsetSelection,
               BitMean, OpenDomainSketch)
AnyMechanism = RandomizedResponse | ValueMechanism | OpenDomainSketch
_GUARDS: weakref.WeakSet[LongitudinalGuard] = weakref.WeakSet()


@dataclass(frozen=True)
class Layers:
    """How one metric's reports are produced.

    ``wire`` is what each report follows (P1, Q and id the collector debiases with); ``memo``
    the permanent layer (None for fresh reporting); ``irr`` the instantaneous layer, if any.
    When both layers are present, compose(memo, irr) == wire exactly.
    """

    wire: AnyMechanism
    memo: AnyMechanism | None
    irr: RandomizedResponse | None


@dataclass(frozen=True)
class PrivacyLoss:
    """What a metric's reports reveal on this device, stated three separate ways.

    Only the first two are epsilons; what a change of value reveals is not bounded by any
    epsilon, and this object does not pretend otherwise (docs/privacy.md, "Statements over
    time").

    Attributes:
        one_report_epsilon: epsilon per report, in nats: ``wire.epsilon``.
        long_run_epsilon: the epsilon of any number of reports of a value *held constant*
            (the memo layer's epsilon); None for fresh reporting, whose n reports lose
            n * one_report_epsilon (``after(n)``), capped only by a budget.
        value_change: in plain words, what a change of value reveals (its timing) and why no
            epsilon bounds it.
        p_answers_differ: memoized metrics: the exact probability that the device's permanent
            answers for the two values differ, i.e. that a change of value shows in its
            reports (numeric: for the two ends of the range, the most it can be); None for
            fresh reporting.
        cost_per_new_value: what the ledger charges the first time a (mechanism, value) is
            reported (memoized), or per report (fresh).
        p_yes_given_yes / p_yes_given_no: the composed P1 and Q of one report, exact; the
            analyst debiases with these (they are ``wire``'s).
    """

    metric: str
    layers: Layers
    one_report_epsilon: float
    long_run_epsilon: float | None
    value_change: str
    p_answers_differ: Fraction | None
    cost_per_new_value: float

    @property
    def p_yes_given_yes(self) -> Fraction:
        """P(report 1 | true 1) of one report, both layers composed (every kind: P1 of its
        ``channel``)."""
        return _channel(self.layers.wire)[0]

    @property
    def p_yes_given_no(self) -> Fraction:
        """P(report 1 | true 0) of one report, both layers composed (every kind: Q of its
        ``channel``)."""
        return _channel(self.layers.wire)[1]

    def after(self, n_reports: int) -> float:
        """The exact worst-case loss of ``n_reports`` reports of one value held constant
        (numeric: of one grid point, which a constant value always rounds to)."""
        memo = self.layers.memo
        if isinstance(memo, RandomizedResponse):
            return repeated_loss(memo, self.layers.irr, n_reports)
        if isinstance(n_reports, bool) or not isinstance(n_reports, int) or n_reports < 0:
            raise InvalidParameterError(
                f"n_reports must be a non-negative integer. Got {n_reports!r} instead.")
        if memo is None:
            return n_reports * self.one_report_epsilon
        return memo.epsilon if n_reports else 0.0  # the reports repeat one answer

    @classmethod
    def of(cls, metric: str, layers: Layers) -> PrivacyLoss:
        """The statements for ``metric`` reported through ``layers``."""
        wire, memo = layers.wire, layers.memo
        if memo is None:
            change = (
                "Each report is a fresh draw, so n reports lose at most n times the "
                "one-report epsilon whatever the values, changed or not. A change of value "
                "shifts the share of ones in the reports, which an observer who links them can "
                "see by averaging the reports on either side of it: the more reports, the "
                "more sharply it dates the change.")
            return cls(metric, layers, wire.epsilon, None, change, None, wire.epsilon)
        differ = _p_answers_differ(memo)
        per_point = kind_of_mechanism(memo).memo_note
        change = (
            f"A new value gets its own permanent answer{per_point}. The two answers differ with "
            f"probability {differ} ({float(differ):.3g}); when they do, anyone who links "
            f"this device's reports sees when the value changed, and every later change "
            f"back and forth. No epsilon bounds this: the timing of each change shows, "
            f"whatever the nats charged.")
        if layers.irr is not None:
            change += (
                " The instantaneous layer blurs each report, but averaging the reports on "
                "either side of a change still dates it, the more sharply the more reports "
                "there are.")
        return cls(metric, layers, wire.epsilon, memo.epsilon, change, differ, memo.epsilon)


def _checked(mechanism: ValueMechanism, value: object) -> int | Fraction:
    """``value`` if ``mechanism`` takes it (an index in range; an exact number in range),
    else InvalidParameterError, whose message never shows the value."""
    if isinstance(mechanism, BitMean):
        if isinstance(value, (int, Fraction)) and not isinstance(value, bool) and \
                mechanism.lower <= value <= mechanism.upper:
            return Fraction(value)
        raise InvalidParameterError(
            f"a numeric value must be an exact number (int or Fraction) in [{mechanism.lower}, "
            f"{mechanism.upper}]: encode it with MetricSpec.encode.")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < mechanism.d:
        raise InvalidParameterError(f"a category index must be an int in [0, {mechanism.d}).")
    return value


def _nearest(key: int, last: int) -> Iterator[int]:
    """Memo keys 0..last by distance from ``key``, the lower first on a tie (a number's grid
    points, a histogram's buckets)."""
    for distance in range(1, last + 1):
        for point in (key - distance, key + distance):
            if 0 <= point <= last:
                yield point


def _p_answers_differ(memo: AnyMechanism) -> Fraction:
    """P(the permanent answers of two values differ), exact; for 1BitMean the largest over
    pairs of values (the two ends of the range)."""
    if isinstance(memo, KaryRandomizedResponse):
        p, q = memo.p, memo.q
        return 1 - (2 * p * q + (memo.d - 2) * q * q)
    if isinstance(memo, UnaryEncoding):
        q = memo.q  # bits i and j agree with probability 1/2 each; the others q^2 + (1-q)^2
        return 1 - Fraction(1, 4) * (q * q + (1 - q) * (1 - q)) ** (memo.d - 2)
    if isinstance(memo, SubsetSelection):  # sum over S of P(S | i) P(S | j), k-subsets S
        d, k, r, c = memo.d, memo.k, memo.r, math.comb
        return 1 - (c(d - 2, k - 2) * r * r + 2 * c(d - 2, k - 1) * r + c(d - 2, k)) / (
            c(d - 1, k - 1) * r + c(d - 1, k)) ** 2
    if isinstance(memo, OpenDomainSketch):
        # Two strings' answers: independent (level, seed, bucket) draws; they agree only on a
        # shared level and seed (1 / (levels seeds)), most often when the two strings hash to
        # one bucket there (p^2 + (g - 1) q^2): the smallest P(differ) over pairs.
        p, q = memo.p, memo.q
        return 1 - (p * p + (memo.g - 1) * q * q) / (memo.levels * memo.seeds)
    p1, q = memo.channel
    return p1 * (1 - q) + q * (1 - p1)


def _channel(mechanism: AnyMechanism) -> tuple[Fraction, Fraction]:
    """(P1, Q) of a counted slot; an open-domain sketch's is its inner GRR's (p, q): the
    reported bucket given the level and seed drawn."""
    if isinstance(mechanism, OpenDomainSketch):
        return mechanism.p, mechanism.q
    return mechanism.channel


class _Route:
    """One (metric, wire mechanism): its layers, and this process's cache of the memoized
    answers already paid for (memory only, never written anywhere)."""

    __slots__ = ("layers", "epsilon", "memo_bits", "memo_flags", "pools", "answers", "grid")

    def __init__(self, layers: Layers) -> None:
        self.layers = layers
        self.epsilon = layers.wire.epsilon
        # A boolean's paid answers again, indexed by the true bit, for perturb's constant-time
        # lookup: as ints, and as bools for the instantaneous layer to index by.
        self.memo_bits: list[int | None] = [None, None]
        self.memo_flags: list[bool | None] = [None, None]
        # "wire" / "irr" -> that layer's PerturbationPool, or None if its coins do not fit one.
        self.pools: dict[str, PerturbationPool | None] = {}
        # Memo key (true bit, category index or grid point) -> its paid memoized answer.
        self.answers: dict[int, int] = {}
        self.grid: Grid | None = None  # numeric: alpha-point rounding, in integers


class LongitudinalGuard:
    """Turns true values into reported bits that stay private over repeated reports.

    Args:
        state_path: directory for the device secret and the ledger (created 0700), e.g.
            ``deniable.client.state.default_state_dir("myapp")``; or ``IN_MEMORY``
            (``":memory:"``) to keep both in memory, which logs a warning: memoization and
            budgets then last only as long as this object, and every restart redraws every
            answer (docs/privacy.md).
        budgets: metric -> Budget per period. Metrics without one are accounted, never refused.
        irr: metric -> instantaneous layer. The metric's wire mechanism must be reachable:
            Q_irr < Q_wire < P1_wire < P1_irr (checked on first use, or by ``check``).
        fresh: metrics reported with fresh coins every time (no memoization).
        rng: source of the fresh coins (instantaneous layer, fresh metrics); secure by default.
        clock: Unix time in seconds, for budget periods.
        max_metric_epsilon: the cap, in nats, on each metric's memoized charges summed over
            every version (mechanism) it is reported under; past it, new answers are refused
            with ``MetricCapError`` (deniable.client.budget). ``math.inf`` turns it off.
        grid: numeric metrics: the intervals m of α-point rounding (``DEFAULT_GRID`` = 32,
            so 33 grid points per range).
        max_unique_share: the most a memoized categorical answer may single out: the
            expected share of 20,000 same-valued devices whose answer under the metric's
            mechanism no other has (``unique_share``; 1 % by default, ``1.0`` turns the
            check off). A memoized metric above it is refused whatever its value
            (``InvalidParameterError`` from ``layers``; the Reporter withholds it).
        warn_in_memory: log the in-memory warning (a Reporter built with ``enabled=False``,
            which reports nothing, asks for none).

    Raises:
        InvalidParameterError: a metric both fresh and with an instantaneous layer, a
            layer that is not a RandomizedResponse, a grid out of range, or a
            max_unique_share outside [0, 1].
        PrivacyStateError: the state directory holds a corrupt secret or ledger.
    """

    def __init__(self, state_path: str | os.PathLike[str], *,
                 budgets: Mapping[str, Budget] | None = None,
                 irr: Mapping[str, RandomizedResponse] | None = None,
                 fresh: Collection[str] = (), rng: RandomBits | None = None,
                 clock: Callable[[], float] = time.time,
                 max_metric_epsilon: float = DEFAULT_MAX_METRIC_EPSILON,
                 grid: int = DEFAULT_GRID,
                 max_unique_share: float = MAX_UNIQUE_SHARE,
                 warn_in_memory: bool = True) -> None:
        self._grid = check_grid(grid)
        if isinstance(max_unique_share, bool) or not isinstance(max_unique_share, (int, float)) \
                or not 0 <= max_unique_share <= 1:
            raise InvalidParameterError(
                f"max_unique_share must be a share in [0, 1]. Got {max_unique_share!r} instead.")
        self._max_unique_share = float(max_unique_share)
        self._alphas: dict[str, int] = {}
        self._irr = dict(irr or {})
        for name, layer in self._irr.items():
            if not isinstance(layer, RandomizedResponse):
                raise InvalidParameterError(
                    f"irr[{name!r}] must be a RandomizedResponse. "
                    f"Got {type(layer).__name__} instead.")
        if isinstance(fresh, str):
            raise InvalidParameterError(
                f"fresh must be a collection of metric names, e.g. {{{fresh!r}}}. "
                f"Got the string {fresh!r} instead.")
        self._fresh = frozenset(fresh)
        both = sorted(self._fresh & set(self._irr))
        if both:
            raise InvalidParameterError(
                f"metrics {both} are both fresh and given an instantaneous layer: an "
                f"instantaneous layer re-perturbs a memoized answer, so it needs memoization.")
        self._rng = rng
        if state_path is None:
            raise InvalidParameterError(
                f"state_path must be a directory for the device secret and the ledger, or "
                f"{IN_MEMORY!r} to keep them in memory for this process only. Got None.")
        in_memory = isinstance(state_path, str) and state_path == IN_MEMORY
        self._state = None if in_memory else StateDir(Path(state_path))
        if self._state is None:
            if warn_in_memory:
                log.warning(
                    "deniable: the privacy state is in memory only (%r): memoized answers "
                    "and budgets last only as long as this process, and each restart redraws "
                    "every answer, so linked reports across restarts can be averaged "
                    "(docs/privacy.md)", IN_MEMORY)
            self._secret = new_secret()
        else:
            with self._state.locked():
                self._secret = self._state.secret()
        self._ledger = PrivacyLedger(self._state, budgets, clock,
                                     max_metric_epsilon=max_metric_epsilon)
        self._routes: dict[tuple[str, AnyMechanism], _Route] = {}
        self._by_identity: dict[tuple[str, int], _Route] = {}
        self._lock = threading.Lock()
        self._closed = False
        _GUARDS.add(self)

    # -- configuration -------------------------------------------------------------------

    def layers(self, metric: str, mechanism: AnyMechanism) -> Layers:
        """How reports of ``metric`` under wire mechanism ``mechanism`` are produced.

        Raises:
            InvalidParameterError: the metric's instantaneous layer cannot produce reports
                that follow ``mechanism``, or it is not a boolean metric.
        """
        return self._route(metric, mechanism).layers

    def _route(self, metric: str, mechanism: AnyMechanism) -> _Route:
        # Found by identity first (a catalogue passes the same objects every time), then by
        # value; the identity index is bounded so fresh equal objects cannot grow it forever.
        route = self._by_identity.get((metric, id(mechanism)))
        if route is not None and route.layers.wire is mechanism:
            return route
        if not isinstance(mechanism, _MECHANISMS):
            raise InvalidParameterError(
                f"mechanism must be a RandomizedResponse, KaryRandomizedResponse, "
                f"UnaryEncoding, SubsetSelection or BitMean. Got {type(mechanism).__name__}.")
        with self._lock:
            route = self._routes.get((metric, mechanism))
        if route is None:
            route = _Route(self._build_layers(metric, mechanism))
            with self._lock:
                route = self._routes.setdefault((metric, mechanism), route)
        if route.layers.wire is mechanism and len(self._by_identity) < _MAX_IDENTITY_ROUTES:
            with self._lock:
                self._by_identity[(metric, id(mechanism))] = route
        return route

    def _build_layers(self, metric: str, mechanism: AnyMechanism) -> Layers:
        # An open metric is always fresh (deniable.client.kinds.open); a layer is refused below.
        if metric in self._fresh or (isinstance(mechanism, OpenDomainSketch)
                                     and metric not in self._irr):
            layers = Layers(wire=mechanism, memo=None, irr=None)
        elif metric in self._irr and not kind_of_mechanism(mechanism).layered:
            raise InvalidParameterError(
                f"metric {metric!r} is {mechanism.kind} ({mechanism.id}): an instantaneous "
                f"layer (irr) is defined for boolean metrics only. Report it memoized (the "
                f"default) or fresh.")
        elif metric in self._irr:
            assert isinstance(mechanism, RandomizedResponse)
            layer = self._irr[metric]
            try:
                layers = Layers(wire=mechanism, memo=split(mechanism, layer), irr=layer)
            except InvalidParameterError as exc:
                raise InvalidParameterError(f"metric {metric!r}: {exc}") from exc
        else:
            layers = Layers(wire=mechanism, memo=mechanism, irr=None)
        memo = layers.memo
        if isinstance(memo, (KaryRandomizedResponse, UnaryEncoding, SubsetSelection)):
            share = unique_share(memo)
            if share > self._max_unique_share:
                raise InvalidParameterError(
                    f"metric {metric!r}: a memoized answer of {memo.id} would single this "
                    f"device out: among {UNIQUE_SHARE_DEVICES:,} devices with the same value, "
                    f"{share:.1%} would hold an answer no other has (the limit is "
                    f"{self._max_unique_share:.1%}). Declare it by epsilon (the automatic "
                    f"choice keeps answers shared), a smaller subset, or GRR "
                    f"(docs/privacy.md).")
        return layers

    def policy(self, metric: str, period: str) -> CollectionPolicy:
        """The collection policy ``metric`` follows here, with ``period``: fresh, memoized
        with its instantaneous layer, or memoized."""
        if metric in self._fresh:
            return CollectionPolicy("fresh", None, period)
        layer = self._irr.get(metric)
        if layer is not None:
            return CollectionPolicy("instantaneous", layer, period)
        return CollectionPolicy("memoized", None, period)

    def check(self, catalogue: Mapping[str, object]) -> None:
        """Check every metric of a catalogue (name -> wire mechanism, or a ``MetricSpec``)
        up front.

        Raises:
            InvalidParameterError: some metric's layers cannot be built.
        """
        for metric, entry in catalogue.items():
            mechanism = getattr(entry, "mechanism", entry)
            assert isinstance(mechanism, _MECHANISMS), type(mechanism).__name__
            self.layers(metric, mechanism)

    # -- reporting -----------------------------------------------------------------------

    def perturb(self, metric: str, mechanism: RandomizedResponse, true_value: bool) -> int:
        """Return the bit to report for ``true_value``, following ``mechanism`` exactly.

        ``true_value`` never leaves this call: it is neither stored nor logged; only an
        HMAC tag of it (under the device secret) reaches the ledger.

        A value whose new answer the cap or a budget refuses is reported as the other
        value's answer if that one is paid for (``_memoized``, the path of every kind): free,
        so the device sends whatever its value and silence never says "the value changed".

        Raises:
            BudgetExceededError: the report would exceed the metric's budget for the period
                and the other value's answer is not paid for; nothing is released or spent.
            MetricCapError (a BudgetExceededError): the report needs a new answer, the
                metric's cap over every version is reached and the other value's answer is
                not paid for; nothing is released or spent.
            InvalidParameterError: see ``layers``.
        """
        if not isinstance(mechanism, RandomizedResponse):  # never depends on the value
            raise InvalidParameterError(
                f"perturb() reports boolean metrics; a {type(mechanism).__name__} is reported "
                f"with perturb_value()")
        route = self._by_identity.get((metric, id(mechanism)))
        if route is None or route.layers.wire is not mechanism:
            route = self._route(metric, mechanism)
        layers = route.layers
        # Constant time in the true value (``deniable audit`` measures it): index by it, never
        # branch on it, and hold it as a bool, never as the int object 0 or 1 that the
        # answer is (touching one object twice is measurably slower than two objects).
        true_bit = _BOOLS[true_value]
        memo = cast("RandomizedResponse | None", layers.memo)
        if memo is None:
            self._ledger.charge(metric, route.epsilon)
            return self._fresh_draw(route, "wire", mechanism, true_bit)
        # With an instantaneous layer the permanent answer is held as a bool, never as the
        # int object the report is: otherwise the call is slower when the two are equal,
        # which times the permanent answer that the layer exists to hide.
        answers = route.memo_bits if layers.irr is None else route.memo_flags
        answer = answers[true_bit]
        if answer is None:
            # First report of this value in this process: its answer, paid for now (or
            # before), or the other value's paid answer if the cap or a budget refuses it.
            bit = self._memoized(route, metric, memo, int(true_bit), (1 - true_bit,))
            own = route.answers.get(true_bit)
            if own is not None:  # fixed from now on: cached for the constant-time lookup
                route.memo_bits[true_bit] = own
                route.memo_flags[true_bit] = _BOOLS[own]
            answer = bit if layers.irr is None else _BOOLS[bit]
        if layers.irr is not None:
            return self._fresh_draw(route, "irr", layers.irr, answer)
        return answer

    def _fresh_draw(self, route: _Route, layer: str, mechanism: RandomizedResponse,
                    true_bit: int) -> int:
        """One fresh, secure perturbation of ``true_bit`` under ``mechanism``.

        With the secure default source the coins come from the route's PerturbationPool for
        that layer: the same exact outcomes, drawn ahead in blocks from os.urandom.
        """
        if self._rng is not None:
            return mechanism.perturb(true_bit, self._rng)
        try:
            pool = route.pools[layer]
        except KeyError:
            pool = route.pools.setdefault(layer, PerturbationPool.create(mechanism))
        return pool.perturb(true_bit) if pool is not None else mechanism.perturb(true_bit)

    def perturb_value(self, metric: str, mechanism: ValueMechanism,
                      value: int | Fraction, *, ordered: bool = False) -> int:
        """The answer to report for a categorical, histogram or numeric metric: a GRR index,
        an OUE bitset (an int, bit i = category i) or a 1BitMean bit, following ``mechanism``.

        Args:
            value: the true value as ``MetricSpec.encode`` gives it: a category (or bucket)
                index, or an exact number in [lower, upper]. It never leaves this call; only
                an HMAC tag of its category or grid point reaches the ledger.
            ordered: the indices are ordered (a histogram's buckets): a refused new bucket
                is then treated as a number's refused grid point.

        A memoized numeric value (or bucket, ``ordered``) whose grid point is new and refused
        by the cap or a budget is reported as the nearest point (bucket) already paid for
        (``_memoized``), a category as the lowest category index paid for: free, and the
        same behaviour for every value, so silence never marks a drift or a change.

        Raises:
            BudgetExceededError, MetricCapError: as ``perturb``; nothing is spent. Raised
                only while no answer of the mechanism (no category, bucket or grid point) is
                paid for.
            InvalidParameterError: a boolean mechanism (use ``perturb``), an index or number
                out of the mechanism's range, or an instantaneous layer for this metric.
        """
        if isinstance(mechanism, RandomizedResponse):
            raise InvalidParameterError("a boolean metric is reported with perturb()")
        route = self._by_identity.get((metric, id(mechanism)))
        if route is None or route.layers.wire is not mechanism:
            route = self._route(metric, mechanism)
        if route.layers.memo is None:
            value = _checked(mechanism, value)  # before anything is charged
            self._ledger.charge(metric, route.epsilon)
            return mechanism.perturb(value, self._rng)  # type: ignore[arg-type]
        if isinstance(mechanism, BitMean):
            if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
                _checked(mechanism, value)  # raises
            alpha = self._alphas.get(metric)
            if alpha is None:
                alpha = self._alphas.setdefault(metric, alpha_threshold(self._secret, metric))
            grid = route.grid
            if grid is None:
                grid = route.grid = Grid(mechanism, self._grid)
            key = grid.point(Fraction(value), alpha)  # raises out of range
        else:
            key = _checked(mechanism, value)  # type: ignore[assignment]
        last = self._grid if isinstance(mechanism, BitMean) else mechanism.d - 1
        instead = (_nearest(key, last) if ordered or isinstance(mechanism, BitMean)
                   else range(mechanism.d))
        return self._memoized(route, metric, mechanism, key, instead)

    def _memoized(self, route: _Route, metric: str, memo: MemoMechanism, key: int,
                  instead: Iterable[int]) -> int:
        """The permanent answer for memo ``key`` (a true bit, category index or grid point)
        under ``memo``, paid for now in the ledger or before; every kind's one path.

        Refused by the cap or a budget, the first key of ``instead`` whose answer is paid for
        (by this or another process) is sent in its place: free, and the rule reads the
        ledger, never the value, so the device sends one report whatever its value once one
        answer is paid, and none for every value before (silence never says "changed"). The
        kind gives the order: a boolean the other value; a category the lowest index; a
        number (or histogram bucket) the nearest paid point, the lower on a tie. Lowest or
        nearest, not "the last one sent": it needs no state beyond the ledger, so processes
        sharing a state dir and the web client (reporter.ts, paidInstead) choose alike.

        Raises:
            BudgetExceededError, MetricCapError: refused, and no answer of ``instead`` paid.
        """
        answer = route.answers.get(key)
        if answer is None:
            tag = value_tag(self._secret, metric, memo, key, self._grid)
            if not self._ledger.is_paid(metric, tag):
                try:
                    self._ledger.charge(metric, memo.epsilon, tag)
                except BudgetExceededError:
                    paid = self._paid_answer(route, metric, memo, instead)
                    if paid is None:
                        raise
                    return paid
            answer = memo_answer(self._secret, metric, memo, key, self._grid)
            route.answers[key] = answer
        return answer

    def _paid_answer(self, route: _Route, metric: str, memo: MemoMechanism,
                     keys: Iterable[int]) -> int | None:
        """The memoized answer of the first of ``keys`` paid for under ``memo`` (here or, as
        the ledger says, by another process), or None if none is."""
        for key in keys:
            answer = route.answers.get(key)
            if answer is None and self._ledger.is_paid(
                    metric, value_tag(self._secret, metric, memo, key, self._grid)):
                answer = memo_answer(self._secret, metric, memo, key, self._grid)
                route.answers[key] = answer
            if answer is not None:
                return answer
        return None

    def perturb_string(self, metric: str, mechanism: OpenDomainSketch, padded: bytes) -> int:
        """The answer (a cell) to report for an open-domain metric's value, given as its
        normalised, padded bytes (``open_domain.normalise``), which never leave this call.

        Always fresh (the open kind defines it, ``deniable.client.kinds.open``): every report
        charges the route's epsilon to the ledger and draws fresh coins. A memoized cell would
        single out the device (unique to ~75 % of 20,000 devices holding the same string) and
        link its reports; and with no memo there is no paid answer to stand in, so a budget
        refusal is raised for every value alike (the Reporter drops it whatever the string).

        Raises:
            BudgetExceededError, MetricCapError: as ``perturb``; nothing is spent.
            InvalidParameterError: ``padded`` is not ``mechanism.max_bytes`` long, or an
                instantaneous layer is declared for this metric.
        """
        if len(padded) != mechanism.max_bytes:
            raise InvalidParameterError(
                f"an open-domain value is normalised to {mechanism.max_bytes} bytes first")
        route = self._route(metric, mechanism)
        self._ledger.charge(metric, route.epsilon)
        return mechanism.perturb_padded(padded, self._rng)

    # -- guarantees and accounting --------------------------------------------------------

    def privacy_loss(self, metric: str, mechanism: AnyMechanism) -> PrivacyLoss:
        """Epsilon per report, long-run epsilon of a constant value, and what a change of
        value reveals, for ``metric`` reported under ``mechanism`` (see ``PrivacyLoss``)."""
        return PrivacyLoss.of(metric, self.layers(metric, mechanism))

    def stats(self) -> dict[str, MetricSpend]:
        """Per metric: epsilon spent this period and over the device's life, refusals."""
        return self._ledger.stats()

    @property
    def refused(self) -> int:
        """Reports refused by a budget, over every metric."""
        return self._ledger.refused

    @property
    def cap_refused(self) -> int:
        """Reports refused by the cap over versions (``max_metric_epsilon``), every metric."""
        return self._ledger.cap_refused

    # -- lifecycle -----------------------------------------------------------------------

    def flush(self) -> None:
        """Write spends and counters that are only in memory to the ledger file."""
        self._ledger.flush()

    def erase(self, also: tuple[str, ...] = ()) -> None:
        """Close without flushing and delete the state: the device secret, the ledger and
        the files of the state directory named in ``also`` (``StateDir.erase``). Spends
        still in memory are dropped; the guard is unusable afterwards."""
        self._closed = True
        if self._state is not None:
            self._state.erase(also)
        self._secret = b""

    def close(self) -> None:
        """Flush. The guard holds no open files, so this is all closing takes."""
        if not self._closed:
            self._closed = True
            self.flush()

    def __enter__(self) -> LongitudinalGuard:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _reset_locks_after_fork() -> None:
    # A lock held by another thread at fork would never be released in the child.
    for guard in list(_GUARDS):
        guard._lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_locks_after_fork)
