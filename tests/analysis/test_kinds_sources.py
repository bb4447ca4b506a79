"""Counts of every kind from a real Redis (the collector's own write path) and from a collector's
HTTP API documents: every counter slot arrives, and each metric's spec with it."""
from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import numpy as np
import pytest

from deniable.analysis import HTTPSource, RedisSource, summarize
from deniable.analysis.sources import SourceError, decode_months, spec_of
from deniable.client.errors import InvalidParameterError
from deniable.client.kinds import MetricSpec
from deniable.core import keys
from deniable.collector.live_registry import Entry
from deniable.collector.store import Store
from tests.conftest import put_counts

OS = MetricSpec.build("categorical", epsilon=2.0, categories=["android", "ios", "linux"])
WIDE = MetricSpec.build("categorical", epsilon=4.0,
                        categories=[f"c{i}" for i in range(1024)])   # OUE, width 1025
STARTUP = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=5000)


def _now_hour() -> datetime:
    return datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)


@pytest.mark.parametrize("spec", [OS, WIDE, STARTUP], ids=["grr-4", "oue-1025", "bm-2"])
def test_decode_months_reads_every_slot_of_any_width(redis_client, spec) -> None:  # type: ignore[no-untyped-def]
    width = spec.mechanism.width
    now = _now_hour()
    rng = np.random.default_rng(width)
    written = {}
    for back in (1, 5, 24 * 40):  # two months when the range is long enough
        row = rng.integers(0, 50, size=width)
        row[0] = 60
        written[keys.hour_index(now - timedelta(hours=back))] = tuple(int(v) for v in row)
    put_counts(redis_client, "m", spec.mechanism.id,
               {keys.hour_start(h): v for h, v in written.items()})  # type: ignore[misc]
    first, end = min(written), keys.hour_index(now) + 1
    months = Store(redis_client).month_strings("m", spec.mechanism.id, first, end)
    hours, values = decode_months(months, width, first, end)
    assert hours.tolist() == sorted(written)
    assert values.shape == (3, width)
    assert [tuple(v) for v in values.tolist()] == [written[h] for h in sorted(written)]


def _register(redis_client, name: str, spec: MetricSpec) -> None:  # type: ignore[no-untyped-def]
    """Write a registry entry whose version carries the spec's fields (the registry JSON of
    issue 12); skip when this collector's registry cannot hold the kind yet."""
    version = {"version": 1, "mechanism": spec.mechanism.id,
               "registered": "2026-11-01T00:00:00+00:00", "memoization": "memoized",
               "instantaneous": None, "period": "day", **spec.describe()}
    text = json.dumps({"name": name, "description": f"{name} description",
                       "retention_days": 90, "retired": None, "versions": [version]})
    try:
        Entry.from_json(text)
    except (InvalidParameterError, KeyError, TypeError) as exc:
        pytest.skip(f"the live registry does not hold {spec.kind} metrics yet: {exc}")
    redis_client.hset(keys.registry(), name, text)
    redis_client.set(keys.registry_generation(), f"gen-{name}")


@pytest.mark.parametrize("spec", [OS, STARTUP], ids=["categorical", "numeric"])
def test_redis_source_reads_specs_and_every_slot(redis_client, redis_url, spec) -> None:  # type: ignore[no-untyped-def]
    _register(redis_client, "kinded", spec)
    now = _now_hour()
    row = (100, 60, 30, 20) if spec is OS else (100, 40)
    put_counts(redis_client, "kinded", spec.mechanism.id, {now - timedelta(hours=2): row})  # type: ignore[dict-item]
    source = RedisSource(redis_url)
    info = source.metrics()["kinded"]
    assert info.spec == spec and info.kind == spec.kind
    counts = source.counts("kinded", now - timedelta(days=1), now + timedelta(hours=1))
    assert counts.values.tolist() == [list(row)]
    summary = summarize(counts)
    assert (summary.categories is not None) == (spec is OS)


class _Collector(BaseHTTPRequestHandler):
    """Serves fixed catalogue and counts documents in the shapes of SPEC-12 (a collector's
    read API), so HTTPSource is checked against the contract."""

    documents: dict[str, Any] = {}

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        path = self.path.split("?", 1)[0]
        body = self.documents.get(path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body or {"detail": "no"}).encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def collector_docs() -> Iterator[tuple[str, dict[str, Any]]]:
    docs: dict[str, Any] = {}
    _Collector.documents = docs
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", docs
    finally:
        server.shutdown()
        server.server_close()


def _entry(name: str, spec: MetricSpec) -> dict[str, Any]:
    return {"name": name, "description": "", "mechanism": spec.mechanism.id, "version": 1,
            "memoization": "memoized", "instantaneous": None, "period": "day",
            **spec.describe()}


def test_http_source_reads_kinds_and_all_slots(collector_docs) -> None:  # type: ignore[no-untyped-def]
    url, docs = collector_docs
    hour = "2026-11-20T10:00:00+00:00"
    docs["/v1/metrics"] = {"metrics": [_entry("os", OS), _entry("startup_ms", STARTUP)]}
    docs["/v1/metrics/os/counts"] = {**_entry("os", OS), "buckets": [
        {"start": hour, "counts": [100, 60, 30, 20]}]}
    docs["/v1/metrics/startup_ms/counts"] = {**_entry("startup_ms", STARTUP), "buckets": [
        {"start": hour, "n": 100, "ones": 40}]}          # width 2: n and ones suffice
    source = HTTPSource(url)
    assert {n: i.kind for n, i in source.metrics().items()} == \
        {"os": "categorical", "startup_ms": "numeric"}
    start = datetime(2026, 11, 19, tzinfo=timezone.utc)
    os_counts = source.counts("os", start, start + timedelta(days=2))
    assert os_counts.values.tolist() == [[100, 60, 30, 20]]
    assert source.metrics()["os"].spec.labels == ("android", "ios", "linux")
    assert source.counts("startup_ms", start, start + timedelta(days=2)).values.tolist() == \
        [[100, 40]]
    docs["/v1/metrics/os/counts"]["buckets"] = [{"start": hour, "n": 100, "ones": 60}]
    with pytest.raises(SourceError):  # a categorical bucket needs every slot
        source.counts("os", start, start + timedelta(days=2))


def test_spec_of_is_lenient_for_booleans_and_strict_on_a_changed_declaration() -> None:
    from deniable.client.mechanism import RandomizedResponse

    assert spec_of({}, RandomizedResponse()).kind == "boolean"
    parsed = spec_of({"kind": "categorical", "categories": list(OS.categories)}, OS.mechanism)
    assert (parsed.kind, parsed.labels, parsed.mechanism) == ("categorical", OS.labels,
                                                              OS.mechanism)
    with pytest.raises(SourceError):
        spec_of({"kind": "categorical", "categories": ["android", "ios", "bsd"]}, OS.mechanism)
