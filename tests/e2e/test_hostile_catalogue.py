"""Issue 26 items 1, 2 and 4 as attacks: a hostile operator drives the real collector's admin
API, and real Python Reporters that declare their metrics (the same metrics file the collector
loaded) report through it. The declaration is the contract (docs/client.md), so:

1. **Narrow domains and decoys** (``os`` re-published as ``[label, decoy]`` for each of five
   labels, ``startup_ms`` as ``[625 k, 10000]`` for k = 1..10, all at epsilon 0.01): every
   device reports under its declared mechanism after every version, whatever its value. The
   operator's signal, "sent or not, under which version", is the same for every device, so
   any rule reading it guesses the same label for every device: chance level, exactly 1/5 of
   the devices here (2 of 10 per label); the decoy versions count nothing.
2. **Served fresh and hourly** (a version at epsilon ln 3 with ``memoization = "fresh"`` and
   ``period = "hour"``): the device takes the version id (the same question, an epsilon no
   larger) but stays memoized and daily: 7 identical reports in 168 hours. A majority vote
   over them is one memoized answer, right with probability exactly
   ``(P1 + 1 - Q) / 2 = 2998/4000`` (chance level for one report of this mechanism: 112.4 of
   150 devices, checked within 6 standard deviations), and each
   ledger charges one answer's epsilon (ln 3), not 168 reports'.
3. **Widened dimension lists** (``app_version`` re-listed with 97 candidate builds, answered
   200 "updated"): the device sends ``other``, as its own list says; the build appears in no
   series and nowhere in Redis.

Each ledger charge is checked against what the collector counted.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path

import pytest
import redis
import requests

from deniable.client import Delivery, InvalidParameterError, Privacy, Reporter, Storage
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import RandomizedResponse
from deniable.collector import auth
from deniable.collector.server import CollectorProcess
from tests.client.test_sender import wait_for
from tests.servers import collector_with_metrics

OS = ["android", "ios", "windows", "macos", "linux"]
BUILDS = ["2.3", "2.4", "2.5"]
METRICS = f"""\
[metrics.os]
kind = "categorical"
categories = {json.dumps(OS)}
epsilon = 1.0

[metrics.startup_ms]
kind = "numeric"
lower = 0
upper = 10000
epsilon = 1.0

[metrics.hourly_flag]
mechanism = "rr:1/2:1/2"

