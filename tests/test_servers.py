"""The shared test plumbing in tests/servers.py: a metrics dict becomes the TOML a collector
loads, and ``collector_with_metrics`` serves exactly those metrics over HTTP."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import redis
import requests

from tests.servers import collector_with_metrics, metrics_toml

TABLES = {"feature_y": {"description": "Feature \"Y\" on", "mechanism": "rr:1/2:1/2",
                        "retention_days": 30},
          "os-name": {"mechanism": "rr:3/4:1/2",
                      "dimensions": {"platform": {"values": ["ios", "android"]}}}}


def test_a_metrics_dict_is_written_as_tables_that_read_back_equal() -> None:
    assert tomllib.loads(metrics_toml(TABLES)) == {"metrics": TABLES}
    assert metrics_toml("[metrics.x]\nmechanism = \"rr:1/2:1/2\"\n") == \
        "[metrics.x]\nmechanism = \"rr:1/2:1/2\"\n"


def test_a_value_toml_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="Got None instead"):
        metrics_toml({"x": {"mechanism": None}})


@pytest.mark.slow
def test_the_collector_serves_the_dicts_metrics_and_flushes_around_itself(
        redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    redis_client.set("left-over", b"1")
    with collector_with_metrics(redis_url, {"feature_y": TABLES["feature_y"]}, tmp_path,
                                workers=1, flush=True) as collector:
        assert redis_client.get("left-over") is None
        catalogue = requests.get(f"{collector.url}/v1/metrics", timeout=5).json()["metrics"]
        served = {entry["name"]: entry["mechanism"] for entry in catalogue}
        assert served == {"feature_y": "rr:1/2:1/2"}
        assert Path(collector.metrics_file) == tmp_path / "metrics.toml"
        redis_client.set("written-while-up", b"1")
    assert collector.process is None or collector.process.poll() is not None
    assert redis_client.dbsize() == 0
