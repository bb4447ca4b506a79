"""deploy/vm/, the single-VM kit, checked as shipped and run for real on loopback.

- the systemd units pass ``systemd-analyze verify`` (and the collector's rates SAFE on
  ``systemd-analyze security``); deploy/redis.conf runs under the installed redis-server;
- the nginx site passes ``nginx -t`` with a throwaway certificate;
- through that nginx (Debian's, run as the test's user from a temp dir, on free ports), the real
  Python client sends over TLS to a collector, trusting a private CA the test makes, and the
  collector holds exactly what the client sent; /metrics is not public; two devices behind the
  proxy get their own rate-limit buckets; slow clients do not stall /healthz; a collector
  that is draining or gone answers 503 + Retry-After through nginx.
"""
from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from deniable.client import Connection, Delivery, Privacy, Reporter
from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from tests.client.test_sender import wait_for
from tests.conftest import DECLARED
from tests.nginx_kit import (NginxProcess, TLSFiles, nginx_test, pod_nginx, private_ca,
                             render_vm_site, vm_nginx)

pytestmark = pytest.mark.slow

VM = Path(__file__).resolve().parents[2] / "deploy" / "vm"
BURST = 40
LIMITED = {"DENIABLE_AUTH": "off", "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0",
           "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0.01", "DENIABLE_RATE_LIMIT_IP_BURST": str(BURST)}
"""Dev mode (no keys), a per-IP bucket of BURST requests that barely refills."""


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package ships it): "
                    "the unit files are not verified on this machine")
    return found


# --- static checks -------------------------------------------------------------------------

def test_the_collector_unit_verifies_and_is_hardened(tmp_path: Path) -> None:
    analyze = systemd_analyze()
    text = (VM / "deniable-collector@.service").read_text()
    for line in ("User=deniable", "ProtectSystem=strict", "NoNewPrivileges=yes",
                 "EnvironmentFile=/etc/deniable/collector.env", "Restart=on-failure",
                 "KillMode=mixed", "Type=notify"):
        assert line in text.splitlines(), line
    # verify checks that ExecStart's program exists: point it at this checkout's `deniable`.
    deniable = Path(shutil.which("deniable") or Path(sys.executable).parent / "deniable")
    assert deniable.exists()
    unit = tmp_path / "deniable-collector@8000.service"  # the template's serving instance
    unit.write_text(text.replace("/opt/deniable/venv/bin/deniable", str(deniable)))
    checked = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode == 0 and checked.stderr.strip() == "", checked.stderr
    # Exposure 0.9 ("SAFE") when written; fail if it creeps above 1.5.
    rated = subprocess.run([analyze, "security", "--offline=true", "--threshold=15", str(unit)],
                           capture_output=True, text=True, timeout=60)
    assert rated.returncode == 0, rated.stdout[-2000:] + rated.stderr
    # The unit's graceful stop outlasts gunicorn's: TimeoutStopSec > DENIABLE_GRACEFUL_TIMEOUT.
    env = dict(line.split("=", 1) for line in (VM / "collector.env").read_text().splitlines()
               if line and not line.startswith("#"))
    stop = int(next(line.split("=")[1] for line in text.splitlines()
                    if line.startswith("TimeoutStopSec=")))
    assert stop > int(env["DENIABLE_GRACEFUL_TIMEOUT"])
    assert env["DENIABLE_HOST"] == "127.0.0.1" and env["DENIABLE_PROXY_FIX_X_FOR"] == "1"


def test_the_redis_drop_in_verifies_with_debians_unit(tmp_path: Path) -> None:
    analyze = systemd_analyze()
    debian = Path("/lib/systemd/system/redis-server.service")
    if not debian.exists():
        pytest.skip("Debian's redis-server.service is not installed: the drop-in has no unit")
    units = tmp_path / "units"
    (units / "redis-server.service.d").mkdir(parents=True)
    shutil.copy(debian, units / "redis-server.service")
    shutil.copy(VM / "redis-server.conf", units / "redis-server.service.d" / "deniable.conf")
    checked = subprocess.run([analyze, "verify", "redis-server.service"], capture_output=True,
                             text=True, timeout=60, env={**os.environ, "SYSTEMD_UNIT_PATH":
                                                         f"{units}:"})
    assert checked.returncode == 0, checked.stderr
    shown = "\n".join(line for line in checked.stderr.splitlines() if "deniable" in line)
    assert shown == "", shown
    assert "/etc/redis/deniable.conf" in (VM / "redis-server.conf").read_text()


