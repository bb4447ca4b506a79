"""One result row of ``deniable audit``: a check of one subject, its claim and its verdict."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CheckResult:
    """One check of one subject.

    Attributes:
        subject / check: what was checked, and how (``epsilon``, ``distribution``, ...).
        claim / bound / tightness: for epsilon checks, the claimed epsilon (nats), the
            empirical lower bound (at ``Audit.confidence``, 95% by default), and bound /
            claim; an open-domain ``exact`` check gives the exact epsilon its enumeration
            finds as the bound (the tightest lower bound there is). None where a check has no
            epsilon.
        passed: the verdict. A pass means the check could not refute the claim.
        detail: what was measured, in words.
        seconds: how long the check took.
        mechanism: the wire mechanism id of the subject, if the check has one.
    """

    subject: str
    check: str
    passed: bool
    detail: str
    claim: float | None = None
    bound: float | None = None
    seconds: float = 0.0
    mechanism: str | None = None

    @property
    def tightness(self) -> float | None:
        if self.claim is None or self.bound is None or self.claim == 0:
            return None
        return self.bound / self.claim

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "check": self.check, "passed": self.passed,
                "claim": self.claim, "bound": self.bound, "tightness": self.tightness,
                "detail": self.detail, "seconds": round(self.seconds, 3),
                "mechanism": self.mechanism}
