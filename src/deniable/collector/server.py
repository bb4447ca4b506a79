"""Running the collector: under gunicorn (production), Werkzeug (dev), or as a child process.

``deniable serve`` calls ``serve``. ``CollectorProcess`` starts ``deniable serve`` as a real
HTTP server in a child process, for the demo and the tests.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from deniable.collector.embedded import die_with_parent, free_port
from deniable.collector.errors import CollectorError

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
DEFAULT_HOST = "127.0.0.1"
"""Where ``deniable serve`` and the gunicorn config listen unless told otherwise: loopback only,
for nginx (or another buffering proxy) on the same host or pod to reach."""
DEFAULT_PORT = 8000
PER_INSTANCE_ENV = (METRICS_DIR_ENV, "DENIABLE_CONTROL_SOCKET")
"""Variables naming one server's own state: never passed on to another collector."""


def default_config_file() -> str:
    """The one gunicorn config, shipped in the package (collector/gunicorn.conf.py)."""
    return str(resources.files("deniable.collector").joinpath("gunicorn.conf.py"))


def close_listeners_on_term(worker: Any) -> None:
    """Make a gunicorn sync worker let go of the listening sockets as soon as it gets SIGTERM.

    On a graceful stop the master closes its listening sockets, but every worker holds copies.
    A worker busy with a slow request kept them open, so the kernel went on completing
    handshakes for new connections that nobody would ever serve (they hung until the worker
    exited). Here SIGTERM (interrupting a blocked read, which Python then retries) first
    replaces the worker's listening descriptors with a socket that listens on nothing
    (``dup2``, so descriptor numbers stay valid for the worker loop's ``select``), then lets
    gunicorn stop the worker as usual: the request in flight finishes, and once the master and
    every worker have let go, new connections are refused at once.
    A worker told to stop while the server goes on (a reload, fewer workers) only drops its
    own copies; the listening socket stays open for the others. Other worker classes (a
    config that overrides ``worker_class``) are left as gunicorn made them.
    """
    import socket

    from gunicorn.workers.sync import SyncWorker

    if not isinstance(worker, SyncWorker):
        return
    previous = signal.getsignal(signal.SIGTERM)
    placeholder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    accept = worker.accept

    def guarded_accept(listener: Any) -> None:
        try:
            accept(listener)
        except OSError:
            if worker.alive:
                raise  # a real error; once stopping, the placeholder refuses accept()

    def handle_term(sig: int, frame: Any) -> None:
        worker.alive = False
        for listener in worker.sockets:
            try:
                os.dup2(placeholder.fileno(), listener.fileno())
            except OSError:
                pass
        if callable(previous):
            previous(sig, frame)

    worker.accept = guarded_accept
    signal.signal(signal.SIGTERM, handle_term)
    # gunicorn asks the kernel to restart system calls after SIGTERM, so a worker blocked in a
    # read (a slow body, a Redis reply) ran no Python handler until the read returned. Let the
    # read be interrupted instead: the handler runs at once, and Python retries the read
    # (PEP 475), so the request in flight goes on undisturbed.
    signal.siginterrupt(signal.SIGTERM, True)