def test_deploy_redis_conf_runs_under_the_installed_redis(tmp_path: Path) -> None:
    """The drop-in's config file is deploy/redis.conf: start it (loopback, free port, temp dir)."""
    import redis

    from deniable.collector.embedded import free_port

    exe = shutil.which("redis-server") or pytest.fail("redis-server not found: ./dev test")
    port = free_port()
    process = subprocess.Popen([exe, str(VM.parent / "redis.conf"), "--port", str(port),
                                "--bind", "127.0.0.1", "--dir", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, socket_timeout=2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline and process.poll() is None, "no redis"
                time.sleep(0.05)
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        client.close()
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_nginx_site_passes_nginx_t_as_shipped(tmp_path: Path) -> None:
    tls = private_ca(tmp_path / "tls")
    # Only the certificate and log paths (and the standby's port: nothing of the tests may
    # reach a real 8001) change: listens, limits and locations as shipped.
    checked = nginx_test(render_vm_site(tls=tls, log_dir=tmp_path), tmp_path / "nginx")
    assert checked.returncode == 0, checked.stderr
    assert "[warn]" not in checked.stderr and "[emerg]" not in checked.stderr, checked.stderr


def test_the_nginx_site_matches_the_collectors_limits_and_proxy_setting() -> None:
    site = (VM / "deniable-collector.nginx").read_text()
    env = dict(line.split("=", 1) for line in (VM / "collector.env").read_text().splitlines()
               if line and not line.startswith("#"))
    assert "client_max_body_size 1m;" in site and int(env["DENIABLE_MAX_BODY_BYTES"]) == 1 << 20
    # One proxy that replaces X-Forwarded-For with the peer: exactly one trusted hop.
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in site
    assert env["DENIABLE_PROXY_FIX_X_FOR"] == "1"
    # The serving instance and the upgrade standby: the unit's instance names are the ports.
    assert f"server {env['DENIABLE_HOST']}:8000 max_fails=0;" in site
    assert f"server {env['DENIABLE_HOST']}:8001 backup max_fails=0;" in site
    assert "ExecStart=/opt/deniable/venv/bin/deniable serve --port %i" in \
        (VM / "deniable-collector@.service").read_text().splitlines()
    assert "access_log off;" in site  # nginx must not log client addresses either


# --- through nginx, for real ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return private_ca(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def behind_nginx(redis_url: str, metrics_file: Path, tls: TLSFiles,
                 tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[tuple[CollectorProcess, NginxProcess]]:
    """A gunicorn collector configured as deploy/vm/collector.env says (one trusted proxy),
    behind deploy/vm's nginx site."""
    env = {**LIMITED, "DENIABLE_PROXY_FIX_X_FOR": "1"}
    with CollectorProcess(redis_url, metrics_file, workers=2, env=env) as collector:
        with vm_nginx(tmp_path_factory.mktemp("nginx"), tls, collector.port) as nginx:
            yield collector, nginx


def tls_context(tls: TLSFiles) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(tls.ca))


def https_get(port: int, path: str, tls: TLSFiles, source: str = "127.0.0.1",
              timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """GET over TLS from the loopback address ``source`` (each one a different device)."""
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout,
                                             context=tls_context(tls),
                                             source_address=(source, 0))
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_the_real_client_over_tls_with_a_private_ca_counts_exactly(
        behind_nginx: tuple[CollectorProcess, NginxProcess], tls: TLSFiles, redis_client,  # type: ignore[no-untyped-def]
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, nginx = behind_nginx
    url = f"https://127.0.0.1:{nginx.port}"
    # Without the CA, the certificate is refused: the private CA is what makes it work.
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{url}/healthz", timeout=5)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)  # only verify= trusts the CA
    # One Reporter stands in for many devices: every call is sent (no period gate).
    with Reporter(url, DECLARED, delivery=Delivery(batch_size=100),
                  privacy=Privacy(one_per_period=False),
                  connection=Connection(verify=str(tls.ca))) as reporter:
        wait_for(lambda: reporter.catalogue_fetched)  # fetched over TLS through nginx
        for i in range(1_000):
            reporter.report("feature_x_enabled", i % 10 == 0)
            reporter.report("dark_mode", i % 2 == 0)
        assert reporter.flush(timeout=30) is True
        ledger = reporter.ledger()
        assert reporter.stats().sent == 2_000
    for metric, entry in ledger.items():
        status, _, body = https_get(nginx.port, f"/v1/metrics/{metric}/counts", tls)
        assert status == 200
        buckets = json.loads(body)["buckets"]
        assert (sum(b["n"] for b in buckets), sum(b["ones"] for b in buckets)) == (
            entry.handed_n, entry.handed_ones) == (entry.sent_n, entry.sent_ones)
    assert sum(e.handed_n for e in ledger.values()) == 2_000


def test_http2_is_offered_and_plain_http_redirects(
        behind_nginx: tuple[CollectorProcess, NginxProcess], tls: TLSFiles) -> None:
    _, nginx = behind_nginx
    context = tls_context(tls)
    context.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", nginx.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as wrapped:
            assert wrapped.selected_alpn_protocol() == "h2"
            assert wrapped.version() in ("TLSv1.2", "TLSv1.3")


def test_metrics_are_not_served_on_the_public_side(
        behind_nginx: tuple[CollectorProcess, NginxProcess], tls: TLSFiles) -> None:
    collector, nginx = behind_nginx
    for path in ("/metrics", "/metrics?x=1", "//metrics", "/%6Detrics"):
        assert https_get(nginx.port, path, tls)[0] == 404, path
    # ... while the collector itself, on loopback, serves them to the host's scraper.
    assert requests.get(f"{collector.url}/metrics", timeout=5).status_code == 200


def test_behind_the_proxy_two_devices_get_their_own_rate_limit_buckets(
        behind_nginx: tuple[CollectorProcess, NginxProcess], tls: TLSFiles, redis_client) -> None:  # type: ignore[no-untyped-def]
    collector, nginx = behind_nginx
    statuses = [https_get(nginx.port, "/v1/metrics", tls, source="127.0.0.2")[0]
                for _ in range(BURST + 1)]
    assert statuses[:BURST] == [200] * BURST and statuses[BURST] == 429
    # Another device behind the same nginx still has its whole bucket.
    assert https_get(nginx.port, "/v1/metrics", tls, source="127.0.0.3")[0] == 200
    assert "DENIABLE_PROXY_FIX_X_FOR" not in collector.log_tail(1 << 20)  # no warning: it is set


def test_without_the_proxy_setting_devices_share_a_bucket_and_the_collector_warns_once(
        redis_url: str, metrics_file: Path, tls: TLSFiles, redis_client,  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    env = {**LIMITED, "DENIABLE_PROXY_FIX_X_FOR": "0"}
    with CollectorProcess(redis_url, metrics_file, workers=1, env=env) as collector:
        with vm_nginx(tmp_path, tls, collector.port) as nginx:
            statuses = [https_get(nginx.port, "/v1/metrics", tls, source="127.0.0.2")[0]
                        for _ in range(BURST + 1)]
            assert statuses[BURST] == 429
            # The documented failure: another device's first request is refused too.
            assert https_get(nginx.port, "/v1/metrics", tls, source="127.0.0.3")[0] == 429
            time.sleep(0.2)
            log = collector.log_tail(1 << 20)
    warnings = [line for line in log.splitlines()
                if "DENIABLE_PROXY_FIX_X_FOR is 0" in line]
    assert len(warnings) == 1, log[-3000:]  # once (one worker), not per request
    assert json.loads(warnings[0])["level"].upper() == "WARNING"


def slowloris(port: int, tls: TLSFiles | None) -> socket.socket:
    """A connection that sends part of a request's headers and then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if tls is not None:
        sock = tls_context(tls).wrap_socket(sock, server_hostname="localhost")
    sock.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
    return sock


def test_slow_clients_do_not_stall_healthz_through_nginx(
        behind_nginx: tuple[CollectorProcess, NginxProcess], tls: TLSFiles) -> None:
    collector, nginx = behind_nginx
    # Straight at gunicorn's two sync workers, two slowloris connections stall /healthz: the
    # threat, shown here so that this test can tell the difference.
    slow = [slowloris(collector.port, None) for _ in range(2)]
    try:
        time.sleep(0.3)
        with pytest.raises((TimeoutError, requests.exceptions.ReadTimeout,
                            requests.exceptions.ConnectionError)):
            requests.get(f"{collector.url}/healthz", timeout=(1, 1.5))
    finally:
        for sock in slow:
            sock.close()
    # Through nginx: more slow connections than there are workers, headers and bodies both.
    slow = [slowloris(nginx.port, tls) for _ in range(6)]
    for _ in range(2):
        body_slow = socket.create_connection(("127.0.0.1", nginx.port), timeout=5)
        body_slow = tls_context(tls).wrap_socket(body_slow, server_hostname="localhost")
        body_slow.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{")
        slow.append(body_slow)
    try:
        time.sleep(0.3)
        for _ in range(5):
            start = time.monotonic()
            status, _, _ = https_get(nginx.port, "/healthz", tls, timeout=3)
            assert status == 200 and time.monotonic() - start < 3.0
    finally:
        for sock in slow:
            sock.close()


def test_a_draining_or_stopped_collector_answers_503_with_retry_after_through_nginx(
        redis_url: str, metrics_file: Path, tls: TLSFiles, redis_client,  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    collector = CollectorProcess(redis_url, metrics_file, workers=1, env=LIMITED)
    collector.start()
    try:
        with vm_nginx(tmp_path, tls, collector.port) as nginx:
            assert https_get(nginx.port, "/healthz", tls)[0] == 200
            assert collector.process is not None
            os.kill(collector.process.pid, signal.SIGTERM)  # as systemd's KillMode=mixed does
            collector.process.wait(timeout=15)
            start = time.monotonic()
            body = json.dumps(encode_batch(new_batch_id(),
                                           [("feature_x_enabled", "rr:1/2:1/2", 1)])).encode()
            answer = requests.post(f"https://127.0.0.1:{nginx.port}/v1/reports", data=body,
                                   headers={"Content-Type": "application/json"},
                                   verify=str(tls.ca), timeout=5)
            assert time.monotonic() - start < 3.0
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
            assert answer.headers["Content-Type"] == "application/problem+json"
            assert answer.json()["status"] == 503
    finally:
        collector.stop()


# --- the Kubernetes pod's nginx (deploy/kubernetes/collector.yaml), on loopback -------------

def test_the_pods_nginx_shields_the_workers_and_keeps_devices_apart(
        redis_url: str, metrics_file: Path, redis_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = {**LIMITED, "DENIABLE_PROXY_FIX_X_FOR": "2"}  # as the manifest sets it
    with CollectorProcess(redis_url, metrics_file, workers=2, env=env) as collector:
        nginx, metrics_port = pod_nginx(tmp_path, collector.port)
        with nginx:
            public = f"http://127.0.0.1:{nginx.port}"
            ingress = {"X-Forwarded-For": "203.0.113.9"}  # every public request passes one
            # Slow clients (more than there are workers) do not stall /healthz.
            slow = [slowloris(nginx.port, None) for _ in range(6)]
            try:
                time.sleep(0.3)
                start = time.monotonic()
                assert requests.get(f"{public}/healthz", headers=ingress,
                                    timeout=3).status_code == 200
                assert time.monotonic() - start < 3.0
            finally:
                for sock in slow:
                    sock.close()
            # /metrics only on the scrape port.
            assert requests.get(f"{public}/metrics", headers=ingress,
                                timeout=5).status_code == 404
            assert requests.get(f"http://127.0.0.1:{metrics_port}/metrics",
                                timeout=5).status_code == 200
            assert requests.get(f"http://127.0.0.1:{metrics_port}/v1/metrics",
                                timeout=5).status_code == 404
            # The ingress in front appends each device's address; the pod's nginx appends the
            # ingress's: with DENIABLE_PROXY_FIX_X_FOR=2 each device has its own bucket.
            def from_device(address: str) -> int:
                return requests.get(f"{public}/v1/metrics", timeout=5,
                                    headers={"X-Forwarded-For": address}).status_code

            assert [from_device("203.0.113.1") for _ in range(BURST + 1)][-2:] == [200, 429]
            assert from_device("203.0.113.2") == 200
            # Without an ingress in front, the count is wrong, and the collector says so.
            assert requests.get(f"{public}/healthz", timeout=5).status_code == 200
        time.sleep(0.2)
        log = collector.log_tail(1 << 20)
        assert log.count("holds 1 address(es) but DENIABLE_PROXY_FIX_X_FOR is 2") == 1, log
