"""`deniable keys create|list|revoke`, and keys it creates working against a live collector."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
import requests

from deniable.cli.main import main
from deniable.collector.embedded import free_port
from tests.conftest import snapshot


def keys_cli(redis_url: str, *args: str) -> int:
    return main(["keys", "--redis-url", redis_url, *args])


def test_create_prints_the_key_once_and_list_never_shows_it(redis_url, redis_client,
                                                           capsys) -> None:
    assert keys_cli(redis_url, "create", "--role", "ingest", "--app", "shop-ios") == 0
    out, err = capsys.readouterr()
    secret = out.strip()
    assert secret.startswith("dnk_") and len(out.splitlines()) == 1
    assert "only time" in err and secret not in err
    key_id = secret[4:20]
    assert keys_cli(redis_url, "create", "--role", "read") == 0
    capsys.readouterr()
    assert keys_cli(redis_url, "list") == 0
    listing = capsys.readouterr().out
    assert key_id in listing and "shop-ios" in listing and "ingest" in listing
    assert "read" in listing
    stored_hash = redis_client.hget(f"dn:v1:{{auth}}:key:{key_id}", "sha256").decode()
    assert secret[21:] not in listing and stored_hash not in listing

    assert keys_cli(redis_url, "revoke", key_id) == 0
    assert f"revoked ingest key {key_id}" in capsys.readouterr().out
    assert keys_cli(redis_url, "list") == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if key_id in l)
    assert not line.rstrip().endswith("-")  # the revoked column holds a time


@pytest.mark.slow
def test_a_created_key_works_and_a_revoked_one_does_not(live_secure_collector, redis_url,
                                                       redis_client, capsys) -> None:
    keys_cli(redis_url, "create", "--role", "read", "--app", "team")
    secret = capsys.readouterr().out.strip()
    url = f"{live_secure_collector.url}/v1/metrics/feature_x_enabled/counts"
    headers = {"Authorization": f"Bearer {secret}"}
    assert requests.get(url, headers=headers, timeout=5).status_code == 200
    keys_cli(redis_url, "revoke", secret[4:20])
    capsys.readouterr()
    time.sleep(1.05)  # the live collector caches keys for 1 s
    assert [requests.get(url, headers=headers, timeout=5).status_code
            for _ in range(4)] == [401] * 4


@pytest.mark.parametrize("args, status, message", [
    (["create", "--role", "ingest"], 1, "per app"),
    (["create", "--role", "read", "--app", "bad app"], 1, "app names"),
    (["revoke", "0123456789abcdef"], 1, "no key has the id"),
    (["revoke", "../../etc"], 1, "no key has the id"),
])
def test_bad_input_is_a_message_and_a_non_zero_exit(redis_url, redis_client, capsys, args,
                                                    status: int, message: str) -> None:
    assert keys_cli(redis_url, *args) == status
    assert message in capsys.readouterr().err
    assert snapshot(redis_client) == {}


def test_usage_errors_and_an_unreachable_redis(redis_client, capsys) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["keys", "create", "--role", "owner"])
    assert usage.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
    assert keys_cli(f"redis://127.0.0.1:{free_port()}/0", "list") == 1
    assert "cannot use Redis" in capsys.readouterr().err


def test_help_explains_the_roles() -> None:
    result = subprocess.run([sys.executable, "-m", "deniable.cli", "keys", "--help"],
                            capture_output=True, text=True, timeout=30, check=True)
    for word in ("ingest", "read", "admin", "create", "list", "revoke", "SHA-256"):
        assert word in result.stdout
