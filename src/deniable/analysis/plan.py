"""Planning, in devices: how many devices a target margin of error needs, or what margin a
number of devices gives, over a window of reporting periods.

Each device sends at most one report per metric per period (its collection policy). Over T
periods of N devices the window's pooled estimate has the variance of the honest window
interval (``deniable.analysis.window``, docs/analysis.md):

    Var = (T * persistent(theta) + fresh(theta)) / (N * T * (P1 - Q)**2)

so the margin is z * sqrt(max over theta of (T * persistent + fresh) / T) / (sqrt(N) (P1 - Q)),
the worst case over the true share theta. Memoized: persistent = r (1 - r), fresh = 0, and the
margin is that of N reports in one period, whatever T is: more days of the same devices add no
information. Fresh coins (or an instantaneous layer) average their fresh part over T.

Every kind plans on the same line, with its mechanism's exact channel (P1, Q)
(``estimate.slot_channel``): a categorical or histogram metric's margin is that of each
category's share (its worst case over the share; ``simultaneous`` for all d categories at once,
Bonferroni), a numeric metric's is on its mean, in its units: (upper - lower) times the margin
on the scaled value s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from deniable.client.kinds import Mechanism
from deniable.client.mechanism import RandomizedResponse, z_score
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy
from deniable.analysis.estimate import numeric_range, slot_channel
from deniable.analysis.window import fresh_variance

_GRID = np.linspace(0.0, 1.0, 2001)


@dataclass(frozen=True)
class Plan:
    """One metric's trade-off between devices and precision.

    ``margin`` is the worst-case half-width of the ``confidence`` interval on the share of
    devices, with ``devices`` devices each reporting once per period for ``periods`` periods
    (``reports`` = devices * periods reach the collector). ``n`` is ``devices`` (its old name).
    """

    metric: str | None
    mechanism: str
    epsilon: float
    p_yes_given_yes: str
    p_yes_given_no: str
    confidence: float
    n: int
    margin: float
    devices: int = 0
    periods: int = 1
    reports: int = 0
    policy: str = DEFAULT_POLICY.summary()
    kind: str = "boolean"
    categories: int = 0
    """Categorical and histogram: d, the number of categories (0 otherwise)."""
    simultaneous: bool = False
    """The margin holds for all d categories at once (Bonferroni), not per category."""
    units: str = "share"
    """What the margin is in: "share" (0 to 1), or "[lower, upper]" for a numeric mean."""


def worst_variance(mechanism: RandomizedResponse, policy: CollectionPolicy,
                   periods: int) -> float:
    """max over theta of (T * persistent + fresh) / T, per report, on the perturbed scale."""
    p1, q = float(mechanism.p_yes_given_yes), float(mechanism.p_yes_given_no)
    rate = q + (p1 - q) * _GRID
    total = rate * (1 - rate)
    fresh = np.minimum(fresh_variance(mechanism, policy, _GRID), total)
    return float(np.max((periods * (total - fresh) + fresh) / periods))


def margin_for(mechanism: Mechanism, devices: int, *, periods: int = 1,
               policy: CollectionPolicy = DEFAULT_POLICY, confidence: float = 0.95) -> float:
    """The worst-case margin with ``devices`` devices over ``periods`` periods: on a share, or
    on a numeric metric's mean in its units."""
    lower, upper = numeric_range(mechanism)
    channel = slot_channel(mechanism)
    spread = float(channel.p_yes_given_yes - channel.p_yes_given_no)
    return (upper - lower) * z_score(confidence) * math.sqrt(
        worst_variance(channel, policy, periods) / devices) / spread


