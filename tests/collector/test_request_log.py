"""Request lines go to stderr in batches: whole lines, in order, each write atomic on a pipe,
none more than the delay late, none written twice across a fork (test_observability.py reads a
whole run's log after a graceful stop: none is lost at exit)."""
from __future__ import annotations

import io
import json
import logging
import os
import select
import time

import pytest

from deniable.collector.observability import JsonFormatter, RequestLineHandler


class Writes(io.StringIO):
    """A stderr that remembers each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


@pytest.fixture()
def stderr() -> Writes:
    return Writes()


def handler(delay_seconds: float, stream: Writes) -> tuple[RequestLineHandler, logging.Logger]:
    batched = RequestLineHandler(delay_seconds, stream)
    batched.setFormatter(JsonFormatter())
    log = logging.getLogger(f"test.requests.{id(batched)}")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(batched)
    return batched, log


def lines(stderr: Writes) -> list[dict]:
    return [json.loads(line) for line in stderr.getvalue().splitlines()]


def test_many_lines_take_few_writes_each_whole_and_at_most_pipe_buf(stderr: Writes) -> None:
    batched, log = handler(60.0, stderr)
    for i in range(500):
        log.info("request", extra={"fields": {"i": i}})
    batched.flush()
    assert [line["i"] for line in lines(stderr)] == list(range(500))  # all, in order
    assert len(stderr.writes) < 500 / 10
    for write in stderr.writes:
        assert len(write.encode()) <= select.PIPE_BUF and write.endswith("\n")


def test_a_lone_line_is_written_within_the_delay(stderr: Writes) -> None:
    _, log = handler(0.1, stderr)
    log.info("request", extra={"fields": {"i": 1}})
    assert stderr.getvalue() == ""  # buffered ...
    deadline = time.monotonic() + 2
    while not stderr.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [line["i"] for line in lines(stderr)] == [1]  # ... and written by the flusher


def test_a_forked_child_does_not_write_its_parents_lines_again(stderr: Writes) -> None:
    batched, log = handler(60.0, stderr)
    log.info("request", extra={"fields": {"who": "parent"}})
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.write(write, str(len(batched._pending)).encode())
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    assert os.read(read, 16) == b"0"
    batched.flush()
    assert [line["who"] for line in lines(stderr)] == ["parent"]


def test_the_recorder_writes_what_the_logging_path_writes(stderr: Writes) -> None:
    from deniable.collector.observability import REQUEST_LOGGER, RequestRecorder

    batched, log = handler(0.0, stderr)  # 0: each line at once
    requests_log = logging.getLogger(REQUEST_LOGGER)
    try:
        requests_log.setLevel(logging.INFO)
        RequestRecorder(True, batched).record("POST", "/v1/reports", 202, 0.0015)
        requests_log.setLevel(logging.WARNING)  # LOG_LEVEL=WARNING: no request lines
        RequestRecorder(True, batched).record("POST", "/v1/reports", 202, 0.0015)
    finally:
        requests_log.setLevel(logging.NOTSET)
    log.name = REQUEST_LOGGER  # the same line, through a logging record and the formatter
    log.info("request", extra={"fields": {"method": "POST", "route": "/v1/reports",
                                          "status": 202, "duration_ms": 1.5}})
    direct, logged = lines(stderr)
    assert direct.pop("ts") and logged.pop("ts")
    assert list(direct.items()) == list(logged.items())
    assert direct == {"level": "info", "logger": REQUEST_LOGGER, "message": "request",
                      "method": "POST", "route": "/v1/reports", "status": 202,
                      "duration_ms": 1.5}
