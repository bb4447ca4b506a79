"""Write the shared test vectors: the contract between the Python client and the web client.

    python -m tests.vectors.generate            # rewrite tests/vectors/vectors.json
    python -m tests.vectors.generate --check    # exit 1 if the committed file is stale

Every value comes from the real Python implementation (deniable.client: mechanism, randomness,
memo, wire, metrics; categorical, numeric and kinds for the kinds beyond boolean; dimensions and the
Reporter's rules for public dimensions); nothing here re-implements it. The inputs (random words, secrets) are
fixed test data from a seeded generator. tests/client/test_vectors.py checks that the committed
file equals what this script writes now, so a change to the Python client fails until the file
is regenerated; web/test/vectors.test.js checks every entry against the TypeScript code.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
import tempfile
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

from deniable.client.categorical import (BITSET_MECHANISMS, MAX_UNIQUE_SHARE,
                                         KaryRandomizedResponse, SubsetSelection, UnaryEncoding,
                                         choose_categorical, domain_tag, unique_share)
from deniable.client.dimensions import DimensionError, Dimensions
from deniable.client.errors import InvalidParameterError, WireFormatError
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.kinds import Mechanism, MetricSpec, parse_mechanism, payload_field
from deniable.client.memo import (_context, _value_context, alpha_threshold, memo_bit, memo_key,
                                  memo_value, spend_tag, value_tag)
from deniable.client.numeric import BitMean
from deniable.client.mechanism import RandomizedResponse, z_score
from deniable.client.budget import DEFAULT_MAX_METRIC_EPSILON, PrivacyLedger
from deniable.client.errors import MetricCapError
from deniable.client.metrics import (DEFAULT_MAX_EPSILON, Served, above_ceiling,
                                     coerce_catalogue, describe_metric, parse_catalogue,
                                     resolve, table_dimensions)
from deniable.client.period import DEFAULT_POLICY, parse_policy
from deniable.client.queue import dims_text
from deniable.client.randomness import SecureBits
from deniable.client.reporter import _DimensionRoute, _stated_dims
from deniable.client.state import SECRET_FILE
from deniable.client.wire import encode_batch
from tests.vectors.open_section import open_domain_entries

PATH = Path(__file__).with_name("vectors.json")

MECHANISMS = [
    "rr:1/2:1/2",            # the default: one 2-bit table draw
    "rr:3/4:1/2",            # table
    "rr:1/3:1/2",            # rejection on the truth coin
    "rr:2/3:1/5",            # rejection on both coins
    "rr:5/7:3/11",
    "rr:1/1024:1/8",         # powers of two, 13 bits: too many for a table, two draws
    "rr:999/1000:1/2",
    "rr:1/4294967311:1/2",   # a denominator above 2**32: 33-bit draws
    "rr:12345678901/99999999977:7/9",
]
INVALID_IDS = ["rr:2/4:1/2", "rr:01/2:1/2", "rr:1/2:1/2 ", " rr:1/2:1/2", "rr:0/1:1/2",
               "rr:1/1:1/2", "rr:1/2:0/1", "rr:1/2:1/1", "rr:3/2:1/2", "rr:1/0:1/2", "rr:1/2",
               "rr:-1/2:1/2", "xx:1/2:1/2", "rr:1/2:1/2:1/2", "rr:1.5/2:1/2", ""]


def _mechanisms() -> list[RandomizedResponse]:
    found = [RandomizedResponse.from_id(m) for m in MECHANISMS]
    found.append(RandomizedResponse.from_epsilon(1.0))                       # 16-bit Warner
    found.append(RandomizedResponse.from_epsilon(0.5, denominator_bits=40))  # 40-bit draws
    return found


def _words(rng: random.Random, n: int) -> list[str]:
    return [f"{rng.getrandbits(64):016x}" for _ in range(n)]


def _source(words: list[str]) -> SecureBits:
    """SecureBits reading exactly these 64-bit words (little-endian), then nothing."""
    stream = [b"".join(int(w, 16).to_bytes(8, "little") for w in words)]

    def read(n: int) -> bytes:
        if not stream:
            raise RuntimeError("the vector's words ran out")
        return stream.pop()
    return SecureBits(read=read)


def mechanism_entries() -> list[dict[str, Any]]:
    return [{"id": m.id, "truth": str(m.truth), "forced_yes": str(m.forced_yes),
             "p_yes_given_yes": str(m.p_yes_given_yes), "p_yes_given_no": str(m.p_yes_given_no),
             "likelihood_ratio": str(m.likelihood_ratio), "epsilon": m.epsilon}
            for m in _mechanisms()]


def invalid_id_entries() -> list[str]:
    refused = []
    for mechanism_id in INVALID_IDS:
        try:
            RandomizedResponse.from_id(mechanism_id)
        except InvalidParameterError:
            refused.append(mechanism_id)
        else:
            raise AssertionError(f"{mechanism_id!r} was accepted")
    return refused


def bits_entries(rng: random.Random) -> list[dict[str, Any]]:
    """Raw bits(k) sequences, including draws that do not fit the current word (k up to 64)."""
    out = []
    for ks in ([1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 32, 1, 32, 32],
               [33, 40, 64, 1, 63, 48, 16, 32, 31, 2, 60]):
        words = _words(rng, 16)
        source = _source(words)
        out.append({"words": words, "ks": ks, "outputs": [str(source.bits(k)) for k in ks]})
    return out


def below_entries(rng: random.Random) -> list[dict[str, Any]]:
    """below(bound) sequences: rejection sampling, draw for draw."""
    out = []
    for bounds in ([3] * 40, [5, 6, 7, 1000, 1001, 65537, 3, 1, 2, 4294967295, 4294967297],
                   [2**33 + 1, 10**15 + 37, 2**64, 3, 2**63 + 1]):
        words = _words(rng, 64)
        source = _source(words)
        out.append({"words": words, "bounds": [str(b) for b in bounds],
                    "outputs": [str(source.below(b)) for b in bounds]})
    return out


def perturb_entries(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for mechanism in _mechanisms():
        words = _words(rng, 200)
        true_bits = [rng.getrandbits(1) for _ in range(48)]
        source = _source(words)
        outputs = [mechanism.perturb(bit, source) for bit in true_bits]
        out.append({"mechanism": mechanism.id, "words": words, "true_bits": true_bits,
                    "outputs": outputs})
    return out


def memo_entries(rng: random.Random) -> list[dict[str, Any]]:
    secrets = [bytes(range(32)), bytes(rng.getrandbits(8) for _ in range(32))]
    out = []
    for secret in secrets:
        for mechanism in _mechanisms():
            for metric in ("dark_mode", "feature_x_enabled", "a", "m" * 64):
                for true_bit in (0, 1):
                    out.append({
                        "secret": secret.hex(), "metric": metric, "mechanism": mechanism.id,
                        "true_bit": true_bit,
                        "context": _context(b"prr", metric, mechanism.id, true_bit).hex(),
                        "bit": memo_bit(secret, metric, mechanism, true_bit)})
    return out


def wire_entries(rng: random.Random) -> list[dict[str, Any]]:
    samples = [
        [("feature_x_enabled", "rr:1/2:1/2", 1)],
        [("feature_x_enabled", "rr:1/2:1/2", 0), ("dark_mode", "rr:3/4:1/2", 1),
         ("dark_mode", "rr:3/4:1/2", 1)],
        [(f"metric_{i % 7}", MECHANISMS[i % 7], rng.getrandbits(1))
         for i in range(100)],
    ]
    return [_wire_entry(rng, reports) for reports in samples]


def _wire_entry(rng: random.Random, reports: list[tuple[Any, ...]]) -> dict[str, Any]:
    """One batch of ``reports`` under a random id: its exact body and the body's SHA-256."""
    batch_id = f"{rng.getrandbits(128):032x}"
    body = json.dumps(encode_batch(batch_id, reports), separators=(",", ":"))
    return {"batch_id": batch_id, "reports": [list(r) for r in reports], "body": body,
            "sha256": hashlib.sha256(body.encode()).hexdigest()}