def plan(mechanism: Mechanism, *, margin: float | None = None, n: int | None = None,
         confidence: float = 0.95, metric: str | None = None, periods: int = 1,
         policy: CollectionPolicy = DEFAULT_POLICY, simultaneous: bool = False) -> Plan:
    """Give exactly one of ``margin`` (-> the devices needed) or ``n`` devices (-> the margin
    they give), for a window of ``periods`` reporting periods under ``policy``.

    Any kind: a boolean metric's share, each category's share of a categorical or histogram
    metric (``simultaneous``: all d at once, Bonferroni), or a numeric metric's mean, with the
    margin in its units.

    Raises:
        ValueError: neither or both given, or periods < 1.
        InvalidParameterError: a margin outside (0, 1) (a numeric metric: (0, upper -
            lower)), n < 1, or a bad confidence.
    """
    from deniable.client.errors import InvalidParameterError

    if (margin is None) == (n is None):
        raise ValueError("give exactly one of margin or n")
    if periods < 1:
        raise ValueError(f"periods must be at least 1. Got {periods} instead.")
    z_score(confidence)  # checks it
    kind = mechanism.kind
    d = int(getattr(mechanism, "d", 0))
    level = 1 - (1 - confidence) / d if simultaneous and d else confidence
    lower, upper = numeric_range(mechanism)
    span = upper - lower
    channel = slot_channel(mechanism)
    if margin is not None:
        if not 0 < margin < span:
            raise InvalidParameterError(
                f"margin must lie in (0, {span:g}). Got {margin} instead.")
    inner = _plan_boolean(channel, margin=None if margin is None else margin / span, n=n,
                          confidence=level, periods=periods, policy=policy)
    return _for(mechanism, inner, metric, confidence, simultaneous, span)


def _for(mechanism: Mechanism, inner: Plan, metric: str | None, confidence: float,
         simultaneous: bool, span: float) -> Plan:
    """A plan made on the slot channel, stated for ``mechanism`` (its id, epsilon, kind)."""
    import dataclasses

    if isinstance(mechanism, RandomizedResponse):
        return dataclasses.replace(inner, metric=metric)
    d = int(getattr(mechanism, "d", 0))
    units = f"[{float(mechanism.lower):g}, {float(mechanism.upper):g}]" \
        if mechanism.kind == "numeric" else "share"  # type: ignore[union-attr]
    return dataclasses.replace(
        inner, metric=metric, mechanism=mechanism.id, epsilon=mechanism.epsilon,
        confidence=confidence, margin=inner.margin * span, kind=mechanism.kind, categories=d,
        simultaneous=simultaneous and bool(d), units=units)


def _plan_boolean(mechanism: RandomizedResponse, *, margin: float | None = None,
                  n: int | None = None, confidence: float = 0.95, metric: str | None = None,
                  periods: int = 1, policy: CollectionPolicy = DEFAULT_POLICY) -> Plan:
    """``plan`` for a randomized response (any slot's channel)."""
    from deniable.client.errors import InvalidParameterError

    if margin is not None:
        if not 0 < margin < 1:
            raise InvalidParameterError(f"margin must lie in (0, 1). Got {margin} instead.")
        spread = float(mechanism.p_yes_given_yes - mechanism.p_yes_given_no)
        worst = worst_variance(mechanism, policy, periods)
        n = max(1, math.ceil(z_score(confidence) ** 2 * worst / (margin * spread) ** 2))
        while n > 1 and margin_for(mechanism, n - 1, periods=periods, policy=policy,
                                   confidence=confidence) <= margin:
            n -= 1
        while margin_for(mechanism, n, periods=periods, policy=policy,
                         confidence=confidence) > margin:
            n += 1
    assert n is not None
    if n < 1:
        raise InvalidParameterError(f"n must be at least 1. Got {n} instead.")
    return Plan(metric=metric, mechanism=mechanism.id, epsilon=mechanism.epsilon,
                p_yes_given_yes=str(mechanism.p_yes_given_yes),
                p_yes_given_no=str(mechanism.p_yes_given_no), confidence=confidence, n=n,
                margin=margin_for(mechanism, n, periods=periods, policy=policy,
                                  confidence=confidence),
                devices=n, periods=periods, reports=n * periods, policy=policy.summary())
