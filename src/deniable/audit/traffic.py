"""The audit's traffic harness: a capturing collector on loopback, and what two devices'
uploads may not differ in (request count, batch sizes, headers, bytes).

Nothing is sent anywhere but 127.0.0.1.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from deniable.client.mechanism import RandomizedResponse
from deniable.client.metrics import describe_metric
from deniable.client.wire import encode_batch


@dataclass(frozen=True)
class Upload:
    """One POST a capturing collector received."""

    body: bytes
    headers: tuple[tuple[str, str], ...]


def uploaded_bits(uploads: list[Upload]) -> list[int]:
    """Every perturbed bit the capturing collector received, in the order sent (the
    client's queue is first in, first out)."""
    return [report["bit"] for upload in uploads for report in json.loads(upload.body)["reports"]]


def traffic_problems(a: list[Upload], b: list[Upload]) -> list[str]:
    """Differences between two devices' uploads that could reveal their true values."""
    problems: list[str] = []
    if len(a) != len(b):
        problems.append(f"{len(a)} uploads for one value, {len(b)} for the other")
    sizes: list[list[int]] = [[], []]
    for side, uploads, out in (("yes", a, sizes[0]), ("no", b, sizes[1])):
        for upload in uploads:
            try:
                doc = json.loads(upload.body)
                reports = [(r["metric"], r["mechanism"], r["bit"]) for r in doc["reports"]]
                canonical = json.dumps(encode_batch(doc["batch_id"], reports),
                                       separators=(",", ":")).encode()
            except (ValueError, KeyError, TypeError):
                problems.append(f"a {side} upload is not a v1 batch")
                break
            if upload.body != canonical:
                problems.append(f"a {side} upload carries more than its perturbed reports")
                break
            out.append(len(reports))
    if sizes[0] != sizes[1]:
        problems.append(f"batch sizes differ: {sizes[0][:5]}... vs {sizes[1][:5]}...")
    headers = ({u.headers for u in a}, {u.headers for u in b})
    if headers[0] != headers[1]:
        problems.append("request headers differ between the two values")
    lengths = ({len(u.body) for u in a}, {len(u.body) for u in b})
    if lengths[0] != lengths[1]:
        problems.append(f"body lengths differ: {sorted(lengths[0])} vs {sorted(lengths[1])}")
    return problems


@contextmanager
def capturing_collector(catalogue: dict[str, RandomizedResponse]
                        ) -> Iterator[tuple[str, list[Upload]]]:
    """A loopback HTTP server that serves ``catalogue`` and keeps every batch it is sent.

    Yields (its URL, the uploads received so far). Nothing is sent anywhere else.
    """
    uploads: list[Upload] = []
    lock = threading.Lock()
    document = json.dumps({"metrics": [describe_metric(name, "", mechanism)
                                       for name, mechanism in catalogue.items()]}).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(200, document)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = tuple(sorted((k.lower(), v) for k, v in self.headers.items()
                                   if k.lower() not in ("content-length", "host")))
            with lock:
                uploads.append(Upload(body, headers))
            self._answer(202, b'{"accepted":true}')

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="deniable-audit-capture",
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", uploads
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