def catalogue_entries() -> dict[str, Any]:
    good = {"metrics": [describe_metric(f"metric_{i}", f"metric number {i}", m)
                        for i, m in enumerate(_mechanisms())]}
    parsed = parse_catalogue(good)
    bad = []
    tampered = json.loads(json.dumps(good))
    tampered["metrics"][0]["p_yes_given_yes"] = "7/8"
    bad.append(tampered)
    bad.append({"metrics": [{**good["metrics"][0], "name": "Bad-Name"}]})
    bad.append({"metrics": [{**good["metrics"][0], "mechanism": "rr:2/4:1/2"}]})
    bad.append({"metrics": "nope"})
    bad.append([])
    for doc in bad:
        try:
            parse_catalogue(doc)
        except WireFormatError:
            continue
        raise AssertionError(f"{doc!r} was accepted")
    return {"good": good, "parsed": {name: m.mechanism.id for name, m in parsed.items()}, "bad": bad}


def catalogue_kind_entries() -> dict[str, Any]:
    """A catalogue as a collector serving every metric kind writes it, and the boolean
    metrics in it: the web client reports boolean metrics only and leaves the others out."""
    specs = [
        ("dark_mode", MetricSpec.build("boolean", mechanism="rr:1/2:1/2")),
        ("os", MetricSpec.build("categorical", epsilon=2.0, categories=[
            "android", "ios", "windows", "macos", "linux", "other"])),
        ("locale", MetricSpec.build("categorical", epsilon=1.0,
                                    categories=[f"l{i}" for i in range(64)])),
        ("crashes_per_week", MetricSpec.build("histogram", epsilon=2.0,
                                              edges=[0, 1, 2, 5, 10, 100], clamp=True)),
        ("startup_ms", MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=10_000,
                                        clamp=True)),
        ("notifications_on", MetricSpec.build("boolean", mechanism="rr:3/4:1/2")),
    ]
    doc = {"metrics": [describe_metric(name, f"the {name} metric", spec)
                       for name, spec in specs]}
    return {"doc": doc,
            "boolean": {name: spec.mechanism.id for name, spec in specs
                        if spec.kind == "boolean"},
            "skipped": {name: spec.kind for name, spec in specs if spec.kind != "boolean"}}


def estimate_entries() -> list[dict[str, Any]]:
    out = []
    cases = [("rr:1/2:1/2", 50, 100, 0.95), ("rr:1/2:1/2", 0, 10, 0.95),
             ("rr:1/2:1/2", 10, 10, 0.9), ("rr:3/4:1/2", 612, 1000, 0.99),
             ("rr:1/3:1/2", 3, 7, 0.95), ("rr:2/3:1/5", 123456, 1000000, 0.95),
             ("rr:5/7:3/11", 1, 1, 0.5), ("rr:999/1000:1/2", 499, 1000, 0.999)]
    for mechanism_id, ones, n, confidence in cases:
        m = RandomizedResponse.from_id(mechanism_id)
        e = m.estimate(ones, n, confidence)
        out.append({"mechanism": mechanism_id, "ones": ones, "n": n, "confidence": confidence,
                    "z": z_score(confidence), "debiased": str(m.debias(Fraction(ones, n))),
                    "yes_rate": e.yes_rate, "value": e.value, "unclipped": e.unclipped,
                    "stderr": e.stderr, "ci_low": e.ci_low, "ci_high": e.ci_high,
                    "clipped": e.clipped, "wide": e.wide})
    return out


# -- metric kinds beyond boolean (categorical, histogram, numeric) ------------------------------

OS = ["android", "ios", "windows", "macos", "linux", "other"]
LOCALES = [f"l{i}" for i in range(64)]
EDGES = [0, 1, 2, 5, 10, 100]


def _kind_mechanisms() -> list[Mechanism]:
    tag6, tag64 = domain_tag(OS), domain_tag(LOCALES)
    return [
        KaryRandomizedResponse(2, Fraction(3, 4), domain_tag(["no", "yes"])),
        KaryRandomizedResponse.from_epsilon(2.0, 6, tag6),
        KaryRandomizedResponse(5, Fraction(1, 3), domain_tag(OS[:5])),       # rejection
        KaryRandomizedResponse(7, Fraction(52345678901, 99999999977), domain_tag(OS + ["x"])),
        KaryRandomizedResponse(300, Fraction(1, 2), domain_tag([str(i) for i in range(300)])),
        UnaryEncoding(6, Fraction(1, 4), tag6),                              # coins end in 1 byte
        UnaryEncoding(9, Fraction(1, 3), domain_tag([str(i) for i in range(9)])),  # never end
        UnaryEncoding.from_epsilon(1.0, 64, tag64),
        UnaryEncoding.from_epsilon(2.0, 1024, domain_tag([str(i) for i in range(1024)])),
        SubsetSelection(8, 3, Fraction(3, 2), domain_tag([str(i) for i in range(8)])),
        SubsetSelection.from_epsilon(1.0, 64, tag64),
        SubsetSelection(5, 1, Fraction(2), domain_tag(OS[:5])),
        SubsetSelection(10, 9, Fraction(7, 3), domain_tag([str(i) for i in range(10)])),
        BitMean(Fraction(1, 4), Fraction(0), Fraction(10_000)),
        BitMean.from_epsilon(1.0, 0, 10_000),
        BitMean(Fraction(1, 3), Fraction(-5, 2), Fraction(7)),
        BitMean(Fraction(1, 4), Fraction(0), Fraction(1, 3)),
    ]


KIND_INVALID_IDS = [
    "grr:6:1/6:0a1b2c3d", "grr:6:1:0a1b2c3d", "grr:06:1/2:0a1b2c3d", "grr:1:1/2:0a1b2c3d",
    "grr:1025:1/2:0a1b2c3d", "grr:6:2/4:0a1b2c3d", "grr:6:1/2:0A1B2C3D", "grr:6:1/2:0a1b2c3",
    "grr:6:1/2:0a1b2c3d ", "grr:6:1/2:0a1b2c3d\n", "grr:6:1/1:0a1b2c3d", "grr:6:-1/2:0a1b2c3d",
    "grr:6:1/18446744073709551617:0a1b2c3d", "grr:0:1/2:0a1b2c3d",
    "oue:6:1/2:0a1b2c3d", "oue:6:0/1:0a1b2c3d", "oue:6:1/4:0a1b2c3", "oue:6:1/4:0a1b2c3dd",
    "ss:8:0:3/2:0a1b2c3d", "ss:8:8:3/2:0a1b2c3d", "ss:8:3:1:0a1b2c3d", "ss:8:03:3/2:0a1b2c3d",
    "ss:08:3:3/2:0a1b2c3d", "ss:8:3:1/2:0a1b2c3d", "ss:8:3:6/4:0a1b2c3d", "ss:8:3:3/2",
    "bm:1/2:0:1", "bm:0/1:0:1", "bm:1/4:1:1", "bm:1/4:2:1", "bm:1/4:-0:1", "bm:1/4:0:2/1",
    "bm:1/4:0:1.5", "bm:1/4:01:2", "bm:-1/4:0:1", "bm:1/4:0", "bm:1:0:1", "bm:1/4:0:1:2",
    "xx:1:2", "grr", "",
]


