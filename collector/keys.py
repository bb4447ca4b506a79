"""Every Redis key the collector uses, as pure functions: THE key layout.

=========================================================  ======  =====================================
key                                                        type    holds
=========================================================  ======  =====================================
``dn:v1:{<metric>}:c:<mechanism id>:<YYYYMMDDHH>``         HASH    ``n`` reports and ``ones`` perturbed
                                                                   ones received in that UTC hour;
                                                                   expires after the metric's retention
``dn:v1:b:<batch id>``                                     STRING  SHA-256 digest of the batch's
                                                                   content (idempotency); expires
                                                                   after the batch-id TTL
``dn:v1:{<metric>}:b:<batch id>``                          STRING  Redis Cluster only: the same
                                                                   digest, once the batch was added
                                                                   to this metric's counters
``dn:v1:{registry}``                                       HASH    metric name -> JSON entry: current
                                                                   mechanism, retention, versions,
                                                                   retired time (see live_registry.py)
``dn:v1:{registry}:gen``                                   STRING  random token, replaced on every
                                                                   registry change (cache check)
``dn:v1:{auth}:key:<key id>``                              HASH    ``role``, ``app``, ``created``,
                                                                   ``sha256`` (hex SHA-256 of the
                                                                   secret, never the secret), and
                                                                   ``revoked`` once revoked
``dn:v1:{auth}:keys``                                      SET     every key id (for ``keys list``)
``dn:v1:rl:<scope>:<subject>``                             HASH    token bucket ``tokens``, ``ts``
                                                                   (ms); ``subject`` is a key id, or an
                                                                   HMAC of the client IP, never the IP;
                                                                   expires when the bucket is full
=========================================================  ======  =====================================

Nothing else is stored: no IP addresses (rate limits hold a keyed hash with a short TTL), no
secrets (keys hold only a SHA-256 of theirs), user agents, device ids, per-report rows or times
finer than the hour. The ``{<metric>}`` hash tag keeps all of a metric's keys in one Redis
Cluster slot, so a batch's write for one metric is a single-slot script and sharding needs no
data migration.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

PREFIX = "dn:v1"
HOUR_FORMAT = "%Y%m%d%H"
BUCKET = timedelta(hours=1)


def counters(metric: str, mechanism_id: str, hour: datetime) -> str:
    """HASH {n, ones}: reports and perturbed ones for one metric in one UTC hour bucket."""
    return f"{PREFIX}:{{{metric}}}:c:{mechanism_id}:{_hour_label(_utc(hour).timestamp() // 3600)}"


@functools.lru_cache(maxsize=1024)
def _hour_label(hours_since_epoch: float) -> str:
    """``YYYYMMDDHH`` of an hour counted from the Unix epoch (cached: the hot path's)."""
    return datetime.fromtimestamp(hours_since_epoch * 3600, timezone.utc).strftime(HOUR_FORMAT)


def batch(batch_id: str) -> str:
    """STRING: the digest of batch ``batch_id``, so that a re-sent batch is counted once and
    an id reused for other content is refused."""
    return f"{PREFIX}:b:{batch_id}"


def batch_applied(metric: str, batch_id: str) -> str:
    """STRING, Redis Cluster only: the batch's digest, once it was added to ``metric``.

    A cluster applies a batch one metric (one slot) at a time; a re-send after a crash
    completes the metrics these keys do not yet mark."""
    return f"{PREFIX}:{{{metric}}}:b:{batch_id}"


def registry() -> str:
    """HASH: metric name -> JSON entry of the runtime metric registry."""
    return f"{PREFIX}:{{registry}}"


def registry_generation() -> str:
    """STRING: a random token replaced on every registry change, so caches can check cheaply."""
    return f"{PREFIX}:{{registry}}:gen"


def api_key(key_id: str) -> str:
    """HASH {role, app, created, sha256[, revoked]}: one API key, by its public id."""
    return f"{PREFIX}:{{auth}}:key:{key_id}"


def api_key_index() -> str:
    """SET: the ids of every API key ever created (revoked ones included)."""
    return f"{PREFIX}:{{auth}}:keys"


def rate_limit(scope: str, subject: str) -> str:
    """HASH {tokens, ts}: one token bucket. ``subject`` is a key id or an HMAC of an IP."""
    return f"{PREFIX}:rl:{scope}:{subject}"


def bucket_start(moment: datetime) -> datetime:
    """The start of the UTC hour holding ``moment`` (naive datetimes are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def hours(start: datetime, end: datetime) -> Iterator[datetime]:
    """Every hour bucket overlapping [start, end), oldest first."""
    hour, end = bucket_start(start), _utc(end)
    while hour < end:
        yield hour
        hour += BUCKET


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment
