"""The client as a guest in the app, over bad networks: the real client against a real
collector (gunicorn, auth on) on loopback, disturbed by stalled, closed, slow and TLS fronts.

Every test ends with exact counts at the collector: every report handed over arrived once
(0 lost, 0 duplicated), checked against the client's own ledger of perturbed bits.
"""
from __future__ import annotations

import logging
import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import requests

from deniable.cli.main import main
from deniable.client import (
    Connection,
    Delivery,
    InvalidParameterError,
    Privacy,
    Reporter,
    UnknownMetricError,
)
from deniable.collector import auth
from tests.netfaults import (closed_port_url, make_private_ca, slow_proxy, stalled_listener,
                             tls_proxy)

pytestmark = pytest.mark.slow

X, DARK = "feature_x_enabled", "dark_mode"
X_MECH, DARK_MECH = "rr:1/2:1/2", "rr:3/4:1/2"   # as in tests/conftest.py's metrics file
DECLARED = {X: X_MECH, DARK: DARK_MECH}
HOSTILE = "rr:4095/4096:1/2"                      # epsilon = ln 8191 ~ 9.0
DEADLINE_SLACK = 0.25                              # issue 17: return within t + 0.25 s


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


class Keys:
    """An ingest and a read key on the collector's Redis."""

    def __init__(self, redis_client) -> None:  # type: ignore[no-untyped-def]
        self.redis = redis_client
        self.ingest = auth.create_key(redis_client, "ingest", "shop")
        self.read = auth.create_key(redis_client, "read", "analysts")


def counted(url: str, keys: Keys, metric: str, mechanism: str) -> tuple[int, int]:
    """(n, ones) the collector counted for one version of ``metric``, over its HTTP API."""
    response = requests.get(f"{url}/v1/metrics/{metric}/counts", params={"mechanism": mechanism},
                            headers={"Authorization": f"Bearer {keys.read.secret}"}, timeout=10)
    response.raise_for_status()
    buckets = response.json()["buckets"]
    return sum(b["n"] for b in buckets), sum(b["ones"] for b in buckets)


def assert_exactly_once(url: str, keys: Keys, ledger, handed: dict[str, int]) -> None:  # type: ignore[no-untyped-def]
    """The collector holds exactly the perturbed bits the client handed over: 0 lost, 0 twice."""
    for metric, n in handed.items():
        entry = ledger[metric]
        assert (entry.handed_n, entry.sent_n) == (n, n), metric
        assert counted(url, keys, metric, entry.mechanism) == (n, entry.handed_ones), metric


def timed(call):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


# -- construction and deadlines --------------------------------------------------------------

def test_a_stalled_collector_never_blocks_the_app_and_nothing_is_lost(
        live_secure_collector, redis_client, tmp_path: Path) -> None:
    keys, queue = Keys(redis_client), tmp_path / "q.db"
    with stalled_listener() as stalled:
        # Nothing declared: construction returns at once, and nothing is reported. (It does
        # local work only, creating the SQLite file: a network wait would be the 10 s read
        # timeout against this listener.)
        fresh, took = timed(lambda: Reporter(stalled, token=keys.ingest.secret,
                                             queue_path=tmp_path / "fresh.db",
                                             privacy=Privacy(one_per_period=False)))
        assert took < 1.0
        with pytest.raises(UnknownMetricError):
            fresh.report(X, True)                # not declared: never reported
        assert fresh.stats().queued == 0
        assert timed(lambda: fresh.close(timeout=0.5))[1] < 0.5 + DEADLINE_SLACK

        reporter, took = timed(lambda: Reporter(stalled, DECLARED, token=keys.ingest.secret,
                                                queue_path=queue, delivery=Delivery(batch_size=10),
                                                privacy=Privacy(one_per_period=False)))
        assert took < 1.0 and reporter.ready
        for i in range(45):
            reporter.report(X if i % 3 else DARK, i % 2 == 0)
        time.sleep(0.2)  # let the sender get a request in flight
        for t in (0.3, 0.6):
            drained, took = timed(lambda: reporter.flush(timeout=t))
            assert drained is False and t - 0.05 <= took < t + DEADLINE_SLACK
        stats = reporter.stats()
        assert (stats.queued, stats.dead_lettered) == (45, 0)
        drained, took = timed(lambda: reporter.close(timeout=0.5))
        assert drained is False and took < 0.5 + DEADLINE_SLACK
    # The network is back: the same queue file delivers everything, exactly once.
    url = live_secure_collector.url
    with Reporter(url, DECLARED, token=keys.ingest.secret, queue_path=queue,
                  privacy=Privacy(one_per_period=False)) as back:
        at_start = back.stats()  # its sender starts at once: some may be sent already
        assert at_start.queued + at_start.sent == 45 and at_start.dead_lettered == 0
        assert back.flush(timeout=20) is True
        assert_exactly_once(url, keys, back.ledger(), {X: 30, DARK: 15})