def _words_used(mechanism: Mechanism, values: list[Any], rng: random.Random
                ) -> tuple[list[str], list[Any]]:
    """The words ``mechanism.perturb`` reads for ``values`` (all of them, none more) and its
    outputs as they travel (an index, a hex bitset or a bit)."""
    words = _words(rng, 12_000)
    source = _source(words)
    outputs = [_payload(mechanism, mechanism.perturb(v, source)) for v in values]
    return words[:source._offset // 8], outputs


def _payload(mechanism: Mechanism, answer: int) -> Any:
    return mechanism.encode_bits(answer) if isinstance(mechanism, BITSET_MECHANISMS) else answer


def kind_mechanism_entries() -> list[dict[str, Any]]:
    out = []
    for m in _kind_mechanisms():
        p1, q = m.channel
        out.append({"id": m.id, "kind": m.kind, "field": payload_field(m.id), "p1": str(p1),
                    "q": str(q), "likelihood_ratio": str(m.likelihood_ratio),
                    "epsilon": m.epsilon})
    return out


def kind_invalid_id_entries() -> list[str]:
    for mechanism_id in KIND_INVALID_IDS:
        try:
            parse_mechanism(mechanism_id)
        except InvalidParameterError:
            continue
        raise AssertionError(f"{mechanism_id!r} was accepted")
    return KIND_INVALID_IDS


def kind_perturb_entries(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for m in _kind_mechanisms():
        if isinstance(m, BitMean):
            span = m.upper - m.lower
            values = [m.lower, m.upper, m.lower + span / 2, m.lower + span * Fraction(1, 3)]
            values += [m.lower + span * Fraction(rng.getrandbits(53), 1 << 53) for _ in range(4)]
            values += [Fraction(float(v)) for v in values[2:] if m.lower <= Fraction(float(v))
                       <= m.upper]
            words, outputs = _words_used(m, values, rng)
            out.append({"mechanism": m.id, "words": words, "values": [str(v) for v in values],
                        "outputs": outputs})
            continue
        n = 4 if m.d > 256 else 24
        values = [rng.randrange(m.d) for _ in range(n)]
        words, outputs = _words_used(m, values, rng)
        out.append({"mechanism": m.id, "words": words, "values": values, "outputs": outputs})
    return out


def _kind_specs() -> list[tuple[str, MetricSpec]]:
    return [
        ("os", MetricSpec.build("categorical", epsilon=2.0, categories=OS)),
        ("os_oue", MetricSpec.build("categorical", mechanism=UnaryEncoding(
            6, Fraction(1, 4), domain_tag(OS)), categories=OS)),
        ("locale", MetricSpec.build("categorical", epsilon=1.0, categories=LOCALES)),
        ("crashes_per_week", MetricSpec.build("histogram", epsilon=2.0, edges=EDGES,
                                              clamp=True)),
        ("load_ms", MetricSpec.build("histogram", epsilon=1.0, edges=["-1/2", "0.25", 3, 1000])),
        ("startup_ms", MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=10_000,
                                        clamp=True)),
        ("script", MetricSpec.build("categorical", epsilon=2.0, categories=[  # the tag's JSON
            "é", "日本語", "😀", 'a"b', "tab\t", "x\u0001y", "back\\slash", "/", "\u2028"])),
        ("temperature", MetricSpec.build("numeric", mechanism="bm:1/3:-5/2:7", lower="-5/2",
                                         upper=7)),
    ]


def _kind_values(spec: MetricSpec) -> tuple[list[Any], list[Any]]:
    """(values the spec takes, values it refuses) as JSON; {"number": "nan"} etc. for the
    numbers JSON cannot carry."""
    specials = [{"number": "nan"}, {"number": "inf"}, {"number": "-inf"}]
    if spec.kind == "categorical":
        return list(spec.categories[:6]), ["Android", "", "other ", 1, None, True, [], 0.5]
    low, high = (spec.edges[0], spec.edges[-1]) if spec.kind == "histogram" else \
        (spec.mechanism.lower, spec.mechanism.upper)  # type: ignore[union-attr]
    inside = [int(low) if low.denominator == 1 else float(low), float(high),
              float((low + high) / 2), float(low + (high - low) / 3), 0.1 * float(high)]
    inside += [float(e) for e in spec.edges] + [float(e) + 1e-9 for e in spec.edges[:-1]]
    outside = [float(low) - 1, float(high) + 0.5, -1e300, 1e300]
    refused = ["3", None, True, False, [], {}] + specials
    return (inside + outside, refused) if spec.clamp else (inside, outside + refused)


def _json_value(value: Any) -> Any:
    if isinstance(value, dict) and "number" in value:
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[value["number"]]
    return value


def kind_encode_entries() -> list[dict[str, Any]]:
    out = []
    for name, spec in _kind_specs():
        taken, refused = _kind_values(spec)
        encoded = [spec.encode(v) for v in taken]
        for v in refused:
            try:
                spec.encode(_json_value(v))
            except InvalidParameterError:
                continue
            raise AssertionError(f"{name} took {v!r}")
        out.append({"entry": describe_metric(name, f"the {name} metric", spec),
                    "values": taken,
                    "encoded": [str(e) if isinstance(e, Fraction) else e for e in encoded],
                    "refused": refused})
    return out


def kind_memo_entries(rng: random.Random) -> list[dict[str, Any]]:
    secrets = [bytes(range(32)), bytes(rng.getrandbits(8) for _ in range(32))]
    out = []
    for secret in secrets:
        for name, spec in _kind_specs():
            taken, _ = _kind_values(spec)
            mechanism = spec.mechanism
            alpha = alpha_threshold(secret, name) if spec.kind == "numeric" else None
            for value in taken[:8]:
                encoded = spec.encode(value)
                key = memo_key(secret, name, mechanism, encoded)  # type: ignore[arg-type]
                answer = memo_value(secret, name, mechanism, encoded)  # type: ignore[arg-type]
                out.append({"secret": secret.hex(), "metric": name,
                            "entry": describe_metric(name, "", spec), "value": value,
                            "alpha": None if alpha is None else str(alpha), "key": key,
                            "answer": _payload(mechanism, answer)})
    return out


def kind_wire_entries(rng: random.Random) -> list[dict[str, Any]]:
    mechanisms = _kind_mechanisms()
    samples = [
        [("os", mechanisms[1].id, 3)],
        [("os", mechanisms[5].id, "0a"), ("locale", mechanisms[7].id, "8000000000000001"),
         ("startup_ms", mechanisms[13].id, 1), ("dark_mode", "rr:1/2:1/2", 0)],
        [(f"metric_{i % 5}", mechanisms[i % 17].id,
          _payload(mechanisms[i % 17], mechanisms[i % 17].perturb(
              0 if not isinstance(mechanisms[i % 17], BitMean) else mechanisms[i % 17].lower,
              _source(_words(rng, 400))))) for i in range(40)],
    ]
    return [_wire_entry(rng, reports) for reports in samples]


def kind_catalogue_entries() -> dict[str, Any]:
    specs = [("dark_mode", MetricSpec.build("boolean", mechanism="rr:1/2:1/2"))] + _kind_specs()
    good = {"metrics": [describe_metric(name, f"the {name} metric", spec)
                        for name, spec in specs]}
    unknown = [{**good["metrics"][1], "name": "future", "kind": "ranking"},
               {**good["metrics"][1], "name": "future_mech", "mechanism": "zz:1:2"}]
    skipped: dict[str, str] = {}
    parsed = parse_catalogue({"metrics": good["metrics"] + unknown}, skipped)

    def changed(name: str, **fields: Any) -> dict[str, Any]:
        """A catalogue of one entry of ``good``, changed (a field None: left out)."""
        entry = json.loads(json.dumps(next(e for e in good["metrics"] if e["name"] == name)))
        for key, value in fields.items():
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = value
        return {"metrics": [entry]}
    os_entry = good["metrics"][1]
    bad = [
        changed("os", categories=OS[::-1]),                      # the tag no longer matches
        changed("os", categories=OS[:5]),                        # d no longer matches
        changed("os", categories=OS[:5] + ["android"]),          # not distinct
        changed("os", categories=None),
        changed("os", p1="1/2"),
        changed("os", q=None),
        changed("os", clamp=True),                               # clamp on a categorical
        changed("os", mechanism=os_entry["mechanism"].replace("grr:6:", "grr:06:")),
        changed("os", kind="numeric"),
        changed("os", kind="boolean"),
        changed("os", lower="0"),
        changed("crashes_per_week", edges=["0", "1", "2", "5", "10", "1000"]),
        changed("crashes_per_week", edges=["0", "2", "1", "5", "10", "100"]),
        changed("crashes_per_week", edges="0,1,2,5,10,100"),
        changed("crashes_per_week", clamp="yes"),
        changed("startup_ms", upper="20000"),
        changed("startup_ms", lower=None),
        changed("startup_ms", edges=["0", "1", "2"]),
        changed("startup_ms", p1="3/4"),
        changed("temperature", mechanism="bm:1/3:-5/2:8"),
    ]
    for doc in bad:
        try:
            parse_catalogue(doc, {})
        except WireFormatError:
            continue
        raise AssertionError(f"{doc!r} was accepted")
    return {"good": {"metrics": good["metrics"] + unknown},
            "parsed": {name: spec.mechanism.id for name, spec in parsed.items()},
            "skipped": skipped and sorted(skipped), "bad": bad}


# -- public dimensions (deniable.client.dimensions; the Reporter's _stated_dims) -------------

DIMS = {"app_version": {"values": ["2.3", "2.4", "2.5"], "other": True},
        "platform": {"values": ["android", "ios", "web"], "other": False},
        "channel": {"values": ["beta", "stable"], "other": False}}
COMBOS = [["platform", "app_version"]]


def _dims_outcome(call: Callable[[], Any]) -> dict[str, Any]:
    """What a call gives: ``{"counted": ...}``, or ``{"error": field}`` for a DimensionError."""
    try:
        return {"counted": call()}
    except DimensionError as exc:
        return {"error": exc.field}


def dims_declaration_entries() -> dict[str, Any]:
    """Declarations ``Dimensions.parse`` accepts (with what it reads) and refuses."""
    good = [(DIMS, COMBOS), ({"platform": {"values": ["web"]}}, []),
            ({"tier": {"values": [f"t{i}" for i in range(100)], "other": True}}, []),
            ({"a": {"values": ["x"]}, "b": {"values": ["y"]}, "c": {"values": ["z"]}},
             [["c", "a"], ["a", "b", "c"]])]
    bad = [
        ({"Platform": {"values": ["web"]}}, []),                 # name not lowercase
        ({"platform": {"values": []}}, []),                      # no values
        ({"platform": {"values": "web"}}, []),                   # not a list
        ({"platform": {"values": ["we b"]}}, []),                # not a value
        ({"platform": {"values": ["web", "web"]}}, []),          # twice
        ({"platform": {"values": ["other"]}}, []),               # reserved
        ({"platform": {"values": ["web"], "other": 1}}, []),     # other not a boolean
        ({"platform": {"values": ["web"], "other": None}}, []),
        ({"platform": {"values": ["web"], "extra": True}}, []),  # unknown field
        ({"platform": ["web"]}, []),
        ({"tier": {"values": [f"t{i}" for i in range(101)]}}, []),
        ({"a": {"values": ["x"]}, "b": {"values": ["y"]}, "c": {"values": ["z"]},
          "d": {"values": ["w"]}}, []),                          # four dimensions
        (DIMS, [["platform"]]),                                  # a combination of one
        (DIMS, [["platform", "os"]]),                            # of an undeclared one
        (DIMS, [["platform", "platform"]]),
        (DIMS, [["platform", "channel"], ["channel", "platform"]]),  # twice
        (DIMS, "platform,channel"),
        (["platform"], []),
    ]
    for doc, combos in bad:
        try:
            Dimensions.parse(doc, combos)
        except InvalidParameterError:
            continue
        raise AssertionError(f"{doc!r} {combos!r} was accepted")
    return {
        "good": [{"dimensions": doc, "combinations": combos,
                  "parsed": Dimensions.parse(doc, combos).describe()} for doc, combos in good],
        "bad": [{"dimensions": doc, "combinations": combos} for doc, combos in bad],
    }


def dims_normalize_entries() -> list[dict[str, Any]]:
    """``Dimensions.normalize`` and ``series`` of stated values: counted (``other`` applied,
    names sorted as the queue's dims_text writes them) or refused (the field named)."""
    dims = Dimensions.parse(DIMS, COMBOS)
    cases: list[dict[str, Any]] = [
        {"platform": "ios"}, {"app_version": "2.4", "platform": "web"},
        {"platform": "web", "app_version": "2.9", "channel": "beta"},
        {"app_version": "other"}, {"app_version": "2.5 beta"}, {"app_version": ""},
        {"app_version": "2.4", "platform": "windows"}, {"platform": "Web"},
        {"os": "linux"}, {"channel": "nightly"}, {"app_version": 2.4}, {},
    ]
    out = []
    for stated in cases:
        found = _dims_outcome(lambda: json.loads(dims_text(dims.normalize(stated)) or "{}"))
        if "counted" in found:
            found["series"] = dims.series(found["counted"])
        out.append({"stated": stated, **found})
    return out


def dims_report_entries() -> list[dict[str, Any]]:
    """The dims a Reporter attaches to one report (``_DimensionRoute`` and ``_stated_dims``):
    the device-wide values the metric declares, overridden by the call's, as counted; or the
    field a DimensionError names. ``declared`` null: the metric declares no dimensions."""
    declared = {"all": (DIMS, COMBOS), "platform_only": ({"platform": DIMS["platform"]}, []),
                "none": None}
    devices = [{}, {"app_version": "2.4", "platform": "web"},
               {"app_version": "9.9", "platform": "web", "country": "fr"},
               {"platform": "windows"}, {"platform": "windows", "app_version": "2.3"}]
    calls: list[dict[str, Any] | None] = [
        None, {}, {"platform": "ios"}, {"app_version": "2.5"}, {"channel": "beta"},
        {"platform": "linux"}, {"country": "fr"}, {"platform": 3}]
    out = []
    for name, decl in declared.items():
        dims = Dimensions.parse(*decl) if decl is not None else Dimensions()
        for device in devices:
            route = _DimensionRoute("m", dims, device) if dims else None
            for call in calls:
                found = _dims_outcome(lambda: json.loads(
                    ("" if route is None and not call else _stated_dims("m", route, call))
                    or "{}"))
                out.append({"declared": name, "device": device, "dims": call, **found})
    return out


def dims_catalogue_entries() -> dict[str, Any]:
    """A catalogue whose entries declare dimensions (as the collector serves them), with the
    dimensions each kept entry declares, and the entries withheld for malformed ones."""
    specs = dict([("dark_mode", MetricSpec.build("boolean", mechanism="rr:1/2:1/2"))]
                 + _kind_specs())
    declared = {"dark_mode": (DIMS, COMBOS), "os": ({"platform": DIMS["platform"]}, []),
                "startup_ms": ({"app_version": DIMS["app_version"]}, [])}
    metrics = []
    for name in ("dark_mode", "os", "startup_ms", "crashes_per_week"):
        entry = describe_metric(name, f"the {name} metric", specs[name])
        if name in declared:
            entry.update(Dimensions.parse(*declared[name]).describe())
        metrics.append(entry)
    malformed = [{**metrics[0], "name": "bad_dims", "dimensions": {"platform": {"values": []}}},
                 {**metrics[0], "name": "bad_combo", "combinations": [["platform", "os"]]},
                 {**metrics[0], "name": "bad_both", "p1": "1/3",
                  "dimensions": {"Platform": {"values": ["web"]}}}]
    doc = {"metrics": metrics + malformed}
    skipped: dict[str, str] = {}
    found: dict[str, Dimensions] = {}
    parsed = parse_catalogue(doc, skipped, found)
    return {"doc": doc, "parsed": sorted(parsed),
            "dimensions": {name: d.describe() for name, d in sorted(found.items())},
            "withheld": sorted(skipped)}


def dims_wire_entries(rng: random.Random) -> list[dict[str, Any]]:
    """Wire bodies of batches whose reports carry dims (the queue's dims text, read back)."""
    mechanisms = _kind_mechanisms()
    samples = [
        [("dark_mode", "rr:1/2:1/2", 1, {"app_version": "2.4", "platform": "web"})],
        [("dark_mode", "rr:1/2:1/2", 0, {"app_version": "other", "platform": "ios"}),
         ("dark_mode", "rr:1/2:1/2", 1, None),
         ("os", mechanisms[1].id, 3, {"platform": "android"}),
         ("dark_mode", "rr:1/2:1/2", 1, {"channel": "beta"})],
    ]
    return [_wire_entry(rng, [(m, k, v, json.loads(dims_text(d)) if d else None)
                              for m, k, v, d in reports]) for reports in samples]


# -- the declaration is the contract (issue 26: metrics.resolve, Served) ----------------------

LN3_SERVED = "rr:499/1000:499/1002"
"""A boolean version at epsilon ln 3 (likelihood ratio exactly 3) other than rr:1/2:1/2."""


IRR_TABLE = {"mechanism": "rr:1/2:1/2", "memoization": "instantaneous",
             "instantaneous": "rr:3/4:1/2"}
"""A boolean declared with an instantaneous layer (memo layer rr:2/3:1/2)."""


def _declaration_cases() -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(what the case shows, the app's declaration as the web client takes it, the served
    catalogue's entries)."""
    os_table = {"kind": "categorical", "categories": OS, "epsilon": 1.0}
    startup = {"kind": "numeric", "lower": 0, "upper": 10000, "epsilon": 1.0}
    dark = {"mechanism": "rr:1/2:1/2",
            "dimensions": {"app_version": {"values": ["2.3", "2.4", "2.5"], "other": True}}}

    def entry(name: str, table: dict[str, Any], **policy: Any) -> dict[str, Any]:
        """The catalogue entry a collector serves for ``table`` (+ ``policy`` fields)."""
        spec = coerce_catalogue({name: table})[name]
        served = describe_metric(name, f"the {name} metric", spec,
                                 parse_policy({**table, **policy}))
        served.update(table_dimensions(table).describe())
        return served

    decoys = [entry("os", {**os_table, "categories": [label, "decoy"], "epsilon": 0.01})
              for label in OS[:2]]
    return [
        ("the catalogue agrees: nothing ignored", {"os": os_table, "dark_mode": dark},
         [entry("os", os_table), entry("dark_mode", dark)]),
        ("no catalogue: the declaration alone", {"os": os_table, "startup_ms": startup}, []),
        ("served fresh and hourly at the same epsilon: the version id only",
         {"flag": {"mechanism": "rr:1/2:1/2"}},
         [entry("flag", {"mechanism": LN3_SERVED}, memoization="fresh", period="hour")]),
        ("served narrow categories (a decoy) at a tiny epsilon: another question",
         {"os": os_table}, decoys[-1:]),
        ("served narrower numeric range at a tiny epsilon: another question",
         {"startup_ms": startup},
         [entry("startup_ms", {**startup, "lower": 625, "epsilon": 0.01})]),
        ("served clamp differs: another question", {"startup_ms": startup},
         [entry("startup_ms", {**startup, "clamp": True, "epsilon": 0.5})]),
        ("served larger epsilon, same question: the declared floor",
         {"os": os_table}, [entry("os", {**os_table, "epsilon": 2.0})]),
        ("served smaller epsilon, same question: taken", {"os": os_table},
         [entry("os", {**os_table, "epsilon": 0.5})]),
        ("served widened dimension list: the declared list", {"dark_mode": dark},
         [entry("dark_mode", {**dark, "dimensions": {"app_version": {
             "values": ["2.3", "2.4", "2.5"] + [f"2.4.{1100 + i}" for i in range(97)],
             "other": True}}})]),
        ("served dimension list in another order: the same list", {"dark_mode": dark},
         [entry("dark_mode", {**dark, "dimensions": {"app_version": {
             "other": True, "values": ["2.5", "2.3", "2.4"]}}})]),
        ("served instantaneous layer on a declared memoized boolean",
         {"flag": {"mechanism": "rr:1/4:1/2"}},
         [entry("flag", {"mechanism": "rr:1/4:1/2"}, memoization="instantaneous",
                instantaneous="rr:1/2:1/2")]),
        ("declared with an instantaneous layer, served the same: nothing ignored",
         {"flag": IRR_TABLE}, [entry("flag", {"mechanism": "rr:1/2:1/2"},
                                     memoization="instantaneous", instantaneous="rr:3/4:1/2")]),
        ("declared with an instantaneous layer; served memoized, then another layer",
         {"flag": IRR_TABLE, "other": IRR_TABLE},
         [entry("flag", {"mechanism": "rr:1/2:1/2"}),
          entry("other", {"mechanism": "rr:1/2:1/2"}, memoization="instantaneous",
                instantaneous="rr:7/8:1/2")]),
        ("declared fresh and weekly; served the defaults",
         {"flag": {"mechanism": "rr:1/2:1/2", "memoization": "fresh", "period": "week"}},
         [entry("flag", {"mechanism": "rr:1/2:1/2"})]),
        ("served metrics the app did not declare are never reported",
         {"flag": {"mechanism": "rr:1/2:1/2"}},
         [entry("flag", {"mechanism": "rr:1/2:1/2"}), entry("os", os_table),
          entry("startup_ms", startup)]),
        ("served every kind narrowed at once, and more fresh",
         {"os": os_table, "startup_ms": startup, "dark_mode": dark},
         [*decoys[:1], entry("startup_ms", {**startup, "upper": 5000, "epsilon": 0.01},
                              memoization="fresh"),
          entry("dark_mode", {**dark, "dimensions": {}}, period="hour")]),
    ]


def declaration_entries() -> list[dict[str, Any]]:
    """What each client makes of a declaration and a served catalogue: per declared metric,
    the mechanism its reports use (None: withheld), the served parts ignored
    (``SERVED_PARTS`` order; their count is ``stats().ignored_served`` /
    ``ignoredServed``), whether the declared floor applied, and the policy and dimensions
    followed (always the declaration's); and the served metrics never reported."""
    out = []
    for about, declared, served_entries in _declaration_cases():
        dims: dict[str, Dimensions] = {}
        policies: dict[str, Any] = {}
        specs = coerce_catalogue(declared, dims, policies)
        doc = {"metrics": served_entries}
        served = Served.parse(json.loads(json.dumps(doc)), {})
        resolution = resolve(specs, served, DEFAULT_MAX_EPSILON, policies=policies,
                             dimensions=dims)
        expect = {}
        for name in sorted(specs):
            policy = policies.get(name, DEFAULT_POLICY)
            used = resolution.usable.get(name)
            expect[name] = {
                "mechanism": used.mechanism.id if used is not None else None,
                "ignored": list(resolution.ignored.get(name, ())),
                "floored": name in resolution.floored,
                "memoization": policy.memoization,
                "instantaneous": None if policy.instantaneous is None
                else policy.instantaneous.id,
                "period": policy.period,
                "dimensions": dims.get(name, Dimensions()).describe(),
            }
        out.append({"about": about, "declared": declared, "catalogue": doc,
                    "max_epsilon": DEFAULT_MAX_EPSILON, "expect": expect,
                    "undeclared": sorted(set(served.specs) - set(specs))})
    return out


# -- the epsilon ceiling and the cap over versions (issue 19: metrics.py, budget.py) ----------

HUGE = "rr:999999999/1000000000:1/2"  # epsilon ~ 21.4: the review's attack


def ceiling_entries() -> dict[str, Any]:
    """``above_ceiling`` decisions for mechanisms of every kind at several ``max_epsilon``,
    and a served catalogue of every kind with metrics above the default ceiling (ln 9), exactly
    at it, and below it, with the names ``resolve`` withholds.

    The decisions are Python's: ln of the exact likelihood ratio against max_epsilon's exact
    value, with its 2**-40 allowance for its own rounding, as the web client decides; each
    mechanism's own float epsilon and the floats just beside it are included."""
    mechanisms: list[Any] = [parse_mechanism(m) for m in MECHANISMS + [HUGE, "rr:4/5:1/2"]]
    mechanisms += _kind_mechanisms()
    limits = [DEFAULT_MAX_EPSILON, math.log(3), 0.5, 1.0, 2.0, 21.0, 22.0, math.inf]
    decisions = []
    for mechanism in mechanisms:
        own = mechanism.epsilon
        for limit in limits + [own, math.nextafter(own, 0), own * (1 - 1e-9), own * (1 + 1e-9)]:
            decisions.append({"mechanism": mechanism.id,
                              "max_epsilon": "inf" if limit == math.inf else limit,
                              "above": above_ceiling(mechanism, limit)})
    specs = [
        ("huge", MetricSpec.build("boolean", mechanism=HUGE)),
        ("at_ceiling", MetricSpec.build("boolean", mechanism="rr:4/5:1/2")),
        ("dark_mode", MetricSpec.build("boolean", mechanism="rr:1/2:1/2")),
        ("os_huge", MetricSpec.build("categorical", epsilon=8.0, categories=OS)),
        ("os", MetricSpec.build("categorical", epsilon=2.0, categories=OS)),
        ("crashes_huge", MetricSpec.build("histogram", epsilon=5.0, edges=EDGES, clamp=True)),
        ("startup_huge", MetricSpec.build("numeric", epsilon=9.0, lower=0, upper=10_000,
                                          clamp=True)),
        ("startup_ms", MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=10_000,
                                        clamp=True)),
    ]
    doc = {"metrics": [describe_metric(name, f"the {name} metric", spec)
                       for name, spec in specs]}
    resolution = resolve(parse_catalogue(doc, {}), None, DEFAULT_MAX_EPSILON)
    return {"decisions": decisions, "doc": doc, "withheld": sorted(resolution.withheld),
            "usable": sorted(resolution.usable)}


def cap_entries() -> list[dict[str, Any]]:
    """Sequences of charges of memoized answers (metric, tag, epsilon) against a cap, run
    through the Python ledger: what each charged (0 for a tag already paid for) or whether
    the cap refused it (MetricCapError). Tags are opaque; epsilons are Python's floats."""
    ln3, ln2 = math.log(3), math.log(2)
    huge = parse_mechanism(HUGE).epsilon
    kinds = [m.epsilon for m in _kind_mechanisms()]
    sequences = [
        # The default cap: both answers of two versions of an ln 3 metric, then no more.
        (DEFAULT_MAX_METRIC_EPSILON, [("m", t, ln3) for t in ("v1:0", "v1:1", "v1:1", "v2:1",
                                                               "v2:0", "v3:0", "v1:0", "v3:1",
                                                               "v2:1")]),
        # Per metric name; a refused tag stays unpaid; a cheaper one may still fit.
        (DEFAULT_MAX_METRIC_EPSILON, [("a", "1", 2.0), ("b", "1", 2.0), ("a", "2", 2.0),
                                      ("a", "3", 1.0), ("a", "4", 0.39), ("a", "3", 1.0),
                                      ("a", "5", 0.01), ("b", "2", 2.0)]),
        # At the default ceiling: two answers of ln 9 fit ln 81; a third does not.
        (DEFAULT_MAX_METRIC_EPSILON, [("m", "v1:0", DEFAULT_MAX_EPSILON),
                                      ("m", "v1:1", DEFAULT_MAX_EPSILON),
                                      ("m", "v2:0", DEFAULT_MAX_EPSILON)]),
        # A huge epsilon is refused at once (the ceiling would have withheld it first).
        (DEFAULT_MAX_METRIC_EPSILON, [("m", "v1:0", huge), ("m", "v2:0", ln2)]),
        # Another cap; every kind's epsilon, one new answer each, until refused.
        (math.log(9), [("m", str(i), e) for i, e in enumerate([ln2, ln2, ln2, ln3 - ln2])]),
        (10.0, [("k", f"{i}", e) for i, e in enumerate(kinds)]),
        (math.inf, [("m", str(i), 20.0) for i in range(5)]),
    ]
    out = []
    for cap, charges in sequences:
        ledger = PrivacyLedger(None, max_metric_epsilon=cap)
        steps = []
        for metric, tag, epsilon in charges:
            try:
                charged: Any = ledger.charge(metric, epsilon, tag)
            except MetricCapError:
                charged = "refused"
            steps.append({"metric": metric, "tag": tag, "epsilon": epsilon,
                          "charged": charged})
        out.append({"max_metric_epsilon": "inf" if cap == math.inf else cap, "charges": steps})
    return out


def cap_substitute_entries(rng: random.Random) -> list[dict[str, Any]]:
    """Sequences of reports of one memoized metric past its cap, run through the Python
    guard with a known device secret: the payload each report sends, or None where nothing
    is sent. A boolean value refused a new answer is sent as the other value's paid answer,
    a category as the lowest paid category's, and nothing for every value while none is paid
    (issue 26: silence never depends on the value)."""
    os_spec = MetricSpec.build("categorical", epsilon=2.0, categories=OS)
    cases: list[tuple[str, MetricSpec, float, list[Any]]] = [
        ("dark_mode", MetricSpec.build("boolean", mechanism="rr:1/2:1/2"), math.log(3),
         [True, False, True, False, False]),
        ("dark_mode", MetricSpec.build("boolean", mechanism="rr:1/2:1/2"), 0.5, [True, False]),
        ("os", os_spec, DEFAULT_MAX_METRIC_EPSILON,
         ["linux", "ios", "android", "linux", "windows", "ios", "other"]),
        ("os", os_spec, 1.0, ["ios", "linux"]),
    ]
    out = []
    for secret in (bytes(range(32)), bytes(rng.getrandbits(8) for _ in range(32))):
        for name, spec, cap, values in cases:
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / SECRET_FILE).write_bytes(secret)
                guard = LongitudinalGuard(tmp, max_metric_epsilon=cap)
                reports = []
                for value in values:
                    try:
                        sent: Any = (guard.perturb(name, spec.mechanism, value)
                                     if spec.kind == "boolean" else
                                     guard.perturb_value(name, spec.mechanism,
                                                         spec.encode(value)))
                    except MetricCapError:
                        sent = None
                    reports.append({"value": value, "sent": sent})
                out.append({"secret": secret.hex(), "max_metric_epsilon": cap,
                            "metric": describe_metric(name, f"the {name} metric", spec),
                            "reports": reports, "cap_refused": guard.cap_refused})
                guard.close()
    return out


