"""Write the shared test vectors: the contract between the Python client and the web client.

    python -m tests.vectors.generate            # rewrite tests/vectors/vectors.json
    python -m tests.vectors.generate --check    # exit 1 if the committed file is stale

Every value comes from the real Python implementation (deniable.client: mechanism, randomness,
memo, wire, metrics); nothing here re-implements it. The inputs (random words, secrets) are
fixed test data from a seeded generator. tests/client/test_vectors.py checks that the committed
file equals what this script writes now, so a change to the Python client fails until the file
is regenerated; web/test/vectors.test.js checks every entry against the TypeScript code.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

from deniable.client.errors import InvalidParameterError, WireFormatError
from deniable.client.kinds import MetricSpec
from deniable.client.memo import _context, memo_bit
from deniable.client.mechanism import RandomizedResponse, z_score
from deniable.client.metrics import describe_metric, parse_catalogue
from deniable.client.randomness import SecureBits
from deniable.client.wire import encode_batch

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
    out = []
    samples = [
        [("feature_x_enabled", "rr:1/2:1/2", 1)],
        [("feature_x_enabled", "rr:1/2:1/2", 0), ("dark_mode", "rr:3/4:1/2", 1),
         ("dark_mode", "rr:3/4:1/2", 1)],
        [(f"metric_{i % 7}", MECHANISMS[i % 7], rng.getrandbits(1))
         for i in range(100)],
    ]
    for reports in samples:
        batch_id = f"{rng.getrandbits(128):032x}"
        body = json.dumps(encode_batch(batch_id, reports), separators=(",", ":"))
        out.append({"batch_id": batch_id, "reports": [list(r) for r in reports], "body": body,
                    "sha256": hashlib.sha256(body.encode()).hexdigest()})
    return out


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
