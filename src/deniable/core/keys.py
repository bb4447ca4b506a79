"""Every Redis key the collector uses, as pure functions: THE key layout.

=========================================================  ======  =====================================
key                                                        type    holds
=========================================================  ======  =====================================
``dn:v1:{<metric>}:m:<mechanism id>:<YYYYMM>``             STRING  the counters of one metric version
                                                                   for one UTC month: per hour of the
                                                                   month, ``width`` unsigned 32-bit
                                                                   big-endian counters (``n`` reports,
                                                                   ``ones`` perturbed ones for a
                                                                   boolean); expires at the month's
                                                                   end plus the metric's retention
``dn:v1:{<metric>}:d:<series>:<mechanism id>:<YYYYMM>``    STRING  the same counters, for the reports
                                                                   that stated one public-dimension
                                                                   value (``series`` =
                                                                   ``platform=ios``), or a declared
                                                                   combination of values; same expiry
``dn:v1:{<metric>}:o:<mechanism id>:<YYYYMMDD>``           STRING  an open-domain metric (``od:``) for
                                                                   one UTC day: ``width`` = 1 + cells
                                                                   u32 counters (slot 0 = n reports,
                                                                   slot 1 + cell), no hours; created at
                                                                   full size; expires at the day's end
                                                                   plus the metric's retention
``dn:v1:{<metric>}:ow:<mechanism id>:<YYYYMMDD>``          STRING  the same for a version declared with
``dn:v1:{<metric>}:oh:<mechanism id>:<YYYYMMDDHH>``                ``period = "week"`` (its Monday) or
                                                                   ``"hour"``: one string per period,
                                                                   expiring at its end + retention
``dn:v1:b:<batch id>``                                     STRING  the batch id's claim (idempotency):
                                                                   ``HMAC-SHA256(BATCH_SECRET, batch
                                                                   digest)`` (128 bits, hex), or ``1``
                                                                   with no secret; expires on the first
                                                                   hour boundary after the batch-id TTL
``dn:v1:{<metric>}:bm:<claim expiry hour>``                HASH    Redis Cluster only: the batches added
                                                                   to this metric's counters whose
                                                                   claims expire at that hour (hours
                                                                   since the epoch): field the batch
                                                                   id's 16 bytes, value ``1``; expires
                                                                   with those claims
``dn:v1:{<metric>}:b:<id>``                                STRING  the claim of a bulk write to the
                                                                   metric (``Store.add_hours``); on a
                                                                   cluster, before the markers above,
                                                                   also a batch's per-metric marker
``dn:v1:{registry}``                                       HASH    metric name -> JSON entry: current
                                                                   mechanism, retention, versions,
                                                                   retired time (see live_registry.py)
``dn:v1:{registry}:gen``                                   STRING  random token, replaced on every
                                                                   registry change (cache check)
``dn:v1:{registry}:layout``                                STRING  ``2`` once no layout-1 counters
                                                                   hash is left (``layout_marker``)
``dn:v1:{auth}:key:<key id>``                              HASH    ``role``, ``app``, ``created``,
                                                                   ``sha256`` (hex SHA-256 of the
                                                                   secret, never the secret), and
                                                                   ``revoked`` once revoked
``dn:v1:{auth}:keys``                                      SET     every key id (for ``keys list``)
``dn:v1:rl:<scope>:<subject>``                             HASH    token bucket ``tokens``, ``ts``
                                                                   (ms); ``subject`` is a key id, or an
                                                                   HMAC of the client IP, never the IP;
                                                                   expires when the bucket is full
``dn:v1:probe:{<tag>}``                                    (none)  never exists: readiness sends ``SET
                                                                   <key> "" XX`` to each master, a write
                                                                   that Redis checks and then does not
                                                                   perform (``write_probe``)
=========================================================  ======  =====================================

Counters (layout 2, "packed months"). A month's string holds ``hours_in_month * width``
counters of 32 bits; the counter for slot ``s`` of hour ``h`` of the month (``h`` = 0 at
00:00 UTC on the 1st) sits at index ``h * width + s`` (byte offset ``4 * index``), written by
``BITFIELD ... OVERFLOW FAIL INCRBY u32 #index``. Redis stores them big-endian (``>u4``). The
string is created at its full size for its month, so its length says nothing about when it was
written. ``width`` is a property of the mechanism's kind: 2 for a boolean (``n``, ``ones``);
``n`` plus one counter per category (d + 1) for the categorical kinds (``grr:``, ``oue:``).

Retention: a month's string expires at ``month end + retention days`` (``EXPIREAT``, re-set on
every write, so a changed retention applies to the month being written). Readers drop the hours
that are older than the retention (``visible``), so what a read returns is what per-hour expiry
would have kept; Redis frees the month when its last hour is past retention.

Expiry times: every ``EXPIREAT`` lies on a UTC hour boundary (counters: a month end plus whole
days; batch records: the batch-id TTL rounded up to the hour), so no TTL times a write more
finely than the hour. The layout-1 counters (``dn:v1:{<metric>}:c:<mechanism id>:<YYYYMMDDHH>``
HASH {n, ones}, one per hour, with a TTL counted from its first write) are converted by
``deniable migrate`` (``src/deniable/collector/migrate.py``).

Nothing else is stored: no IP addresses (rate limits hold a keyed hash with a short TTL), no
secrets (keys hold only a SHA-256 of theirs), no batch content (batch records hold a keyed
HMAC whose key never enters Redis, or nothing), user agents, device ids, per-report rows or
times finer than the hour. The rate-limit buckets are the one documented exception on times:
their ``ts`` and TTL are those of the bucket's last request (milliseconds), of a keyed hash of
an IP or of a key id, and hold no content; a bucket lives only until it refills (seconds). The
``{<metric>}`` hash tag keeps all of a metric's keys in one Redis Cluster slot, so a batch's
write for one metric is a single-slot script and sharding needs no data migration.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from deniable.client import kinds
from deniable.client.dimensions import SERIES
from deniable.client.errors import InvalidParameterError
# Hour indexes are defined once, in ``periods``; re-exported here for the key layout's users.
from deniable.core.periods import HOUR as BUCKET  # noqa: F401 (re-exported)
from deniable.core.periods import (HOUR_SECONDS, SPAN_HOURS, check_granularity, hour_index,
                                   hour_range, hour_start, period_hour)
from deniable.core.periods import hour_floor as bucket_start  # noqa: F401 (re-exported)
from deniable.core.periods import utc as _utc

PREFIX = "dn:v1"
HOUR_FORMAT = "%Y%m%d%H"
MONTH_FORMAT = "%Y%m"

COUNTER_BITS = 32
COUNTER_TYPE = "u32"
"""BITFIELD type of every counter: unsigned 32 bits (at most 4,294,967,295 per hour slot)."""
COUNTER_MAX = 2 ** COUNTER_BITS - 1
COUNTER_DTYPE = ">u4"
"""numpy dtype of a month string's counters (BITFIELD stores integers big-endian)."""
COUNTER_BYTES = COUNTER_BITS // 8