def test_a_closed_port_first_launch_keeps_the_declared_reports(
        live_secure_collector, redis_client, tmp_path: Path) -> None:
    keys, queue = Keys(redis_client), tmp_path / "q.db"
    closed = closed_port_url()
    reporter, took = timed(lambda: Reporter(closed, DECLARED, token=keys.ingest.secret,
                                            queue_path=queue,
                                            delivery=Delivery(batch_size=5, backoff=0.05),
                                            privacy=Privacy(one_per_period=False)))
    assert took < 1.0
    for i in range(12):
        reporter.report(DARK, i % 4 == 0)
    wait_for(lambda: reporter.last_error is not None)
    assert "refused the connection" in (reporter.last_error or "")
    assert not reporter.stats().key_refused
    drained, took = timed(lambda: reporter.close(timeout=0.4))
    assert drained is False and took < 0.4 + DEADLINE_SLACK

    url = live_secure_collector.url
    with Reporter(url, DECLARED, token=keys.ingest.secret, queue_path=queue,
                  privacy=Privacy(one_per_period=False)) as back:
        assert back.flush(timeout=20) is True
        assert_exactly_once(url, keys, back.ledger(), {DARK: 12})


def test_a_slow_collector_abandoned_at_the_deadline_still_counts_once(
        live_secure_collector, redis_client, tmp_path: Path) -> None:
    keys, queue = Keys(redis_client), tmp_path / "q.db"
    url = live_secure_collector.url
    with slow_proxy(port_of(url), delay=0.8) as slow:
        reporter = Reporter(slow, DECLARED, token=keys.ingest.secret, queue_path=queue,
                            delivery=Delivery(batch_size=10), privacy=Privacy(one_per_period=False),
                            connection=Connection(timeout=(2.0, 5.0)))
        for i in range(30):
            reporter.report(X, i % 5 == 0)
        # A request is in flight at each deadline: flush and close give it up on time.
        drained, took = timed(lambda: reporter.flush(timeout=0.3))
        assert drained is False and took < 0.3 + DEADLINE_SLACK
        drained, took = timed(lambda: reporter.close(timeout=0.3))
        assert drained is False and took < 0.3 + DEADLINE_SLACK
        time.sleep(1.0)  # the abandoned request reaches the collector and is counted there
        # The slow path still works for a patient app.
        with Reporter(slow, DECLARED, token=keys.ingest.secret, queue_path=queue,
                      privacy=Privacy(one_per_period=False),
                      connection=Connection(timeout=(2.0, 5.0))) as patient:
            for i in range(10):
                patient.report(X, True)
            assert patient.flush(timeout=30) is True
            ledger = patient.ledger()
    # The abandoned batch was re-sent under its id: a duplicate, counted once.
    assert_exactly_once(url, keys, ledger, {X: 40})


