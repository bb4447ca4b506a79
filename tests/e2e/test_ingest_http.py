"""The ingest endpoint over real HTTP (gunicorn): sized and chunked bodies, the body limit, and
the answer's headers, as a client sees them."""
from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator

import redis

from deniable.client.wire import encode_batch, new_batch_id
from deniable.core import keys
from deniable.collector.server import CollectorProcess
from tests.conftest import snapshot

X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"


def post(port: int, body: bytes | Iterator[bytes], chunked: bool = False,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        try:
            connection.request("POST", "/v1/reports", body=body, encode_chunked=chunked,
                               headers={"Content-Type": "application/json", **(headers or {})})
        except BrokenPipeError:
            pass  # the collector answered (413) and closed before the whole body was sent
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def in_pieces(body: bytes, size: int = 1000) -> Iterator[bytes]:
    return (body[i:i + size] for i in range(0, len(body), size))


def test_a_chunked_batch_is_accepted_like_a_sized_one(live_collector: CollectorProcess,
                                                      redis_client: redis.Redis) -> None:
    doc = encode_batch(new_batch_id(), [(X, X_MECH, 1)] * 300)
    status, headers, body = post(live_collector.port, in_pieces(json.dumps(doc).encode()),
                                 chunked=True, headers={"X-Request-Id": "chunked-000001"})
    assert status == 202 and json.loads(body) == {"batch_id": doc["batch_id"], "accepted": 300}
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Request-Id"] == "chunked-000001"
    assert redis_client.exists(keys.batch(doc["batch_id"]))
    # The same batch again, sized this time: one batch, counted once.
    status, _, body = post(live_collector.port, json.dumps(doc).encode())
    assert status == 200 and json.loads(body)["duplicate"] is True


def test_a_body_over_the_limit_is_refused_sized_or_chunked(live_collector: CollectorProcess,
                                                           redis_client: redis.Redis) -> None:
    huge = json.dumps(encode_batch(new_batch_id(), [(X, X_MECH, 1)] * 1000)).encode()
    huge = huge[:-2] + b" " * ((1 << 20) - len(huge) + 1) + huge[-2:]  # 1 MiB + 1 byte
    before = snapshot(redis_client)
    for chunked in (False, True):
        status, headers, body = post(live_collector.port,
                                     in_pieces(huge, 65536) if chunked else huge, chunked)
        assert status == 413, chunked
        assert headers["Content-Type"] == "application/problem+json"
        assert json.loads(body)["status"] == 413
    assert snapshot(redis_client) == before
    # One byte less fits (and the spaces are valid JSON, so it takes the careful path).
    fits = huge[:-3] + huge[-2:]
    assert post(live_collector.port, fits)[0] == 202


def raw_exchange(port: int, request: bytes) -> bytes:
    """Send bytes as they are, stop sending, and read the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_body_cut_short_or_a_broken_chunk_is_a_400(live_collector: CollectorProcess,
                                                     redis_client: redis.Redis) -> None:
    body = json.dumps(encode_batch(new_batch_id(), [(X, X_MECH, 1)] * 10)).encode()
    head = (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
    before = snapshot(redis_client)
    short = raw_exchange(live_collector.port, head + b"Content-Length: %d\r\n\r\n%s"
                         % (len(body) + 50, body))
    broken = raw_exchange(live_collector.port, head + b"Transfer-Encoding: chunked\r\n\r\n"
                          + b"%x\r\n%s\r\nzz\r\n" % (len(body), body))
    for answer in (short, broken):
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert b"application/problem+json" in answer
    assert snapshot(redis_client) == before
