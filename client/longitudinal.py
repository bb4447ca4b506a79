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
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import TracebackType

from deniable.client.budget import Budget, MetricSpend, PrivacyLedger
from deniable.client.composition import repeated_loss, split
from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import RandomizedResponse
from deniable.client.memo import memo_bit, new_secret, spend_tag
from deniable.client.pool import PerturbationPool
from deniable.client.randomness import RandomBits
from deniable.client.state import StateDir


_MAX_IDENTITY_ROUTES = 4096
_GUARDS: weakref.WeakSet[LongitudinalGuard] = weakref.WeakSet()


@dataclass(frozen=True)
class Layers:
    """How one metric's reports are produced.

    ``wire`` is what each report follows (P1, Q and id the collector debiases with); ``memo``
    the permanent layer (None for fresh reporting); ``irr`` the instantaneous layer, if any.
    When both layers are present, compose(memo, irr) == wire exactly.
    """

    wire: RandomizedResponse
    memo: RandomizedResponse | None
    irr: RandomizedResponse | None


@dataclass(frozen=True)
class PrivacyLoss:
    """A metric's privacy guarantees on this device, in nats.

    Attributes:
        one_report_epsilon: the loss of one report: ``wire.epsilon``.
        long_run_epsilon: the loss of any number of reports of one true value (the memo
            layer's epsilon); None for fresh reporting, whose loss grows without bound
            (n reports of one value: n * one_report_epsilon) and only the budget caps.
        lifetime_epsilon: the worst case over a device's whole life if its value may change:
            both values memoized, 2 * long_run_epsilon; None for fresh reporting.
        cost_per_new_value: what the ledger charges the first time a value is reported
            (memoized), or per report (fresh).
        p_yes_given_yes / p_yes_given_no: the composed P1 and Q of one report, exact; the
            analyst debiases with these (they are ``wire``'s).
    """

    metric: str
    layers: Layers
    one_report_epsilon: float
    long_run_epsilon: float | None
    lifetime_epsilon: float | None
    cost_per_new_value: float

    @property
    def p_yes_given_yes(self) -> Fraction:
        """P(report 1 | true 1) of one report, both layers composed."""
        return self.layers.wire.p_yes_given_yes

    @property
    def p_yes_given_no(self) -> Fraction:
        """P(report 1 | true 0) of one report, both layers composed."""
        return self.layers.wire.p_yes_given_no

    def after(self, n_reports: int) -> float:
        """The exact worst-case loss of ``n_reports`` reports of one true value."""
        if self.layers.memo is None:
            if isinstance(n_reports, bool) or not isinstance(n_reports, int) or n_reports < 0:
                raise InvalidParameterError(
                    f"n_reports must be a non-negative integer. Got {n_reports!r} instead.")
            return n_reports * self.one_report_epsilon
        return repeated_loss(self.layers.memo, self.layers.irr, n_reports)


class _Route:
    """One (metric, wire mechanism): its layers, and this process's cache of the memoized
    answers already paid for (index = true bit; memory only, never written anywhere)."""

    __slots__ = ("layers", "epsilon", "memo_bits", "pools")

    def __init__(self, layers: Layers) -> None:
        self.layers = layers
        self.epsilon = layers.wire.epsilon
        self.memo_bits: list[int | None] = [None, None]
        # "wire" / "irr" -> that layer's PerturbationPool, or None if its coins do not fit one.
        self.pools: dict[str, PerturbationPool | None] = {}


