"""The live dashboard's breakdowns (``GET /dashboard/breakdown``): the same cells, n,
suppression and estimates as ``analysis.breakdown`` on the same Redis, for every kind; a
suppressed cell's estimate is never sent."""
from __future__ import annotations

import pytest

from deniable.cli.sources import RedisSource
from deniable.analysis.breakdown import breakdown
from tests.analysis.test_breakdown import (BOOLEAN, DIMS, LOAD, OS, RANGE, STARTUP, _ingest,
                                           _register, _reports)


@pytest.mark.parametrize("spec", [BOOLEAN, OS, LOAD, STARTUP],
                         ids=["boolean", "categorical", "histogram", "numeric"])
def test_dashboard_breakdown_equals_the_analysis(app, redis_client, redis_url, spec) -> None:  # type: ignore[no-untyped-def]
    name = f"dash_{spec.kind}"
    _register(redis_client, name, spec, DIMS)
    top = 2 if spec.mechanism.width == 2 else spec.mechanism.width - 1
    _ingest(redis_client, name, spec, DIMS,
            _reports([i % top for i in range(130)], {"platform": "android"})
            + _reports([(i * 7) % top for i in range(99)], {"platform": "ios"})
            + _reports([0] * 11, None))
    answer = app.test_client().get("/dashboard/breakdown", query_string={
        "metric": name, "by": "platform", "from": RANGE[0].isoformat(),
        "to": RANGE[1].isoformat()})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    doc = answer.get_json()
    want = breakdown(RedisSource(redis_url), name, "platform", *RANGE)
    assert [(c["label"], c["n"], c["suppressed"]) for c in doc["cells"]] == \
        [(c.label, c.n, c.suppressed) for c in want.cells]
    assert doc["not_stated"] == want.not_stated == 11 and doc["min_reports"] == 100
    android, ios, web = doc["cells"]
    assert "estimate" not in ios and "categories" not in ios
    assert ios["reason"] == want.cells[1].reason
    assert "ios: n = 99" in doc["note"] and "single people out" in doc["note"]
    assert "not protected by local differential privacy" in doc["dimensions"]
    shown = want.cells[0].summary
    assert shown is not None
    if shown.categories is not None:
        assert [k["estimate"] for k in android["categories"]] == \
            pytest.approx(shown.categories.value.tolist())
        assert [k["sim_high"] for k in android["categories"]] == \
            pytest.approx(shown.categories.sim_high.tolist())
    else:
        assert android["estimate"] == pytest.approx(shown.estimate)
        assert (android["ci_low"], android["ci_high"]) == \
            pytest.approx((shown.ci_low, shown.ci_high))


def test_dashboard_breakdown_threshold_and_errors(app, redis_client) -> None:  # type: ignore[no-untyped-def]
    _register(redis_client, "dash_k", BOOLEAN, DIMS)
    _ingest(redis_client, "dash_k", BOOLEAN, DIMS, _reports([1] * 99, {"platform": "ios"}))
    client = app.test_client()
    query = {"metric": "dash_k", "by": "platform", "from": RANGE[0].isoformat(),
             "to": RANGE[1].isoformat()}
    ios = client.get("/dashboard/breakdown", query_string={**query, "min_reports": "99"}
                     ).get_json()["cells"][1]
    assert (ios["n"], ios["suppressed"], ios["estimate"]) == (99, False, 1.0)
    ios = client.get("/dashboard/breakdown", query_string={**query, "min_reports": "100"}
                     ).get_json()["cells"][1]
    assert (ios["n"], ios["suppressed"]) == (99, True) and "estimate" not in ios
    missing = client.get("/dashboard/breakdown", query_string={**query, "by": "channel"})
    assert missing.status_code == 404
    assert "dimensions: platform, app_version" in missing.get_data(as_text=True)
    assert client.get("/dashboard/breakdown", query_string={**query, "min_reports": "0"}
                      ).status_code == 422


def test_the_page_offers_a_by_choice(app) -> None:  # type: ignore[no-untyped-def]
    page = app.test_client().get("/dashboard").get_data(as_text=True)
    assert 'name="by"' in page and 'name="min_reports"' in page
    assert 'data-breakdown="/dashboard/breakdown"' in page
