"""deniable.client: the library embedded in apps.

It perturbs every true value on the device under local differential privacy (randomized
response for booleans; k-ary randomized response or optimized unary encoding for categories
and histogram buckets; 1BitMean for numbers, see ``MetricSpec``), so only perturbed reports
ever leave the process. It depends on the standard library and ``requests`` only. Public
dimensions (``Dimensions``: app version, platform, ...) travel beside them in clear, from
closed allow-lists; they are not protected by local differential privacy.
"""
from __future__ import annotations

from deniable.client.dimensions import DimensionError, Dimensions
from deniable.client.errors import (
    BudgetExceededError,
    DeniableError,
    InvalidParameterError,
    MetricCapError,
    PrivacyStateError,
    QueueError,
    UnknownMetricError,
    UploadError,
    WireFormatError,
)
from deniable.client.kinds import MetricSpec
from deniable.client.mechanism import Estimate, RandomizedResponse
from deniable.client.randomness import SecureBits
from deniable.client.stats import Stats

__all__ = [
    "Budget",
    "BudgetExceededError",
    "DeniableError",
    "DimensionError",
    "Dimensions",
    "Estimate",
    "IN_MEMORY",
    "InvalidParameterError",
    "LongitudinalGuard",
    "MetricCapError",
    "MetricSpec",
    "PrivacyStateError",
    "QueueError",
    "RandomizedResponse",
    "Reporter",
    "SecureBits",
    "Stats",
    "UnknownMetricError",
    "UploadError",
    "WireFormatError",
]


def __getattr__(name: str) -> object:
    # Reporter pulls in requests; import it lazily so the mechanism stays importable alone.
    if name == "Reporter":
        from deniable.client.reporter import Reporter

        return Reporter
    # The privacy-over-time layer: imported on use.
    if name == "LongitudinalGuard":
        from deniable.client.longitudinal import LongitudinalGuard

        return LongitudinalGuard
    if name == "IN_MEMORY":
        from deniable.client.state import IN_MEMORY

        return IN_MEMORY
    if name == "Budget":
        from deniable.client.budget import Budget

        return Budget
    raise AttributeError(name)
