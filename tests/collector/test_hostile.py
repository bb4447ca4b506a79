"""Our own corpus of hostile inputs, sent over HTTP to a real collector (gunicorn) on real Redis.

The pass bar: no 5xx, a problem+json answer, and Redis byte-for-byte unchanged after every
rejected request.
"""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
import requests

from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV, snapshot

X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"
BATCH_ID = "0123456789abcdef0123456789abcdef"
GOOD_REPORT = '{"metric":"feature_x_enabled","mechanism":"rr:1/2:1/2","bit":1}'


def body(reports: str = GOOD_REPORT, batch_id: str = BATCH_ID) -> bytes:
    return f'{{"batch_id":"{batch_id}","reports":[{reports}]}}'.encode()


def report_with_bit(bit: str) -> str:
    return f'{{"metric":"feature_x_enabled","mechanism":"rr:1/2:1/2","bit":{bit}}}'


def report_named(metric: str) -> str:
    return f'{{"metric":{json.dumps(metric)},"mechanism":"rr:1/2:1/2","bit":1}}'


HOSTILE: dict[str, tuple[bytes, set[int]]] = {
    "deep nesting": (b'{"batch_id":' + b"[" * 100_000 + b"]" * 100_000 + b"}", {400, 413}),
    "deep nesting within the limits": (b"[" * 5000 + b"]" * 5000, {400}),
    "nested report": (body('{"metric":{"metric":{"metric":[[[[1]]]]}},"mechanism":"x","bit":1}'),
                      {422}),
    "huge integer bit": (body(report_with_bit("1" + "0" * 400)), {400, 422}),
    "huge exponent bit": (body(report_with_bit("1e400")), {400, 422}),
    "64-bit overflow bit": (body(report_with_bit("18446744073709551617")), {400, 422}),
    "true for 1": (body(report_with_bit("true")), {422}),
    "1.0 for 1": (body(report_with_bit("1.0")), {422}),
    "string 1 for 1": (body(report_with_bit('"1"')), {422}),
    "-0 for 0": (body(report_with_bit("-0.0")), {422}),
    "NaN bit": (body(report_with_bit("NaN")), {400}),
    "Infinity bit": (body(report_with_bit("Infinity")), {400}),
    "duplicate bit key": (body('{"metric":"feature_x_enabled","mechanism":"rr:1/2:1/2",'
                               '"bit":0,"bit":1}'), {400}),
    "duplicate batch_id key": (
        f'{{"batch_id":"{BATCH_ID}","batch_id":"{"f" * 32}","reports":[{GOOD_REPORT}]}}'
        .encode(), {400}),
    "duplicate reports key": (
        f'{{"batch_id":"{BATCH_ID}","reports":[],"reports":[{GOOD_REPORT}]}}'.encode(), {400}),
    "duplicate key with spaces": (body('{"metric" : "feature_x_enabled", "mechanism" :'
                                       ' "rr:1/2:1/2", "bit" : 1, "bit"\n:\t1}'), {400}),
    "non-UTF-8 bytes": (body().replace(b"feature_x", b"feature_\xff\xfe"), {400}),
    "lone surrogate escape": (body(report_named("\ud800")), {400, 422}),
    "UTF-16 body": (body().decode().encode("utf-16"), {400}),
    "empty body": (b"", {400}),
    "not an object": (b'"reports"', {422}),
    "null": (b"null", {422}),
    "10 MB body": (b'{"batch_id":"' + b"a" * (10 << 20) + b'"}', {413}),
    "100,000 reports": (body(",".join([GOOD_REPORT] * 100_000)), {413}),
    "glob metric *": (body(report_named("*")), {422}),
    "glob metric ?": (body(report_named("feature_x_enable?")), {422}),
    "glob metric [": (body(report_named("feature_[x]_enabled")), {422}),
    "hash-tag metric {": (body(report_named("{feature_x_enabled}")), {422}),
    "hash-tag metric }": (body(report_named("a}b{c")), {422}),
    "metric with colon": (body(report_named("dn:v1:x")), {422}),
    "metric with NUL": (body(report_named("feature_x_enabled\u0000")), {422}),
    "batch_id glob": (body(batch_id="*" * 32), {422}),
    "batch_id hash tag": (body(batch_id="{" + "a" * 30 + "}"), {422}),
    "unknown field": (body(GOOD_REPORT.replace('"bit":1', '"bit":1,"device_id":"abc"')), {422}),
    "wrong mechanism": (body(GOOD_REPORT.replace("rr:1/2:1/2", "rr:1/2:1/3")), {422}),
}


