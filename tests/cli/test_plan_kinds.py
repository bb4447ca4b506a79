"""``deniable plan`` for d categories and for a numeric mean, checked against the exact variance
worked by hand."""
from __future__ import annotations

import json
import math
from statistics import NormalDist

import pytest

from deniable.analysis.plan import margin_for, plan
from deniable.cli.main import main
from deniable.client.categorical import KaryRandomizedResponse
from deniable.client.kinds import MetricSpec
from deniable.client.numeric import BitMean
from fractions import Fraction

Z = NormalDist().inv_cdf(0.975)


def test_categorical_plan_matches_the_exact_variance_by_hand() -> None:
    # GRR d = 3, p = 1/2, q = 1/4: a share's worst variance per report is pi (1 - pi) at
    # pi = 1/2 (in [q, p]), over (p - q)^2 = 1/16: n = ceil(z^2 * 0.25 / (0.01 * 0.25)^2).
    grr = KaryRandomizedResponse(3, Fraction(1, 2), "00000000")
    found = plan(grr, margin=0.01)
    assert found.devices == math.ceil(Z * Z * 0.25 / (0.01 * 0.25) ** 2)
    assert found.kind == "categorical" and found.categories == 3 and found.mechanism == grr.id
    assert found.margin <= 0.01 < margin_for(grr, found.devices - 1)
    # All three at once: each at 1 - 0.05 / 3.
    z3 = NormalDist().inv_cdf(1 - 0.05 / 6)
    together = plan(grr, margin=0.01, simultaneous=True)
    assert together.devices == math.ceil(z3 * z3 * 0.25 / (0.01 * 0.25) ** 2)
    assert together.simultaneous


def test_numeric_plan_is_in_the_metric_units() -> None:
    # a = 1/4 on [0, 1000]: margin 10 on the mean is 0.01 on s; 1 - 2a = 1/2, worst pi = 1/2.
    bm = BitMean(Fraction(1, 4), Fraction(0), Fraction(1000))
    found = plan(bm, margin=10)
    assert found.devices == math.ceil(Z * Z * 0.25 / (0.01 * 0.5) ** 2)
    assert found.units == "[0, 1000]" and 9.99 < found.margin <= 10
    assert plan(bm, n=found.devices).margin == pytest.approx(found.margin)


def test_plan_cli_for_categories_and_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--epsilon", "2", "--categories", "6", "--margin", "0.01",
                 "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["plans"][0]
    spec = MetricSpec.build("categorical", epsilon=2.0, categories=[str(i) for i in range(6)])
    assert got["mechanism"] == spec.mechanism.id and got["categories"] == 6
    assert got["devices"] == plan(spec.mechanism, margin=0.01).devices
    assert main(["plan", "--epsilon", "1", "--range", "0", "5000", "--margin", "25"]) == 0
    out = capsys.readouterr().out
    assert "numeric" in out and "±25.0 on the" in out and "[0, 5000])" in out
    assert main(["plan", "--epsilon", "4", "--categories", "1024", "--devices", "100000",
                 "--simultaneous", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["plans"][0]
    assert got["mechanism"].startswith("grr:1024:") and got["simultaneous"]  # docs/privacy.md
    with pytest.raises(SystemExit):
        main(["plan", "--mechanism", "rr:1/2:1/2", "--categories", "6", "--margin", "0.01"])
    with pytest.raises(SystemExit):
        main(["plan", "--epsilon", "1", "--margin", "2"])  # a share's margin must be < 1


def test_a_margin_is_read_in_what_the_metric_estimates_and_nonsense_is_refused(  # type: ignore[no-untyped-def]
        capsys: pytest.CaptureFixture[str]) -> None:
    for argv, why in ((["--epsilon", "1", "--margin", "0.7"], "margin on a share"),
                      (["--epsilon", "1", "--range", "0", "1000", "--margin", "600"],
                       "makes no sense: its values lie in [0, 1000]"),
                      (["--epsilon", "1", "--margin", "0.02", "--mean-margin", "25"],
                       "--mean-margin goes with --collector")):
        with pytest.raises(SystemExit) as bad:
            main(["plan", *argv])
        assert bad.value.code == 2 and why in capsys.readouterr().err


@pytest.mark.slow
def test_plan_collector_reads_a_numeric_margin_in_its_unit(redis_url, redis_client, tmp_path,  # type: ignore[no-untyped-def]
                                                          capsys) -> None:
    from deniable.collector.server import CollectorProcess
    from tests.cli.test_report_kinds import METRICS
    from tests.conftest import OPEN_ENV

    path = tmp_path / "metrics.toml"
    path.write_text(METRICS)
    with CollectorProcess(redis_url, path, workers=1, env=OPEN_ENV) as collector:
        assert main(["plan", "--collector", collector.url, "--margin", "0.02",
                     "--format", "json"]) == 0
        got = {p["metric"]: p for p in json.loads(capsys.readouterr().out)["plans"]}
        [name] = [m for m, p in got.items() if p["kind"] == "numeric"]
        lower, upper = (float(x) for x in got[name]["units"].strip("[]").split(","))
        # 2 % of its range, not 0.02 in its unit (which needed hundreds of billions).
        assert got[name]["margin"] <= 0.02 * (upper - lower) < 1.01 * got[name]["margin"]
        assert got[name]["devices"] < 1_000_000
        assert main(["plan", "--collector", collector.url, "--margin", "0.02",
                     "--mean-margin", str(0.05 * (upper - lower)), "--format", "json"]) == 0
        wider = {p["metric"]: p for p in json.loads(capsys.readouterr().out)["plans"]}[name]
        assert wider["margin"] <= 0.05 * (upper - lower) and \
            wider["devices"] < got[name]["devices"]
