"""A privacy scan of what the server holds: every Redis key, value and expiry, and log lines.

It reports anything that identifies a batch's content or times a write more finely than the
hour, and anything the key layout (``keys.py``) does not define:

- a key outside the layout; a layout-1 counters hash (its TTL dates its first write to the
  second: run ``deniable migrate``);
- a counters string or batch record with no expiry, or one whose expiry is not on a UTC hour
  boundary;
- a batch record holding anything but ``1`` or a 128-bit keyed HMAC: a 256-bit hex value is
  the layout-1 unkeyed SHA-256 of the content, and any value equal to the unkeyed digest
  (whole or truncated) of a batch the scan can enumerate (one metric of the registry, up to
  ``max_enumerated_n`` reports) is reversible, and reported as such;
- an IP address in any key or value; a rate-limit subject that is not a keyed hash or key id;
  a rate-limit bucket that lives longer than ``max_rate_limit_ttl_seconds`` (rate-limit buckets
  hold the time of their last request by nature: the one documented exception, allowed only
  because they hold no content and live seconds);
- in log lines: an IP address, a batch id or batch record value found in Redis, a report body
  or batch fields (``batch_id``, ``reports``, ``ones``, ``digest``), a user agent.

The registry and API-key records hold the times of admin actions (metric registration and
retirement, key creation), never of reports; they are not timing findings.

``scan(redis_url, log_lines)`` is the entry point for tools (``deniable audit``); it returns
the findings, empty when clean.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import redis
import redis.cluster

from deniable.core import keys

HOUR_MS = keys.HOUR_SECONDS * 1000
_HEX32 = re.compile(r"^[0-9a-f]{32}\Z")
_HEX16 = re.compile(r"^[0-9a-f]{16}\Z")
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
_IPV6 = re.compile(r"[0-9A-Fa-f:]*:[0-9A-Fa-f:]*:[0-9A-Fa-f:]*")  # candidates; ipaddress decides
_LOG_FIELDS = ("batch_id", "reports", "ones", "digest", "user_agent", "remote_addr",
               "client_ip", "body")


@dataclass(frozen=True)
class Finding:
    """One thing the server should not hold.

    Attributes:
        kind: "key", "value", "ttl" or "log".
        where: the Redis key, or ``log line N`` (1-based).
        problem: what is wrong, in words.
    """

    kind: str
    where: str
    problem: str


def scan(redis_url: str, log_lines: Iterable[str] = (), *, cluster: bool = False,
         max_enumerated_n: int = 64) -> list[Finding]:
    """Scan a collector's Redis (and its log lines, if given); the findings, empty when clean."""
    client: redis.Redis | redis.cluster.RedisCluster
    if cluster:
        client = redis.cluster.RedisCluster.from_url(redis_url)
    else:
        client = redis.Redis.from_url(redis_url)
    try:
        findings, seen = scan_redis_with_ids(client, max_enumerated_n=max_enumerated_n)
        return findings + scan_log_lines(log_lines, seen)
    finally:
        client.close()


def scan_redis(client: redis.Redis | redis.cluster.RedisCluster, *,
               max_enumerated_n: int = 64,
               max_rate_limit_ttl_seconds: int = 86400) -> list[Finding]:
    """Every finding in Redis (see the module docstring)."""
    return scan_redis_with_ids(client, max_enumerated_n=max_enumerated_n,
                               max_rate_limit_ttl_seconds=max_rate_limit_ttl_seconds)[0]


