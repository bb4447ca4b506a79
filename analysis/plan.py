"""Planning: how many reports a target margin of error needs, or what margin n reports give.

The margin is the worst case (a perturbed yes-rate of 1/2) half-width of the interval on the
true share, from ``RandomizedResponse.margin_of_error``: z * 0.5 / (sqrt(n) * (P1 - Q)). Pure
Python: no numpy needed.
"""
from __future__ import annotations

from dataclasses import dataclass

from deniable.client.mechanism import RandomizedResponse


@dataclass(frozen=True)
class Plan:
    """One mechanism's trade-off between reports and precision.

    ``margin`` is the worst-case half-width of the ``confidence`` interval after ``n``
    reports, on the 0..1 scale of the true share.
    """

    metric: str | None
    mechanism: str
    epsilon: float
    p_yes_given_yes: str
    p_yes_given_no: str
    confidence: float
    n: int
    margin: float


def plan(mechanism: RandomizedResponse, *, margin: float | None = None, n: int | None = None,
         confidence: float = 0.95, metric: str | None = None) -> Plan:
    """Give exactly one of ``margin`` (-> the reports needed) or ``n`` (-> the margin they give).

    Raises:
        ValueError: neither or both given.
        InvalidParameterError: a margin outside (0, 1), n < 1, or a bad confidence.
    """
    if (margin is None) == (n is None):
        raise ValueError("give exactly one of margin or n")
    if margin is not None:
        n = mechanism.reports_for_margin(margin, confidence)
    assert n is not None
    return Plan(metric=metric, mechanism=mechanism.id, epsilon=mechanism.epsilon,
                p_yes_given_yes=str(mechanism.p_yes_given_yes),
                p_yes_given_no=str(mechanism.p_yes_given_no), confidence=confidence, n=n,
                margin=mechanism.margin_of_error(n, confidence))
