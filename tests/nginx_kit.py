"""Debian's nginx with the shipped site configs, run by the tests on loopback.

Each nginx runs as the test's user, from a temp dir holding its own config, pid file, logs and
temp paths, on free ports. ``render_vm_site`` turns deploy/vm/deniable-collector.nginx into a
loopback copy by replacing exact strings (each must be found: a renamed path fails the test,
not the check). A private CA and a server certificate for 127.0.0.1/localhost come from the
openssl commands deploy/vm/README.md gives operators, run as they are written.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pytest

from deniable.collector.embedded import die_with_parent, free_port

ROOT = Path(__file__).resolve().parent.parent
VM_SITE = ROOT / "deploy" / "vm" / "deniable-collector.nginx"


def nginx_binary() -> str:
    """Debian's nginx (``./dev test`` installs it), else the test fails and says why."""
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/sbin/nginx") if os.access(p, os.X_OK)), None)
    if found is None:
        pytest.fail("nginx not found: run the tests with ./dev test, which installs Debian's "
                    "nginx (apt-get install nginx)")
    return found


@dataclass(frozen=True)
class TLSFiles:
    ca: Path        # the private CA's certificate: what the client trusts
    chain: Path     # the server certificate (signed by the CA) and the CA
    key: Path       # the server's private key


PRIVATE_CA_DOCS = ROOT / "deploy" / "vm" / "README.md"


def private_ca_commands() -> str:
    """The private-CA shell lines deploy/vm/README.md gives operators (between its markers)."""
    text = PRIVATE_CA_DOCS.read_text()
    try:
        block = text.split("<!-- private-ca: begin -->", 1)[1].split("<!-- private-ca: end -->")[0]
    except IndexError:
        pytest.fail("deploy/vm/README.md lost its private-ca markers: update tests/nginx_kit.py")
    lines = [line[2:] if line.startswith("  ") else line for line in block.strip().splitlines()]
    assert lines[0] == "```sh" and lines[-1] == "```", lines
    return "\n".join(lines[1:-1]) + "\n"


def private_ca(directory: Path) -> TLSFiles:
    """A fresh private CA and a server certificate for 127.0.0.1 and localhost, signed by it,
    made by running the very commands deploy/vm/README.md gives (so they stay true)."""
    shutil.which("openssl") or pytest.fail("openssl not found: apt-get install openssl")
    directory.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", private_ca_commands()],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NAME": "localhost",
                               "SAN": "DNS:localhost,IP:127.0.0.1", "CA_DIR": str(directory)})
    assert done.returncode == 0, done.stderr
    return TLSFiles(ca=directory / "ca.pem", chain=directory / "server-chain.pem",
                    key=directory / "server.key")


def replace_exact(text: str, old: str, new: str) -> str:
    """``text`` with every ``old`` replaced; fails the test if ``old`` is not there."""
    if old not in text:
        pytest.fail(f"the shipped nginx site no longer contains {old!r}: update tests/nginx_kit.py")
    return text.replace(old, new)


def render_vm_site(*, tls: TLSFiles, log_dir: Path, upstream_port: int | None = None,
                   https_port: int | None = None, http_port: int | None = None,
                   standby_port: int | None = None) -> str:
    """deploy/vm's site with the test's certificate and log paths; with ports given, also
    listening on loopback free ports (IPv4 only) in front of the collector on ``upstream_port``.
    The standby upstream (8001 as shipped) is ``standby_port``, else a free port nobody serves."""
    text = VM_SITE.read_text()
    text = replace_exact(text, "server 127.0.0.1:8001 backup ",
                         f"server 127.0.0.1:{standby_port or free_port()} backup ")
    text = replace_exact(text, "/etc/deniable/tls/fullchain.pem", str(tls.chain))
    text = replace_exact(text, "/etc/deniable/tls/privkey.pem", str(tls.key))
    text = replace_exact(text, "/var/log/nginx/deniable-error.log", str(log_dir / "site-error.log"))
    if upstream_port is not None:
        text = replace_exact(text, "server 127.0.0.1:8000 ", f"server 127.0.0.1:{upstream_port} ")
    if https_port is not None:
        text = replace_exact(text, "    listen [::]:443 ssl http2;\n", "")
        text = replace_exact(text, "listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;")
    if http_port is not None:
        text = replace_exact(text, "    listen [::]:80;\n", "")
        text = replace_exact(text, "listen 80;", f"listen 127.0.0.1:{http_port};")
    return text