@dataclass(frozen=True)
class Month:
    """One UTC month of hour buckets: ``first_hour`` counted from the Unix epoch, ``hours`` long."""

    label: str
    first_hour: int
    hours: int

    @property
    def end_hour(self) -> int:
        """The first hour of the next month."""
        return self.first_hour + self.hours

    def size_bytes(self, width: int) -> int:
        """The length of this month's counters string for ``width`` slots per hour."""
        return self.hours * width * COUNTER_BYTES


def width(mechanism_id: str) -> int:
    """Counter slots per hour for a mechanism: 2 (``n``, ``ones``) for the one-bit kinds
    (``rr:``, ``bm:``), and ``n`` plus one per category (d + 1) for ``grr:`` and ``oue:``."""
    try:
        return kinds.width(mechanism_id)
    except InvalidParameterError as exc:
        raise ValueError(f"no counter layout for mechanism {mechanism_id!r}: {exc}") from exc


def counters(metric: str, mechanism_id: str, month: Month | int | datetime) -> str:
    """STRING: the packed counters of one metric version for one UTC month.

    ``month`` is a Month, an hour index (hours since the Unix epoch) or a time in the month.
    """
    if not isinstance(month, Month):
        month = month_of(month)
    return f"{PREFIX}:{{{metric}}}:m:{mechanism_id}:{month.label}"




