"""The Reporter's configuration: four frozen objects with defaults, as httpx groups
``Timeout`` and ``Limits``.

The simple call stays ``Reporter(url, metrics=...)``; the full call adds a handful of objects::

    Reporter(url, metrics="metrics.toml", token=KEY, queue_path=data_dir / "deniable.db",
             storage=Storage(durability="sync"),
             delivery=Delivery(batch_size=50, close_timeout=5.0),
             privacy=Privacy(budgets={"os": Budget(1.1, "day")}),
             connection=Connection(verify="/etc/myapp/ca.pem"))

Each object is plain data: ``Reporter()`` checks the values (``InvalidParameterError`` as
before), so one object may be shared by many reporters and changed with
``dataclasses.replace``. The keyword arguments these objects replace (``Reporter(batch_size=...)``
and 24 others) still work for one release: each emits a ``DeprecationWarning`` naming its new
spelling (``LEGACY_KEYWORDS``).
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Final, TypedDict

from deniable.client.budget import DEFAULT_MAX_METRIC_EPSILON, Budget
from deniable.client.catalogue import DEFAULT_CATALOGUE_REFRESH
from deniable.client.mechanism import RandomizedResponse
from deniable.client.metrics import DEFAULT_MAX_EPSILON
from deniable.client.period import CollectionPolicy
from deniable.client.queue import (
    DEFAULT_COMMIT_INTERVAL,
    DEFAULT_MAX_BATCH_AGE,
    DEFAULT_MAX_QUEUE_AGE,
    DEFAULT_MAX_QUEUED_REPORTS,
    Durability,
)
from deniable.client.sender import DEFAULT_BACKOFF, DEFAULT_MAX_BACKOFF, DEFAULT_MAX_CONFIG_BACKOFF
from deniable.client.transport import DEFAULT_TIMEOUT, Verify

DEFAULT_BATCH_SIZE = 100
"""Reports per uploaded batch."""
DEFAULT_CLOSE_TIMEOUT = 10.0
"""Seconds ``close()`` and the context manager wait for uploads."""
DEFAULT_EXIT_TIMEOUT = 2.0
"""Seconds the atexit hook waits for uploads (all open reporters together): short, so an
offline app still exits promptly."""


@dataclass(frozen=True)
class Storage:
    """What the device keeps, where, and how durably (docs/client.md, "Configuration").

    The queue file itself is ``Reporter(queue_path=...)``: the one storage option most apps set.

    Attributes:
        privacy_dir: directory of the on-device privacy state (the device secret behind
            memoized answers, and the budget ledger). None: ``<queue_path>.privacy`` beside a
            queue file; without one, the per-user data directory of that collector
            (``deniable.client.state.default_state_dir``). ``":memory:"`` (``IN_MEMORY``)
            keeps it for one process only (a warning says so).
        durability: ``"group"``: ``report()`` returns at once and a crash loses at most the
            last ``commit_interval`` seconds of reports. ``"sync"``: ``report()`` returns once
            the report is committed (and fsynced); a crash loses nothing.
        commit_interval: seconds of the group-commit window.
        max_queued_reports: cap on queued reports; the oldest batches are dropped beyond it.
        max_queue_age: seconds a report may wait in the queue before it is dropped.
    """

    privacy_dir: str | os.PathLike[str] | None = None
    durability: Durability = "group"
    commit_interval: float = DEFAULT_COMMIT_INTERVAL
    max_queued_reports: int = DEFAULT_MAX_QUEUED_REPORTS
    max_queue_age: float = DEFAULT_MAX_QUEUE_AGE


@dataclass(frozen=True)
class Delivery:
    """When batches leave, how failures are retried, and how long shutdown waits.

    Attributes:
        batch_size: reports per uploaded batch, in [1, 1000].
        max_batch_age: seconds before a partial batch is sealed and sent.
        upload_jitter: upper bound, in seconds, of a random delay before uploading after idle.
        backoff: seconds of the first retry's backoff bound (doubling, full jitter).
        max_backoff: cap, in seconds, on one retry wait after a network failure, 429 or 5xx.
        max_config_backoff: cap, in seconds, on one retry wait after a refused key (401/403),
            a TLS failure or another configuration error (404, 405, ...).
        catalogue_refresh: seconds between catalogue fetches after a success.
        close_timeout: seconds ``close()`` and ``with`` wait for uploads.
        exit_timeout: seconds the atexit hook waits for the uploads of every reporter left
            open, together.
    """

    batch_size: int = DEFAULT_BATCH_SIZE
    max_batch_age: float = DEFAULT_MAX_BATCH_AGE
    upload_jitter: float = 0.0
    backoff: float = DEFAULT_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    max_config_backoff: float = DEFAULT_MAX_CONFIG_BACKOFF
    catalogue_refresh: float = DEFAULT_CATALOGUE_REFRESH
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT
    exit_timeout: float = DEFAULT_EXIT_TIMEOUT


@dataclass(frozen=True)
class Privacy:
    """What each report may cost, and how answers are reused (docs/privacy.md).

    Attributes:
        max_epsilon: the epsilon ceiling, in nats: no report is ever sent under a mechanism
            whose one-report epsilon exceeds it (default ln 9 ~ 2.2). A served mechanism above
            it is never used; a declared one is refused by ``Reporter()``.
        max_metric_epsilon: cap, in nats, on what one metric name's memoized answers may cost
            over every version ever reported; past it a value needing a new answer is sent as
            a paid one, or not at all (``stats().cap_refused``). Default ln 81; ``math.inf``
            turns it off.
        budgets: metric -> Budget (epsilon per period). A report that would exceed its
            metric's budget raises BudgetExceededError. Metrics without one are not capped.
        policies: metric -> CollectionPolicy, over the one its declaration table states (the
            default is memoized, one report per day). ``fresh`` and ``irr`` override its
            memoization. The collector's served policy is never followed.
        fresh: metrics reported with fresh coins on every report instead of a memoized answer
            (each report then costs its full epsilon; use with a budget).
        irr: metric -> an instantaneous layer (a RandomizedResponse or its id) re-perturbing
            the memoized answer on every report, as RAPPOR's IRR does. Boolean metrics only.
        one_per_period: send at most one report per metric per period (later calls are
            no-ops counted in ``stats().period_skipped``). False reports every call: only for
            load tests or one Reporter standing in for many simulated devices.
    """

    max_epsilon: float = DEFAULT_MAX_EPSILON
    max_metric_epsilon: float = DEFAULT_MAX_METRIC_EPSILON
    budgets: Mapping[str, Budget] = field(default_factory=dict[str, Budget])
    policies: Mapping[str, CollectionPolicy] = field(
        default_factory=dict[str, CollectionPolicy])
    fresh: Collection[str] = ()
    irr: Mapping[str, RandomizedResponse | str] = field(
        default_factory=dict[str, "RandomizedResponse | str"])
    one_per_period: bool = True


@dataclass(frozen=True)
class Connection:
    """How requests reach the collector (the ingest key is ``Reporter(token=...)``).

    Attributes:
        timeout: (connect, read) timeouts in seconds for every request.
        verify: TLS verification as ``requests`` takes it: True (the default CA store), the
            path of a CA bundle (PEM) or directory, e.g. your private CA's; or False, which is
            refused unless ``insecure_skip_verify`` is True as well.
        insecure_skip_verify: set True, with ``verify=False``, to send without checking the
            collector's certificate: anyone on the path can then read and change the traffic.
            For tests on a throwaway certificate only.
    """

    timeout: tuple[float, float] = DEFAULT_TIMEOUT
    verify: Verify = True
    insecure_skip_verify: bool = False


class LegacyOptions(TypedDict, total=False):
    """``Reporter``'s keyword arguments before the configuration objects: deprecated, kept for
    one release. Each is a field of the object ``LEGACY_KEYWORDS`` names."""

    batch_size: int
    durability: Durability
    commit_interval: float
    max_batch_age: float
    max_queued_reports: int
    max_queue_age: float
    upload_jitter: float
    backoff: float
    max_backoff: float
    max_config_backoff: float
    close_timeout: float
    exit_timeout: float
    timeout: tuple[float, float]
    verify: Verify
    insecure_skip_verify: bool
    max_epsilon: float
    catalogue_refresh: float
    privacy_dir: str | os.PathLike[str] | None
    budgets: Mapping[str, Budget] | None
    irr: Mapping[str, RandomizedResponse | str] | None
    fresh: Collection[str]
    max_metric_epsilon: float
    policies: Mapping[str, CollectionPolicy] | None
    one_per_period: bool


LEGACY_KEYWORDS: Final[Mapping[str, str]] = {
    **{name: "storage" for name in ("privacy_dir", "durability", "commit_interval",
                                    "max_queued_reports", "max_queue_age")},
    **{name: "delivery" for name in ("batch_size", "max_batch_age", "upload_jitter", "backoff",
                                     "max_backoff", "max_config_backoff", "catalogue_refresh",
                                     "close_timeout", "exit_timeout")},
    **{name: "privacy" for name in ("max_epsilon", "max_metric_epsilon", "budgets", "policies",
                                    "fresh", "irr", "one_per_period")},
    **{name: "connection" for name in ("timeout", "verify", "insecure_skip_verify")},
}
"""Each deprecated ``Reporter`` keyword -> the ``Reporter`` argument whose object now holds it
(under the same field name)."""
_CLASS_OF: Final[Mapping[str, str]] = {
    "storage": "Storage", "delivery": "Delivery", "privacy": "Privacy",
    "connection": "Connection"}
_NONE_MEANS_EMPTY: Final = frozenset({"budgets", "irr", "policies"})
"""Mapping keywords whose old default was None: None given to them still means none."""


@dataclass(frozen=True)
class Options:
    """The four objects one ``Reporter`` uses, deprecated keywords applied."""

    storage: Storage
    delivery: Delivery
    privacy: Privacy
    connection: Connection


def merge_legacy(options: Options, legacy: LegacyOptions, *, stacklevel: int = 3) -> Options:
    """``options`` with each deprecated keyword in ``legacy`` applied over its object's field
    (the keyword wins), warning once per keyword with its new spelling.

    Raises:
        TypeError: a keyword ``Reporter`` never took, as Python raises for one.
    """
    given: dict[str, object] = dict(legacy)
    unknown = sorted(set(given) - set(LEGACY_KEYWORDS))
    if unknown:
        raise TypeError(f"Reporter() got an unexpected keyword argument {unknown[0]!r}")
    changes: dict[str, dict[str, object]] = {}
    for name, value in given.items():
        target = LEGACY_KEYWORDS[name]
        warnings.warn(
            f"Reporter({name}=...) is deprecated and will be removed in the next release: "
            f"pass Reporter({target}={_CLASS_OF[target]}({name}=...)) instead "
            f"(deniable.client.{_CLASS_OF[target]}).",
            DeprecationWarning, stacklevel=stacklevel)
        if value is None and name in _NONE_MEANS_EMPTY:
            value = {}
        changes.setdefault(target, {})[name] = value
    return Options(**{target: replace(getattr(options, target), **changes.get(target, {}))
                      for target in _CLASS_OF})


DEFAULT_STORAGE: Final = Storage()
DEFAULT_DELIVERY: Final = Delivery()
DEFAULT_PRIVACY: Final = Privacy()
DEFAULT_CONNECTION: Final = Connection()
"""Each object's defaults, shared by every ``Reporter`` given none (they are frozen)."""
