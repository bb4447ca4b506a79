"""Issue 26, "sending never depends on the true value ... not through the cap", as an attack.

A hostile operator drives the real collector's admin API; real Python Reporters, one privacy
state per device, report a boolean whose value each device holds. The operator publishes
versions of the metric (the same question at ln 3, no larger than declared) until every
device's cap over versions (ln 81 = 4 ln 3) is spent: one answer under each of versions 0-3.
Then half the devices change value (8 of 16, fixed by the test, not by anything the operator
sees) and every device reports again under version 3. Before this change, a changed device's
new answer was refused and it went silent, while an unchanged one re-sent its paid answer:
"changed iff silent" was right for every device (issue 26's figure: 100 of 100).

Now the refused value is sent as the other value's paid answer, free. What the operator sees
per device (reports counted and ones under version 3, after each device's run) is the same as
before the change for every device, changed or not, so any rule reading it is right for half
the devices: chance level 1/2 of 16 = 8, exactly, with no tolerance (the view is a fixed
function of what the device sent before the change, so the accuracy is not random; no false
failure). A version published after that (nothing of it paid) is silent for every device,
whatever its value. Each ledger charges 4 ln 3, never past the cap, and the collector counted
exactly what the ledgers paid for. The same attack runs on 8 Node devices of the web client
(both entries; each start reports twice, the repeat free): the same result, 4 of 8 for each
rule, exactly.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import requests

from deniable.client import Delivery, Privacy, Reporter, Storage
from deniable.client.budget import DEFAULT_MAX_METRIC_EPSILON
from deniable.client.longitudinal import LongitudinalGuard
from deniable.collector import auth
from deniable.collector.server import CollectorProcess
from tests.client.test_sender import wait_for
from tests.e2e.test_version_churn import (  # noqa: F401  (a fixture)
    CAP_REPORTS, DECLARED, METRIC, secure_collector, version)
from tests.e2e.test_web_version_churn import start

DEVICES = 16
NODE_DEVICES = 8


def observed(url: str, read: dict[str, str], mechanism: str) -> tuple[int, int]:
    """What the collector counted for the metric under ``mechanism``: (reports, ones)."""
    answer = requests.get(f"{url}/v1/metrics/{METRIC}/counts", headers=read, timeout=10,
                          params={"mechanism": mechanism})
    assert answer.status_code == 200, answer.text
    buckets = answer.json()["buckets"]
    return sum(b["n"] for b in buckets), sum(b["ones"] for b in buckets)


@pytest.fixture()
def keys(redis_client: redis.Redis) -> Iterator[tuple[dict[str, str], dict[str, str], str]]:
    """Admin and read headers, and an ingest key."""
    yield ({"Authorization": f"Bearer {auth.create_key(redis_client, 'admin').secret}"},
           {"Authorization": f"Bearer {auth.create_key(redis_client, 'read').secret}"},
           auth.create_key(redis_client, "ingest", "app").secret)


Run = Callable[[int, int, bool], tuple[int, int]]
"""run(i, j, value): device i starts the app and reports ``value`` under version j; the
operator's view of that start: (reports, ones) the collector counted under version j."""


def attack(url: str, admin: dict[str, str], run: Run, devices: int, per_run: int) -> None:
    """The operator spends every device's cap (one new answer under each of 4 versions), half
    the devices change value, every device reports again; then a version none of whose
    answers is paid. Asserts the operator's view says nothing of who changed."""
    changed = set(range(0, devices, 2))  # chosen by the test, not by anything the operator sees
    values = [i % 4 < 2 for i in range(devices)]  # both values among changed and unchanged

    def publish(j: int) -> None:
        answer = requests.post(f"{url}/v1/admin/metrics", headers=admin, timeout=10,
                               json={"name": METRIC, "mechanism": version(j).id})
        assert answer.status_code == 201, answer.text

    last: list[tuple[int, int]] = []
    for j in range(CAP_REPORTS):
        publish(j)
        last = [run(i, j, values[i]) for i in range(devices)]
        assert all(n == per_run for n, _ in last)
    now = [run(i, CAP_REPORTS - 1, values[i] != (i in changed)) for i in range(devices)]
    assert now == last  # each device's view: its reports, the same bits as before the change
    for rule in (lambda view, before: view[0] == 0,          # "changed iff silent"
                 lambda view, before: view != before):       # "changed iff the bits moved"
        right = sum(rule(now[i], last[i]) == (i in changed) for i in range(devices))
        assert right == devices // 2  # chance level, exactly
    # A version of which nothing is paid: silent for every device, whatever its value.
    publish(CAP_REPORTS)
    assert [run(i, CAP_REPORTS, values[i] != (i in changed)) for i in range(devices)] \
        == [(0, 0)] * devices


