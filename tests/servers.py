"""Small real HTTP servers and proxies for tests that need to see or disturb the wire."""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