def ledger_tag_entries(rng: random.Random) -> list[dict[str, Any]]:
    """The ledger's opaque tags (``spend_tag``, ``value_tag``: HMAC under the device secret)
    of memoized answers of every kind, with their HMAC input, for known secrets."""
    secrets = [bytes(range(32)), bytes(rng.getrandbits(8) for _ in range(32))]
    out: list[dict[str, Any]] = []
    for secret in secrets:
        for mechanism in _mechanisms()[:3]:
            for metric in ("dark_mode", "m" * 64):
                for key in (0, 1):
                    out.append({"secret": secret.hex(), "metric": metric,
                                "mechanism": mechanism.id, "key": key,
                                "context": _context(b"tag", metric, mechanism.id, key).hex(),
                                "tag": spend_tag(secret, metric, mechanism, key)})
        for name, spec in _kind_specs():
            mechanism = spec.mechanism
            keys = (0, 1, 32) if spec.kind == "numeric" else (0, 1, len(spec.categories) - 1)
            for key in keys:
                out.append({"secret": secret.hex(), "metric": name, "mechanism": mechanism.id,
                            "key": key,
                            "context": _value_context(b"tag", name, mechanism,  # type: ignore[arg-type]
                                                      key, 32).hex(),
                            "tag": value_tag(secret, name, mechanism, key)})  # type: ignore[arg-type]
    return out


