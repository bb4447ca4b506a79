"""The client as a guest: construction never waits, declared metrics report before a catalogue,
the epsilon ceiling and the declared floor, what each HTTP answer does to a batch, and the
one-mechanism-per-metric batches the collector accepts for any unretired version."""
from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import pytest

from deniable.client import (
    Delivery,
    InvalidParameterError,
    Privacy,
    RandomizedResponse,
    Reporter,
    UnknownMetricError,
)
from deniable.client.errors import UploadError, WireFormatError
from deniable.client.kinds import MetricSpec
from deniable.client.metrics import (DEFAULT_MAX_EPSILON, coerce_catalogue, describe_metric,
                                     load_metrics_file, resolve)
from deniable.client.queue import DurableQueue
from deniable.client.transport import status_kind
from deniable.client.wire import decode_batch, decode_compact_batch, encode_batch, new_batch_id
from tests.client.test_sender import Largest, wait_for
from tests.netfaults import stalled_listener
from tests.servers import recording_collector

LN3, LN7 = RandomizedResponse.from_id("rr:1/2:1/2"), RandomizedResponse.from_id("rr:3/4:1/2")
HUGE = RandomizedResponse.from_id("rr:4095/4096:1/2")
CATALOGUE = {"metrics": [describe_metric("feature_x_enabled", "X", LN3),
                         describe_metric("dark_mode", "D", LN7)]}
METRICS = {"feature_x_enabled": "rr:1/2:1/2"}




# -- the ceiling and the floor, as a pure function -------------------------------------------

def test_the_default_ceiling_admits_what_the_project_ships_and_nothing_far_above() -> None:
    assert DEFAULT_MAX_EPSILON == pytest.approx(math.log(9))
    ln9 = RandomizedResponse.from_id("rr:4/5:1/2")     # P1 = 9/10, Q = 1/10: exactly ln 9
    assert ln9.likelihood_ratio == 9
    just_above = RandomizedResponse.from_id("rr:801/1000:1/2")
    shipped = {"a": LN3, "b": LN7, "c": ln9, "d": just_above, "e": HUGE}
    resolution = resolve(coerce_catalogue(shipped), None, DEFAULT_MAX_EPSILON)
    assert set(resolution.usable) == {"a", "b", "c"}
    assert set(resolution.withheld) == {"d", "e"} and "max_epsilon" in resolution.withheld["e"]


def test_the_ceiling_compares_exact_likelihood_ratios_never_float_epsilons() -> None:
    from deniable.client.metrics import above_ceiling
    ln3 = math.log(3)
    # ln 3 itself, and the float just below it (within max_epsilon's 2**-40 allowance for its
    # own rounding), admit a ratio of exactly 3; a float comparison of epsilons would refuse
    # the second.
    assert not above_ceiling(LN3, ln3)
    assert not above_ceiling(LN3, math.nextafter(ln3, 0))
    assert LN3.epsilon > math.nextafter(ln3, 0)
    assert above_ceiling(LN3, ln3 * (1 - 1e-9))       # far past the allowance: refused
    assert not above_ceiling(HUGE, math.inf) and above_ceiling(HUGE, DEFAULT_MAX_EPSILON)


def test_a_declared_mechanism_is_a_floor_and_a_more_private_one_is_taken() -> None:
    more_private = RandomizedResponse.from_id("rr:1/4:1/2")
    declared = coerce_catalogue({"x": LN3, "y": LN3, "z": LN7})
    served = coerce_catalogue({"x": LN7, "y": more_private, "z": LN7, "other": LN3})
    resolution = resolve(declared, served, DEFAULT_MAX_EPSILON)
    assert resolution.usable == coerce_catalogue(
        {"x": LN3, "y": more_private, "z": LN7})  # never "other"
    assert set(resolution.floored) == {"x"} and "rr:3/4:1/2" in resolution.floored["x"]
    assert resolve(declared, None, DEFAULT_MAX_EPSILON).usable == declared
    assert resolve({}, served, DEFAULT_MAX_EPSILON).usable == {}  # nothing declared
    lowered = resolve(declared, served, math.log(2))
    assert lowered.usable == {"y": MetricSpec("boolean", more_private)}


def test_max_epsilon_must_be_a_positive_number() -> None:
    for bad in (0, -1.0, float("nan"), "2", True):
        with pytest.raises(InvalidParameterError, match="max_epsilon"):
            Reporter("http://127.0.0.1:9", METRICS,
                     privacy=Privacy(max_epsilon=bad,
                                     one_per_period=False))  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="catalogue_refresh"):
        Reporter("http://127.0.0.1:9", METRICS, delivery=Delivery(catalogue_refresh=0),
                 privacy=Privacy(one_per_period=False))
    with pytest.raises(InvalidParameterError, match="above max_epsilon"):
        Reporter("http://127.0.0.1:9", {"x": HUGE}, privacy=Privacy(one_per_period=False))
    Reporter("http://127.0.0.1:9", {"x": HUGE},
             privacy=Privacy(max_epsilon=math.inf, one_per_period=False)).close(timeout=0)


