"""Hostile reports for the new wire shapes (``index`` for GRR, ``bits`` for OUE, ``bit`` for
1BitMean), sent to the collector's ingest endpoint on real Redis.

The pass bar, for every case: no 5xx, a problem document whose first error names the
offending field, and Redis byte-for-byte unchanged (a DUMP of every key).
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from deniable.client.categorical import UnaryEncoding, domain_tag
from deniable.client.kinds import MetricSpec
from deniable.client.wire import encode_batch
from deniable.collector.app import create_app
from deniable.collector.store import Store
from tests.conftest import OPEN, snapshot

CAT = MetricSpec.build("categorical", epsilon=1.0, categories=list("abcde"))      # GRR, d = 5
WIDE = MetricSpec.build("categorical", categories=list("uvwxyz"),                # OUE, d = 6
                        mechanism=UnaryEncoding.from_epsilon(0.1, 6, domain_tag(list("uvwxyz"))))
BIG = MetricSpec.build("categorical", categories=[f"c{i}" for i in range(1024)],  # OUE, d = 1024
                       mechanism=UnaryEncoding.from_epsilon(
                           1.0, 1024, domain_tag([f"c{i}" for i in range(1024)])))
NUM = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=10)                # 1BitMean
FLAG = "rr:1/2:1/2"
C, W, B, N = CAT.mechanism.id, WIDE.mechanism.id, BIG.mechanism.id, NUM.mechanism.id
BATCH_ID = "0123456789abcdef0123456789abcdef"


def metrics_toml() -> str:
    lines = []
    for name, spec in (("cat", CAT), ("wide", WIDE), ("big", BIG), ("num", NUM)):
        doc = {k: v for k, v in spec.describe().items() if k != "choice"}
        lines.append(f"[metrics.{name}]\nmechanism = {json.dumps(spec.mechanism.id)}")
        lines += [f"{k} = {json.dumps(v)}" for k, v in doc.items()]
    lines.append(f'[metrics.flag]\nmechanism = "{FLAG}"')
    return "\n".join(lines) + "\n"


def test_the_shapes_are_the_ones_meant() -> None:
    assert (C[:6], W[:6], B[:9], N[:3]) == ("grr:5:", "oue:6:", "oue:1024:", "bm:")


@pytest.fixture(scope="module")
def metrics_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kinds") / "metrics.toml"
    path.write_text(metrics_toml())
    return path




def report(metric: str, mechanism: str, **payload: object) -> dict:
    return {"metric": metric, "mechanism": mechanism, **payload}


def body(*reports: dict) -> bytes:
    return orjson.dumps({"batch_id": BATCH_ID, "reports": list(reports)})


def raw(*reports: str) -> bytes:
    return f'{{"batch_id":"{BATCH_ID}","reports":[{",".join(reports)}]}}'.encode()


GOOD_CAT = report("cat", C, index=0)
HOSTILE: dict[str, tuple[bytes, int, str]] = {
    # GRR: an index in [0, d), an int and nothing else
    "index = d": (body(report("cat", C, index=5)), 422, "/reports/0/index"),
    "index -1": (body(report("cat", C, index=-1)), 422, "/reports/0/index"),
    "index 2**63": (raw(f'{{"metric":"cat","mechanism":"{C}","index":{2 ** 63}}}'), 422,
                    "/reports/0/index"),
    "index past 64 bits": (raw(f'{{"metric":"cat","mechanism":"{C}","index":{10 ** 30}}}'),
                           422, "/reports/0/index"),
    "index true": (body(report("cat", C, index=True)), 422, "/reports/0/index"),
    "index false": (body(report("cat", C, index=False)), 422, "/reports/0/index"),
    "index 1.0": (body(report("cat", C, index=1.0)), 422, "/reports/0/index"),
    "index 1e0": (raw(f'{{"metric":"cat","mechanism":"{C}","index":1e0}}'), 422,
                  "/reports/0/index"),
    "index '1'": (body(report("cat", C, index="1")), 422, "/reports/0/index"),
    "index null": (body(report("cat", C, index=None)), 422, "/reports/0/index"),
    "index [1]": (body(report("cat", C, index=[1])), 422, "/reports/0/index"),
    # OUE: exactly ceil(d / 4) lowercase hex digits, no bit at or above d
    "bits too short": (body(report("wide", W, bits="3")), 422, "/reports/0/bits"),
    "bits too long": (body(report("wide", W, bits="003")), 422, "/reports/0/bits"),
    "bits upper case": (body(report("wide", W, bits="3F")), 422, "/reports/0/bits"),
    "bits bit d set": (body(report("wide", W, bits="40")), 422, "/reports/0/bits"),
    "bits high bits": (body(report("wide", W, bits="ff")), 422, "/reports/0/bits"),
    "bits 0x": (body(report("wide", W, bits="0x")), 422, "/reports/0/bits"),
    "bits space": (body(report("wide", W, bits=" 3")), 422, "/reports/0/bits"),
    "bits non-hex": (body(report("wide", W, bits="zz")), 422, "/reports/0/bits"),
    "bits an int": (body(report("wide", W, bits=3)), 422, "/reports/0/bits"),
    "bits a list": (body(report("wide", W, bits=[1, 1])), 422, "/reports/0/bits"),
    "bits unicode digits": (body(report("wide", W, bits="\u0663\u0663")), 422,
                            "/reports/0/bits"),
    "bits d=1024 upper case": (body(report("big", B, bits="F" * 256)), 422, "/reports/0/bits"),
    "bits d=1024 one short": (body(report("big", B, bits="f" * 255)), 422, "/reports/0/bits"),
    # each mechanism takes its own payload field, and only it
    "bit on a grr metric": (body(report("cat", C, bit=1)), 422, "/reports/0/index"),
    "bits on a grr metric": (body(report("cat", C, bits="1")), 422, "/reports/0/index"),
    "index on an rr metric": (body(report("flag", FLAG, index=1)), 422, "/reports/0/bit"),
    "index on an oue metric": (body(report("wide", W, index=1)), 422, "/reports/0/bits"),
    "index on a bm metric": (body(report("num", N, index=1)), 422, "/reports/0/bit"),
    "bit and index": (body(report("cat", C, index=1, bit=1)), 422, "/reports/0/bit"),
    "bm bit 2": (body(report("num", N, bit=2)), 422, "/reports/0/bit"),
    "bm bit true": (body(report("num", N, bit=True)), 422, "/reports/0/bit"),
    # the registered mechanism, exactly
    "another metric's mechanism": (body(report("cat", W, bits="01")), 422,
                                   "/reports/0/mechanism"),
    "grr id with another tag": (body(report("cat", C[:-8] + "00000000", index=0)), 422,
                                "/reports/0/mechanism"),
    "grr id with another d": (body(report("cat", C.replace("grr:5:", "grr:6:"), index=0)),
                              422, "/reports/0/mechanism"),
    "a junk id with the registered payload": (body(report("cat", "rr:zzz", index=0)), 422,
                                              "/reports/0/mechanism"),
    "an rr id with a bit on a grr metric": (body(report("cat", FLAG, bit=1)), 422,
                                            "/reports/0/mechanism"),
    "bm id with other bounds": (body(report("num", N[:-5] + ":0:11", bit=1)), 422,
                                "/reports/0/mechanism"),
    # one bad report refuses the whole batch
    "good then bad": (body(GOOD_CAT, GOOD_CAT, report("cat", C, index=9)), 422,
                      "/reports/2/index"),
    "repeated bits key": (raw(f'{{"metric":"wide","mechanism":"{W}","bits":"01",'
                              f'"bits":"01"}}'), 400, ""),
    "repeated index key": (raw(f'{{"metric":"cat","mechanism":"{C}","index":1,"index":2}}'),
                           400, ""),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_reports_are_refused_naming_the_field_and_change_nothing(
        http, redis_client: redis.Redis, case: str) -> None:  # type: ignore[no-untyped-def]
    data, status, pointer = HOSTILE[case]
    http.post("/v1/reports", json=encode_batch("f" * 32, [("cat", C, 1), ("wide", W, "01")]))
    before = snapshot(redis_client)
    assert before  # there is something to change
    response = http.post("/v1/reports", data=data, content_type="application/json")
    assert response.status_code == status, response.json
    assert response.mimetype == "application/problem+json"
    if pointer:
        assert response.json["errors"][0]["pointer"] == pointer, response.json
    assert snapshot(redis_client) == before


def test_a_batch_mixing_two_versions_of_a_metric_is_refused(http,  # type: ignore[no-untyped-def]
                                                            redis_client: redis.Redis) -> None:
    created = http.post("/v1/admin/metrics", json={
        "name": "cat", "kind": "categorical", "categories": list("abcdef"), "epsilon": 1.0})
    assert created.status_code == 201
    new = created.json["metric"]["mechanism"]
    before = snapshot(redis_client)
    mixed = http.post("/v1/reports", json=encode_batch(BATCH_ID, [("cat", C, 4),
                                                                  ("cat", new, 5)]))
    assert mixed.status_code == 422
    assert mixed.json["errors"][0]["pointer"] == "/reports/1/mechanism"
    # The new version's index 5 is out of range for the old one: each is checked against
    # the mechanism it names.
    old_out_of_range = http.post("/v1/reports", json=encode_batch(BATCH_ID, [("cat", C, 5)]))
    assert old_out_of_range.status_code == 422
    assert old_out_of_range.json["errors"][0]["pointer"] == "/reports/0/index"
    assert snapshot(redis_client) == before
    for mechanism, index in ((C, 4), (new, 5)):  # each version alone is counted
        assert http.post("/v1/reports", json=encode_batch(
            f"{index:032x}", [("cat", mechanism, index)])).status_code == 202


def big_batch(batch_id: str, n: int) -> tuple[bytes, list[int]]:
    """``n`` OUE reports of d = 1024 in the client's compact layout, and what they count."""
    reports, expected = [], [n] + [0] * 1024
    for i in range(n):
        bits = (1 << (i % 1024)) | (1 << ((i * 7 + 3) % 1024))
        for slot in range(1024):
            expected[1 + slot] += bits >> slot & 1
        reports.append(("big", B, BIG.mechanism.encode_bits(bits)))  # type: ignore[union-attr]
    doc = encode_batch(batch_id, reports)
    return json.dumps(doc, separators=(",", ":")).encode(), expected


