"""Write the open-domain (``od:``) test vectors: the contract for a second implementation.

    python -m tests.vectors.open_domain            # rewrite tests/vectors/open_domain.json
    python -m tests.vectors.open_domain --check    # exit 1 if the committed file is stale

Every value comes from deniable.client.open_domain (normalisation, the hash, ids, the report
for a scripted sequence of draws); the inputs are fixed. tests/client/test_open_domain.py
checks that the committed file equals what this script writes now.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import fraction_text
from deniable.client.open_domain import (OpenDomainSketch, bucket, hash_constants, normalise,
                                         prefix_words)

PATH = Path(__file__).with_name("open_domain.json")


class _Script:
    def __init__(self, values: list[int]) -> None:
        self.values, self.used = values, 0

    def bits(self, k: int) -> int:
        value = self.values[self.used] & ((1 << k) - 1)
        self.used += 1
        return value


def _normalise_cases() -> list[dict[str, Any]]:
    cases = [("crash:main", 16, False), ("e\u0301t\u00e9", 8, False), ("abc", 3, False),
             ("abcdéf", 5, True), ("abcdéf", 6, True), ("toolongvalue", 8, False),
             ("", 8, False), ("a\x00b", 8, False), ("日本語", 9, False), ("日本語", 8, True)]
    out = []
    for value, max_bytes, clamp in cases:
        entry: dict[str, Any] = {"value": value, "max_bytes": max_bytes, "clamp": clamp}
        try:
            entry["padded_hex"] = normalise(value, max_bytes, clamp).hex()
        except InvalidParameterError:
            entry["error"] = True
        out.append(entry)
    return out


def _hash_cases() -> list[dict[str, Any]]:
    rng = random.Random(33)
    out = []
    for _ in range(40):
        length = rng.randint(1, 64)
        prefix = bytes(rng.randrange(256) for _ in range(length))
        level, seed, g = rng.randrange(64), rng.randrange(1 << 16), rng.choice([2, 4, 10, 56, 1024])
        words = prefix_words(prefix)
        out.append({"prefix_hex": prefix.hex(), "level": level, "seed": seed, "g": g,
                    "words": words,
                    "constants": [str(a) for a in hash_constants(level, seed, len(words) + 1)],
                    "bucket": bucket(prefix, level, seed, g)})
    return out


def _id_cases() -> list[dict[str, Any]]:
    ids = ["od:16:1:1024:10:1/2", "od:8:2:3:5:2/5", "od:64:1:65536:1024:1/2",
           "od:016:1:1024:10:1/2", "od:16:1:1024:10:2/4", "od:16:1:1024:10:1/10",
           "od:15:2:1024:10:1/2", "od:16:1:1024:10:1"]
    out = []
    for text in ids:
        try:
            sketch = OpenDomainSketch.from_id(text)
        except InvalidParameterError:
            out.append({"id": text, "valid": False})
            continue
        out.append({"id": text, "valid": True, "levels": sketch.levels, "cells": sketch.cells,
                    "width": sketch.width, "likelihood_ratio": fraction_text(
                        sketch.likelihood_ratio), "epsilon": sketch.epsilon})
    for epsilon in (1.0, 2.0, 2.1972245773362196, 4.0):
        out.append({"from_epsilon": epsilon, "id": OpenDomainSketch.from_epsilon(epsilon).id})
    return out


def _perturb_cases() -> list[dict[str, Any]]:
    """Reports for scripted draws: each draw is ``bits(k)`` masked to k bits, in the order
    level (below levels), seed (below seeds), keep coin (below p's denominator < numerator),
    other bucket (below g - 1); rejection redraws as ``below`` does."""
    rng = random.Random(7)
    out = []
    for mechanism, value in (("od:4:1:8:10:1/2", "ab"), ("od:4:2:3:5:2/5", "hé"),
                             ("od:16:1:1024:10:1/2", "crash:main")):
        sketch = OpenDomainSketch.from_id(mechanism)
        for _ in range(6):
            draws = [rng.getrandbits(64) for _ in range(40)]
            out.append({"mechanism": mechanism, "value": value, "draws": [str(d) for d in draws],
                        "cell": sketch.perturb(value, _Script(draws))})
    return out


def vectors() -> dict[str, Any]:
    return {"normalise": _normalise_cases(), "hash": _hash_cases(), "ids": _id_cases(),
            "perturb": _perturb_cases()}


def render() -> str:
    return json.dumps(vectors(), ensure_ascii=False, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        return 0 if PATH.exists() and PATH.read_text(encoding="utf-8") == text else 1
    PATH.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