def test_the_atexit_hook_keeps_its_deadline_against_a_stalled_collector(tmp_path: Path) -> None:
    child = textwrap.dedent("""
        import atexit, sys, time
        atexit.register(lambda: print("exited", time.monotonic(), flush=True))  # runs last
        from deniable.client import Reporter
        url, queue = sys.argv[1], sys.argv[2]
        for i in range(2):  # two reporters left open share one exit deadline
            r = Reporter(url, {"dark_mode": "rr:3/4:1/2"}, queue_path=f"{queue}{i}",
                         batch_size=1, exit_timeout=0.5, one_per_period=False)
            for _ in range(3):
                r.report("dark_mode", True)
        time.sleep(0.3)  # requests in flight
        print("leaving", time.monotonic(), flush=True)
    """)
    with stalled_listener() as stalled:
        done = subprocess.run([sys.executable, "-c", child, stalled, str(tmp_path / "q")],
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    times = {line.split()[0]: float(line.split()[1]) for line in done.stdout.splitlines()}
    assert times["exited"] - times["leaving"] < 0.5 + DEADLINE_SLACK
    for i in range(2):  # nothing lost: the reports wait in each queue file
        with Reporter(closed_port_url(), {"dark_mode": "rr:3/4:1/2"},
                      queue_path=tmp_path / f"q{i}", privacy=Privacy(one_per_period=False)) as left:
            assert left.stats().queued == 3
            left.close(timeout=0)


# -- keys --------------------------------------------------------------------------------

def test_a_revoked_key_keeps_the_data_until_a_valid_key_delivers_it_once(
        live_secure_collector, redis_client, redis_url, tmp_path: Path, capsys) -> None:
    keys, queue, url = Keys(redis_client), tmp_path / "q.db", live_secure_collector.url
    reporter = Reporter(url, DECLARED, token=keys.ingest.secret, queue_path=queue,
                        delivery=Delivery(batch_size=10, backoff=0.05),
                        privacy=Privacy(one_per_period=False))
    for i in range(20):
        reporter.report(X, i % 2 == 0)
    assert reporter.flush(timeout=20) is True

    assert main(["keys", "--redis-url", redis_url, "revoke", keys.ingest.info.key_id]) == 0
    capsys.readouterr()
    time.sleep(1.1)  # DENIABLE_AUTH_CACHE_SECONDS=1 for this collector
    for i in range(50):
        reporter.report(DARK, i % 3 == 0)
    assert reporter.flush(timeout=1.0) is False
    wait_for(lambda: reporter.stats().key_refused)
    stats = reporter.stats()
    assert (stats.queued, stats.dead_lettered) == (50, 0)
    assert "refused the ingest key" in (stats.last_error or "")
    assert reporter.dead_letters() == []
    assert reporter.close(timeout=0.5) is False

    # The app gets a valid key: the same queue file delivers every batch, exactly once.
    second = auth.create_key(redis_client, "ingest", "shop")
    reporter = Reporter(url, DECLARED, token=second.secret, queue_path=queue,
                        delivery=Delivery(backoff=0.05), privacy=Privacy(one_per_period=False))
    assert reporter.flush(timeout=20) is True
    assert not reporter.stats().key_refused and reporter.last_error is None
    # And a key replaced while running: set_token.
    auth.revoke_key(redis_client, second.info.key_id)
    time.sleep(1.1)
    for i in range(10):
        reporter.report(DARK, True)
    assert reporter.flush(timeout=1.0) is False
    wait_for(lambda: reporter.stats().key_refused)
    reporter.set_token(auth.create_key(redis_client, "ingest", "shop").secret)
    assert reporter.flush(timeout=20) is True
    assert_exactly_once(url, keys, reporter.ledger(), {X: 20, DARK: 60})
    reporter.close()


# -- a hostile catalogue -----------------------------------------------------------------

def register_hostile(url: str, redis_client) -> None:  # type: ignore[no-untyped-def]
    admin = auth.create_key(redis_client, "admin", "ops")
    for mechanism in (DARK_MECH, HOSTILE):  # version 1 as in the metrics file, then version 2
        response = requests.post(f"{url}/v1/admin/metrics", timeout=10,
                                 headers={"Authorization": f"Bearer {admin.secret}"},
                                 json={"name": DARK, "mechanism": mechanism})
        assert response.status_code in (200, 201), response.text
    assert [v["mechanism"] for v in response.json()["metric"]["versions"]] == [DARK_MECH,
                                                                                HOSTILE]

    time.sleep(1.2)  # DENIABLE_REGISTRY_CACHE_SECONDS=1: every worker's cache has moved on

    def served() -> bool:
        doc = requests.get(f"{url}/v1/metrics", timeout=10,
                           headers={"Authorization": f"Bearer {admin.secret}"}).json()
        return {m["name"]: m["mechanism"] for m in doc["metrics"]}[DARK] == HOSTILE
    wait_for(lambda: all(served() for _ in range(4)))


def test_a_huge_epsilon_in_the_catalogue_is_never_used(
        live_secure_collector, redis_client, caplog) -> None:
    keys, url = Keys(redis_client), live_secure_collector.url
    register_hostile(url, redis_client)
    caplog.set_level(logging.WARNING, logger="deniable.client")

    # The declared mechanism is the floor, and the collector still accepts it (an unretired
    # earlier version of the metric).
    with Reporter(url, DECLARED, token=keys.ingest.secret,
                  delivery=Delivery(batch_size=10, catalogue_refresh=0.1),
                  privacy=Privacy(one_per_period=False)) as reporter:
        wait_for(lambda: DARK in reporter.stats().floored_metrics)
        assert reporter.metrics[DARK].id == DARK_MECH
        assert reporter.privacy_loss(DARK).one_report_epsilon == pytest.approx(math.log(7))
        for i in range(25):
            reporter.report(DARK, i % 2 == 0)
        assert reporter.flush(timeout=20) is True
        time.sleep(0.3)  # a few refreshes: still said once
        assert reporter.stats().dead_lettered == 0
        ledger = reporter.ledger()
    floor_lines = [r for r in caplog.records if "privacy floor" in r.getMessage()]
    assert len(floor_lines) == 1
    assert counted(url, keys, DARK, HOSTILE) == (0, 0)  # nothing was ever sent above it
    assert_exactly_once(url, keys, ledger, {DARK: 25})


def test_the_ceiling_can_be_raised_or_lowered_by_the_app(
        live_secure_collector, redis_client) -> None:
    keys, url = Keys(redis_client), live_secure_collector.url
    with Reporter(url, {X: "rr:1/2:1/2"}, token=keys.ingest.secret,
                  privacy=Privacy(max_epsilon=1.5, one_per_period=False)) as strict:
        wait_for(lambda: strict.catalogue_fetched)
        assert set(strict.metrics) == {X}  # the served dark_mode (ln 7) is not declared
        strict.close(timeout=0)
    with pytest.raises(InvalidParameterError, match="max_epsilon"):
        # Declaring above it is a programming error.
        Reporter(url, DECLARED, privacy=Privacy(max_epsilon=1.5, one_per_period=False))
    with Reporter(url, DECLARED, token=keys.ingest.secret,
                  privacy=Privacy(one_per_period=False)) as default:
        assert set(default.metrics) == {X, DARK}    # ln 3 and ln 7 pass the default ln 9
        default.close(timeout=0)


# -- TLS ---------------------------------------------------------------------------------

def test_tls_with_a_private_ca(live_secure_collector, redis_client, tmp_path: Path,
                               monkeypatch) -> None:
    keys, url, queue = Keys(redis_client), live_secure_collector.url, tmp_path / "q.db"
    ca = make_private_ca(tmp_path)
    (tmp_path / "other").mkdir()
    other = make_private_ca(tmp_path / "other")
    with tls_proxy(port_of(url), ca) as https:
        # The default trust store does not know the private CA: the failure names itself,
        # and the reports stay queued.
        reporter = Reporter(https, DECLARED, token=keys.ingest.secret, queue_path=queue,
                            delivery=Delivery(batch_size=5, backoff=0.05),
                            privacy=Privacy(one_per_period=False))
        for i in range(10):
            reporter.report(X, i % 2 == 1)
        wait_for(lambda: reporter.last_error is not None)
        assert "certificate verify failed for host 127.0.0.1" in (reporter.last_error or "")
        assert reporter.close(timeout=0.3) is False
        # The process-wide REQUESTS_CA_BUNDLE cannot replace the bundle the app gives.
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(other.ca_pem))
        with Reporter(https, DECLARED, token=keys.ingest.secret, queue_path=queue,
                      privacy=Privacy(one_per_period=False),
                      connection=Connection(verify=ca.ca_pem)) as trusted:
            assert trusted.stats().queued == 10
            for i in range(5):
                trusted.report(DARK, True)
            assert trusted.flush(timeout=20) is True
            assert_exactly_once(url, keys, trusted.ledger(), {X: 10, DARK: 5})