def is_sparse(mechanism_id: str) -> bool:
    """Whether a mechanism's reports each touch one of many counters (``od:``): such a
    metric is counted per reporting period in one string (``open_counters``), not per hour."""
    return kinds.payload_field(mechanism_id) == "cell"


OPEN_KINDS = {"hour": "oh", "day": "o", "week": "ow"}
"""The key segment of an open-domain metric's counters per declared period (the day's ``o``
is the layout's first, kept as it was)."""


def open_counters(metric: str, mechanism_id: str, start_hour: int, period: str = "day") -> str:
    """STRING: the ``width`` u32 counters of an open-domain metric version for one reporting
    period (its ``period``: ``hour``, ``day`` or ``week``, as the version declares it), slot 0
    = n, slot 1 + cell. ``start_hour`` is any hour index inside the period; the key names the
    period's start (``YYYYMMDD``, ``YYYYMMDDHH`` for hours; a week by its Monday). Bounded by
    the id (4 x width bytes) per period, whatever the number of distinct strings reported."""
    start = period_hour(start_hour, check_granularity(period))
    label = _hour_label(start)
    return f"{PREFIX}:{{{metric}}}:{OPEN_KINDS[period]}:{mechanism_id}:" \
           f"{label if period == 'hour' else label[:8]}"


def open_counters_expire_at(start_hour: int, retention_days: int, period: str = "day") -> int:
    """EXPIREAT (Unix s, on an hour boundary) of a period's open-domain counters: the end of
    the period holding hour ``start_hour``, plus the retention."""
    end = period_hour(start_hour, check_granularity(period)) + SPAN_HOURS[period]
    return end * HOUR_SECONDS + retention_days * 86400


def open_period_starts(first_hour: int, end_hour: int, period: str) -> list[int]:
    """The start hours of every ``period`` overlapping the hours [first_hour, end_hour),
    oldest first."""
    if end_hour <= first_hour:
        return []
    first = period_hour(first_hour, check_granularity(period))
    return list(range(first, end_hour, SPAN_HOURS[period]))


OPEN_COUNTERS_PATTERN = f"{PREFIX}:{{*}}:o*"
"""SCAN pattern of every open-domain period string (``o``, ``oh``, ``ow``)."""


def parse_open_counters(key: str) -> tuple[str, str, str] | None:
    """(metric, mechanism id, label: YYYYMMDD, or YYYYMMDDHH for an hour) of an open-domain
    period key; None for another key. ``open_period_of`` says which period it counts."""
    for period, kind in OPEN_KINDS.items():
        parsed = _parse_counter_key(key, kind, 10 if period == "hour" else 8)
        if parsed is not None:
            return parsed
    return None


def open_period_of(key: str) -> str | None:
    """The period (``hour``, ``day``, ``week``) an open-domain key counts; None for another."""
    for period, kind in OPEN_KINDS.items():
        if _parse_counter_key(key, kind, 10 if period == "hour" else 8) is not None:
            return period
    return None


COUNTERS_PATTERN = f"{PREFIX}:{{*}}:m:*"
"""SCAN pattern of every month counters string."""


def series_counters(metric: str, mechanism_id: str, series: str,
                    month: Month | int | datetime) -> str:
    """STRING: the packed counters of one public-dimension series of a metric version for one
    UTC month (``series`` such as ``platform=ios`` or ``app_version=2.4,platform=ios``; see
    ``deniable.client.dimensions``). Same layout, width and expiry as ``counters``."""
    if not isinstance(month, Month):
        month = month_of(month)
    return f"{PREFIX}:{{{metric}}}:d:{series}:{mechanism_id}:{month.label}"


SERIES_PATTERN = f"{PREFIX}:{{*}}:d:*"
"""SCAN pattern of every series counters string."""


