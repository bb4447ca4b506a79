"""Bad networks on loopback, for the client's guest-behaviour tests: a stalled listener, a
closed port, a slow proxy, and a TLS-terminating proxy with a private CA made on the spot."""
from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@contextmanager
def stalled_listener() -> Iterator[str]:
    """A URL whose port accepts TCP connections (the kernel completes the handshake) and
    never answers: a stalled proxy or captive portal."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def closed_port_url() -> str:
    """A URL on a loopback port nobody listens on: every connection is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _pump(src: socket.socket, dst: socket.socket, delay: float = 0.0) -> None:
    try:
        while data := src.recv(65536):
            if delay:
                time.sleep(delay)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def _proxy(upstream_port: int, *, delay: float = 0.0,
           tls: ssl.SSLContext | None = None, scheme: str = "http") -> Iterator[str]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    stop = threading.Event()
    opened: list[socket.socket] = []

    def handle(client: socket.socket) -> None:
        try:
            if tls is not None:
                client.settimeout(5)
                client = tls.wrap_socket(client, server_side=True)
                client.settimeout(None)
            upstream = socket.create_connection(("127.0.0.1", upstream_port))
        except (OSError, ssl.SSLError):
            client.close()  # e.g. the client refused our certificate
            return
        opened.extend((client, upstream))
        threading.Thread(target=_pump, args=(client, upstream, delay), daemon=True).start()
        _pump(upstream, client)

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=handle, args=(client,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()
        for sock in opened:
            try:
                sock.close()
            except OSError:
                pass


@contextmanager
def slow_proxy(upstream_port: int, delay: float) -> Iterator[str]:
    """A TCP proxy that holds every chunk the client sends for ``delay`` seconds before
    forwarding it: a slow collector (or a slow path to it)."""
    with _proxy(upstream_port, delay=delay) as url:
        yield url


@dataclass(frozen=True)
class PrivateCA:
    """A CA made for one test, and a server certificate it signed for 127.0.0.1/localhost."""

    ca_pem: Path
    server_pem: Path
    server_key: Path


def make_private_ca(directory: Path) -> PrivateCA:
    """Generate a private CA and a server certificate with the ``openssl`` CLI (P-256)."""
    d = directory
    ext = d / "server.ext"
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                   "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
                   "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *args: subprocess.run(["openssl", *args], check=True,  # noqa: E731
                                       capture_output=True, cwd=d)
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=Deniable test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", str(ext))
    return PrivateCA(d / "ca.pem", d / "server.pem", d / "server.key")


@contextmanager
def tls_proxy(upstream_port: int, ca: PrivateCA) -> Iterator[str]:
    """An HTTPS front for a plain-HTTP collector, serving ``ca``'s server certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(ca.server_pem, ca.server_key)
    with _proxy(upstream_port, tls=context, scheme="https") as url:
        yield url
