"""Issue 31's acceptance test: a new metric kind is new files and a registration.

The toy ``rating`` kind (tests/client/kind_rating.py, 1 to 5 stars under GRR) is registered at
run time with ``deniable.client.kinds.register``, in this process and in a real collector
process (gunicorn, on a real Redis), and travels from the real client over HTTP to the
collector's counters, the analysis and ``deniable report``. No other module names it.
"""
from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from deniable.analysis import HTTPSource, summarize
from deniable.cli.main import main
from deniable.client import Delivery, Privacy, Reporter
from deniable.client.errors import InvalidParameterError
from deniable.client import kinds
from deniable.client.kinds import REGISTRY, MetricSpec, kind_of, register, registered
from deniable.collector.errors import CollectorError
from deniable.collector.registry import declare
from deniable.collector.server import CollectorProcess
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

BOOT = """\
# The collector process registers the toy kind at start: a kind's "registration line".
from deniable.client.kinds import register
from tests.client.kind_rating import Rating
register(Rating())
"""


@pytest.fixture()
def rating_collector(redis_url: str, tmp_path: Path) -> Iterator[CollectorProcess]:
    """A collector process that has registered ``rating`` (a ``sitecustomize`` on its
    PYTHONPATH), serving ``METRICS``; ``rating`` registered in this process too."""
    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(BOOT)
    path = os.pathsep.join(p for p in (str(boot), str(ROOT), os.environ.get("PYTHONPATH"))
                           if p)
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


def test_a_new_kind_travels_from_the_client_to_the_report(rating_collector: CollectorProcess,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
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

    assert main(["report", "--collector", url, "--metric", "stars", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)["metrics"][0]
    assert doc["metric"] == "stars" and doc["kind"] == "rating" and doc["n"] == REPORTS
    assert [row["category"] for row in doc["categories"]] == list(STARS)
    assert [row["estimate"] for row in doc["categories"]] == pytest.approx(list(found.values()))
    assert main(["report", "--collector", url, "--metric", "stars"]) == 0
    text = capsys.readouterr().out
    assert all(label in text for label in STARS)