def main_config(directory: Path, site: Path) -> str:
    """An nginx.conf of the test's own: pid, logs and temp paths in ``directory``."""
    user = "user root;\n" if os.geteuid() == 0 else ""  # as root, workers would be 'nobody'
    temp = "\n".join(f"    {kind}_temp_path {directory / kind};"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return (f"{user}worker_processes 1;\ndaemon off;\npid {directory / 'nginx.pid'};\n"
            f"error_log {directory / 'error.log'} warn;\n"
            "events { worker_connections 512; }\n"
            f"http {{\n    access_log off;\n{temp}\n    include {site};\n}}\n")


def nginx_test(site_text: str, directory: Path, *, whole: bool = False
               ) -> subprocess.CompletedProcess[str]:
    """``nginx -t`` on ``site_text`` inside the test's main config (``whole``: it is one)."""
    directory.mkdir(parents=True, exist_ok=True)
    site = directory / "site.conf"
    site.write_text(site_text)
    conf = directory / "nginx.conf"
    conf.write_text(site_text if whole else main_config(directory, site))
    return subprocess.run([nginx_binary(), "-t", "-p", str(directory), "-c", str(conf),
                           "-e", str(directory / "startup-error.log")],
                          capture_output=True, text=True, timeout=30)


class NginxProcess:
    """nginx in the foreground on a rendered site, until ``stop``."""

    def __init__(self, site_text: str, directory: Path, port: int, *,
                 whole: bool = False) -> None:
        self.site_text = site_text
        self.directory = directory
        self.port = port
        self.whole = whole
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        checked = nginx_test(self.site_text, self.directory, whole=self.whole)
        assert checked.returncode == 0, checked.stderr
        self.process = subprocess.Popen(
            [nginx_binary(), "-p", str(self.directory), "-c", str(self.directory / "nginx.conf"),
             "-e", str(self.directory / "startup-error.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=die_with_parent())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"nginx exited: {self.error_log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError(f"nginx did not listen on {self.port} in {timeout}s")

    def error_log(self) -> str:
        path = self.directory / "error.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> NginxProcess:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def vm_nginx(directory: Path, tls: TLSFiles, upstream_port: int,
             standby_port: int | None = None) -> NginxProcess:
    """The VM site on loopback in front of a collector (and its standby, for upgrades): HTTPS
    on ``.port``."""
    https_port, http_port = free_port(), free_port()
    site = render_vm_site(tls=tls, log_dir=directory, upstream_port=upstream_port,
                          https_port=https_port, http_port=http_port,
                          standby_port=standby_port)
    return NginxProcess(site, directory, https_port)


KUBERNETES = ROOT / "deploy" / "kubernetes" / "collector.yaml"


def kubernetes_nginx_conf() -> str:
    """The pod's nginx.conf, from the Kubernetes manifest's ConfigMap."""
    import yaml

    for doc in yaml.safe_load_all(KUBERNETES.read_text()):
        if doc and doc["kind"] == "ConfigMap" and "nginx.conf" in doc["data"]:
            return str(doc["data"]["nginx.conf"])
    raise AssertionError("no nginx.conf ConfigMap in deploy/kubernetes/collector.yaml")


def pod_nginx(directory: Path, upstream_port: int) -> tuple[NginxProcess, int]:
    """The pod's nginx on loopback in front of a collector: its public port on ``.port``, and
    the metrics port returned beside it."""
    public, metrics = free_port(), free_port()
    directory.mkdir(parents=True, exist_ok=True)
    text = kubernetes_nginx_conf()
    text = replace_exact(text, "/tmp/", f"{directory}/")
    text = replace_exact(text, "error_log /dev/stderr crit;", f"error_log {directory}/error.log crit;")
    text = replace_exact(text, "listen 8080;", f"listen 127.0.0.1:{public};")
    text = replace_exact(text, "listen 9100;", f"listen 127.0.0.1:{metrics};")
    text = replace_exact(text, "server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream_port};")
    if os.geteuid() == 0:
        text = "user root;\ndaemon off;\n" + text
    else:
        text = "daemon off;\n" + text
    return NginxProcess(text, directory, public, whole=True), metrics
