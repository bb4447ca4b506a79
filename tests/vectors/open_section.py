"""The ``open_domain`` section of the shared test vectors (tests/vectors/vectors.json):
the ``od:`` mechanism (deniable.client.open_domain) as the Python client computes it.

- ``mechanisms``: canonical ids with their parameters, exact p, q and likelihood ratio, epsilon,
  levels, cells and counter width; ``invalid_ids``: spellings ``from_id`` refuses;
- ``normalise``: values (NFC, multi-byte, emoji, clamp at a character boundary) with their
  padded bytes, or the refusal;
- ``hashes``: the hash constants, the 64-bit hash and the bucket for several g, per
  (level, seed, prefix);
- ``perturb``: cells for given random words and values (every word read, none more).

Every value comes from the real Python code; the inputs are fixed test data.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from deniable.client.errors import InvalidParameterError
from deniable.client.open_domain import (OpenDomainSketch, bucket, hash_constants, normalise,
                                         prefix_words)

MECHANISMS = [
    "od:16:1:1024:10:1/2",       # the default: epsilon = ln 9
    "od:16:2:1024:10:1/2",       # two bytes per level
    "od:4:1:4:3:1/2",            # tiny: small enough to enumerate
    "od:2:1:1:2:3/4",            # the smallest family
    "od:64:2:65536:1024:7/8",    # every bound at its largest
    "od:12:1:256:56:2000000/2000001",
    "od:8:1:1024:3:2863311531/4294967296",  # a 2**32 denominator: 33-bit rejection draws
]
INVALID_IDS = [
    "od:16:1:1024:10:2/4", "od:016:1:1024:10:1/2", "od:16:01:1024:10:1/2",
    "od:16:1:01024:10:1/2", "od:16:1:1024:010:1/2", "od:16:1:1024:10:1/10",
    "od:16:1:1024:10:1/11", "od:16:1:1024:10:1", "od:16:1:1024:10:1/1", "od:0:1:1024:10:1/2",
    "od:65:1:1024:10:1/2", "od:15:2:1024:10:1/2", "od:16:3:1024:10:1/2", "od:16:1:0:10:1/2",
    "od:16:1:65537:10:1/2", "od:16:1:1024:1:1/2", "od:16:1:1024:1025:1/2",
    "od:16:1:1024:10:1/2 ", "od:16:1:1024:10:1/2\n", " od:16:1:1024:10:1/2",
    "od:16:1:1024:10", "od:16:1:1024:10:1/2:x", "OD:16:1:1024:10:1/2", "od:16:1:1024:10:-1/2",
    "od:16:1:1024:10:1.5/2", "grr:6:1/2:0a1b2c3d", "", "od:16:1:1024:10:1/0",
]
VALUES: list[tuple[Any, int, bool]] = [
    ("a", 16, False), ("hello", 16, False), ("0123456789abcdef", 16, False),
    ("0123456789abcdefg", 16, False), ("0123456789abcdefg", 16, True),
    ("Cafe\u0301", 16, False),              # NFD in, NFC out: 'Café' is 5 bytes
    ("\u00e9", 1, False), ("\u00e9", 1, True),  # 2 bytes into 1: refused, or cut to nothing
    ("\u00e9\u00e9", 3, True),              # cut before the second character
    ("\U0001F600 ok", 16, False), ("\U0001F600\U0001F600", 7, True),
    ("\u65e5\u672c\u8a9e\u30c6\u30ad\u30b9\u30c8", 16, True),
    ("\ufb01", 4, False),                   # a compatibility ligature: NFC keeps it
    ("\u1100\u1161\u11a8", 4, False),       # conjoining jamo: NFC composes one syllable
    ("", 16, False), ("a\x00b", 16, False), ("\ud800", 16, False), ("x\udc00", 16, False),
    (None, 16, False), (7, 16, False), (["a"], 16, False),
    ("ab", 2, False), ("abc", 2, False), ("abc", 2, True), ("\t \n", 16, False),
]
PREFIXES = ["", "61", "6162", "616263", "61626364", "6162636465", "00", "ff", "ffffffff",
            "ffffffffffffffffffffffffffffffff", "c3a9", "f09f9880206f6b"]
G_VALUES = [2, 3, 10, 56, 1024]


def _refusal(call: Callable[[], object]) -> str | None:
    try:
        call()
    except InvalidParameterError:
        return None
    return "accepted"


def mechanism_entries() -> list[dict[str, Any]]:
    out = []
    for mechanism_id in MECHANISMS:
        m = OpenDomainSketch.from_id(mechanism_id)
        out.append({"id": m.id, "max_bytes": m.max_bytes, "step": m.step, "seeds": m.seeds,
                    "g": m.g, "p": str(m.p), "q": str(m.q),
                    "likelihood_ratio": str(m.likelihood_ratio), "epsilon": m.epsilon,
                    "levels": m.levels, "cells": m.cells, "width": m.width})
    return out


def invalid_id_entries() -> list[str]:
    for mechanism_id in INVALID_IDS:
        if _refusal(lambda: OpenDomainSketch.from_id(mechanism_id)) is not None:
            raise AssertionError(f"{mechanism_id!r} was accepted")
    return INVALID_IDS


def normalise_entries() -> list[dict[str, Any]]:
    out = []
    for value, max_bytes, clamp in VALUES:
        entry: dict[str, Any] = {"value": value, "max_bytes": max_bytes, "clamp": clamp}
        try:
            entry["padded"] = normalise(value, max_bytes, clamp).hex()
        except InvalidParameterError:
            entry["padded"] = None
        out.append(entry)
    return out


def hash_entries(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for prefix_hex in PREFIXES:
        prefix = bytes.fromhex(prefix_hex)
        for level, seed in ((0, 0), (rng.randrange(64), rng.randrange(1 << 16)),
                            (63, 65535)):
            words = prefix_words(prefix)
            constants = hash_constants(level, seed, len(words) + 1)
            # The module doc's formula, written out; the client's bucket() must agree for every g.
            h = (constants[0] + sum(a * w for a, w in zip(constants[1:], words))) % (1 << 64)
            buckets = {str(g): bucket(prefix, level, seed, g) for g in G_VALUES}
            assert all(b == ((h >> 32) * int(g)) >> 32 for g, b in buckets.items())
            out.append({"prefix": prefix_hex, "level": level, "seed": seed,
                        "words": words, "constants": [f"{a:016x}" for a in constants],
                        "hash": f"{h:016x}",
                        "buckets": buckets})
    return out


def perturb_entries(rng: random.Random, words_of: Callable[[random.Random, int], list[str]],
                    source_of: Callable[[list[str]], Any]) -> list[dict[str, Any]]:
    strings = ["a", "hello", "Caf\u00e9", "\U0001F600", "0123456789abcdef", "crash:0x1f2e",
               "\u65e5\u672c", "zz"]
    out = []
    for mechanism_id in MECHANISMS:
        m = OpenDomainSketch.from_id(mechanism_id)
        values = [s for s in strings if len(s.encode()) <= m.max_bytes]
        values = [rng.choice(values) for _ in range(24)]
        words = words_of(rng, 4000)
        source = source_of(words)
        cells = [m.perturb(v, source) for v in values]
        out.append({"mechanism": m.id, "words": words[:source._offset // 8],
                    "values": values, "cells": cells,
                    "splits": [list(m.split_cell(c)) for c in cells]})
    return out


def open_domain_entries(rng: random.Random,
                        words_of: Callable[[random.Random, int], list[str]],
                        source_of: Callable[[list[str]], Any]) -> dict[str, Any]:
    """The ``open_domain`` section (see the module doc)."""
    return {"mechanisms": mechanism_entries(), "invalid_ids": invalid_id_entries(),
            "normalise": normalise_entries(), "hashes": hash_entries(rng),
            "perturb": perturb_entries(rng, words_of, source_of)}