def test_verify_false_needs_an_explicit_insecure_flag(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="insecure_skip_verify"):
        Reporter("https://127.0.0.1:9", DECLARED, privacy=Privacy(one_per_period=False),
                 connection=Connection(verify=False))
    with pytest.raises(InvalidParameterError, match="verify=False"):
        Reporter("https://127.0.0.1:9", DECLARED, privacy=Privacy(one_per_period=False),
                 connection=Connection(insecure_skip_verify=True))
    with pytest.raises(InvalidParameterError, match="does not exist"):
        Reporter("https://127.0.0.1:9", DECLARED, privacy=Privacy(one_per_period=False),
                 connection=Connection(verify=tmp_path / "missing.pem"))
    insecure = Reporter("https://127.0.0.1:9", DECLARED, privacy=Privacy(one_per_period=False),
                        connection=Connection(verify=False, insecure_skip_verify=True))
    insecure.close(timeout=0)


def test_the_collectors_metrics_file_can_declare_the_metrics(
        live_secure_collector, redis_client, metrics_file: Path) -> None:
    keys, url = Keys(redis_client), live_secure_collector.url
    with Reporter(url, metrics_file, token=keys.ingest.secret,
                  privacy=Privacy(one_per_period=False)) as reporter:
        assert reporter.ready and {m: r.id for m, r in reporter.metrics.items()} == DECLARED
        for _ in range(7):
            reporter.report(DARK, False)
        assert reporter.flush(timeout=20) is True
        assert_exactly_once(url, keys, reporter.ledger(), {DARK: 7})