def test_the_collectors_metrics_toml_file_declares_metrics(tmp_path: Path) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text('[metrics.dark_mode]\ndescription = "D"\nmechanism = "rr:3/4:1/2"\n'
                    'retention_days = 30\nsome_future_field = 1\n')
    assert load_metrics_file(path) == {"dark_mode": MetricSpec("boolean", LN7)}
    for text in ("not toml [", "[other]\n", '[metrics.x]\nmechanism = 3\n',
                 '[metrics.Bad]\nmechanism = "rr:1/2:1/2"\n'):
        path.write_text(text)
        with pytest.raises(InvalidParameterError):
            load_metrics_file(path)
    with pytest.raises(InvalidParameterError, match="cannot read"):
        load_metrics_file(tmp_path / "missing.toml")


# -- before the catalogue --------------------------------------------------------------------

def test_declared_metrics_report_before_any_catalogue_and_undeclared_ones_raise(
        tmp_path: Path) -> None:
    with stalled_listener() as url:
        started = time.monotonic()
        reporter = Reporter(url, METRICS, queue_path=tmp_path / "q.db",
                            privacy=Privacy(one_per_period=False))
        assert time.monotonic() - started < 1.0  # local work only; the read timeout is 10 s
        for i in range(5):
            reporter.report("feature_x_enabled", i % 2 == 0)
        # Undeclared metrics raise whatever the value; programming errors raise at once.
        for value in (True, False, None):
            with pytest.raises(UnknownMetricError, match="dark_mode"):
                reporter.report("dark_mode", value)
        with pytest.raises(InvalidParameterError):
            reporter.report("feature_x_enabled", None)
        with pytest.raises(UnknownMetricError):
            reporter.report("Not A Name", True)
        stats = reporter.stats()
        assert (stats.not_ready, stats.queued) == (0, 5)
        reporter.close(timeout=0)


def test_a_reporter_that_declares_nothing_reports_nothing(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="deniable.client")
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, delivery=Delivery(batch_size=1),
                      privacy=Privacy(one_per_period=False)) as reporter:
            wait_for(lambda: reporter.catalogue_fetched)
            assert reporter.metrics == {}  # the catalogue adds no metric
            for metric in ("dark_mode", "feature_x_enabled", "not_registered"):
                with pytest.raises(UnknownMetricError, match=metric):
                    reporter.report(metric, True)
            assert reporter.flush(timeout=10) is True
    assert recorder.paths == ["/v1/metrics"]  # no POST
    assert any("declares no metrics" in r.getMessage() for r in caplog.records)


# -- what each answer does to a batch ------------------------------------------------------

def test_status_kinds() -> None:
    assert {s: status_kind(s) for s in (400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 429,
                                        500, 503)} \
        == {400: "bad_batch", 401: "key_refused", 403: "key_refused", 404: "config",
            405: "config", 408: "network", 409: "bad_batch", 413: "bad_batch", 415: "config",
            422: "bad_batch", 429: "network", 500: "network", 503: "network"}
    assert UploadError("x", status=503, retryable=True).kind == "network"
    assert UploadError("x", status=422, retryable=False).kind == "bad_batch"


@pytest.mark.slow
@pytest.mark.parametrize("status", [401, 403, 404, 415])
def test_configuration_answers_keep_the_batch_queued(status: int) -> None:
    with recording_collector(CATALOGUE, [(status, {})] * 2) as (url, recorder):
        with Reporter(url, METRICS, delivery=Delivery(batch_size=1, backoff=0.5),
                      privacy=Privacy(one_per_period=False)) as reporter:
            reporter._sender._rand = Largest()  # each wait its bound: 0.5 s, then 1 s
            reporter.report("feature_x_enabled", True)
            wait_for(lambda: reporter.last_error is not None)  # the first answer is in
            assert reporter.stats().key_refused == (status in (401, 403))
            assert reporter.flush(timeout=10) is True
            assert (reporter.stats().sent, reporter.stats().dead_lettered) == (1, 0)
            assert reporter.last_error is None and not reporter.stats().key_refused
        assert recorder.statuses == [status, status, 202]
        assert len(set(recorder.bodies)) == 1  # the same bytes, the same batch id


@pytest.mark.slow
@pytest.mark.parametrize("status", [400, 409, 413, 422])
def test_a_dead_lettered_batch_can_be_retried_unchanged(status: int) -> None:
    with recording_collector(CATALOGUE, [(status, {})]) as (url, recorder):
        with Reporter(url, METRICS, delivery=Delivery(batch_size=2),
                      privacy=Privacy(one_per_period=False)) as reporter:
            reporter.report("feature_x_enabled", True)
            reporter.report("feature_x_enabled", False)
            assert reporter.flush(timeout=10) is True
            [letter] = reporter.dead_letters()
            assert letter.status == status and reporter.stats().dead_lettered == 2
            assert reporter.retry_dead_letters() == 2
            assert reporter.dead_letters() == [] and reporter.stats().dead_lettered == 0
            assert reporter.flush(timeout=10) is True
            assert reporter.stats().sent == 2
            assert reporter.retry_dead_letters() == 0
        assert recorder.statuses == [status, 202]
        assert recorder.bodies[0] == recorder.bodies[1]