@pytest.fixture()
def limited(redis_url: str, metrics_file: Path,  # type: ignore[no-untyped-def]
            redis_client: redis.Redis) -> Iterator[tuple]:
    """A collector whose body limit is exactly one full batch of d = 1024 reports."""
    full, expected = big_batch(BATCH_ID, 1000)
    app = create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file), "TESTING": True,
                      **OPEN, "MAX_BODY_BYTES": len(full)})
    yield app.test_client(), full, expected


def test_a_full_batch_of_d_1024_at_the_body_limit_is_counted_exactly(
        limited, redis_client: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    http, full, expected = limited
    assert 300_000 < len(full) < 1 << 20  # 1000 reports of 256 hex digits fit the default MiB
    before = snapshot(redis_client)
    over = http.post("/v1/reports", data=full + b" ", content_type="application/json")
    assert over.status_code == 413
    too_many, _ = big_batch("e" * 32, 1001)
    refused = http.post("/v1/reports", data=too_many, content_type="application/json")
    assert refused.status_code == 413  # past the limit too: refused before it is parsed
    assert snapshot(redis_client) == before
    started = time.perf_counter()
    accepted = http.post("/v1/reports", data=full, content_type="application/json")
    seconds = time.perf_counter() - started
    assert accepted.status_code == 202, accepted.json
    assert accepted.json["accepted"] == 1000
    totals = http.get("/v1/metrics/big/counts").json["buckets"]
    assert [b["counts"] for b in totals] == [expected]
    assert seconds < 10  # generous for a shared 2-core machine; measured ~0.1 s alone
    again = http.post("/v1/reports", data=full, content_type="application/json")
    assert again.status_code == 200 and again.json["duplicate"]  # a re-send counts once
    assert [b["counts"] for b in http.get("/v1/metrics/big/counts").json["buckets"]] == \
        [expected]


def test_a_d_1024_batch_with_one_bad_report_or_too_many_reports_changes_nothing(
        http, redis_client: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    full, _ = big_batch(BATCH_ID, 1000)
    before = snapshot(redis_client)
    last_bad = full[:-len('"}]}') - 256] + b"F" * 256 + b'"}]}'  # upper-case hex
    response = http.post("/v1/reports", data=last_bad, content_type="application/json")
    assert response.status_code == 422
    assert response.json["errors"][0]["pointer"] == "/reports/999/bits"
    too_many, _ = big_batch("e" * 32, 1001)
    response = http.post("/v1/reports", data=too_many, content_type="application/json")
    assert response.status_code == 422
    assert response.json["errors"][0]["pointer"] == "/reports"
    assert snapshot(redis_client) == before
    assert Store(redis_client).totals() == {}
