"""bench/discovery.py's workloads are what its tables say they are, and its bound is the
arithmetic docs/discovery.md derives (no client randomness here: deterministic checks)."""
from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path
from types import ModuleType

from deniable.client.open_domain import OpenDomainSketch, normalise

ROOT = Path(__file__).resolve().parent.parent


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_discovery",
                                                  ROOT / "bench" / "discovery.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_workloads_are_distinct_valid_values_of_a_16_byte_metric_and_reproducible() -> None:
    bench = _bench()
    for name, make in bench.WORKLOADS.items():
        strings = make(3000, random.Random(4))
        assert len(strings) == len(set(strings)) == 3000, name
        assert strings == make(3000, random.Random(4)), name
        for text in strings:
            assert len(normalise(text, 16)) == 16  # the client accepts it unclamped


def test_the_realistic_workload_has_its_three_families_and_shared_prefixes() -> None:
    strings = _bench().realistic_strings(3000, random.Random(5))
    urls = [s for s in strings if s.startswith("/")]
    crashes = [s for s in strings if "." in s and ":" in s]
    terms = [s for s in strings if s.replace(" ", "").isalpha() and s.islower()]
    assert all(abs(len(family) - 1000) <= 1 for family in (urls, crashes, terms))
    # low entropy: far fewer distinct 4-byte prefixes than strings (random ones: nearly all)
    assert len({s[:4] for s in strings}) < 0.35 * len(strings)
    assert len({s[:4] for s in _bench().random_strings(3000, random.Random(5))}) > 2500


def test_bound_share_is_the_documented_arithmetic() -> None:
    bench = _bench()
    sketch = OpenDomainSketch.from_epsilon(math.log(9))
    # OLH's variance at share 0 with g = e^eps + 1, p = 1/2: 4 e^eps / (e^eps - 1)^2 = 0.5625
    base = 1 / sketch.g
    variance = base * (1 - base) / (float(sketch.p) - base) ** 2
    assert math.isclose(variance, 0.5625)
    share = bench.bound_share(100_000, math.log(9), 16 * math.log(256))
    assert math.isclose(share, math.sqrt(2 * 16 * math.log(256)) * math.sqrt(0.5625 / 1e5))
    assert 0.0315 < share < 0.0317  # 13.3 standard errors of 0.0024: docs/discovery.md
    # the n at which the 10th Zipf(1.1) string of 10,000 reaches the bound: about 690,000
    tenth = float(bench.zipf_shares(10_000)[9])
    needed = 0.5625 * (math.sqrt(2 * 16 * math.log(256)) / tenth) ** 2
    assert 680_000 < needed < 700_000
    assert math.isclose(bench.bound_share(round(needed), math.log(9), 16 * math.log(256)),
                        tenth, rel_tol=1e-5)