def parse_series_counters(key: str) -> tuple[str, str, str, str] | None:
    """(metric, series, mechanism id, YYYYMM) of a series counters key; None for another."""
    parsed = _parse_counter_key(key, "d", 6)
    if parsed is None:
        return None
    metric, rest, label = parsed
    series, sep, mechanism_id = rest.partition(":")
    if not sep or not SERIES.match(series) or not mechanism_id:
        return None
    return metric, series, mechanism_id, label


def parse_counters(key: str) -> tuple[str, str, str] | None:
    """(metric, mechanism id, YYYYMM) of a month counters key; None for another key."""
    return _parse_counter_key(key, "m", 6)


def _parse_counter_key(key: str, kind: str, label_digits: int) -> tuple[str, str, str] | None:
    """(metric, mechanism id, time label) of ``<PREFIX>:{<metric>}:<kind>:<mechanism>:<label>``
    whose label has ``label_digits`` digits; None for any other key."""
    head = f"{PREFIX}:{{"
    if not key.startswith(head):
        return None
    metric, sep, rest = key[len(head):].partition(f"}}:{kind}:")
    mechanism_id, _, label = rest.rpartition(":")
    if not sep or not mechanism_id or len(label) != label_digits or not label.isdigit():
        return None
    return metric, mechanism_id, label


def counters_v1(metric: str, mechanism_id: str, hour: datetime) -> str:
    """HASH {n, ones}: layout 1, one key per metric and hour (read only by ``migrate``)."""
    return f"{PREFIX}:{{{metric}}}:c:{mechanism_id}:{_hour_label(_utc(hour).timestamp() // 3600)}"


V1_COUNTERS_PATTERN = f"{PREFIX}:{{*}}:c:*"
"""SCAN pattern of layout-1 counter hashes."""


def parse_counters_v1(key: str) -> tuple[str, str, int] | None:
    """(metric, mechanism id, hour index) of a layout-1 counters key; None for another key."""
    parsed = _parse_counter_key(key, "c", 10)
    if parsed is None:
        return None
    metric, mechanism_id, label = parsed
    moment = datetime.strptime(label, HOUR_FORMAT).replace(tzinfo=timezone.utc)
    return metric, mechanism_id, hour_index(moment)


@functools.lru_cache(maxsize=1024)
def _hour_label(hours_since_epoch: float) -> str:
    """``YYYYMMDDHH`` of an hour counted from the Unix epoch (cached: the hot path's)."""
    return datetime.fromtimestamp(hours_since_epoch * 3600, timezone.utc).strftime(HOUR_FORMAT)


