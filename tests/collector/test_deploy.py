"""The deploy/ files parse and agree with the code: probes, graceful shutdown, Redis safety."""
from __future__ import annotations

import runpy
from pathlib import Path

import yaml

from deniable.collector.server import default_config_file, default_workers

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_every_yaml_file_parses() -> None:
    files = sorted(DEPLOY.rglob("*.yaml"))
    assert len(files) >= 2
    for path in files:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        assert documents, path


def test_kubernetes_probes_and_grace_match_gunicorn() -> None:
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(
        (DEPLOY / "kubernetes" / "collector.yaml").read_text())}
    assert {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler",
            "PodDisruptionBudget"} <= set(docs)
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["DENIABLE_REDIS_URL"]["valueFrom"]
    graceful = int(env["DENIABLE_GRACEFUL_TIMEOUT"]["value"])
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][-1]
                   .split("sleep(")[1].rstrip(")"))
    assert pod["terminationGracePeriodSeconds"] > pre_stop + graceful
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_the_packaged_gunicorn_config_is_deploys(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # as `deniable serve` sets it
    assert Path(default_config_file()).read_text() == (DEPLOY / "gunicorn.conf.py").read_text()
    settings = runpy.run_path(str(DEPLOY / "gunicorn.conf.py"))
    assert settings["worker_class"] == "sync" and settings["workers"] == default_workers() >= 2
    assert settings["accesslog"] is None  # an access log would record client addresses
    # ... and gunicorn's logger never even builds one (its fields hold the client address).
    logger = settings["logger_class"].__new__(settings["logger_class"])
    assert logger.access(None, None, None, None) is None
    assert settings["graceful_timeout"] == 25


def test_redis_conf_keeps_counters_durable_and_never_evicts() -> None:
    lines = {line.split()[0]: " ".join(line.split()[1:])
             for line in (DEPLOY / "redis.conf").read_text().splitlines()
             if line.strip() and not line.startswith("#")}
    assert lines["appendonly"] == "yes"
    assert lines["appendfsync"] == "everysec"
    assert lines["maxmemory-policy"] == "noeviction"


def test_dockerfile_runs_deniable_serve_as_non_root() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert text.count("FROM ") == 2  # multi-stage
    assert "USER 10001" in text and 'ENTRYPOINT ["deniable", "serve"]' in text
