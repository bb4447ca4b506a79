"""Issue 26's attacks 1, 2 and 4 against the web client, end to end: a real collector (gunicorn,
real Redis, auth on) whose operator is hostile and uses its admin API, and 40 Node devices
(web/scripts/node-contract-reporter.mjs, half on each entry for the boolean metric, the others
on deniable-client/all) that ship the app's declarations (the metrics file, as JSON).

The operator, who also sees every request (the script records each batch as sent):
1. publishes, round after round, narrow domains at epsilon 0.01: `os` with categories
   [L, "decoy"] for five labels L, `startup_ms` on [625 k, 10000] (issue 26 read every
   device's value from which of these versions got a report);
2. publishes a `dark_mode` version at ln 3 with memoization "fresh" and period "hour" (a
   majority vote over fresh reports read 200 of 200 devices);
4. re-lists 100 candidate builds as `dark_mode`'s `app_version` values, one of them each
   device's exact build (which then arrived in clear).

Asserted from what the collector counts and what went over the wire: no report under any
attack version; every device sends the same reports whatever its values (so "sent or not"
says nothing: recovery by it is 0 of 40, chance 1/6 for the OS and 1/16 for the 625 ms bucket);
one memoized answer per metric and device (the served "fresh" is ignored); `app_version` only
ever "other"; each device's ledger charges exactly one answer per metric at its declared
epsilon, the answers it sent; and the operator's best guess of the OS from those answers is
right no more often than the declared mechanism allows (tolerance in the test).

Needs `./dev test` (or `./dev setup` plus `npm ci && npm run build` in web/).
"""
from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Iterator
from fractions import Fraction
from math import comb
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from deniable.client.categorical import KaryRandomizedResponse, domain_tag
from deniable.client.kinds import parse_mechanism
from deniable.client.state import StateDir
from deniable.collector import auth
from deniable.collector.server import CollectorProcess
from tests.e2e.test_version_churn import version
from tests.e2e.test_web_client import WEB, node, web_declarations
from tests.servers import collector_with_metrics

pytestmark = pytest.mark.slow

OS = ["android", "ios", "windows", "macos", "linux", "other"]
OS_MECHANISM = KaryRandomizedResponse(6, Fraction(1, 4), domain_tag(OS))  # P1 1/4, eps ln 5/3
OS_P1 = OS_MECHANISM.p
BUILD = "2.4.1177"  # every device's exact build
DEVICES = 40
ROUNDS = 5          # app starts per device, one attack version of os and startup_ms each
METRICS = f"""\
[metrics.os]
kind = "categorical"
categories = {json.dumps(OS)}
mechanism = "{OS_MECHANISM.id}"

[metrics.startup_ms]
kind = "numeric"
lower = 0
upper = 10000
clamp = true
epsilon = 1.0

[metrics.dark_mode]
mechanism = "rr:1/2:1/2"
[metrics.dark_mode.dimensions.app_version]
values = ["2.3", "2.4", "2.5"]
other = true
"""
FRESH = version(1).id  # epsilon exactly ln 3, as the declared rr:1/2:1/2: the device takes it


def max_recovered(n: int, p: Fraction, rate: Fraction = Fraction(1, 10**6)) -> int:
    """The least k with P(Binomial(n, p) > k) <= rate, exactly: the most devices a guess right
    with probability p per device gets right, but for a chance of at most `rate`."""
    tail = Fraction(0)
    for k in range(n, -1, -1):
        tail += comb(n, k) * p**k * (1 - p)**(n - k)
        if tail > rate:
            return k
    return 0