def scan_redis_with_ids(client: redis.Redis | redis.cluster.RedisCluster, *,
                        max_enumerated_n: int = 64,
                        max_rate_limit_ttl_seconds: int = 86400
                        ) -> tuple[list[Finding], set[str]]:
    """Findings in Redis, and the batch ids and record values seen (for the log scan)."""
    findings: list[Finding] = []
    identifiers: set[str] = set()
    records: dict[str, str] = {}
    for raw in client.scan_iter(count=1000):
        key = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        kind = _classify(key)
        findings.extend(_key_findings(key, kind))
        kind_type = _text(client.type(key))
        if kind == "batch_markers" and kind_type == "hash":
            markers = {_raw(f): _raw(v) for f, v in client.hgetall(key).items()}
            values = [_text(v) for v in markers.values()]
            identifiers.update(f.hex() for f in markers)
            findings.extend(_marker_findings(key, markers))
        else:
            values = _values(client, key, kind_type)
        for value in values:
            for address in _addresses(value):
                findings.append(Finding("value", key, f"holds an IP address ({address})"))
        if kind in ("batch", "batch_applied"):
            batch_id = key.rsplit(":", 1)[1]
            identifiers.add(batch_id)
            value = values[0] if values else ""
            identifiers.add(value)
            records[key] = value
            findings.extend(_record_findings(key, value))
        expiry = _expire_at_ms(client, key)
        if kind in ("counters", "batch", "batch_applied", "batch_markers", "counters_v1"):
            if expiry is None:
                findings.append(Finding("ttl", key, "has no expiry (retention is not enforced)"))
            elif not _on_hour(expiry):
                findings.append(Finding(
                    "ttl", key, f"expires at {expiry} ms, not on an hour boundary: the expiry "
                                "dates the write more finely than the hour"))
        elif kind == "rate_limit" and expiry is not None:
            remaining = expiry - _server_ms(client)
            if remaining > max_rate_limit_ttl_seconds * 1000:
                findings.append(Finding("ttl", key, f"a rate-limit bucket lives "
                                                    f"{remaining // 1000} s: more than "
                                                    f"{max_rate_limit_ttl_seconds} s"))
    findings.extend(_reversed_records(client, records, max_enumerated_n))
    identifiers.discard("1")
    identifiers.discard("")
    return findings, identifiers


def scan_log_lines(lines: Iterable[str], identifiers: Iterable[str] = ()) -> list[Finding]:
    """Findings in log lines: addresses, batch fields or bodies, and any batch id or batch
    record value from ``identifiers`` (which would tie a record to the line's time)."""
    known = [i for i in identifiers if len(i) >= 16]
    findings = []
    for number, line in enumerate(lines, start=1):
        where = f"log line {number}"
        for address in _addresses(line):
            findings.append(Finding("log", where, f"holds an IP address ({address})"))
        for identifier in known:
            if identifier in line:
                findings.append(Finding("log", where, f"names batch record {identifier!r}: it "
                                                      "ties the record to the line's time"))
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            for name in _LOG_FIELDS:
                if name in doc:
                    findings.append(Finding("log", where, f"has a {name!r} field"))
        if "User-Agent" in line or '"reports"' in line:
            findings.append(Finding("log", where, "holds a user agent or a report body"))
    return findings


def _classify(key: str) -> str:
    """Which layout entry ``key`` is: counters, counters_v1, batch, batch_applied,
    batch_markers, registry, registry_gen, layout, api_key, api_key_index, rate_limit; or
    "unknown"."""
    if keys.parse_counters(key) is not None or keys.parse_series_counters(key) is not None \
            or keys.parse_open_counters(key) is not None:
        return "counters"  # a dimension series is counters too; its label is allow-listed
    if keys.parse_batch_markers(key) is not None:
        return "batch_markers"
    if keys.parse_counters_v1(key) is not None:
        return "counters_v1"
    if key in (keys.registry(), keys.registry_generation(), keys.api_key_index(),
               keys.layout_marker()):
        return {keys.registry(): "registry", keys.registry_generation(): "registry_gen",
                keys.api_key_index(): "api_key_index", keys.layout_marker(): "layout"}[key]
    head = f"{keys.PREFIX}:"
    rest = key[len(head):] if key.startswith(head) else None
    if rest is None:
        return "unknown"
    if rest.startswith("b:") and _HEX32.match(rest[2:]):
        return "batch"
    if rest.startswith("{auth}:key:"):
        return "api_key"
    if rest.startswith("rl:"):
        return "rate_limit"
    if rest.startswith("{") and "}:b:" in rest and _HEX32.match(rest.rsplit(":", 1)[1]):
        return "batch_applied"
    return "unknown"


def _key_findings(key: str, kind: str) -> list[Finding]:
    found = [Finding("key", key, f"holds an IP address ({a})") for a in _addresses(key)]
    if kind == "unknown":
        found.append(Finding("key", key, "is not in the key layout (src/deniable/core/keys.py)"))
    elif kind == "counters_v1":
        found.append(Finding("key", key, "is a layout-1 hour hash: its TTL dates its first "
                                         "write to the second (run `deniable migrate`)"))
    elif kind == "rate_limit":
        subject = key.rsplit(":", 1)[1]
        if not (_HEX32.match(subject) or _HEX16.match(subject)):
            found.append(Finding("key", key, "a rate-limit subject that is neither a keyed "
                                             "hash nor a key id"))
    return found


