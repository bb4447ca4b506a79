"""Access control: one role per key, hashes only in Redis, 401 vs 403, revocation, dev mode."""
from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import redis

from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector import auth
from deniable.collector.app import create_app
from deniable.collector.errors import CollectorError
from tests.conftest import snapshot

X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"
NEW_METRIC = {"name": "new_metric", "mechanism": "rr:1/2:1/2"}


def bearer(key: auth.NewKey | str) -> dict[str, str]:
    secret = key.secret if isinstance(key, auth.NewKey) else key
    return {"Authorization": f"Bearer {secret}"}


def report_batch() -> dict:
    return encode_batch(new_batch_id(), [(X, X_MECH, 1), (X, X_MECH, 0)])


@pytest.fixture()
def http(secure_app):  # type: ignore[no-untyped-def]
    return secure_app.test_client()


@pytest.fixture()
def keys_by_role(redis_client: redis.Redis) -> dict[str, auth.NewKey]:
    return {"ingest": auth.create_key(redis_client, "ingest", "shop-app"),
            "read": auth.create_key(redis_client, "read", "analysts"),
            "admin": auth.create_key(redis_client, "admin")}


# (method, path, json body, the one role allowed or a tuple of them, status when allowed)
ENDPOINTS = [
    ("post", "/v1/reports", "batch", ("ingest",), 202),
    ("get", "/v1/metrics", None, ("ingest", "read", "admin"), 200),
    ("get", f"/v1/metrics/{X}/counts", None, ("read",), 200),
    ("post", "/v1/admin/metrics", NEW_METRIC, ("admin",), 201),
    ("get", "/v1/admin/metrics", None, ("admin",), 200),
    ("post", f"/v1/admin/metrics/{X}/retire", None, ("admin",), 200),
]


def call(http, method: str, path: str, body, headers: dict[str, str]):  # type: ignore[no-untyped-def]
    if body == "batch":
        body = report_batch()
    return getattr(http, method)(path, json=body, headers=headers)


@pytest.mark.parametrize("method, path, body, allowed, ok", ENDPOINTS)
def test_each_endpoint_takes_only_its_roles(http, redis_client, keys_by_role, method: str,
                                            path: str, body, allowed: tuple[str, ...],
                                            ok: int) -> None:
    for role, key in keys_by_role.items():
        if role in allowed:
            continue
        before = snapshot(redis_client)
        response = call(http, method, path, body, bearer(key))
        assert response.status_code == 403, (role, response.json)
        assert response.mimetype == "application/problem+json"
        assert role in response.json["detail"]
        assert snapshot(redis_client) == before  # refused: nothing written
    for role in allowed:
        assert call(http, method, path, body, bearer(keys_by_role[role])).status_code == ok


@pytest.mark.parametrize("method, path, body, allowed, ok", ENDPOINTS)
def test_no_credentials_is_401_with_a_bearer_challenge_and_changes_nothing(
        http, redis_client, method: str, path: str, body, allowed, ok) -> None:
    http.post("/v1/reports", json=report_batch(),
              headers=bearer(auth.create_key(redis_client, "ingest", "app")))
    before = snapshot(redis_client)
    response = call(http, method, path, body, {})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.mimetype == "application/problem+json"
    assert snapshot(redis_client) == before


@pytest.mark.parametrize("header", [
    "Basic dXNlcjpwYXNz", "Bearer", "Bearer    ", "dnk_0123456789abcdef_x",
])
def test_a_malformed_authorization_header_is_401(http, header: str) -> None:
    response = http.get("/v1/metrics", headers={"Authorization": header})
    assert response.status_code == 401
    assert 'error="invalid_request"' in response.headers["WWW-Authenticate"]


def test_unknown_wrong_and_forged_keys_are_401_invalid_token(http, redis_client,
                                                             keys_by_role) -> None:
    good = keys_by_role["read"].secret
    key_id = keys_by_role["read"].info.key_id
    wrong_secret = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    unknown_id = f"dnk_{'0' * 16}_{good[21:]}" if key_id != "0" * 16 else good
    for token in (wrong_secret, unknown_id, "not-a-key", good + "x"):
        response = http.get(f"/v1/metrics/{X}/counts", headers=bearer(token))
        assert response.status_code == 401, token
        assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
    assert http.get(f"/v1/metrics/{X}/counts", headers=bearer(good)).status_code == 200