def period_entries(rng: random.Random) -> dict[str, Any]:
    """The period gate (``PeriodGate``): period indexes of given times (UTC; ISO weeks from
    Monday), and which calls of a sequence it admits, across restarts (a new gate on the same
    state directory). Times are integer Unix milliseconds (the clock reads them / 1000)."""
    import tempfile

    from deniable.client.period import CollectionPolicy, PeriodGate

    monday = 4 * 86_400_000  # 1970-01-05, the first Monday
    day, week = 86_400_000, 7 * 86_400_000
    times = [0, 1, 3_599_999, 3_600_000, day - 1, day, monday - 1, monday, monday + week - 1,
             monday + week, 1_764_115_200_000 - 1, 1_764_115_200_000,  # 2025-11-26, Wednesday
             1_767_571_200_000 - 1, 1_767_571_200_000,  # Monday 2026-01-05: ISO week 2
             *(rng.randrange(1_600_000_000_000, 1_900_000_000_000) for _ in range(8))]
    indexes = [{"ms": t, "period": p, "index": CollectionPolicy(period=p).period_index(t / 1000)}
               for t in times for p in ("hour", "day", "week")]
    start = 1_764_115_200_000 - 2 * 3_600_000  # Tuesday 22:00 UTC
    events: list[dict[str, Any]] = []
    now = start
    for step in range(160):
        now += rng.choice([1, 60_000, 600_000, 1_800_000, 3_600_000, 5 * 3_600_000])
        metric = rng.choice(["a", "b", "c"])
        period = {"a": "hour", "b": "day", "c": "week"}[metric]
        if step >= 120 and metric == "a":
            period = "day"  # the registry changed a's period
        events.append({"ms": now, "metric": metric, "period": period,
                       "restart": rng.random() < 0.15})
    with tempfile.TemporaryDirectory() as state:
        clock = [0.0]
        gate = PeriodGate(state, clock=lambda: clock[0])
        for event in events:
            if event["restart"]:
                gate = PeriodGate(state, clock=lambda: clock[0])
            clock[0] = event["ms"] / 1000
            event["admitted"] = gate.admit(event["metric"], CollectionPolicy(period=event["period"]))
    return {"indexes": indexes, "sequence": events}


