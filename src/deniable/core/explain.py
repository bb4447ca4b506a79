"""Plain words for estimates, shared by the collector's dashboard and the analysis reports:
what epsilon means for a metric, and the honest caveats of one bucket."""
from __future__ import annotations

import html

from deniable.client.mechanism import RandomizedResponse


def epsilon_note(mechanism: RandomizedResponse, n: int | None, confidence: float = 0.95) -> str:
    """What epsilon means for a metric, in plain words (HTML-escaped text); with ``n``, what
    the noise costs with that many reports (None: that sentence is left out)."""
    ratio = float(mechanism.likelihood_ratio)
    posterior = ratio / (1 + ratio)
    p1, q = mechanism.p_yes_given_yes, mechanism.p_yes_given_no
    text = (
        f"Privacy: epsilon = {mechanism.epsilon:.3f} for this metric. Every device randomizes "
        f"its answer before sending it: a true \u201cyes\u201d is sent as yes with probability "
        f"{p1} ({float(p1):.0%}), a true \u201cno\u201d with probability {q} ({float(q):.0%}). "
        f"So one report shifts the odds of anyone\u2019s guess about that person by at most "
        f"e^epsilon = {ratio:.2f}\u00d7: someone who thought yes and no equally likely before "
        f"seeing a report can be at most {posterior:.0%} sure after it. ")
    if n is None:
        pass
    elif n > 0:
        text += (f"The price is noise: with these {n:,} reports the estimate is good to "
                 f"\u00b1{mechanism.margin_of_error(n, confidence):.4f} at worst "
                 f"({confidence:.0%} interval); four times as many reports halve that. ")
    else:
        text += "There are no reports in this range yet. "
    text += ("A smaller epsilon protects people more and needs more reports for the same "
             "precision.")
    return html.escape(text)


def bucket_flags(n: int, clipped: bool, wide: bool, unclipped: float,
                 interval_clipped: bool = False, partial: str = "") -> str:
    """The honest caveats of one bucket, in words (as ``flags`` does for a summary):
    ``partial`` says how the range cuts the bucket; ``interval_clipped`` that a bound of the
    interval was clipped to [0, 1]."""
    notes = [partial] if partial else []
    if n == 0:
        return "; ".join(notes + ["no reports"])
    if clipped:
        notes.append(f"clipped (unclipped {unclipped:+.4f})")
    if interval_clipped:
        notes.append("interval clipped to [0, 1]")
    if wide:
        notes.append("too few reports: interval spans half of [0, 1]")
    return "; ".join(notes)
