"""The floor of ingest: a bare WSGI app that reads, validates and applies a batch with the
collector's own code (the compact reading, then one EVALSHA) and nothing else: no auth, no
metrics, no logs, no request ids, no error handling. bench/ingest.py serves it exactly as the
collector is served, to show what the collector's features cost on top of the work itself."""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import orjson

from deniable.client.wire import decode_compact_batch
from deniable.collector.store import Store, connect

REGISTRY: dict[str, str] = json.loads(os.environ["BENCH_REGISTRY"])
RETENTION = {metric: 90 for metric in REGISTRY}
store = Store(connect(os.environ["DENIABLE_REDIS_URL"]))


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    batch = decode_compact_batch(body, REGISTRY)
    if batch is None:
        raise ValueError("the bench sends compact batches only")
    store.add_batch(batch, datetime.now(timezone.utc), RETENTION, 7 * 86400)
    out = orjson.dumps({"batch_id": batch.batch_id, "accepted": batch.n_reports})
    start_response("202 Accepted", [("Content-Type", "application/json"),
                                    ("Content-Length", str(len(out)))])
    return [out]