@pytest.fixture(scope="module")
def collector(redis_url: str, metrics_file) -> Iterator[CollectorProcess]:  # type: ignore[no-untyped-def]
    with CollectorProcess(redis_url, metrics_file, workers=2, env=OPEN_ENV) as live:
        yield live


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_body_is_rejected_and_changes_nothing(
        name: str, collector: CollectorProcess, redis_client: redis.Redis) -> None:
    payload, expected = HOSTILE[name]
    # Something already counted, so "unchanged" is not trivially "empty".
    seed = encode_batch(new_batch_id(), [(X, X_MECH, 1), (X, X_MECH, 0)])
    assert requests.post(f"{collector.url}/v1/reports", json=seed, timeout=10).status_code == 202
    before = snapshot(redis_client)
    try:
        response = requests.post(f"{collector.url}/v1/reports", data=payload, timeout=30,
                                 headers={"Content-Type": "application/json"})
    except requests.ConnectionError:
        # A server may hang up on a body it will not read; it still must not count anything.
        assert name in {"10 MB body", "100,000 reports"}, name
    else:
        assert response.status_code in expected, (response.status_code, response.text[:300])
        assert response.headers["Content-Type"] == "application/problem+json"
        assert response.json()["status"] == response.status_code
        assert "Traceback" not in response.text
    assert snapshot(redis_client) == before
    assert requests.get(f"{collector.url}/healthz", timeout=10).status_code == 200


def test_a_batch_id_reused_with_other_content_gets_409_and_counts_nothing(
        collector: CollectorProcess, redis_client: redis.Redis) -> None:
    batch_id = new_batch_id()
    first = encode_batch(batch_id, [(X, X_MECH, 1)] * 3)
    assert requests.post(f"{collector.url}/v1/reports", json=first, timeout=10).status_code == 202
    before = snapshot(redis_client)
    other = encode_batch(batch_id, [(X, X_MECH, 0)] * 3)
    response = requests.post(f"{collector.url}/v1/reports", json=other, timeout=10)
    assert response.status_code == 409
    assert response.json()["errors"] == [{"pointer": "/batch_id",
                                          "detail": "already used for other content"}]
    assert snapshot(redis_client) == before
    resent = requests.post(f"{collector.url}/v1/reports", json=first, timeout=10)
    assert resent.status_code == 200 and resent.json()["duplicate"] is True
    assert snapshot(redis_client) == before


@pytest.mark.slow
def test_100000_reports_under_a_raised_body_limit_get_422(
        redis_url: str, metrics_file, redis_client: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    """With the body limit out of the way, the reports-per-batch limit still holds."""
    payload = body(",".join([GOOD_REPORT] * 100_000))
    with CollectorProcess(redis_url, metrics_file, workers=1,
                          env={**OPEN_ENV, "DENIABLE_MAX_BODY_BYTES": str(16 << 20)}) as live:
        before = snapshot(redis_client)
        response = requests.post(f"{live.url}/v1/reports", data=payload, timeout=30,
                                 headers={"Content-Type": "application/json"})
        assert response.status_code == 422
        assert response.json()["errors"][0]["pointer"] == "/reports"
        assert snapshot(redis_client) == before


def test_a_clean_batch_with_spaces_and_escapes_is_not_taken_for_a_duplicate_key(
        collector: CollectorProcess, redis_client: redis.Redis) -> None:
    """The duplicate-key check counts key ends; pretty-printed or escaped JSON still passes."""
    doc = encode_batch(new_batch_id(), [(X, X_MECH, 1), (X, X_MECH, 0)])
    text = json.dumps(doc, indent=2, separators=(" , ", " :\n ")).replace('"bit"', '"b\\u0069t"')
    response = requests.post(f"{collector.url}/v1/reports", data=text.encode(), timeout=10,
                             headers={"Content-Type": "application/json"})
    assert response.status_code == 202, response.text