IRR_PAIRS = [("rr:1/2:1/2", "rr:3/4:1/2"), ("rr:1/4:1/2", "rr:1/2:1/2"),
             ("rr:1/3:1/2", "rr:2/3:1/3"), ("rr:1/8:1/16", "rr:1/2:1/32"),
             (RandomizedResponse.from_epsilon(1.0).id, "rr:3/4:1/2")]
"""(wire mechanism, instantaneous layer) pairs the guard can split."""
IRR_UNREACHABLE = [("rr:1/2:1/2", "rr:1/2:1/2"), ("rr:3/4:1/2", "rr:1/2:1/2"),
                   ("rr:1/2:1/8", "rr:3/4:1/2")]
"""Pairs it cannot: the layer is no less noisy than the wire mechanism."""


def instantaneous_entries(rng: random.Random) -> dict[str, Any]:
    """The instantaneous layer of a boolean metric, as the guard builds and reports it: the
    memo layer split(wire, irr), the permanent answer of each true bit (memo_bit under the memo
    layer) and its ledger tag, then each report a fresh draw of the layer over the answer
    (the words feed those draws, as ``LongitudinalGuard(rng=...)._fresh_draw``); and the
    pairs the guard refuses."""
    from deniable.client.composition import compose
    from deniable.client.longitudinal import LongitudinalGuard
    from deniable.client.state import IN_MEMORY

    secrets = [bytes(range(32)), bytes(rng.getrandbits(8) for _ in range(32))]
    layered = []
    for wire_id, irr_id in IRR_PAIRS:
        wire, irr = RandomizedResponse.from_id(wire_id), RandomizedResponse.from_id(irr_id)
        guard = LongitudinalGuard(IN_MEMORY, irr={"m": irr}, warn_in_memory=False)
        memo = guard.layers("m", wire).memo
        assert isinstance(memo, RandomizedResponse) and compose(memo, irr) == wire
        for secret in secrets:
            for metric in ("dark_mode", "m" * 64):
                answers = [memo_bit(secret, metric, memo, bit) for bit in (0, 1)]
                words = _words(rng, 120)
                source = _source(words)
                true_bits = [rng.getrandbits(1) for _ in range(40)]
                layered.append({
                    "secret": secret.hex(), "metric": metric, "wire": wire.id,
                    "instantaneous": irr.id, "memo": memo.id, "answers": answers,
                    "tags": [spend_tag(secret, metric, memo, bit) for bit in (0, 1)],
                    "words": words, "true_bits": true_bits,
                    "outputs": [irr.perturb(answers[bit], source) for bit in true_bits]})
    refused = []
    for wire_id, irr_id in IRR_UNREACHABLE:
        guard = LongitudinalGuard(IN_MEMORY, irr={"m": RandomizedResponse.from_id(irr_id)},
                                  warn_in_memory=False)
        try:
            guard.layers("m", RandomizedResponse.from_id(wire_id))
        except InvalidParameterError:
            refused.append({"wire": wire_id, "instantaneous": irr_id})
        else:
            raise AssertionError(f"{wire_id} over {irr_id} was split")
    return {"layered": layered, "unreachable": refused}


