"""Per-category shares of a categorical or histogram metric: unbiased, with exact variance.

Each category i has its own counter c_i (GRR: how often i was reported; OUE: how often bit i
was set). With (P1, Q) = ``mechanism.channel``, E[c_i] = n (Q + f_i (P1 - Q)), so

    f_i = (c_i / n - Q) / (P1 - Q)                       unbiased, may lie outside [0, 1]
    Var(f_i) = pi_i (1 - pi_i) / (n (P1 - Q)^2),  pi_i = Q + f_i (P1 - Q)   exactly

and the standard error is its plug-in value, pi_i estimated by c_i / n. Two kinds of interval
are given, and every output names them:

- **per category** (``ci_low``, ``ci_high``): each holds for its own category with the stated
  confidence (marginal): Wilson's score interval on c_i / n mapped through the same line,
  clipped to [0, 1], as for a boolean metric;
- **simultaneous** (``sim_low``, ``sim_high``): all d hold at once with the stated confidence
  (Bonferroni: each at 1 - (1 - confidence) / d). Read these when scanning many categories.

The unbiased shares need not be non-negative nor sum to 1 (GRR's do sum to 1 exactly; OUE's
only in expectation). ``project_to_simplex`` gives the nearest probability vector, on request
only: it is biased (it pulls small shares up from below zero and the others down), so it is
flagged "biased" wherever it shows and is never the default.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deniable.client.errors import InvalidParameterError
from deniable.client.kinds import Mechanism
from deniable.client.mechanism import z_score
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy
from deniable.analysis.estimate import Estimates, debias, slot_channel
from deniable.core.window import INTERVAL_NOTE

FloatArray = NDArray[np.float64]
PROJECTION_NOTE = ("biased: Euclidean projection of the unbiased shares onto the probability "
                   "simplex (non-negative, sum 1); use the unbiased shares for inference")


@dataclass(frozen=True)
class CategoryEstimates:
    """Estimated shares of each category, every array of shape (d,).

    Attributes:
        labels: the category (or histogram bucket) labels.
        n: reports behind the estimates (the same for every category).
        counts: the perturbed count of each category's slot.
        value: the unbiased share of each category (not clipped: may be < 0 or > 1).
        stderr: the plug-in standard error of ``value``.
        ci_low, ci_high: per-category (marginal) intervals at ``confidence``, in [0, 1].
        sim_low, sim_high: simultaneous intervals: all categories at once at ``confidence``
            (Bonferroni), in [0, 1].
        confidence: the confidence level of both kinds of interval.
        mechanism: the mechanism's id; epsilon: its epsilon (nats).
        periods, design_effect: the reporting periods pooled and their design effect (1 for
            one period; see ``deniable.analysis.window``).
    """

    labels: tuple[str, ...]
    n: int
    counts: NDArray[np.int64]
    value: FloatArray
    stderr: FloatArray
    ci_low: FloatArray
    ci_high: FloatArray
    sim_low: FloatArray
    sim_high: FloatArray
    confidence: float
    mechanism: str = ""
    epsilon: float = float("nan")
    periods: int = 1
    design_effect: float = 1.0

    @property
    def d(self) -> int:
        return len(self.labels)

    @property
    def simultaneous_confidence(self) -> float:
        """The per-category level of each simultaneous interval: 1 - (1 - confidence) / d."""
        return 1 - (1 - self.confidence) / self.d

    @property
    def interval_note(self) -> str:
        """Which interval is which, in words (every output carries it)."""
        return INTERVAL_NOTE.format(pct=f"{self.confidence:.0%}", d=self.d)

    def project_to_simplex(self) -> FloatArray:
        """The probability vector nearest to ``value`` (Euclidean): BIASED, never the default.

        Non-negative and summing to 1; shares below a common threshold become 0. Use it to
        draw a distribution, not for inference: its intervals are not these.
        """
        return project_to_simplex(self.value)

    def rows(self, *, projected: bool = False) -> list[dict[str, Any]]:
        """One JSON-ready dict per category (NaN as None); with ``projected``, also the
        biased projection as ``projected_biased``."""
        simplex = self.project_to_simplex() if projected and self.n else None
        out = []
        for i, label in enumerate(self.labels):
            row = {"category": label, "n": self.n, "count": int(self.counts[i]),
                   "estimate": _finite(self.value[i]), "stderr": _finite(self.stderr[i]),
                   "ci_low": float(self.ci_low[i]), "ci_high": float(self.ci_high[i]),
                   "sim_low": float(self.sim_low[i]), "sim_high": float(self.sim_high[i])}
            if projected:
                row["projected_biased"] = None if simplex is None else float(simplex[i])
            out.append(row)
        return out


def _finite(x: float) -> float | None:
    x = float(x)
    return None if x != x else x


def project_to_simplex(values: Sequence[float] | FloatArray) -> FloatArray:
    """The Euclidean projection of ``values`` (shape (d,)) onto {x >= 0, sum x = 1}.

    The sort-based algorithm (Held, Wolfe and Crowder 1974; Duchi et al. 2008): with u sorted
    descending, rho = the largest j with u_j - (u_1 + ... + u_j - 1) / j > 0, and
    x = max(v - theta, 0) for theta = (u_1 + ... + u_rho - 1) / rho. BIASED as an estimator.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or not v.size or not np.all(np.isfinite(v)):
        raise InvalidParameterError("need a non-empty vector of finite shares to project")
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - 1.0
    j = np.arange(1, v.size + 1)
    rho = int(np.flatnonzero(u - cumulative / j > 0)[-1]) + 1
    theta = cumulative[rho - 1] / rho
    return np.maximum(v - theta, 0.0)