def test_the_tolerance() -> None:
    assert max_recovered(DEVICES, Fraction(1, 4)) == 24
    assert max_recovered(DEVICES // 2, Fraction(1, 4)) == 15
    assert max_recovered(DEVICES, Fraction(1)) == 40


@pytest.fixture()
def collector(redis_url: str, redis_client: redis.Redis, tmp_path: Path
              ) -> Iterator[CollectorProcess]:
    """Auth on; registry and keys re-read on every request, so a new version shows at once."""
    env = {"DENIABLE_AUTH_CACHE_SECONDS": "0", "DENIABLE_REGISTRY_CACHE_SECONDS": "0",
           "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0", "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0"}
    with collector_with_metrics(redis_url, METRICS, tmp_path, workers=2, env=env,
                                flush=True) as process:
        yield process


def units(epsilon: float) -> int:
    """epsilon in the ledger's units (2**-1074), exactly."""
    return int(Fraction(epsilon) * 2**1074)


def test_a_hostile_operator_reads_nothing_beyond_the_declared_mechanisms(
        collector: CollectorProcess, redis_client: redis.Redis, tmp_path: Path) -> None:
    url = collector.url
    admin = {"Authorization": f"Bearer {auth.create_key(redis_client, 'admin').secret}"}
    read = {"Authorization": f"Bearer {auth.create_key(redis_client, 'read').secret}"}
    ingest = auth.create_key(redis_client, "ingest", "app").secret
    # The app ships its metrics file as JSON (what `deniable metrics json` writes).
    shipped = web_declarations(requests.get(f"{url}/v1/metrics", headers=read, timeout=5).json())
    declared = {name: table["mechanism"] for name, table in shipped.items()}
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps(shipped))

    def publish(body: dict[str, Any]) -> str:
        answer = requests.post(f"{url}/v1/admin/metrics", headers=admin, json=body, timeout=10)
        assert answer.status_code in (200, 201), answer.text
        return str(answer.json()["metric"]["mechanism"])

    builds = [f"2.4.{1100 + i}" for i in range(100)]
    assert BUILD in builds
    assert publish({"name": "dark_mode", "mechanism": FRESH, "memoization": "fresh",
                    "period": "hour", "dimensions": {"app_version": {
                        "values": builds, "other": True}}}) == FRESH
    attack: dict[str, list[str]] = {"os": [], "startup_ms": []}
    truth = random.Random(26)
    values = [{"os": truth.choice(OS), "startup_ms": truth.uniform(0, 10_000),
               "dark_mode": truth.random() < 0.5} for _ in range(DEVICES)]
    results: list[list[dict[str, Any]]] = [[] for _ in range(DEVICES)]
    for i in range(DEVICES):
        StateDir(tmp_path / f"device{i}" / "privacy").secret()
    for r in range(ROUNDS):
        attack["os"].append(publish({"name": "os", "kind": "categorical", "epsilon": 0.01,
                                     "categories": [OS[r], "decoy"]}))
        attack["startup_ms"].append(publish({"name": "startup_ms", "kind": "numeric",
                                             "epsilon": 0.01, "lower": 625 * (3 * r + 1),
                                             "upper": 10000}))
        devices = [{"dir": str(tmp_path / f"device{i}"), "entry": "all" if i % 2 else "default",
                    "dimensions": {"app_version": BUILD},
                    "reports": [[m, v[m]] for _ in range(3) for m in ("os", "startup_ms",
                                                                     "dark_mode")]}
                   for i, v in enumerate(values)]
        path = tmp_path / "devices.json"
        path.write_text(json.dumps(devices))
        done = subprocess.run([node(), "scripts/node-contract-reporter.mjs", url, ingest,
                               str(metrics), str(path)], cwd=WEB, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        for i, result in enumerate(json.loads(done.stdout)):
            assert result["sent"] is True and result["stats"]["deadLettered"] == 0, result
            results[i].append(result)

    fresh_taken = {**declared, "dark_mode": FRESH}
    for i, runs in enumerate(results):
        all_entry = i % 2 == 1
        for result in runs:
            stats = result["stats"]
            # The default entry reports booleans only: its os and startup_ms calls throw,
            # whatever the value (the same 6 calls every start); the other entry throws none.
            assert result["thrown"] == (0 if all_entry else 6), result
            assert result["metrics"] == (fresh_taken if all_entry else {"dark_mode": FRESH})
            ignored = stats["ignoredServed"]
            assert ignored["dark_mode"] == 3, stats  # memoization, period, dimensions
            if all_entry:
                assert ignored["os"] == 1 and ignored["startup_ms"] == 1, stats  # mechanism
            assert stats["withheld"] == 0 and stats["capRefused"] == 0, stats
        wire = [x for result in runs for x in result["wire"]]
        # What the operator sees does not depend on the values: the same reports, under the
        # same mechanisms, from every device of an entry; each metric one memoized answer.
        assert sorted((x["metric"], x["mechanism"]) for x in wire) == sorted(
            [("dark_mode", FRESH)] * 3 * ROUNDS +
            ([("os", declared["os"]), ("startup_ms", declared["startup_ms"])] * 3 * ROUNDS
             if all_entry else []))
        for metric in ("os", "startup_ms", "dark_mode"):
            answers = {json.dumps({k: v for k, v in x.items() if k not in ("metric", "mechanism")},
                                  sort_keys=True) for x in wire if x["metric"] == metric}
            assert len(answers) == (1 if all_entry or metric == "dark_mode" else 0), answers
        # Only the declared list: "other" for the exact build (the default entry sends no dims).
        assert all(x.get("dims") == ({"app_version": "other"} if all_entry else None)
                   for x in wire if x["metric"] == "dark_mode"), wire
        assert BUILD not in json.dumps(wire)
        # The ledger charges what was sent: one answer per metric, at its mechanism's epsilon.
        ledger = runs[-1]["ledger"]
        charged = {"dark_mode": FRESH, **({"os": declared["os"],
                                          "startup_ms": declared["startup_ms"]}
                                         if all_entry else {})}
        assert sorted(ledger) == sorted(charged), ledger
        for metric, mechanism in charged.items():
            assert len(ledger[metric]["paid"]) == 1, (metric, ledger)
            # Each client computes the float epsilon itself (within an ulp or so of the
            # other): equal within the ledger's own 2**-40 rounding allowance.
            want = units(parse_mechanism(mechanism).epsilon)
            assert abs(int(ledger[metric]["spent"]) - want) <= want >> 40, (metric, ledger)

    def counts(metric: str, mechanism: str) -> dict[str, Any]:
        doc: dict[str, Any] = requests.get(f"{url}/v1/metrics/{metric}/counts", headers=read,
                                           params={"mechanism": mechanism}, timeout=10).json()
        return doc

    def reports(metric: str, mechanism: str) -> int:
        return sum(b["n"] for b in counts(metric, mechanism).get("buckets", []))

    # Nothing ever arrives under an attack version: recovery by "which version got a report"
    # is 0 of 40 devices (chance 1/6 for the OS, 1/16 for the 625 ms bucket).
    for metric in ("os", "startup_ms"):
        for mechanism in attack[metric]:
            assert reports(metric, mechanism) == 0, (metric, mechanism)
        assert reports(metric, declared[metric]) == DEVICES // 2 * 3 * ROUNDS
    assert reports("dark_mode", declared["dark_mode"]) == 0
    assert reports("dark_mode", FRESH) == DEVICES * 3 * ROUNDS
    # The collector counted exactly what went over the wire (os's slots: counts_of each answer).
    slots = [0] * OS_MECHANISM.width
    for runs in results:
        for x in (x for result in runs for x in result["wire"] if x["metric"] == "os"):
            for slot, by in enumerate(OS_MECHANISM.counts_of(x["index"])):
                slots[slot] += by
    assert [sum(c) for c in zip(*(b["counts"] for b in counts("os", declared["os"])["buckets"]))
            ] == slots
    # The operator's best guess of a device's OS is its one answer (GRR: P1 = 1/4 > Q = 3/20):
    # right with probability exactly 1/4 per device (chance: 1/6), so more than 15 of the 20
    # devices of deniable-client/all right has probability < 1e-6 (max_recovered), against
    # 40 of 40 before the declaration was the contract.
    guessed = [OS[next(x["index"] for x in runs[0]["wire"] if x["metric"] == "os")] ==
               values[i]["os"] for i, runs in enumerate(results) if i % 2 == 1]
    assert OS_P1 == Fraction(1, 4)
    assert sum(guessed) <= max_recovered(len(guessed), OS_P1)
    by = requests.get(f"{url}/v1/metrics/dark_mode/counts", headers=read, timeout=10,
                      params={"mechanism": FRESH, "by": "app_version"}).json()
    assert [label for label, b in by.get("series", {}).items() if b] == ["app_version=other"]
    assert not any(BUILD.encode() in key for key in redis_client.keys("*"))