def month_of(moment: datetime | int) -> Month:
    """The UTC month holding ``moment`` (a time, or an hour index)."""
    index = moment if isinstance(moment, int) else hour_index(moment)
    return _month(index // 24)


@functools.lru_cache(maxsize=4096)
def _month(day_index: int) -> Month:
    day = datetime.fromtimestamp(day_index * 86400, timezone.utc)
    first = day.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    first_hour = int(first.timestamp()) // HOUR_SECONDS
    return Month(f"{first:{MONTH_FORMAT}}", first_hour,
                 int(following.timestamp()) // HOUR_SECONDS - first_hour)


def months(first_hour: int, end_hour: int) -> list[Month]:
    """Every month overlapping the hours [first_hour, end_hour), oldest first."""
    found: list[Month] = []
    hour = first_hour
    while hour < end_hour:
        month = month_of(hour)
        found.append(month)
        hour = month.end_hour
    return found


def counter_index(month: Month, hour: int, slot: int, slots: int) -> int:
    """BITFIELD index (``#index``) of ``slot`` of ``hour`` in ``month``'s string."""
    if not month.first_hour <= hour < month.end_hour or not 0 <= slot < slots:
        raise ValueError(f"hour {hour} slot {slot} is outside month {month.label}")
    return (hour - month.first_hour) * slots + slot


def counters_expire_at(month: Month, retention_days: int) -> int:
    """EXPIREAT (Unix s, on an hour boundary) of a month's counters: its end + retention."""
    return month.end_hour * HOUR_SECONDS + retention_days * 86400


def visible_from(now: datetime, retention_days: int) -> int:
    """The oldest hour index a read shows under ``retention_days``: hours whose end lies
    within the retention of ``now``, as layout 1's per-hour expiry kept them."""
    return hour_index(now) - retention_days * 24


def expire_at_hour(moment: datetime, ttl_seconds: int) -> int:
    """EXPIREAT (Unix s) for a record written at ``moment`` to live ``ttl_seconds``: rounded
    up to the next hour boundary, so the expiry dates the write to its hour only."""
    due = int(_utc(moment).timestamp()) + int(ttl_seconds)
    return -(-due // HOUR_SECONDS) * HOUR_SECONDS


def batch(batch_id: str) -> str:
    """STRING: the claim of batch ``batch_id`` (a keyed HMAC of its content, or ``1``), so that
    a re-sent batch is counted once and an id reused for other content is refused."""
    return f"{PREFIX}:b:{batch_id}"


def batch_applied(metric: str, batch_id: str) -> str:
    """STRING: the claim of a bulk write to ``metric`` (``Store.add_hours``), in its slot.

    Before the batch markers (``batch_markers``), a Redis Cluster also marked each metric a
    batch was added to with one of these; a re-send still honours such a marker."""
    return f"{PREFIX}:{{{metric}}}:b:{batch_id}"


def batch_markers(metric: str, claim_expire_at: int) -> str:
    """HASH, Redis Cluster only: the batches added to ``metric`` whose claims expire at
    ``claim_expire_at`` (Unix s, an hour boundary): field the batch id's 16 bytes, value ``1``.

    A cluster applies a batch one metric (one slot) at a time; a re-send after a crash
    completes the metrics not yet marked. The re-send finds the hash through its claim's own
    expiry (EXPIRETIME), and the hash expires with those claims. One hash per metric per hour
    costs ≈ 80 B per marker where a key per marker cost ≈ 160 B (bench/soak.py --cluster)."""
    return f"{PREFIX}:{{{metric}}}:bm:{claim_expire_at // HOUR_SECONDS}"


BATCH_MARKERS_PATTERN = f"{PREFIX}:{{*}}:bm:*"
"""SCAN pattern of every marker hash."""


def parse_batch_markers(key: str) -> tuple[str, int] | None:
    """(metric, claim expiry in Unix s) of a ``batch_markers`` key; None for any other key."""
    head = f"{PREFIX}:{{"
    if not key.startswith(head) or "}:bm:" not in key:
        return None
    metric, _, label = key[len(head):].rpartition("}:bm:")
    if not label.isdigit() or not metric:
        return None
    return metric, int(label) * HOUR_SECONDS


def marker_field(batch_id: str) -> bytes:
    """A batch id (32 hex digits) as its ``batch_markers`` field: the 16 bytes it spells."""
    return bytes.fromhex(batch_id)


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


def layout_marker() -> str:
    """STRING ``2``: no layout-1 counters hash (``counters_v1``) is left, so a collector's start
    need not look for them (``deniable migrate`` writes it, or the first start that found
    none)."""
    return f"{PREFIX}:{{registry}}:layout"


def write_probe(tag: str) -> str:
    """A key that is never written: readiness sends ``SET <key> "" XX`` to learn whether Redis
    would take a write (Redis refuses a write command before running it; XX on a key that
    does not exist then changes nothing). ``tag`` picks the Redis Cluster slot, so each
    master can be asked with a key of its own slots."""
    return f"{PREFIX}:probe:{{{tag}}}"


def rate_limit(scope: str, subject: str) -> str:
    """HASH {tokens, ts}: one token bucket. ``subject`` is a key id or an HMAC of an IP."""
    return f"{PREFIX}:rl:{scope}:{subject}"


def hours(start: datetime, end: datetime) -> Iterator[datetime]:
    """Every hour bucket overlapping [start, end), oldest first."""
    first, end_hour = hour_range(start, end)
    for index in range(first, end_hour):
        yield hour_start(index)