def category_arrays(values: NDArray[np.int64], mechanism: Mechanism, confidence: float = 0.95,
                    *, policy: CollectionPolicy = DEFAULT_POLICY,
                    periods: NDArray[np.int64] | None = None) -> tuple[Estimates, Estimates]:
    """Per-bucket, per-category estimates: (marginal, simultaneous), each an ``Estimates``
    whose arrays have shape (buckets, d). The simultaneous one is at the per-category level
    1 - (1 - confidence) / d (Bonferroni), so its intervals hold for all d at once.

    Args:
        values: counter slots, shape (buckets, d + 1); slot 0 is n.
        mechanism: the GRR, OUE or SS mechanism that perturbed the reports.
        periods: reporting periods pooled per bucket, shape (buckets,); 1 by default.
    """
    values = np.asarray(values, dtype=np.int64)
    if values.ndim != 2 or values.shape[1] != mechanism.width or mechanism.width < 3:
        raise InvalidParameterError(
            f"need counts of shape (buckets, {mechanism.width}) for {mechanism.id}. "
            f"Got {values.shape} instead.")
    d = values.shape[1] - 1
    slots = values[:, 1:]
    n = np.broadcast_to(values[:, :1], slots.shape)
    t = None if periods is None else np.broadcast_to(
        np.asarray(periods, np.int64).reshape(-1, 1), slots.shape)
    channel = slot_channel(mechanism)
    z_score(confidence)  # checks it
    marginal = debias(channel, slots, n, confidence, policy=policy, periods=t)
    simultaneous = debias(channel, slots, n, 1 - (1 - confidence) / d, policy=policy,
                          periods=t)
    return marginal, simultaneous


def estimate_categories(counts: Sequence[int] | NDArray[np.int64], mechanism: Mechanism,
                        labels: Sequence[str] | None = None, confidence: float = 0.95, *,
                        policy: CollectionPolicy = DEFAULT_POLICY,
                        periods: int = 1) -> CategoryEstimates:
    """Debias one set of categorical counters into per-category shares.

    Args:
        counts: the counter slots, shape (d + 1,): n, then each category's count.
        mechanism: the GRR, OUE or SS mechanism that perturbed the reports.
        labels: the d category labels (default "0", "1", ...).
        confidence: the level of both the per-category and the simultaneous intervals.
        policy, periods: the metric's collection policy and the reporting periods the counts
            pool (the window interval; one period by default).

    Raises:
        InvalidParameterError: counts of the wrong width, negative, or a count above n.
    """
    row = np.asarray(counts, dtype=np.int64).reshape(1, -1)
    d = row.shape[1] - 1
    names = tuple(labels) if labels is not None else tuple(str(i) for i in range(d))
    if len(names) != d:
        raise InvalidParameterError(f"need {d} labels for {d} categories. Got {len(names)}.")
    if np.any(row < 0) or np.any(row[0, 1:] > row[0, 0]):
        raise InvalidParameterError("need counts with 0 <= count <= n for every category")
    marginal, simultaneous = category_arrays(row, mechanism, confidence, policy=policy,
                                             periods=np.array([max(periods, 1)]))
    deff = marginal.design_effect
    return CategoryEstimates(
        labels=names, n=int(row[0, 0]), counts=row[0, 1:].copy(),
        value=marginal.unclipped[0], stderr=marginal.stderr[0], ci_low=marginal.ci_low[0],
        ci_high=marginal.ci_high[0], sim_low=simultaneous.ci_low[0],
        sim_high=simultaneous.ci_high[0], confidence=confidence, mechanism=mechanism.id,
        epsilon=mechanism.epsilon, periods=max(periods, 1),
        design_effect=float(np.nanmax(deff[0])) if deff is not None and row[0, 0] else 1.0)


def from_arrays(labels: Sequence[str], values: NDArray[np.int64], marginal: Estimates,
                simultaneous: Estimates, i: int, mechanism: Mechanism,
                periods: int = 1) -> CategoryEstimates:
    """Bucket ``i`` of ``category_arrays``' output as a CategoryEstimates."""
    deff = marginal.design_effect
    n = int(values[i, 0])
    return CategoryEstimates(
        labels=tuple(labels), n=n, counts=values[i, 1:].copy(),
        value=marginal.unclipped[i], stderr=marginal.stderr[i], ci_low=marginal.ci_low[i],
        ci_high=marginal.ci_high[i], sim_low=simultaneous.ci_low[i],
        sim_high=simultaneous.ci_high[i], confidence=marginal.confidence,
        mechanism=mechanism.id, epsilon=mechanism.epsilon, periods=max(periods, 1),
        design_effect=float(np.nanmax(deff[i])) if deff is not None and n else 1.0)
