"""Memoized answers: exact P1/Q over device secrets, fixed per device, never stored in clear."""
from __future__ import annotations

import json
import math
import os
import stat
from collections import Counter
from pathlib import Path

import pytest

from deniable.client import RandomizedResponse
from deniable.client.errors import PrivacyStateError
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import DEFAULT
from deniable.client.memo import HmacBits, memo_bit, new_secret, spend_tag
from deniable.client.state import StateDir


Z = 5.5
"""Standard errors: an exact binomial tail of at most 3.9e-8 per check, so below 1.2e-7 for
the 3 checks of a test (5 SE gave 1.7e-6)."""


def within(ones: int, n: int, p: float) -> bool:
    return abs(ones / n - p) <= Z * math.sqrt(p * (1 - p) / n)


def test_hmac_bits_are_a_deterministic_stream_keyed_by_secret_and_context() -> None:
    secret = new_secret()
    a, b = HmacBits(secret, b"ctx"), HmacBits(secret, b"ctx")
    assert [a.bits(k) for k in (1, 7, 64, 300, 3)] == [b.bits(k) for k in (1, 7, 64, 300, 3)]
    assert HmacBits(secret, b"ctx").bits(256) != HmacBits(secret, b"other").bits(256)
    assert HmacBits(secret, b"ctx").bits(256) != HmacBits(new_secret(), b"ctx").bits(256)
    assert HmacBits(secret, b"ctx").bits(0) == 0


def test_hmac_bits_are_uniform_across_block_boundaries() -> None:
    stream = HmacBits(new_secret(), b"uniform")
    draws = Counter(stream.bits(3) for _ in range(48_000))  # 3 does not divide 256
    assert set(draws) == set(range(8))
    for count in draws.values():  # expected 6,000, sd ~72
        assert abs(count - 6_000) < 400


@pytest.mark.slow
@pytest.mark.parametrize("mechanism_id", [
    "rr:1/2:1/2",   # the default: one table draw of 2 bits
    "rr:2/3:1/2",   # truth coin with denominator 3: rejection sampling
    "rr:1/3:1/4",   # both coins drawn separately
])
def test_memoized_bit_has_exactly_the_mechanisms_probabilities_over_device_secrets(
        mechanism_id: str) -> None:
    mechanism = RandomizedResponse.from_id(mechanism_id)
    n = 100_000
    ones = {1: 0, 0: 0}
    both = Counter()
    for _ in range(n):
        secret = os.urandom(32)
        b1, b0 = memo_bit(secret, "m", mechanism, 1), memo_bit(secret, "m", mechanism, 0)
        ones[1] += b1
        ones[0] += b0
        both[b1, b0] += 1
    p1, q = float(mechanism.p_yes_given_yes), float(mechanism.p_yes_given_no)
    assert within(ones[1], n, p1)
    assert within(ones[0], n, q)
    # The two values draw from separate streams: their answers are independent.
    assert within(both[1, 1], n, p1 * q)


def test_memoized_bit_is_fixed_per_secret_metric_and_mechanism() -> None:
    secret = new_secret()
    assert len({memo_bit(secret, "m", DEFAULT, 1) for _ in range(50)}) == 1
    # Over many secrets, other metrics and mechanisms get answers of their own.
    differs_metric = differs_mechanism = 0
    other = RandomizedResponse.from_id("rr:3/4:1/2")
    for _ in range(2_000):
        s = new_secret()
        differs_metric += memo_bit(s, "m", DEFAULT, 1) != memo_bit(s, "n", DEFAULT, 1)
        differs_mechanism += memo_bit(s, "m", DEFAULT, 1) != memo_bit(s, "m", other, 1)
    assert within(differs_metric, 2_000, 2 * 0.75 * 0.25)  # independent draws
    assert within(differs_mechanism, 2_000, 0.75 * (1 - 0.875) + 0.25 * 0.875)


def test_spend_tag_depends_on_the_secret_so_it_names_no_value_by_itself() -> None:
    secret = new_secret()
    assert spend_tag(secret, "m", DEFAULT, 1) == spend_tag(secret, "m", DEFAULT, True)
    assert spend_tag(secret, "m", DEFAULT, 1) != spend_tag(secret, "m", DEFAULT, 0)
    tags = {spend_tag(new_secret(), "m", DEFAULT, 1) for _ in range(100)}
    assert len(tags) == 100  # no tag of "true" shared across devices


def test_the_secret_is_created_once_with_owner_only_permissions(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    secret = state.secret()
    assert len(secret) == 32
    assert state.secret() == secret == StateDir(tmp_path / "state").secret()
    path = tmp_path / "state" / "secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert [p.name for p in (tmp_path / "state").iterdir() if p.name.endswith(".tmp")] == []


def test_a_secret_left_readable_by_others_is_tightened(tmp_path: Path) -> None:
    StateDir(tmp_path).secret()
    os.chmod(tmp_path / "secret", 0o644)
    StateDir(tmp_path).secret()
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600


def test_a_corrupt_secret_is_refused_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"short")
    with pytest.raises(PrivacyStateError, match="corrupt"):
        LongitudinalGuard(tmp_path)
    assert (tmp_path / "secret").read_bytes() == b"short"


def test_the_answer_survives_a_restart(tmp_path: Path) -> None:
    with LongitudinalGuard(tmp_path) as guard:
        first = [guard.perturb(f"metric_{i}", DEFAULT, True) for i in range(40)]
    with LongitudinalGuard(tmp_path) as guard:
        assert [guard.perturb(f"metric_{i}", DEFAULT, True) for i in range(40)] == first


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def _without_tags(doc: dict) -> dict:  # type: ignore[type-arg]
    for entry in doc["metrics"].values():
        assert all(len(tag) == 32 and int(tag, 16) >= 0 for tag in entry["paid"])
        entry["paid"] = len(entry["paid"])
    return doc


def test_the_state_never_holds_the_true_value(tmp_path: Path) -> None:
    # Two devices, one reporting True and one False for metrics whose names spell values:
    # their state differs only in the random secret and the opaque HMAC tags.
    metrics = ["true", "false", "is_enabled", "1", "0"]
    docs = []
    for value in (True, False):
        path = tmp_path / str(value)
        with LongitudinalGuard(path) as guard:
            for metric in metrics:
                for _ in range(5):
                    guard.perturb(metric, DEFAULT, value)
        files = _files(path)
        assert set(files) == {"secret", "ledger.json", "lock"}
        assert len(files["secret"]) == 32 and files["lock"] == b""
        ledger = files["ledger.json"].decode()
        for word in ("True", "False"):
            assert word not in ledger
        doc = json.loads(ledger)
        for name, entry in doc["metrics"].items():
            assert not any(isinstance(v, bool) for v in entry.values())
            assert set(entry) == {"period_start", "spent", "lifetime", "refused", "paid",
                                  "memoized", "capped"}
        docs.append(_without_tags(doc))
    assert docs[0] == docs[1]