def prepare_metrics_dir(path: str | None = None) -> tuple[str, bool]:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` for this process and the gunicorn workers it forks.

    Call before anything imports prometheus_client. Uses ``path``, else the variable already
    set, else a fresh temporary directory. Stale ``*.db`` files of an earlier run are removed,
    as prometheus_client requires, so counters start from zero with each server start.

    Returns:
        The directory, and whether it was made here (and so should be removed on exit).
    """
    chosen = path or os.environ.get(METRICS_DIR_ENV)
    made = chosen is None
    chosen = chosen or tempfile.mkdtemp(prefix="deniable-prometheus-")
    os.makedirs(chosen, exist_ok=True)
    for name in os.listdir(chosen):
        if name.endswith(".db"):
            os.unlink(os.path.join(chosen, name))
    os.environ[METRICS_DIR_ENV] = chosen
    return chosen, made


def default_workers() -> int:
    """gunicorn sync workers for this machine: two per core the process may use, at least 2.

    Each ingest request waits on one Redis round trip; a second worker per core keeps the core
    busy meanwhile (docs/operations.md, "Speed", measures 1, 1.5, 2 and 3 per core).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, 2 * (cores or 1))


def serve(host: str, port: int, *, workers: int | None = None, dev: bool = False,
          config_file: str | None = None, app: Callable[[], Any] | None = None) -> None:
    """Serve the collector configured by the ``DENIABLE_*`` environment, until stopped.

    Under gunicorn, every server setting comes from ``config_file`` (by default the packaged
    collector/gunicorn.conf.py); ``host``, ``port`` and ``workers`` override its bind address
    and worker count. ``app`` makes the WSGI app in each worker (default: ``create_app``, as
    ``deniable.collector.wsgi``); ``deniable serve`` passes one that adds the dashboard's
    open-domain decoder (``dashboard.use_discovery``).
    """
    if dev:
        from deniable.collector.app import create_app

        (app or create_app)().run(host=host, port=port, threaded=True, use_reloader=False)
        return
    from gunicorn.app.base import Application

    overrides: dict[str, Any] = {"bind": f"{host}:{port}"}
    if workers:
        overrides["workers"] = workers
    path = config_file or default_config_file()

    class _Collector(Application):  # type: ignore[misc]
        def init(self, parser: Any, opts: Any, args: Any) -> None:
            return None

        def load_config(self) -> None:
            self.load_config_from_file(path)
            for key, value in overrides.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            if app is not None:
                return app()
            from deniable.collector.wsgi import app as default

            return default

    _Collector().run()


class CollectorProcess:
    """``deniable serve`` in a child process on 127.0.0.1 and a free port.

    Args:
        redis_url: the Redis holding the counters.
        metrics_file: the metrics TOML file.
        workers: gunicorn sync workers.
        dev: use Werkzeug's threaded server instead of gunicorn.
        env: extra ``DENIABLE_*`` settings.
    """

    def __init__(self, redis_url: str, metrics_file: str | Path, *, workers: int = 2,
                 dev: bool = False, port: int | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.redis_url = redis_url
        self.metrics_file = str(metrics_file)
        self.workers = workers
        self.dev = dev
        self.port = port or free_port()
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> str:
        """Start the server; return its base URL once /healthz answers and, under gunicorn,
        every worker has loaded the app (so no worker is still starting up afterwards)."""
        command = [sys.executable, "-m", "deniable.cli", "serve", "--host", "127.0.0.1",
                   "--port", str(self.port), "--redis-url", self.redis_url,
                   "--metrics-file", self.metrics_file, "--workers", str(self.workers)]
        if self.dev:
            command.append("--dev")
        env = self.child_env()
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                        stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True, preexec_fn=die_with_parent())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                message = f"the collector exited with {self.process.returncode}: {self.log_tail()}"
                self.stop()
                raise CollectorError(message)
            if self._answers() and (self.dev or self._workers_ready() >= self.workers):
                return self.url
            time.sleep(0.05)
        self.stop()
        raise CollectorError(f"the collector was not ready on port {self.port} in {timeout}s: "
                             f"{self.log_tail(1000)}")

    def child_env(self) -> dict[str, str]:
        """This environment for the child, minus per-instance state that it must not share
        with other collectors (a Prometheus directory, a control socket) unless ``env`` names
        its own: each collector then gets a fresh metrics directory and no control socket."""
        inherited = {k: v for k, v in os.environ.items() if k not in PER_INSTANCE_ENV}
        return {**inherited, **self.env}

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _workers_ready(self) -> int:
        """How many workers have logged "worker ready" (the gunicorn config's hook)."""
        return self.log_tail(1 << 24).count('"message":"worker ready"')

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Stop the server and all its workers: ``sig`` (SIGTERM, graceful) then SIGKILL."""
        process, self.process = self.process, None
        log, self._log = self._log, None
        if log is not None:
            log.close()
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, sig)
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            except ProcessLookupError:
                pass

    def log_tail(self, limit: int = 4000) -> str:
        """The end of the server's combined stdout and stderr."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-limit:]

    def __enter__(self) -> CollectorProcess:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
