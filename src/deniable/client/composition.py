"""Two layers of randomized response, composed exactly (in Fractions).

A forced-response mechanism with truth ``t`` and forced_yes ``f`` is the binary channel

    P1 = P(report 1 | true 1) = t + (1 - t) f,     Q = P(report 1 | true 0) = (1 - t) f.

Conversely, every binary channel with 0 < Q < P1 < 1 is exactly one forced-response mechanism:
t = P1 - Q and f = Q / (1 - P1 + Q) (``from_probabilities``).

Feeding the answer of a first layer A into a second layer B (RAPPOR's permanent then
instantaneous randomized response) gives the channel

    P1 = P1_A P1_B + (1 - P1_A) Q_B,     Q = Q_A P1_B + (1 - Q_A) Q_B,

whose spread is P1 - Q = (P1_A - Q_A)(P1_B - Q_B) = t_A t_B > 0, with Q >= Q_B > 0 and
P1 <= P1_B < 1. So the composition is always again a forced-response mechanism (``compose``):

    truth = t_A t_B,     forced_yes = Q / (1 - t_A t_B).

It tells the truth exactly when both layers do. Its id (e.g. ``rr:1/2:1/2``) is an ordinary
mechanism id, so the wire format and the collector need no change: the collector debiases with
the composed P1 and Q, which is what the reports follow.

Going the other way (``split``): for a wire mechanism W and a second layer B there is a first
layer A with compose(A, B) == W exactly when Q_B < Q_W < P1_W < P1_B, namely
P1_A = (P1_W - Q_B) / t_B and Q_A = (Q_W - Q_B) / t_B.
"""
from __future__ import annotations

import math
from fractions import Fraction

from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import RandomizedResponse


def from_probabilities(p_yes_given_yes: Fraction, p_yes_given_no: Fraction) -> RandomizedResponse:
    """The forced-response mechanism with exactly these P1 and Q.

    Raises:
        InvalidParameterError: unless 0 < Q < P1 < 1 (otherwise no such mechanism exists).
    """
    p1, q = Fraction(p_yes_given_yes), Fraction(p_yes_given_no)
    if not 0 < q < p1 < 1:
        raise InvalidParameterError(
            f"a forced-response mechanism needs 0 < Q < P1 < 1. Got P1 = {p1}, Q = {q} instead.")
    truth = p1 - q
    return RandomizedResponse(truth, q / (1 - truth))


def compose(first: RandomizedResponse, second: RandomizedResponse) -> RandomizedResponse:
    """The single mechanism equivalent to reporting ``second.perturb(first.perturb(v))``."""
    p1a, qa = first.p_yes_given_yes, first.p_yes_given_no
    p1b, qb = second.p_yes_given_yes, second.p_yes_given_no
    return from_probabilities(p1a * p1b + (1 - p1a) * qb, qa * p1b + (1 - qa) * qb)


def split(composed: RandomizedResponse, second: RandomizedResponse) -> RandomizedResponse:
    """The first layer A such that ``compose(A, second) == composed``, exactly.

    Raises:
        InvalidParameterError: no such layer exists; this needs
            Q_second < Q_composed < P1_composed < P1_second.
    """
    p1w, qw = composed.p_yes_given_yes, composed.p_yes_given_no
    p1b, qb = second.p_yes_given_yes, second.p_yes_given_no
    if not qb < qw < p1w < p1b:
        raise InvalidParameterError(
            f"the instantaneous layer {second.id} (P1 = {p1b}, Q = {qb}) cannot produce "
            f"reports that follow {composed.id} (P1 = {p1w}, Q = {qw}): it needs "
            f"Q_layer < Q_wire < P1_wire < P1_layer, i.e. a less noisy instantaneous layer. "
            f"Got {qb} < {qw} < {p1w} < {p1b}, which is false.")
    spread = p1b - qb
    return from_probabilities((p1w - qb) / spread, (qw - qb) / spread)


def repeated_loss(memo: RandomizedResponse, irr: RandomizedResponse | None,
                  n_reports: int) -> float:
    """The exact worst-case privacy loss (nats) of ``n_reports`` reports of one true value.

    Every report re-perturbs the same memoized bit with fresh coins of ``irr`` (or repeats it
    when ``irr`` is None). Their joint likelihood ratio between true 1 and true 0 is
    g(rho) = (P1_m rho + 1 - P1_m) / (Q_m rho + 1 - Q_m), with rho the memoized bit's
    likelihood ratio from the reports; g is monotone in rho and rho is extreme when every
    report is 1 (rho = (P1_i / Q_i)^n) or every report is 0 (rho = ((1 - P1_i) / (1 - Q_i))^n).
    The loss is the larger |ln g| of those two. It grows with n towards ``memo.epsilon``, which
    it never exceeds, and for n = 1 it is ``compose(memo, irr).epsilon``.

    The reports share the memoized bit, so they do NOT compose like independent mechanisms:
    this loss can exceed n times the one-report epsilon (see docs/privacy.md).
    """
    if isinstance(n_reports, bool) or not isinstance(n_reports, int) or n_reports < 0:
        raise InvalidParameterError(
            f"n_reports must be a non-negative integer. Got {n_reports!r} instead.")
    if n_reports == 0:
        return 0.0
    if irr is None:
        return memo.epsilon
    p1m, not_p1m = float(memo.p_yes_given_yes), float(1 - memo.p_yes_given_yes)
    qm, not_qm = float(memo.p_yes_given_no), float(1 - memo.p_yes_given_no)
    p1i, qi = irr.p_yes_given_yes, irr.p_yes_given_no

    def log_g(log_rho: float) -> float:
        # ln g(e^x), scaled so that the exponential never overflows nor cancels.
        if log_rho >= 0:
            w = math.exp(-log_rho)
            return math.log(p1m + not_p1m * w) - math.log(qm + not_qm * w)
        w = math.exp(log_rho)
        return math.log(p1m * w + not_p1m) - math.log(qm * w + not_qm)

    all_ones = n_reports * math.log(p1i / qi)
    all_zeros = n_reports * math.log((1 - p1i) / (1 - qi))
    return min(memo.epsilon, max(log_g(all_ones), -log_g(all_zeros)))
