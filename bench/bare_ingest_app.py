"""The floor of ingest: a bare WSGI app that parses, validates, checks for repeated keys and
applies a batch with the collector's own code and one EVALSHA, and nothing else (no Flask, no
auth, no metrics, no logs). bench/ingest.py serves it exactly as the collector is served, to
show how much of the gap to a no-op endpoint is the work itself and how much the features."""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import orjson

from deniable.client.wire import decode_batch
from deniable.collector.ingest import repeats_a_key
from deniable.collector.store import Store, connect

REGISTRY: dict[str, str] = json.loads(os.environ["BENCH_REGISTRY"])
RETENTION = {metric: 90 for metric in REGISTRY}
store = Store(connect(os.environ["DENIABLE_REDIS_URL"]))


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    batch = decode_batch(orjson.loads(body), REGISTRY)
    if repeats_a_key(body, batch.n_reports):
        raise ValueError("repeated key")
    store.add_batch(batch, datetime.now(timezone.utc), RETENTION, 7 * 86400)
    out = orjson.dumps({"batch_id": batch.batch_id, "accepted": batch.n_reports})
    start_response("202 Accepted", [("Content-Type", "application/json"),
                                    ("Content-Length", str(len(out)))])
    return [out]