@pytest.mark.slow
def test_past_the_cap_a_changed_boolean_is_not_told_by_silence(
        secure_collector: CollectorProcess, keys: tuple[dict[str, str], dict[str, str], str],
        tmp_path: Path) -> None:
    url = secure_collector.url
    admin, read, ingest = keys
    assert CAP_REPORTS * math.log(3) <= DEFAULT_MAX_METRIC_EPSILON * (1 + 1e-12)
    states = [tmp_path / f"device{i}" for i in range(DEVICES)]

    def run(i: int, j: int, value: bool) -> tuple[int, int]:
        before = observed(url, read, version(j).id)
        with Reporter(url, {METRIC: DECLARED}, token=ingest, storage=Storage(privacy_dir=states[i]),
                      delivery=Delivery(batch_size=10),
                      privacy=Privacy(one_per_period=False)) as reporter:
            wait_for(lambda: reporter.metrics[METRIC] == version(j))
            reporter.report(METRIC, value)
            assert reporter.flush(timeout=10)
        after = observed(url, read, version(j).id)
        return after[0] - before[0], after[1] - before[1]

    attack(url, admin, run, DEVICES, 1)
    # The ledgers: 4 ln 3 each, never past the cap; the refusals are counted on the device.
    for i, state in enumerate(states):
        guard = LongitudinalGuard(state)
        try:
            spend = guard.stats()[METRIC]
        finally:
            guard.close()
        assert spend.paid_values == CAP_REPORTS
        assert spend.memoized_charged == pytest.approx(CAP_REPORTS * math.log(3), rel=1e-12)
        assert spend.cap_refused == (2 if i % 2 == 0 else 1)  # the changed ones: 2
    # The collector counted one report per device per paid version and the substitutes.
    assert [observed(url, read, version(j).id)[0] for j in range(CAP_REPORTS + 1)] \
        == [DEVICES] * (CAP_REPORTS - 1) + [2 * DEVICES, 0]


@pytest.mark.slow
def test_node_devices_past_the_cap_are_not_told_by_silence_either(
        secure_collector: CollectorProcess, keys: tuple[dict[str, str], dict[str, str], str],
        tmp_path: Path) -> None:
    """The same attack on Node devices (web/scripts/node-churn-reporter.mjs: each start
    reports the value twice, the repeat free), half on each entry; the ledger in each
    device's queue file holds 4 answers, never past the cap."""
    url = secure_collector.url
    admin, read, ingest = keys
    entries = ["default", "default", "all", "all"] * (NODE_DEVICES // 4)

    def run(i: int, j: int, value: bool) -> tuple[int, int]:
        before = observed(url, read, version(j).id)
        start(url, tmp_path / f"node{i}", ingest, METRIC, value, entries[i], version(j).id)
        after = observed(url, read, version(j).id)
        return after[0] - before[0], after[1] - before[1]

    attack(url, admin, run, NODE_DEVICES, 2)
    for i in range(NODE_DEVICES):
        ledger = json.loads((tmp_path / f"node{i}" / "queue.json").read_text())["ledger"]
        assert len(ledger[METRIC]["paid"]) == CAP_REPORTS