def test_redis_holds_hashes_only_never_a_key(http, redis_client, keys_by_role) -> None:
    http.post("/v1/reports", json=report_batch(), headers=bearer(keys_by_role["ingest"]))
    everything = b"".join(k + (redis_client.dump(k) or b"") for k in redis_client.scan_iter())
    stored_hashes = set()
    for role, key in keys_by_role.items():
        secret_part = key.secret[len("dnk_") + 17:]  # after "dnk_<id>_"
        assert len(secret_part) == 43
        assert key.secret.encode() not in everything
        assert secret_part.encode() not in everything
        record = redis_client.hgetall(f"dn:v1:{{auth}}:key:{key.info.key_id}")
        assert record[b"sha256"] == auth.digest(key.secret).encode()
        assert record[b"role"] == role.encode()
        stored_hashes.add(record[b"sha256"])
    assert len(stored_hashes) == 3
    assert redis_client.hget(f"dn:v1:{{auth}}:key:{keys_by_role['ingest'].info.key_id}",
                             "app") == b"shop-app"


def test_a_revoked_key_is_refused_at_once_without_a_cache(http, redis_client,
                                                          keys_by_role) -> None:
    key = keys_by_role["ingest"]
    assert http.post("/v1/reports", json=report_batch(), headers=bearer(key)).status_code == 202
    auth.revoke_key(redis_client, key.info.key_id)
    before = snapshot(redis_client)
    response = http.post("/v1/reports", json=report_batch(), headers=bearer(key))
    assert response.status_code == 401
    assert snapshot(redis_client) == before
    assert http.get("/v1/metrics", headers=bearer(keys_by_role["read"])).status_code == 200


def test_the_key_cache_refuses_a_revoked_key_within_its_window(redis_client) -> None:
    window = 0.5
    slack = 0.25  # a loaded 2-core CI machine can stall this process for a tenth of a second
    checker = auth.Authenticator(redis_client, cache_seconds=window)
    key = auth.create_key(redis_client, "read", "team")
    cached_at = time.monotonic()
    assert checker.verify(key.secret) is not None
    auth.revoke_key(redis_client, key.info.key_id)
    revoked_at = time.monotonic()
    still_cached = checker.verify(key.secret) is not None
    assert still_cached or time.monotonic() - cached_at > window  # the documented window
    while checker.verify(key.secret) is not None:
        assert time.monotonic() - revoked_at <= window + slack
        time.sleep(0.02)
    assert time.monotonic() - revoked_at <= window + slack
    assert auth.Authenticator(redis_client, cache_seconds=window).verify(key.secret) is None


def test_keys_are_listed_without_secrets_and_revocation_is_recorded(redis_client) -> None:
    a = auth.create_key(redis_client, "ingest", "app-one")
    b = auth.create_key(redis_client, "admin")
    auth.revoke_key(redis_client, a.info.key_id)
    listed = {k.key_id: k for k in auth.list_keys(redis_client)}
    assert set(listed) == {a.info.key_id, b.info.key_id}
    assert listed[a.info.key_id].revoked is not None and listed[b.info.key_id].revoked is None
    assert listed[a.info.key_id].app == "app-one" and listed[b.info.key_id].role == "admin"
    assert not any(hasattr(k, "secret") or hasattr(k, "sha256") for k in listed.values())


@pytest.mark.parametrize("role, app, message", [
    ("owner", "x", "role must be one of"), ("ingest", "", "per app"),
    ("ingest", "bad name!", "app names"), ("read", "x" * 65, "app names"),
])
def test_bad_key_requests_are_refused_and_store_nothing(redis_client, role: str, app: str,
                                                        message: str) -> None:
    with pytest.raises(auth.AuthError, match=message):
        auth.create_key(redis_client, role, app)
    assert snapshot(redis_client) == {}
    with pytest.raises(auth.AuthError, match="no key has the id"):
        auth.revoke_key(redis_client, "0123456789abcdef")
    assert snapshot(redis_client) == {}


def test_dev_mode_needs_no_key_and_warns_loudly(redis_url: str, metrics_file: Path,
                                                redis_client, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="deniable.collector"):
        app = create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file),
                          "AUTH": "off"})
    assert any(r.levelno == logging.WARNING and "AUTHENTICATION IS DISABLED" in r.message
               for r in caplog.records)
    http = app.test_client()
    assert http.post("/v1/reports", json=report_batch()).status_code == 202
    assert http.get(f"/v1/metrics/{X}/counts").json["buckets"][0]["n"] == 2


def test_auth_is_on_by_default_and_quiet(redis_url: str, metrics_file: Path, redis_client,
                                         caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="deniable.collector"):
        app = create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file)})
    assert not any("AUTHENTICATION" in r.message for r in caplog.records)
    assert app.test_client().get("/v1/metrics").status_code == 401


def test_an_unknown_auth_setting_fails_at_start(redis_url: str, metrics_file: Path) -> None:
    with pytest.raises(CollectorError, match="DENIABLE_AUTH must be 'on' or 'off'"):
        create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file), "AUTH": "maybe"})


def test_require_refuses_unknown_roles() -> None:
    with pytest.raises(ValueError, match="roles must be among"):
        auth.require("superuser")
