"""The Reporter as an app sees it, against a real HTTP server that records the wire."""
from __future__ import annotations

import json

import pytest

from deniable.client import InvalidParameterError, Reporter, UnknownMetricError
from deniable.client.mechanism import DEFAULT, RandomizedResponse
from deniable.client.metrics import describe_metric
from tests.servers import recording_collector

CATALOGUE = {"metrics": [describe_metric("feature_x_enabled", "X", DEFAULT),
                         describe_metric("dark_mode", "Dark", RandomizedResponse("3/4", "1/2"))]}


class FixedBits:
    """Always draws the same value: 0b01 makes the two-coin scheme force a "yes"."""

    def __init__(self, value: int) -> None:
        self.value = value

    def bits(self, k: int) -> int:
        return self.value & ((1 << k) - 1)


def test_the_client_configures_itself_from_the_collector() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        reporter = Reporter(url)
        assert reporter.metrics == {"feature_x_enabled": DEFAULT,
                                    "dark_mode": RandomizedResponse("3/4", "1/2")}
        assert recorder.paths == ["/v1/metrics"]


def test_the_bytes_sent_carry_perturbed_bits_only() -> None:
    # With the truth coin forced to "lie" and the forced coin to "no", every report of a
    # true "yes" goes out as 0: the wire must show the perturbed bit, not the true value.
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, rng=FixedBits(0b11)) as reporter:
            for _ in range(5):
                reporter.report("feature_x_enabled", True)
        [body] = recorder.bodies
        doc = json.loads(body)
        assert set(doc) == {"batch_id", "reports"}
        assert doc["reports"] == [{"metric": "feature_x_enabled", "mechanism": "rr:1/2:1/2",
                                   "bit": 0}] * 5
        assert b"true" not in body.lower() and b"value" not in body


def test_requests_carry_no_identifiers_or_cookies() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, batch_size=1) as reporter:  # every report is its own request
            reporter.report("feature_x_enabled", True)
            reporter.report("feature_x_enabled", False)
        assert len(recorder.bodies) == 2
        for headers in recorder.headers:
            assert "Cookie" not in headers  # the server set one; it is never returned
            assert headers["User-Agent"] == "deniable-client"
        ids = [json.loads(b)["batch_id"] for b in recorder.bodies]
        assert ids[0] != ids[1]


def test_batches_upload_when_full_and_on_flush() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        reporter = Reporter(url, batch_size=3)
        for _ in range(7):
            reporter.report("dark_mode", False)
        assert [len(json.loads(b)["reports"]) for b in recorder.bodies] == [3, 3]
        assert reporter.flush() == 1
        assert [len(json.loads(b)["reports"]) for b in recorder.bodies] == [3, 3, 1]
        assert reporter.flush() == 0  # nothing left
        reporter.close()


def test_unknown_metrics_and_values_are_refused_without_echoing_the_value() -> None:
    with recording_collector(CATALOGUE) as (url, _):
        reporter = Reporter(url)
        with pytest.raises(UnknownMetricError, match="not_registered"):
            reporter.report("not_registered", True)
        with pytest.raises(InvalidParameterError) as info:
            reporter.report("dark_mode", "sensitive answer")  # type: ignore[arg-type]
        assert "sensitive" not in str(info.value)
        with pytest.raises(InvalidParameterError):
            Reporter(url, batch_size=0)


def test_metrics_can_be_given_in_code() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        reporter = Reporter(url, metrics={"feature_x_enabled": "rr:1/2:1/2"})
        assert recorder.paths == []  # no catalogue fetch
        assert reporter.metrics == {"feature_x_enabled": DEFAULT}
        with pytest.raises(InvalidParameterError):
            Reporter(url, metrics={"Bad Name": DEFAULT})