[metrics.build_flag]
mechanism = "rr:1/2:1/2"
[metrics.build_flag.dimensions.app_version]
values = {json.dumps(BUILDS)}
other = true
"""
TINY = 0.01
"""The epsilon of every decoy version (issue 26, item 1)."""


@pytest.fixture()
def hostile(redis_url: str, redis_client: redis.Redis, tmp_path: Path
            ) -> Iterator[tuple[CollectorProcess, Path, dict[str, dict[str, str]], str]]:
    """A collector with auth on (keys cached), its registry re-read on every request (a
    published version shows at once); the metrics file (which the apps declare too), the
    headers of an admin and a read key, and an ingest key."""
    env = {"DENIABLE_AUTH_CACHE_SECONDS": "60", "DENIABLE_REGISTRY_CACHE_SECONDS": "0",
           "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0", "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0"}
    with collector_with_metrics(redis_url, METRICS, tmp_path, workers=1, env=env) as collector:
        path = Path(collector.metrics_file)
        admin = {"Authorization": f"Bearer {auth.create_key(redis_client, 'admin').secret}"}
        read = {"Authorization": f"Bearer {auth.create_key(redis_client, 'read').secret}"}
        ingest = auth.create_key(redis_client, "ingest", "app").secret
        yield collector, path, {"admin": admin, "read": read}, ingest


def publish(url: str, keys: dict[str, dict[str, str]], body: dict[str, object],
            status: int = 201) -> str:
    """Register ``body`` through the admin API; the mechanism id of the current version."""
    answer = requests.post(f"{url}/v1/admin/metrics", headers=keys["admin"], json=body,
                           timeout=10)
    assert answer.status_code == status, answer.text
    return answer.json()["metric"]["versions"][-1]["mechanism"]


def counted(url: str, keys: dict[str, dict[str, str]], metric: str, mechanism: str,
            **query: str) -> int:
    """Reports the collector counted for ``metric`` under ``mechanism`` (every hour)."""
    answer = requests.get(f"{url}/v1/metrics/{metric}/counts", headers=keys["read"],
                          timeout=10,
                          params={"mechanism": mechanism, **query})
    assert answer.status_code == 200, answer.text
    return sum(bucket["n"] for bucket in answer.json()["buckets"])


def charged(state: Path) -> dict[str, tuple[float, int]]:
    """metric -> (nats charged over the device's life, memoized answers paid for)."""
    guard = LongitudinalGuard(state)
    try:
        return {m: (s.total_charged, s.paid_values) for m, s in guard.stats().items()}
    finally:
        guard.close()


@pytest.mark.slow
def test_narrow_domains_and_decoys_leave_sending_independent_of_the_value(
        hostile: tuple[CollectorProcess, Path, dict[str, dict[str, str]], str], tmp_path: Path) -> None:
    collector, metrics, keys, ingest = hostile
    url = collector.url
    declared = Reporter(url, metrics, storage=Storage(privacy_dir=":memory:"))
    os_id, startup_id = (declared.specs[m].mechanism.id for m in ("os", "startup_ms"))
    declared.close(timeout=0)
    # Ten devices: two per label; start-up times one in each of ten 625 ms bands.
    devices = [(tmp_path / f"device{i}", OS[i // 2], 625 * i + 300) for i in range(10)]
    decoys = [{"name": "os", "kind": "categorical", "categories": [label, "decoy"],
               "epsilon": TINY} for label in OS]
    decoys += [{"name": "startup_ms", "kind": "numeric", "lower": 625 * k, "upper": 10_000,
                "epsilon": TINY} for k in range(1, 11)]
    seen: list[list[tuple[tuple[str, str, int], ...]]] = [[] for _ in devices]
    decoy_ids = []
    for body in decoys:
        decoy_ids.append((body["name"], publish(url, keys, body)))
        for i, (state, label, startup) in enumerate(devices):
            with Reporter(url, metrics, token=ingest, storage=Storage(privacy_dir=state),
                          privacy=Privacy(one_per_period=False)) as reporter:
                wait_for(lambda: reporter.catalogue_fetched)
                assert reporter.stats().ignored_served[str(body["name"])] >= 1
                for metric, value in (("os", label), ("startup_ms", startup)):
                    try:  # as any app must: a value the metric does not take raises
                        reporter.report(metric, value)
                    except InvalidParameterError:
                        pass
                assert reporter.flush(timeout=10)
                seen[i].append(tuple(sorted((e.metric, e.mechanism, e.sent_n)
                                            for e in reporter.ledger().values())))
    # What the operator sees of each device, version by version: identical for every device.
    expected = tuple(sorted([("os", os_id, 1), ("startup_ms", startup_id, 1)]))
    assert all(pattern == [expected] * len(decoys) for pattern in seen)
    # So a rule reading it guesses one label for all: right for exactly 2 of 10 (chance, 1/5).
    guesses = {tuple(pattern) for pattern in seen}
    assert len(guesses) == 1
    assert sum(label == OS[0] for _, label, _ in devices) == 2
    # Nothing under any decoy; every report under the declared versions, as each ledger says.
    for metric, mechanism in decoy_ids:
        assert counted(url, keys, metric, mechanism) == 0
    assert counted(url, keys, "os", os_id) == len(decoys) * len(devices)
    assert counted(url, keys, "startup_ms", startup_id) == len(decoys) * len(devices)
    for state, _, _ in devices:
        spent = charged(state)  # one memoized answer each, at the declared epsilon
        assert spent["os"] == (pytest.approx(1.0), 1)
        assert spent["startup_ms"] == (pytest.approx(1.0), 1)


P1, Q = Fraction(1497, 2000), Fraction(499, 2000)
"""The served version's channel: truth t = 499/1000, forced_yes t / (2 (1 - t)), so P1 = 3t/2
and Q = t/2 (epsilon ln 3, as declared: likelihood ratio P1/Q = 3)."""
SERVED = RandomizedResponse(Fraction(499, 1000), Fraction(499, 1000) / (2 * Fraction(501, 1000)))
DEVICES = 150
HOURS = 168


def test_the_served_mechanism_states_the_channel_above() -> None:
    assert SERVED.channel == (P1, Q) and SERVED.likelihood_ratio == 3
    accuracy = (P1 + 1 - Q) / 2
    assert accuracy == Fraction(2998, 4000)
    # The bounds checked below: mean -/+ 6 sd of Binomial(150, accuracy), 112.4 -/+ 31.9;
    # the top one below 150 (before the fix: 200 of 200).
    mean = DEVICES * accuracy
    sd = math.sqrt(DEVICES * accuracy * (1 - accuracy))
    assert 80 < float(mean) - 6 * sd and float(mean) + 6 * sd < 145 < DEVICES


@pytest.mark.slow
def test_served_fresh_and_hourly_policies_change_nothing_on_the_device(
        hostile: tuple[CollectorProcess, Path, dict[str, dict[str, str]], str], tmp_path: Path) -> None:
    collector, metrics, keys, ingest = hostile
    url = collector.url
    served_id = publish(url, keys, {"name": "hourly_flag", "mechanism": SERVED.id,
                                     "memoization": "fresh", "period": "hour"})
    assert served_id == SERVED.id
    monday = datetime(2026, 11, 23, tzinfo=timezone.utc).timestamp()
    right = 0
    for d in range(DEVICES):
        value = d % 2 == 0
        state = tmp_path / f"device{d}"
        with Reporter(url, metrics, token=ingest, storage=Storage(privacy_dir=state),
                      delivery=Delivery(batch_size=50)) as reporter:
            wait_for(lambda: reporter.metrics["hourly_flag"] == SERVED)  # the version id only
            assert reporter.stats().ignored_served == {"hourly_flag": 2}  # memoization, period
            now = [monday]
            reporter._periods._clock = lambda: now[0]  # noqa: SLF001 - a week of hours
            for hour in range(HOURS):
                now[0] = monday + 3600 * hour + 60
                reporter.report("hourly_flag", value)
            assert reporter.flush(timeout=10)
            [entry] = reporter.ledger().values()
        # Daily, as declared: 7 reports, all the one memoized answer.
        assert (entry.mechanism, entry.sent_n) == (SERVED.id, 7)
        assert entry.sent_ones in (0, 7)
        majority = entry.sent_ones > entry.sent_n // 2
        right += majority == value
        assert charged(state)["hourly_flag"] == (pytest.approx(SERVED.epsilon), 1)
    assert counted(url, keys, "hourly_flag", SERVED.id) == 7 * DEVICES
    # Chance level for one report of this mechanism: 2998/4000 of 150 = 112.4 expected, sd
    # 5.31; the bounds are mean -/+ 6 sd (false failure < 2e-9 by the normal tail on both
    # sides together). Before the fix a majority over 168 fresh reports recovered 200 of 200.
    assert 80 <= right <= 145


def test_a_widened_dimension_list_never_carries_the_exact_build(
        hostile: tuple[CollectorProcess, Path, dict[str, dict[str, str]], str],
        redis_client: redis.Redis, tmp_path: Path) -> None:
    collector, metrics, keys, ingest = hostile
    url = collector.url
    candidates = BUILDS + [f"2.4.{1100 + i}" for i in range(97)]
    mechanism = publish(url, keys, {
        "name": "build_flag", "mechanism": "rr:1/2:1/2",
        "dimensions": {"app_version": {"values": candidates, "other": True}}}, status=200)
    device = {"app_version": "2.4.1177"}  # on the operator's list, not on the app's
    state = tmp_path / "device"
    with Reporter(url, metrics, token=ingest, storage=Storage(privacy_dir=state),
                  privacy=Privacy(one_per_period=False), dimensions=device) as reporter:
        wait_for(lambda: reporter.catalogue_fetched)
        assert reporter.stats().ignored_served == {"build_flag": 1}  # its dimensions
        assert reporter.dimensions["build_flag"].get("app_version").values == tuple(BUILDS)  # type: ignore[union-attr]
        for _ in range(3):
            reporter.report("build_flag", True)
        assert reporter.flush(timeout=10)
        [entry] = reporter.ledger().values()
        assert (entry.sent_n, reporter.stats().dead_lettered) == (3, 0)
    assert counted(url, keys, "build_flag", mechanism) == 3
    assert counted(url, keys, "build_flag", mechanism, series="app_version=other") == 3
    assert counted(url, keys, "build_flag", mechanism,
                   series="app_version=2.4.1177") == 0
    # No counter of the build exists: only the registry holds the operator's list.
    assert not [k for k in redis_client.keys("*1177*") if b"app_version=2.4.1177" in k]
    assert [k for k in redis_client.keys("*app_version=other*")]
    assert charged(state)["build_flag"] == (pytest.approx(math.log(3)), 1)