def privacy_loss_entries() -> list[dict[str, Any]]:
    """``PrivacyLoss`` of every kind's mechanism, memoized and fresh, without an instantaneous
    layer; then of boolean mechanisms with one (``instantaneous``: the layer's id): epsilons,
    the exact probability that two values' permanent answers differ, and ``after(n)`` (with
    a layer, the exact repeated loss, which grows towards the long-run epsilon)."""
    from deniable.client.longitudinal import Layers, PrivacyLoss
    from deniable.client.composition import split

    out: list[dict[str, Any]] = []
    for wire_id, irr_id in IRR_PAIRS:
        wire, irr = RandomizedResponse.from_id(wire_id), RandomizedResponse.from_id(irr_id)
        loss = PrivacyLoss.of("m", Layers(wire, split(wire, irr), irr))
        out.append({"mechanism": wire.id, "memoized": True, "instantaneous": irr.id,
                    "one_report_epsilon": loss.one_report_epsilon,
                    "long_run_epsilon": loss.long_run_epsilon,
                    "p_answers_differ": str(loss.p_answers_differ),
                    "cost_per_new_value": loss.cost_per_new_value,
                    "after": [loss.after(n) for n in (0, 1, 2, 3, 10, 100)],
                    "value_change": loss.value_change})
    for mechanism in [*_mechanisms(), *(spec.mechanism for _, spec in _kind_specs())]:
        for memoized in (True, False):
            loss = PrivacyLoss.of("m", Layers(mechanism, mechanism if memoized else None, None))
            out.append({"mechanism": mechanism.id, "memoized": memoized,
                        "one_report_epsilon": loss.one_report_epsilon,
                        "long_run_epsilon": loss.long_run_epsilon,
                        "p_answers_differ": None if loss.p_answers_differ is None
                        else str(loss.p_answers_differ),
                        "cost_per_new_value": loss.cost_per_new_value,
                        "after": [loss.after(n) for n in range(4)],
                        "value_change": loss.value_change})
    return out


