"""What the operator docs tell operators to run, run: the key-rotation commands of
docs/collector-security.md against a live collector, and a collector's start with a metrics
file the admin API has overtaken (the registry wins; said once, in JSON, with advice that fits).
(The private-CA commands of deploy/vm/README.md make every certificate of the VM-kit tests:
tests/nginx_kit.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import requests

from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector import auth
from deniable.collector.app import create_app
from deniable.collector.embedded import RedisServer
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN, OPEN_ENV

DOCS = Path(__file__).resolve().parents[2] / "docs"
X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"


def doc_block(path: Path, name: str) -> str:
    """The shell block of ``path`` between ``<!-- name: begin -->`` and ``end``."""
    text = path.read_text()
    block = text.split(f"<!-- {name}: begin -->", 1)[1].split(f"<!-- {name}: end -->", 1)[0]
    lines = block.strip().splitlines()
    assert lines[0] == "```sh" and lines[-1] == "```", lines
    return "\n".join(lines[1:-1]) + "\n"


def post(url: str, key: str) -> int:
    batch = encode_batch(new_batch_id(), [(X, X_MECH, 1)])
    return requests.post(f"{url}/v1/reports", json=batch, timeout=10,
                         headers={"Authorization": f"Bearer {key}"}).status_code


@pytest.mark.slow
def test_the_key_rotation_commands_of_the_docs_rotate_a_key(
        live_secure_collector: CollectorProcess, redis_url: str,
        redis_client: redis.Redis) -> None:
    old = auth.create_key(redis_client, "ingest", app="rotating-app").secret
    url = live_secure_collector.url
    assert post(url, old) == 202
    script = doc_block(DOCS / "collector-security.md", "key-rotation") + 'printf "%s\\n" "$NEW"\n'
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60,
        env={**os.environ, "OLD": old, "COLLECTOR": url, "DENIABLE_REDIS_URL": redis_url,
             "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    new = done.stdout.strip().splitlines()[-1]
    assert new.startswith("dnk_") and new != old
    assert post(url, new) == 202
    deadline = time.monotonic() + 10  # the collector caches a verified key for 1 s here
    while post(url, old) != 401:
        assert time.monotonic() < deadline, "the old key still works"
        time.sleep(0.2)
    listed = {k.key_id: k for k in auth.list_keys(redis_client)}
    assert listed[old.split("_")[1]].revoked is not None
    assert listed[new.split("_")[1]].app == "rotating-app"


@pytest.mark.slow
def test_a_metrics_file_behind_the_admin_api_is_noted_once_in_json(
        metrics_file: Path, tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as own_redis:
        admin = create_app({"REDIS_URL": own_redis.url, "METRICS_FILE": str(metrics_file),
                            "TESTING": True, **OPEN}).test_client()
        published = admin.post("/v1/admin/metrics", json={"name": X, "mechanism": "rr:3/4:1/2"})
        assert published.status_code == 201, published.text
        # `deniable serve` (its master builds the app, then 2 workers), auth off (a warning).
        with CollectorProcess(own_redis.url, metrics_file, workers=2, env=OPEN_ENV) as live:
            assert requests.get(f"{live.url}/readyz", timeout=10).status_code == 200
            log = live.log_tail(1 << 24)
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]  # every line JSON
    notes = [line["message"] for line in lines if X in line["message"]]
    assert notes == [f"metrics file: {X} names version 1 ({X_MECH}); the registry's current "
                     "version is 2 (rr:3/4:1/2), registered through the admin API, and wins. "
                     "To silence this, set its mechanism in the file to rr:3/4:1/2"], notes
    assert sum("AUTHENTICATION IS DISABLED" in line["message"] for line in lines) >= 1
