"""Issue 31's acceptance test: a new metric kind is new files and a registration.

The toy ``rating`` kind (tests/client/kind_rating.py, 1 to 5 stars under GRR) is registered at
run time: in this process (the app) with ``deniable.client.kinds.register``, and in a real
collector process (gunicorn, on a real Redis) and a real ``deniable report`` process the
supported way, as an installed distribution's entry point of the group ``deniable.kinds``
(tests/client/kind_plugin.py writes its dist-info on their PYTHONPATH) or an operator's
``DENIABLE_KINDS`` entry. It travels from the real client over HTTP to the collector's
counters, the analysis and ``deniable report``. No other module names it.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from deniable.analysis import HTTPSource, summarize
from deniable.client import Delivery, Privacy, Reporter
from deniable.client.errors import InvalidParameterError
from deniable.client import kinds
from deniable.client.kinds import BUILT_IN, REGISTRY, MetricSpec, kind_of, register, registered
from deniable.collector.errors import CollectorError
from deniable.collector.registry import declare
from deniable.collector.server import CollectorProcess
from tests.client.kind_plugin import write_distribution
from tests.client.kind_rating import STARS, Rating
from tests.conftest import ROOT
from tests.servers import OPEN_ENV, collector_with_metrics

pytestmark = pytest.mark.slow  # starts a collector process: not in the fast lane

METRICS = {"stars": {"description": "How many stars the user gives the app", "kind": "rating",
                     "epsilon": 2.0, "memoization": "fresh"}}
SHARES = (0.05, 0.10, 0.15, 0.40, 0.30)
REPORTS = 3000
Z = 6
"""Standard errors of each star's estimate from its truth (the drawn ratings): 5 shares at
2e-9 each (two-sided normal tail at 6 SE), 1e-8 per run. The plug-in SE is conservative with
fixed true values."""

ENTRY = {"rating": "tests.client.kind_rating:Rating"}
"""The plugin's entry point: ``rating`` names the kind's class, a zero-argument factory."""


def plugin_path(directory: Path, entries: dict[str, str] | None = ENTRY) -> str:
    """A PYTHONPATH for a child process: a distribution holding ``entries`` (none: no
    distribution) and the repository root (so ``tests.client.kind_rating`` imports)."""
    parts = [str(write_distribution(directory, entries))] if entries is not None else []
    parts += [str(ROOT), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


def deniable(*args: str, path: str) -> subprocess.CompletedProcess[str]:
    """Run ``deniable ARGS`` in a child process with PYTHONPATH ``path`` (no DENIABLE_KINDS)."""
    env = {k: v for k, v in os.environ.items() if k != "DENIABLE_KINDS"}
    return subprocess.run([sys.executable, "-m", "deniable.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**env, "PYTHONPATH": path})


@pytest.fixture()
def rating_collector(redis_url: str, tmp_path: Path) -> Iterator[CollectorProcess]:
    """A collector process that finds ``rating`` as an installed plugin (an entry point of
    ``deniable.kinds`` on its PYTHONPATH), serving ``METRICS``; ``rating`` registered in this
    process too (the app's ``register``)."""
    path = plugin_path(tmp_path / "site")
    with registered(Rating()):
        with collector_with_metrics(redis_url, METRICS, tmp_path, workers=1, flush=True,
                                    env={**OPEN_ENV, "PYTHONPATH": path}) as process:
            yield process


def test_an_unregistered_kind_is_refused_everywhere() -> None:
    assert "rating" not in REGISTRY and "rating" not in kinds.KINDS
    with pytest.raises(InvalidParameterError, match="kind must be one of"):
        MetricSpec.build("rating", epsilon=2.0)
    with pytest.raises(InvalidParameterError, match="kind: must be one of"):
        declare(METRICS["stars"])


def test_a_collector_that_has_not_registered_the_kind_refuses_its_metrics(
        redis_url: str, tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="kind: must be one of boolean, categorical"):
        with collector_with_metrics(redis_url, METRICS, tmp_path, workers=1):
            pass


def test_a_registered_kind_is_asked_like_the_built_in_ones() -> None:
    with registered(Rating()) as kind:
        assert kind_of("rating") is kind and kinds.KINDS[-1] == "rating"
        spec = declare(METRICS["stars"])  # the collector's registry asks the same REGISTRY
        assert spec.kind == "rating" and spec.mechanism.id.startswith("grr:5:")
        assert spec.labels == STARS and spec.encode(4) == 3
        assert MetricSpec.from_document(spec.describe(), spec.mechanism) == spec
        with pytest.raises(InvalidParameterError, match="is registered already"):
            register(Rating())
        for bad in (0, 6, 2.0, True, "5"):
            with pytest.raises(InvalidParameterError, match="from 1 to 5"):
                spec.encode(bad)
    assert "rating" not in REGISTRY and "rating" not in kinds.KINDS


def test_a_new_kind_travels_from_the_client_to_the_report(
        rating_collector: CollectorProcess) -> None:
    url = rating_collector.url
    draw = random.Random(31)
    ratings = draw.choices(range(1, 6), SHARES, k=REPORTS)
    with Reporter(url, metrics=METRICS, delivery=Delivery(batch_size=500),
                  privacy=Privacy(one_per_period=False)) as reporter:
        for stars in ratings:
            reporter.report("stars", stars)
        for bad in (0, 6, 4.5, "five"):
            with pytest.raises(InvalidParameterError):
                reporter.report("stars", bad)
        assert reporter.flush(timeout=60) is True
        assert reporter.stats().sent == REPORTS

    counts = HTTPSource(url).counts("stars")
    assert counts.metric.kind == "rating" and counts.metric.spec.labels == STARS
    assert counts.values.shape[1] == 1 + len(STARS) and counts.values[:, 0].sum() == REPORTS
    summary = summarize(counts)
    assert summary.kind == "rating" and summary.n == REPORTS
    assert "in each category" in summary.estimand  # the wording the kind's hooks give
    truth = [ratings.count(stars) / REPORTS for stars in range(1, 6)]
    found = summary.shares
    assert list(found) == list(STARS)
    assert summary.categories is not None
    for i, label in enumerate(STARS):
        assert abs(found[label] - truth[i]) < Z * summary.categories.stderr[i], label

    # ``deniable report`` in its own process, which finds the plugin as the collector did.
    path = rating_collector.env["PYTHONPATH"]
    done = deniable("report", "--collector", url, "--metric", "stars", "--format", "json",
                    path=path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)["metrics"][0]
    assert doc["metric"] == "stars" and doc["kind"] == "rating" and doc["n"] == REPORTS
    assert [row["category"] for row in doc["categories"]] == list(STARS)
    assert [row["estimate"] for row in doc["categories"]] == pytest.approx(list(found.values()))
    assert "kind plugin loaded: rating from 'rating = tests.client.kind_rating:Rating'" \
        in done.stderr
    done = deniable("report", "--collector", url, "--metric", "stars", path=path)
    assert done.returncode == 0, done.stderr
    assert all(label in done.stdout for label in STARS)
    # The collector said which plugin kinds it loaded, naming the entry, and nothing else.
    log = rating_collector.log_tail(1 << 24)
    assert "kind plugin loaded: rating from 'rating = tests.client.kind_rating:Rating' " \
           "(entry point of deniable.kinds, kind-rating-plugin 0)" in log


def test_a_report_process_without_the_plugin_cannot_read_the_kind(
        rating_collector: CollectorProcess, tmp_path: Path) -> None:
    done = deniable("report", "--collector", rating_collector.url, "--metric", "stars",
                    path=plugin_path(tmp_path / "bare", None))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"kind must be one of {', '.join(sorted(BUILT_IN, key=kinds.KINDS.index))}. Got " \
           f"'rating' instead." in done.stderr, done.stderr


def test_a_collector_registers_a_kind_an_operator_names_in_DENIABLE_KINDS(
        redis_url: str, tmp_path: Path) -> None:
    env = {**OPEN_ENV, "PYTHONPATH": plugin_path(tmp_path / "site", None),
           "DENIABLE_KINDS": "tests.client.kind_rating:Rating"}
    with collector_with_metrics(redis_url, METRICS, tmp_path, workers=1, env=env) as process:
        catalogue = requests.get(f"{process.url}/v1/metrics", timeout=10).json()
        served = requests.get(f"{process.url}/v1/openapi.json", timeout=10).json()
        log = process.log_tail(1 << 24)
    (stars,) = [m for m in catalogue["metrics"] if m["name"] == "stars"]
    assert stars["kind"] == "rating"
    schema = served["components"]["schemas"]["MetricRegistration"]["properties"]["kind"]
    assert schema["enum"][-1] == "rating"  # the served document names the plugin's kind
    assert "kind plugin loaded: rating from 'tests.client.kind_rating:Rating' " \
           "(DENIABLE_KINDS)" in log


@pytest.mark.parametrize(("entries", "env", "named"), [
    ({"rating": "tests.client.kind_rating:nope"}, {},
     "kind plugin 'rating = tests.client.kind_rating:nope' (entry point of deniable.kinds, "
     "kind-rating-plugin 0) does not load: AttributeError"),
    (None, {"DENIABLE_KINDS": "tests.client.kind_plugin:impostor"},
     "kind plugin 'tests.client.kind_plugin:impostor' (DENIABLE_KINDS) names a kind "
     "'boolean', a built-in kind's name: a plugin never replaces a built-in kind")])
def test_a_collector_refuses_to_start_on_a_bad_plugin_naming_the_entry(
        redis_url: str, tmp_path: Path, entries: dict[str, str] | None, env: dict[str, str],
        named: str) -> None:
    child = {**OPEN_ENV, **env, "PYTHONPATH": plugin_path(tmp_path / "site", entries)}
    with pytest.raises(CollectorError) as info:
        with collector_with_metrics(redis_url, METRICS, tmp_path, workers=1, env=child):
            pass
    assert named in str(info.value) and "Traceback" not in str(info.value)


def test_the_cli_refuses_a_bad_plugin_with_a_message_and_status_1(tmp_path: Path) -> None:
    path = plugin_path(tmp_path / "site", {"rating": "tests.client.kind_rating:STARS"})
    assert deniable("report", "--help", path=path).returncode == 0  # --help loads nothing
    done = deniable("report", "--collector", "http://127.0.0.1:9", "--metric", "stars",
                    path=path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "deniable report: error: kind plugin 'rating = tests.client.kind_rating:STARS' (entry "
        "point of deniable.kinds, kind-rating-plugin 0) must name a Kind or a zero-argument "
        "factory of one. Got a tuple instead.")
