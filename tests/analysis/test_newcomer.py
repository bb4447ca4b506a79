"""The analysis as a newcomer calls it: ``summarize`` gives every kind's figure where its
docstring says (and a clear error where there is none), and ``to_frame`` takes what a source
returns, or says what to pass."""
from __future__ import annotations

import math

import pytest

from deniable.analysis import series, summarize, to_frame
from tests.analysis.test_kinds_outputs import KindsSource, SPECS


@pytest.fixture(scope="module")
def source() -> KindsSource:
    return KindsSource(n=200)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_summarize_gives_every_kind_its_figure(source: KindsSource, name: str) -> None:
    summary = summarize(source.counts(name))
    assert summary.n == 200 * len(source.values[name])
    if SPECS[name].kind in ("categorical", "histogram"):
        assert math.isnan(summary.estimate)  # no single figure: shares instead
        shares = summary.shares
        assert list(shares) == list(SPECS[name].labels)
        assert shares == dict(zip(summary.categories.labels,  # type: ignore[union-attr]
                                  summary.categories.value.tolist()))  # type: ignore[union-attr]
        assert abs(sum(shares.values()) - 1) < 0.25  # unbiased shares of one population
    else:
        assert math.isfinite(summary.estimate) and summary.ci_low <= summary.ci_high
        with pytest.raises(ValueError, match="Read summary.estimate"):
            summary.shares


@pytest.mark.parametrize("name", sorted(SPECS))
def test_to_frame_takes_what_a_source_returns(source: KindsSource, name: str) -> None:
    counts = source.counts(name)
    frame = to_frame(counts)
    assert frame.equals(to_frame(series(counts)))  # its daily series, debiased
    assert "estimate" in frame and len(frame) > 0


def test_to_frame_says_what_to_pass(source: KindsSource) -> None:
    with pytest.raises(TypeError, match=r"source\.counts\(metric\).*summarize\(counts\)"):
        to_frame({"feature_x_enabled": 3})  # type: ignore[arg-type]