# -- one mechanism per metric per batch ----------------------------------------------------

def test_a_batch_never_mixes_two_mechanisms_of_one_metric(tmp_path: Path) -> None:
    queue = DurableQueue(tmp_path / "q.db", batch_size=10)
    for mechanism in ("rr:1/2:1/2", "rr:1/2:1/2", "rr:3/4:1/2", "rr:3/4:1/2"):
        queue.put(("dark_mode", mechanism, 1))
        queue.put(("feature_x_enabled", "rr:1/2:1/2", 0))
    queue.commit(seal_all=True)
    bodies = []
    while (batch := queue.next_batch()) is not None:
        bodies.append(json.loads(batch.body))
        queue.ack(batch.batch_id)
    per_batch = [{(r["metric"], r["mechanism"]) for r in b["reports"]} for b in bodies]
    assert [len(b["reports"]) for b in bodies] == [4, 4]
    for pairs in per_batch:
        assert len({m for m, _ in pairs}) == len(pairs)
    queue.close()


def test_the_wire_accepts_an_earlier_version_and_counts_it_under_its_own_mechanism() -> None:
    current, older = {"dark_mode": "rr:3/4:1/2"}, {"dark_mode": frozenset({"rr:1/2:1/2"})}
    batch_id = new_batch_id()
    doc = encode_batch(batch_id, [("dark_mode", "rr:1/2:1/2", 1), ("dark_mode", "rr:1/2:1/2", 0)])
    body = json.dumps(doc, separators=(",", ":")).encode()
    for batch in (decode_batch(doc, current, older=older),
                  decode_compact_batch(body, current, older=older)):
        assert batch is not None
        assert batch.tallies["dark_mode"].mechanism == "rr:1/2:1/2"
        assert (batch.tallies["dark_mode"].n, batch.tallies["dark_mode"].ones) == (2, 1)
    with pytest.raises(WireFormatError):
        decode_batch(doc, current)  # without ``older``: only the current version
    assert decode_compact_batch(body, current) is None
    mixed = encode_batch(batch_id, [("dark_mode", "rr:1/2:1/2", 1), ("dark_mode", "rr:3/4:1/2", 1)])
    with pytest.raises(WireFormatError) as info:
        decode_batch(mixed, current, older=older)
    assert [p.pointer for p in info.value.problems] == ["/reports/1/mechanism"]
    assert decode_compact_batch(json.dumps(mixed, separators=(",", ":")).encode(), current,
                                older=older) is None


def test_network_failures_name_themselves() -> None:
    import requests

    from deniable.client.transport import _network_failure, _tls_failure

    dns = requests.exceptions.ConnectionError(
        "HTTPSConnectionPool(host='t.invalid', port=443): Max retries exceeded (Caused by "
        "NameResolutionError(\"Failed to resolve 't.invalid' ([Errno -2] Name or service not "
        "known)\"))")
    assert _network_failure("t.invalid", dns) == "DNS lookup failed for host t.invalid " \
                                                 "(ConnectionError)"
    assert "timed out" in _network_failure("h", requests.exceptions.ConnectTimeout("x"))
    assert "did not answer" in _network_failure("h", requests.exceptions.ReadTimeout("x"))
    tls = requests.exceptions.SSLError(
        "HTTPSConnectionPool(host='h', port=443): Max retries exceeded (Caused by SSLError("
        "SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
        "failed: unable to get local issuer certificate (_ssl.c:1006)')))")
    assert _tls_failure("h", tls) == ("certificate verify failed for host h: unable to get "
                                      "local issuer certificate")
    assert _tls_failure("h", requests.exceptions.SSLError("EOF")) == \
        "TLS handshake failed for host h (SSLError)"


def test_flush_keeps_its_deadline_while_another_thread_holds_the_queue_file(
        tmp_path: Path) -> None:
    """A slow SQLite write elsewhere (a loaded disk) must not hold flush() past its deadline."""
    import threading
    with stalled_listener() as url:
        reporter = Reporter(url, METRICS, queue_path=tmp_path / "q.db",
                            privacy=Privacy(one_per_period=False))
        for i in range(20):
            reporter.report("feature_x_enabled", i % 2 == 0)
        queue = reporter._queue
        held, release = threading.Event(), threading.Event()

        def hold_the_file() -> None:
            with queue._db_lock:  # as a commit stuck in fsync would
                held.set()
                release.wait(5)

        holder = threading.Thread(target=hold_the_file)
        holder.start()
        try:
            assert held.wait(5)
            started = time.monotonic()
            assert reporter.flush(timeout=0.3) is False
            assert time.monotonic() - started < 0.3 + 0.25
        finally:
            release.set()
            holder.join()
        reporter.close(timeout=0)
    with Reporter("http://127.0.0.1:9", METRICS, queue_path=tmp_path / "q.db",
                  privacy=Privacy(one_per_period=False)) as again:
        assert again.stats().queued == 20  # nothing was lost by giving up
        again.close(timeout=0)