def unique_share_entries() -> list[dict[str, Any]]:
    """Memoized answers as identifiers: each mechanism's expected unique share among 20,000
    same-valued devices (``unique_share``, a float) and whether the guard refuses to memoize it
    (above 1 %). Shares within a relative 1e-6 of the limit are left out: there the two
    languages' floats may decide apart."""
    tag = "0a1b2c3d"
    mechanisms: list[Any] = []
    for d in (2, 6, 16, 64, 256, 1024):
        for epsilon in (0.5, 1.0, 2.0, 4.0):
            best = SubsetSelection.from_epsilon(epsilon, d, tag)
            mechanisms += [choose_categorical(epsilon, d, tag)[0],
                           UnaryEncoding.from_epsilon(epsilon, d, tag),
                           KaryRandomizedResponse.from_epsilon(epsilon, d, tag), best]
            mechanisms += [SubsetSelection(d, k, best.r, tag) for k in (2, 3, d // 2)
                           if 1 <= k < d]
    out, seen = [], set()
    for m in mechanisms:
        share = unique_share(m)
        if m.id in seen or abs(share - MAX_UNIQUE_SHARE) <= 1e-6 * MAX_UNIQUE_SHARE:
            continue
        seen.add(m.id)
        out.append({"mechanism": m.id, "share": share, "identifying": share > MAX_UNIQUE_SHARE})
    return out


def budget_entries(rng: random.Random) -> dict[str, Any]:
    """Per-period budgets (``PrivacyLedger`` with ``budgets``): a sequence of fresh reports
    (integer Unix milliseconds, the clock reading them / 1000; the clock sometimes goes back)
    and whether each is admitted. Budgets are epsilon and period in seconds, as ``Budget``."""
    from deniable.client.budget import Budget, PrivacyLedger
    from deniable.client.errors import BudgetExceededError
    from deniable.client.mechanism import RandomizedResponse

    epsilons = [RandomizedResponse.from_id(i).epsilon for i in ("rr:1/2:1/2", "rr:3/4:1/2",
                                                              "rr:1/4:1/2")]
    budgets = {"a": Budget.for_reports(3, epsilons[0], 3600.0), "b": Budget(2.5),
               "c": Budget(0.0, 60.0), "d": Budget(epsilons[1] + epsilons[2], 7 * 86_400.0)}
    clock = [0.0]
    ledger = PrivacyLedger(None, budgets, clock=lambda: clock[0], max_metric_epsilon=math.inf)
    events: list[dict[str, Any]] = []
    now = 1_764_115_200_000 - 2 * 3_600_000
    for _ in range(120):
        now += rng.choice([-600_000, 1, 60_000, 600_000, 1_800_000, 3_600_000, 20 * 3_600_000])
        metric, epsilon = rng.choice(list(budgets)), rng.choice(epsilons)
        clock[0] = now / 1000
        try:
            ledger.charge(metric, epsilon)
            admitted = True
        except BudgetExceededError:
            admitted = False
        events.append({"ms": now, "metric": metric, "epsilon": epsilon, "admitted": admitted})
    return {"budgets": {name: {"epsilon": b.epsilon, "period": b.period}
                        for name, b in budgets.items()}, "sequence": events}


SECTIONS: dict[str, Callable[[random.Random], Any]] = {
    "mechanisms": lambda rng: mechanism_entries(),
    "invalid_ids": lambda rng: invalid_id_entries(),
    "bits": bits_entries,
    "below": below_entries,
    "perturb": perturb_entries,
    "memo": memo_entries,
    "wire": wire_entries,
    "catalogue": lambda rng: catalogue_entries(),
    "catalogue_kinds": lambda rng: catalogue_kind_entries(),
    "estimates": lambda rng: estimate_entries(),
    "kind_mechanisms": lambda rng: kind_mechanism_entries(),
    "kind_invalid_ids": lambda rng: kind_invalid_id_entries(),
    "kind_perturb": kind_perturb_entries,
    "kind_encode": lambda rng: kind_encode_entries(),
    "kind_memo": kind_memo_entries,
    "kind_wire": kind_wire_entries,
    "kind_catalogue": lambda rng: kind_catalogue_entries(),
    "dims_declarations": lambda rng: dims_declaration_entries(),
    "dims_normalize": lambda rng: dims_normalize_entries(),
    "dims_report": lambda rng: dims_report_entries(),
    "dims_catalogue": lambda rng: dims_catalogue_entries(),
    "dims_wire": dims_wire_entries,
    "ceiling": lambda rng: ceiling_entries(),
    "cap": lambda rng: cap_entries(),
    "cap_substitute": cap_substitute_entries,
    "declarations": lambda rng: declaration_entries(),
    "ledger_tags": ledger_tag_entries,
    "periods": period_entries,
    "privacy_loss": lambda rng: privacy_loss_entries(),
    "instantaneous": instantaneous_entries,
    "unique_share": lambda rng: unique_share_entries(),
    "budgets": budget_entries,
    "open_domain": lambda rng: open_domain_entries(rng, _words, _source),
}


def generate() -> dict[str, Any]:
    """The vectors, freshly computed from the Python client (deterministic)."""
    doc: dict[str, Any] = {
        "about": "Shared test vectors, written by tests/vectors/generate.py from the Python "
                 "client (deniable.client). Do not edit: regenerate with "
                 "`python -m tests.vectors.generate`. Words are 64-bit, hex, read "
                 "little-endian; fractions are exact strings.",
        "version": 1,
    }
    for name, make in SECTIONS.items():
        doc[name] = make(random.Random(f"deniable-vectors/{name}"))
    return doc


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    args = parser.parse_args(argv)
    text = render(generate())
    if args.check:
        if PATH.read_text() != text:
            print(f"{PATH} is stale: run python -m tests.vectors.generate", file=sys.stderr)
            return 1
        return 0
    PATH.write_text(text)
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
