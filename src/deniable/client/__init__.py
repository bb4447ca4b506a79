"""deniable.client: the library embedded in apps.

It perturbs every true value on the device under local differential privacy (randomized
response for booleans; k-ary randomized response or optimized unary encoding for categories
and histogram buckets; 1BitMean for numbers, see ``MetricSpec``), so only perturbed reports
ever leave the process. It depends on the standard library and ``requests`` only. Public
dimensions (``Dimensions``: app version, platform, ...) travel beside them in clear, from
closed allow-lists; they are not protected by local differential privacy.

Every name in ``__all__`` is imported here, so type checkers (mypy, pyright, strict) see each
one's real type (the package ships ``py.typed``; tests/test_typing.py checks both).
"""
from __future__ import annotations

import logging

from deniable.client.budget import Budget
from deniable.client.config import Connection, Delivery, Privacy, Storage
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
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import Estimate, RandomizedResponse
from deniable.client.randomness import SecureBits
from deniable.client.reporter import Reporter
from deniable.client.state import IN_MEMORY
from deniable.client.stats import Stats

__version__ = "0.1.0"
"""The distribution's version (pyproject.toml reads it from here; web/package.json and
CHANGELOG.md carry the same, checked by tests/test_release.py)."""

LOGGER_NAME = "deniable.client"
"""The one logger of the client library. It has a ``NullHandler``: nothing reaches the app's
terminal unless the app configures logging (e.g. ``logging.basicConfig()``, or a handler on
this logger). Its lines never hold a report's value."""
logging.getLogger(LOGGER_NAME).addHandler(logging.NullHandler())

__all__ = [
    "Budget",
    "BudgetExceededError",
    "Connection",
    "DeniableError",
    "Delivery",
    "DimensionError",
    "Dimensions",
    "Estimate",
    "IN_MEMORY",
    "LOGGER_NAME",
    "InvalidParameterError",
    "LongitudinalGuard",
    "MetricCapError",
    "MetricSpec",
    "Privacy",
    "PrivacyStateError",
    "QueueError",
    "RandomizedResponse",
    "Reporter",
    "SecureBits",
    "Stats",
    "Storage",
    "UnknownMetricError",
    "UploadError",
    "WireFormatError",
    "__version__",
]
