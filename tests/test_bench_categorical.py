"""bench/categorical.py's simulation draws the exact aggregate distribution it says it draws
(the peers are not needed: only our protocols are simulated here)."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

from deniable.client.categorical import KaryRandomizedResponse, domain_tag

ROOT = Path(__file__).resolve().parent.parent


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_categorical",
                                                  ROOT / "bench" / "categorical.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_populations_are_fixed_counts_summing_to_n() -> None:
    bench = _bench()
    for kind in ("zipf", "uniform"):
        counts = bench.population(kind, 64, 10_007)
        assert counts.sum() == 10_007 and (counts >= 0).all()
    assert list(bench.population("zipf", 4, 100)) == sorted(bench.population("zipf", 4, 100),
                                                            reverse=True)


def test_simulated_counts_have_the_exact_mean_and_variance_of_each_category() -> None:
    bench = _bench()
    rng = np.random.default_rng(3)  # the population's randomness, not a client's
    counts = bench.population("zipf", 8, 5000)
    trials = 20_000
    for epsilon in (1.0, 4.0):  # both families, whatever the automatic choice picks
        grr = KaryRandomizedResponse.from_epsilon(epsilon, 8, domain_tag(list("abcdefgh")))
        for protocol in (bench.Protocol("GRR", tuple(map(float, grr.channel)), "grr"),
                         bench.Protocol("OUE", (0.5, 1 / (math.exp(epsilon) + 1)), "oue")):
            p1, q = protocol.channel
            reported = protocol.simulate(counts, trials, rng)
            n = counts.sum()
            mean = counts * p1 + (n - counts) * q
            var = counts * p1 * (1 - p1) + (n - counts) * q * (1 - q)
            # 6 standard errors of the mean; the variance within 6 of its standard errors.
            assert np.all(np.abs(reported.mean(axis=0) - mean) < 6 * np.sqrt(var / trials))
            assert np.all(np.abs(reported.var(axis=0, ddof=1) / var - 1)
                          < 6 * math.sqrt(2 / trials) + 0.01)
            if protocol.family == "grr":
                assert (reported.sum(axis=1) == n).all()  # one category per report
