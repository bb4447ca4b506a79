"""Real servers for tests: a collector started on a metrics file (``collector_with_metrics``),
and small HTTP servers and proxies for tests that need to see or disturb the wire."""
from __future__ import annotations

import json
import socket
import threading
import time
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import redis

from deniable.collector.server import CollectorProcess

BATCH_SECRET = "test-batch-secret"
"""The batch-record HMAC key of the tests' collectors (a reused batch id answers 409)."""
OPEN = {"AUTH": "off", "RATE_LIMIT_IP_PER_SECOND": 0, "RATE_LIMIT_KEY_PER_SECOND": 0,
        "BATCH_SECRET": BATCH_SECRET}
"""Settings of an open collector: dev mode (no keys) and no rate limits."""
OPEN_ENV = {f"DENIABLE_{k}": str(v) for k, v in OPEN.items()}
"""``OPEN`` as a collector process's environment."""

Metrics = str | Mapping[str, Mapping[str, object]]
"""A metrics file's text, or its ``[metrics.*]`` tables as a dict: name -> table."""


def metrics_toml(metrics: Metrics) -> str:
    """The TOML text of ``metrics``: text as given; a dict as ``[metrics.NAME]`` tables (nested
    dicts as sub-tables). Raises ValueError if the text written would not read back equal."""
    if isinstance(metrics, str):
        return metrics
    lines: list[str] = []

    def table(header: str, body: Mapping[str, object]) -> None:
        lines.append(f"[{header}]")
        nested = {k: v for k, v in body.items() if isinstance(v, Mapping)}
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in body.items()
                     if key not in nested)
        lines.append("")
        for key, value in nested.items():
            table(f"{header}.{_toml_key(key)}", value)  # type: ignore[arg-type]

    for name, body in metrics.items():
        table(f"metrics.{_toml_key(name)}", body)
    text = "\n".join(lines)
    if tomllib.loads(text) != {"metrics": _plain(metrics)}:
        raise ValueError(f"metrics must be TOML-writable tables. Got {metrics!r} instead.")
    return text


def _toml_key(key: str) -> str:
    return key if key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key) \
        else json.dumps(key)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value)  # a JSON string or number is a TOML basic string or number
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ValueError(f"a metric's value must be a bool, number, string or list. "
                     f"Got {value!r} instead.")


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@contextmanager
def collector_with_metrics(redis_url: str, metrics: Metrics, directory: Path, *,
                           workers: int = 2, env: Mapping[str, str] | None = OPEN_ENV,
                           flush: bool = False) -> Iterator[CollectorProcess]:
    """A live collector (``deniable serve``, gunicorn) over ``metrics``, written to
    ``directory/metrics.toml`` (``CollectorProcess.metrics_file``); stopped on exit.

    Args:
        redis_url: the Redis the collector writes (a test's own server, never port 6379).
        metrics: the metrics file's text, or its tables as a dict (``metrics_toml``).
        directory: an empty temp directory for the file.
        workers: gunicorn sync workers.
        env: the collector's ``DENIABLE_*`` settings; default an open collector.
        flush: empty the Redis database before the start and after the stop, so the
            collector's counts are exactly its own tests' reports and leave nothing behind.
    """
    path = Path(directory) / "metrics.toml"
    path.write_text(metrics_toml(metrics))
    if flush:
        _flush(redis_url)
    try:
        with CollectorProcess(redis_url, path, workers=workers, env=env) as process:
            yield process
    finally:
        if flush:
            _flush(redis_url)


def _flush(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


class Recorder:
    """What a RecordingCollector received."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.post_times: list[float] = []  # time.monotonic() of each POST's arrival
        self.statuses: list[int] = []      # the status answered to each POST


@contextmanager
def recording_collector(catalogue: dict, answers: list[tuple[int, dict[str, str]]] | None = None
                        ) -> Iterator[tuple[str, Recorder]]:
    """A collector stand-in that records raw requests, sets a cookie, and accepts everything.

    ``answers`` scripts the first POSTs: each (status, extra headers) is used once, in order
    (e.g. ``(503, {"Retry-After": "1"})``); afterwards every POST gets 202.
    """
    recorder = Recorder()
    script = list(answers or [])
    script_lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, status: int, body: dict, extra: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Set-Cookie", "tracker=device-123; Path=/")
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            recorder.paths.append(self.path)
            recorder.headers.append(dict(self.headers))
            self._answer(200, catalogue)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with script_lock:
                status, extra = script.pop(0) if script else (202, {})
                recorder.post_times.append(time.monotonic())
                recorder.paths.append(self.path)
                recorder.bodies.append(body)
                recorder.headers.append(dict(self.headers))
                recorder.statuses.append(status)
            if status < 300:
                self._answer(status, {"accepted": len(json.loads(body)["reports"])})
            else:
                self._answer(status, {"title": "scripted", "detail": f"scripted {status}"},
                             extra)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", recorder
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def response_dropping_proxy(upstream_port: int, drop_first: int) -> Iterator[str]:
    """A TCP proxy that forwards each request upstream, but for the first ``drop_first``
    connections swallows the upstream's answer and hangs up: the request was applied, yet
    the client never hears so, exactly as when a response is lost to a timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    state = {"connections": 0}
    stop = threading.Event()
    opened: list[socket.socket] = []

    def pump(src: socket.socket, dst: socket.socket | None) -> None:
        try:
            while data := src.recv(65536):
                if dst is not None:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                if s is not None:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            state["connections"] += 1
            drop = state["connections"] <= drop_first
            upstream = socket.create_connection(("127.0.0.1", upstream_port))
            opened.extend((client, upstream))
            threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, None if drop else client),
                             daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()
        for sock in opened:
            sock.close()