class LongitudinalGuard:
    """Turns true values into reported bits that stay private over repeated reports.

    Args:
        state_path: directory for the device secret and the ledger (created 0700). None keeps
            both in memory: memoization and budgets then last only as long as this object.
        budgets: metric -> Budget per period. Metrics without one are accounted, never refused.
        irr: metric -> instantaneous layer. The metric's wire mechanism must be reachable:
            Q_irr < Q_wire < P1_wire < P1_irr (checked on first use, or by ``check``).
        fresh: metrics reported with fresh coins every time (no memoization).
        rng: source of the fresh coins (instantaneous layer, fresh metrics); secure by default.
        clock: Unix time in seconds, for budget periods.

    Raises:
        InvalidParameterError: a metric both fresh and with an instantaneous layer, or a
            layer that is not a RandomizedResponse.
        PrivacyStateError: the state directory holds a corrupt secret or ledger.
    """

    def __init__(self, state_path: str | os.PathLike[str] | None, *,
                 budgets: Mapping[str, Budget] | None = None,
                 irr: Mapping[str, RandomizedResponse] | None = None,
                 fresh: Collection[str] = (), rng: RandomBits | None = None,
                 clock: Callable[[], float] = time.time) -> None:
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
        self._state = None if state_path is None else StateDir(Path(state_path))
        if self._state is None:
            self._secret = new_secret()
        else:
            with self._state.locked():
                self._secret = self._state.secret()
        self._ledger = PrivacyLedger(self._state, budgets, clock)
        self._routes: dict[tuple[str, RandomizedResponse], _Route] = {}
        self._by_identity: dict[tuple[str, int], _Route] = {}
        self._lock = threading.Lock()
        self._closed = False
        _GUARDS.add(self)

    # -- configuration -------------------------------------------------------------------

    def layers(self, metric: str, mechanism: RandomizedResponse) -> Layers:
        """How reports of ``metric`` under wire mechanism ``mechanism`` are produced.

        Raises:
            InvalidParameterError: the metric's instantaneous layer cannot produce reports
                that follow ``mechanism``.
        """
        return self._route(metric, mechanism).layers

    def _route(self, metric: str, mechanism: RandomizedResponse) -> _Route:
        # Found by identity first (a catalogue passes the same objects every time), then by
        # value; the identity index is bounded so fresh equal objects cannot grow it forever.
        route = self._by_identity.get((metric, id(mechanism)))
        if route is not None and route.layers.wire is mechanism:
            return route
        if not isinstance(mechanism, RandomizedResponse):
            raise InvalidParameterError(
                f"mechanism must be a RandomizedResponse. Got {type(mechanism).__name__}.")
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

    def _build_layers(self, metric: str, mechanism: RandomizedResponse) -> Layers:
        if metric in self._fresh:
            layers = Layers(wire=mechanism, memo=None, irr=None)
        elif metric in self._irr:
            layer = self._irr[metric]
            try:
                layers = Layers(wire=mechanism, memo=split(mechanism, layer), irr=layer)
            except InvalidParameterError as exc:
                raise InvalidParameterError(f"metric {metric!r}: {exc}") from exc
        else:
            layers = Layers(wire=mechanism, memo=mechanism, irr=None)
        return layers

    def check(self, catalogue: Mapping[str, RandomizedResponse]) -> None:
        """Check every metric of a catalogue (name -> wire mechanism) up front.

        Raises:
            InvalidParameterError: some metric's layers cannot be built.
        """
        for metric, mechanism in catalogue.items():
            self.layers(metric, mechanism)

    # -- reporting -----------------------------------------------------------------------

    def perturb(self, metric: str, mechanism: RandomizedResponse, true_value: bool) -> int:
        """Return the bit to report for ``true_value``, following ``mechanism`` exactly.

        ``true_value`` never leaves this call: it is neither stored nor logged; only an
        HMAC tag of it (under the device secret) reaches the ledger.

        Raises:
            BudgetExceededError: the report would exceed the metric's budget for the period;
                nothing is released or spent.
            InvalidParameterError: see ``layers``.
        """
        route = self._by_identity.get((metric, id(mechanism)))
        if route is None or route.layers.wire is not mechanism:
            route = self._route(metric, mechanism)
        layers = route.layers
        true_bit = 1 if true_value else 0
        memo = layers.memo
        if memo is None:
            self._ledger.charge(metric, route.epsilon)
            return self._fresh_draw(route, "wire", mechanism, true_bit)
        bit = route.memo_bits[true_bit]
        if bit is None:
            # First report of this value in this process: pay for it (or find it paid), then
            # derive the permanent answer. Both are fixed from then on, so they are cached.
            tag = spend_tag(self._secret, metric, memo, true_bit)
            if not self._ledger.is_paid(metric, tag):
                self._ledger.charge(metric, memo.epsilon, tag)
            bit = memo_bit(self._secret, metric, memo, true_bit)
            route.memo_bits[true_bit] = bit
        if layers.irr is not None:
            bit = self._fresh_draw(route, "irr", layers.irr, bit)
        return bit

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

    # -- guarantees and accounting --------------------------------------------------------

    def privacy_loss(self, metric: str, mechanism: RandomizedResponse) -> PrivacyLoss:
        """One-report, long-run and lifetime epsilon of ``metric`` reported under ``mechanism``."""
        layers = self.layers(metric, mechanism)
        if layers.memo is None:
            return PrivacyLoss(metric, layers, mechanism.epsilon, None, None, mechanism.epsilon)
        long_run = layers.memo.epsilon
        return PrivacyLoss(metric, layers, mechanism.epsilon, long_run, 2 * long_run, long_run)

    def stats(self) -> dict[str, MetricSpend]:
        """Per metric: epsilon spent this period and over the device's life, refusals."""
        return self._ledger.stats()

    @property
    def refused(self) -> int:
        """Reports refused by a budget, over every metric."""
        return self._ledger.refused

    # -- lifecycle -----------------------------------------------------------------------

    def flush(self) -> None:
        """Write spends and counters that are only in memory to the ledger file."""
        self._ledger.flush()

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