def _marker_findings(key: str, markers: Mapping[bytes, bytes]) -> list[Finding]:
    """A marker hash holds only batch ids (16 bytes each) marked ``1``."""
    if all(len(f) == 16 and v == b"1" for f, v in markers.items()):
        return []
    return [Finding("value", key, "holds a marker that is not a 16-byte batch id marked '1'")]


def _record_findings(key: str, value: str) -> list[Finding]:
    if value == "1" or _HEX32.match(value):
        return []
    if _HEX64.match(value):
        return [Finding("value", key, "holds a 256-bit digest: the unkeyed SHA-256 of the "
                                      "batch's content, reversible by enumeration")]
    return [Finding("value", key, "holds neither '1' nor a 128-bit keyed HMAC")]


def _reversed_records(client: redis.Redis | redis.cluster.RedisCluster,
                      records: Mapping[str, str], max_n: int) -> list[Finding]:
    """Batch records equal to the unkeyed digest (whole or its first 128 bits) of a batch of
    one registered metric version with at most ``max_n`` reports: reversible."""
    values = {v: k for k, v in records.items() if v not in ("", "1")}
    if not values or max_n < 1:
        return []
    findings = []
    for metric, mechanism_id in _catalogue(client):
        for n in range(1, max_n + 1):
            for ones in range(n + 1):
                digest = hashlib.sha256(f"{metric}|{mechanism_id}|{n}|{ones}".encode()).hexdigest()
                for candidate in (digest, digest[:32]):
                    if candidate in values:
                        findings.append(Finding(
                            "value", values[candidate],
                            f"reversed: the unkeyed digest of {metric} ({mechanism_id}), "
                            f"n={n}, ones={ones}"))
    return findings


def _catalogue(client: redis.Redis | redis.cluster.RedisCluster) -> list[tuple[str, str]]:
    """(metric, mechanism id) of every version in the registry."""
    found: list[tuple[str, str]] = []
    for raw in client.hvals(keys.registry()):
        try:
            entry = json.loads(raw)
            found.extend((entry["name"], v["mechanism"]) for v in entry["versions"])
        except (ValueError, KeyError, TypeError):
            continue
    return found


def _values(client: redis.Redis | redis.cluster.RedisCluster, key: str,
            kind_type: str) -> list[str]:
    """A key's values as text (a counters string's bytes are binary: none)."""
    if kind_type == "string":
        raw = client.get(key)
        if raw is None or keys.parse_counters(key) is not None or \
                keys.parse_series_counters(key) is not None or \
                keys.parse_open_counters(key) is not None:
            return []
        return [raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)]
    if kind_type == "hash":
        return [_text(x) for pair in client.hgetall(key).items() for x in pair]
    if kind_type == "set":
        return [_text(x) for x in client.smembers(key)]
    if kind_type == "list":
        return [_text(x) for x in client.lrange(key, 0, -1)]
    if kind_type == "zset":
        return [_text(x) for x in client.zrange(key, 0, -1)]
    return []


def _expire_at_ms(client: redis.Redis | redis.cluster.RedisCluster, key: str) -> int | None:
    """When ``key`` expires (Unix ms; None: never). EXPIRETIME where Redis has it (7.0+),
    else the server's TIME plus PTTL (exact to a millisecond or two)."""
    try:
        at = int(client.execute_command("PEXPIRETIME", key))
        return None if at < 0 else at
    except redis.ResponseError:  # Redis 6.2: no PEXPIRETIME
        now = _server_ms(client)
        remaining = int(client.pttl(key))
        return None if remaining < 0 else now + remaining


def _on_hour(expire_ms: int) -> bool:
    """On a UTC hour boundary, allowing 5 ms for an expiry computed from TIME + PTTL."""
    offset = expire_ms % HOUR_MS
    return min(offset, HOUR_MS - offset) <= 5


def _server_ms(client: redis.Redis | redis.cluster.RedisCluster) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _addresses(text: str) -> Sequence[str]:
    found: list[str] = []
    for match in _IPV4.findall(text):
        try:
            ipaddress.IPv4Address(match)
        except ValueError:
            continue
        found.append(match)
    for match in _IPV6.findall(text):
        try:
            ipaddress.IPv6Address(match)
        except ValueError:
            continue
        found.append(match)
    return found


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _raw(value: bytes | str) -> bytes:
    """A Redis reply as bytes (the scan's client returns bytes; a decoding one, str)."""
    return value if isinstance(value, bytes) else value.encode()
