"""The open-domain decoder: its numpy hash is the client's, and on counters made by the real
client it finds a known top set and shows nothing outside the population."""
from __future__ import annotations

import math
import random
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import pytest

from deniable.analysis.discovery import (_extensions, buckets, discover, extension_counts,
                                         level_counters, prefix_counts)
from deniable.client.errors import InvalidParameterError
from deniable.client.open_domain import OpenDomainSketch, bucket, normalise


class _Seeded:
    """Reproducible bits (random.Random: tests only, never for real reports)."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def bits(self, k: int) -> int:
        return self._random.getrandbits(k) if k else 0


@pytest.mark.parametrize("step", [1, pytest.param(2, marks=pytest.mark.slow)])  # 2: 2-5 s
def test_numpy_hash_is_the_clients(step: int) -> None:
    sketch = OpenDomainSketch(max_bytes=12, step=step, seeds=64, g=37, p=Fraction(1, 2))
    rng = np.random.default_rng(7)
    for level in range(sketch.levels):
        prefixes = rng.integers(0, 256, size=(20, sketch.prefix_length(level))).astype(np.uint8)
        table = buckets(sketch, level, prefixes)
        for s in (0, 5, 63):
            for i in range(20):
                assert table[s, i] == bucket(prefixes[i].tobytes(), level, s, sketch.g)
        cells = rng.integers(0, 50, size=(sketch.levels, sketch.seeds, sketch.g))
        parents = prefixes[:3, :level * step]
        ext = _extensions(step)
        full = np.concatenate([np.repeat(parents, ext.shape[0], axis=0),
                               np.tile(ext, (3, 1))], axis=1)
        assert (extension_counts(sketch, cells, level, parents, ext).ravel()
                == prefix_counts(sketch, cells, level, full)).all()


def _counters(sketch: OpenDomainSketch, population: dict[str, int], seed: int) -> np.ndarray:
    counters = np.zeros(sketch.width, dtype=np.int64)
    rng = _Seeded(seed)
    for value, devices in population.items():
        padded = normalise(value, sketch.max_bytes)
        for _ in range(devices):
            for index, increment in sketch.increments(sketch.perturb_padded(padded, rng)):
                counters[index] += increment
    return counters


@pytest.mark.slow
def test_discovers_the_known_top_set_and_nothing_outside_the_population() -> None:
    """30,000 devices through the real client at epsilon 4: five strings of 3-8 bytes hold
    20, 15, 10, 8 and 6 % of devices, 1,230 strings hold 0.033 % each.

    False-failure rate: ``found`` holds a string outside the population with probability at
    most 1 - confidence = 1e-7 (Bonferroni over every complete candidate; the fixed family's
    collision bias is about 0.1 standard errors here with 1024 seeds, see docs/discovery.md).
    Each top string's standard error is at most 0.0045 (one level of 3,750 reports), so the
    6 % one lies >= 7 standard errors above the z = 6.4 threshold and the beam at every
    level (at most 255 x 64 noise prefixes, max about 5 standard errors): missed with
    probability < 1e-9. The draws are seeded, so the test is also reproducible.
    """
    sketch = OpenDomainSketch.from_epsilon(4.0, max_bytes=8, seeds=1024)
    top = {"crash:a": 6000, "oom": 4500, "segv@0x1": 3000, "anr.main": 2400, "npe:42": 1800}
    tail = {f"t{i:05d}": 10 for i in range(1230)}
    population = {**top, **tail}
    n = sum(population.values())
    assert n == 30_000
    result = discover(sketch, _counters(sketch, population, seed=2026), confidence=1 - 1e-7)
    found = {f.string for f in result.found}
    assert found <= set(population)
    assert set(top) <= found
    assert {f.string for f in result.ranked[:5]} == set(top)
    for f in result.found:
        assert f.lower <= population[f.string] / n <= f.upper
    assert result.n == n and sum(result.n_per_level) == n
    assert result.tested >= len(found) and result.z > 5


def test_min_share_is_z_standard_errors_at_share_zero() -> None:
    sketch = OpenDomainSketch.from_id("od:2:1:8:10:1/2")
    counters = _counters(sketch, {"ab": 500, "c": 300, "de": 200}, seed=1)
    result = discover(sketch, counters, confidence=0.95)
    n_last = result.n_per_level[-1]
    gain = 0.5 - 0.1
    assert result.min_share == pytest.approx(result.z * math.sqrt(0.1 * 0.9 / n_last) / gain)
    assert result.z == pytest.approx(NormalDist().inv_cdf(1 - 0.05 / result.tested))


def test_counters_that_do_not_fit_are_refused() -> None:
    sketch = OpenDomainSketch.from_id("od:2:1:8:10:1/2")
    good = _counters(sketch, {"ab": 5}, seed=3)
    assert level_counters(sketch, good).shape == (2, 8, 10)
    for bad in (good[:-1], np.concatenate([[6], good[1:]]), -good):
        with pytest.raises(InvalidParameterError):
            discover(sketch, bad)
    with pytest.raises(InvalidParameterError):
        discover(sketch, good, confidence=1.0)


def test_no_reports_show_nothing_and_say_nothing_is_discoverable() -> None:
    sketch = OpenDomainSketch.from_id("od:4:1:16:10:1/2")
    result = discover(sketch, np.zeros(sketch.width, dtype=np.int64))
    assert result.n == 0 and result.found == () and result.ranked == ()
    assert result.min_share == math.inf


def test_track_scores_a_given_string_as_discover_scores_it() -> None:
    """Strings completed at different levels (1, 2 and 4 bytes of 4): the same share and
    interval as the decoder's; deterministic (seeded coins), no false-failure rate."""
    from deniable.analysis.discovery import track

    sketch = OpenDomainSketch.from_epsilon(4.0, 4)
    population = {"x": 1500, "gc": 1200, "abcd": 1000, **{f"t{i:03d}": 2 for i in range(400)}}
    counters = _counters(sketch, population, seed=5)
    found = {f.string: f for f in discover(sketch, counters).found}
    assert {"x", "gc", "abcd"} <= set(found)
    z = discover(sketch, counters).z
    for value in ("x", "gc", "abcd"):
        pooled, share, stderr = track(sketch, counters, value)
        assert (share, share - z * stderr) == pytest.approx(
            (found[value].share, found[value].lower), rel=1e-12)
    levels = discover(sketch, counters).n_per_level
    assert track(sketch, counters, "x")[0] == sum(levels[1:])  # completed at level 1
    assert track(sketch, counters, "abcd")[0] == levels[-1]
    with pytest.raises(InvalidParameterError):
        track(sketch, counters, "five!")
    assert np.isnan(track(sketch, np.zeros(sketch.width, np.int64), "x")[1])
