"""The Reporter's configuration objects (deniable.client.config): the simple call stays simple,
the objects carry the old defaults, and every keyword of earlier versions still works for one
release, warning with its new spelling."""
from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import deniable.client
from deniable.client import (
    Budget,
    BudgetExceededError,
    Connection,
    Delivery,
    InvalidParameterError,
    Privacy,
    RandomizedResponse,
    Reporter,
    Storage,
)
from deniable.client.config import LEGACY_KEYWORDS, LegacyOptions
from deniable.client.mechanism import DEFAULT
from tests.servers import recording_collector

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = "http://127.0.0.1:9"  # nobody listens: construction never waits on the network
DECLARED = {"dark_mode": "rr:3/4:1/2"}
OBJECTS = {"storage": Storage, "delivery": Delivery, "privacy": Privacy,
           "connection": Connection}

# The defaults Reporter's keyword arguments had before the objects (src/deniable/client at
# commit 8a1051e), written out: the objects must keep every one.
OLD_DEFAULTS: dict[str, object] = {
    "batch_size": 100, "durability": "group", "commit_interval": 0.05, "max_batch_age": 15.0,
    "max_queued_reports": 1_000_000, "max_queue_age": 7 * 24 * 3600.0, "upload_jitter": 0.0,
    "backoff": 0.5, "max_backoff": 60.0, "max_config_backoff": 300.0, "close_timeout": 10.0,
    "exit_timeout": 2.0, "timeout": (3.05, 10.0), "verify": True, "insecure_skip_verify": False,
    "max_epsilon": DEFAULT.epsilon * 2, "catalogue_refresh": 3600.0, "privacy_dir": None,
    "budgets": {}, "irr": {}, "fresh": (), "max_metric_epsilon": DEFAULT.epsilon * 4,
    "policies": {}, "one_per_period": True,
}
"""ln 9 = 2 ln 3 and ln 81 = 4 ln 3: the two-coin mechanism's epsilon is ln 3."""


def test_the_simple_call_needs_no_object_and_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Reporter(OFFLINE, metrics=DECLARED, storage=Storage(privacy_dir=":memory:")) as r:
            assert r.batch_size == 100 and r.delivery == Delivery()
            assert r.privacy == Privacy() and r.connection == Connection()
            r.close(timeout=0)


def test_each_old_keyword_is_a_field_of_one_object_with_its_old_default() -> None:
    assert set(LEGACY_KEYWORDS) == set(OLD_DEFAULTS) == set(LegacyOptions.__annotations__)
    for name, target in LEGACY_KEYWORDS.items():
        default = getattr(OBJECTS[target](), name)
        assert default == pytest.approx(OLD_DEFAULTS[name]) if isinstance(default, float) \
            else default == OLD_DEFAULTS[name], name
    # Every field of every object is one old keyword: nothing new, nothing lost.
    fields = {f.name for cls in OBJECTS.values() for f in dataclasses.fields(cls)}
    assert fields == set(LEGACY_KEYWORDS)


def test_the_objects_are_frozen_and_exported() -> None:
    for cls in OBJECTS.values():
        assert cls.__name__ in deniable.client.__all__
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(cls(), dataclasses.fields(cls)[0].name, None)
    assert dataclasses.replace(Delivery(), batch_size=10).batch_size == 10


def test_the_constructor_takes_a_handful_of_arguments() -> None:
    named = [p for p in inspect.signature(Reporter).parameters.values()
             if p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert [p.name for p in named] == [
        "collector_url", "metrics", "token", "queue_path", "storage", "delivery", "privacy",
        "connection", "dimensions", "enabled", "rng"]


@pytest.mark.parametrize("name", sorted(LEGACY_KEYWORDS))
def test_an_old_keyword_warns_naming_its_new_spelling(name: str) -> None:
    target = LEGACY_KEYWORDS[name]
    cls = OBJECTS[target].__name__
    value = OLD_DEFAULTS[name]
    if name == "privacy_dir":
        value = ":memory:"
    options = {"privacy_dir": ":memory:"} if name != "privacy_dir" else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reporter = Reporter(OFFLINE, DECLARED, storage=Storage(**options),  # type: ignore[arg-type]
                            **{name: value})  # type: ignore[misc]
        reporter.close(timeout=0)
    messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert messages == [
        f"Reporter({name}=...) is deprecated and will be removed in the next release: pass "
        f"Reporter({target}={cls}({name}=...)) instead (deniable.client.{cls})."]
    # The warning points at the caller's line, not at the library.
    assert [w.filename for w in caught if w.category is DeprecationWarning] == [__file__]


def test_an_old_keyword_still_works_and_overrides_its_objects_field() -> None:
    with recording_collector({"metrics": []}) as (url, recorder):
        with pytest.deprecated_call(match=r"pass Reporter\(delivery=Delivery\(batch_size=\.\.\.\)\)"):
            old = Reporter(url, DECLARED, batch_size=2,
                           delivery=Delivery(batch_size=50, close_timeout=5.0),
                           storage=Storage(privacy_dir=":memory:"),
                           privacy=Privacy(one_per_period=False))
        with old:
            assert old.delivery == Delivery(batch_size=2, close_timeout=5.0)
            assert (old.batch_size, old.close_timeout) == (2, 5.0)
            for _ in range(6):
                old.report("dark_mode", True)
            assert old.flush(10)
        # 6 reports in batches of 2: three requests, as batch_size=2 asks.
        assert len(recorder.bodies) == 3
        assert all(len(json.loads(body)["reports"]) == 2 for body in recorder.bodies)


def test_the_old_and_new_spellings_build_the_same_reporter(tmp_path: Path) -> None:
    epsilon = RandomizedResponse.from_id(DECLARED["dark_mode"]).epsilon  # ln 7
    budget = {"dark_mode": Budget.for_reports(1, epsilon)}
    with pytest.deprecated_call():
        old = Reporter(OFFLINE, DECLARED, privacy_dir=tmp_path / "old", fresh={"dark_mode"},
                       budgets=budget, max_epsilon=3.0, one_per_period=False,
                       timeout=(1.0, 1.0), close_timeout=0)
    new = Reporter(OFFLINE, DECLARED, storage=Storage(privacy_dir=tmp_path / "new"),
                   privacy=Privacy(fresh={"dark_mode"}, budgets=budget, max_epsilon=3.0,
                                   one_per_period=False),
                   connection=Connection(timeout=(1.0, 1.0)), delivery=Delivery(close_timeout=0))
    for reporter in (old, new):
        with reporter:
            assert reporter.max_epsilon == 3.0 and reporter.close_timeout == 0
            assert reporter.privacy == new.privacy and reporter.connection == new.connection
            reporter.report("dark_mode", True)  # fresh: costs ln 7, the whole budget
            with pytest.raises(BudgetExceededError):
                reporter.report("dark_mode", True)
            reporter.close(timeout=0)


def test_none_for_an_old_mapping_keyword_still_means_none() -> None:
    with pytest.deprecated_call():
        reporter = Reporter(OFFLINE, DECLARED, budgets=None, irr=None, policies=None,
                            storage=Storage(privacy_dir=":memory:"))
    with reporter:
        assert reporter.privacy == Privacy()
        reporter.close(timeout=0)


def test_an_unknown_keyword_is_a_type_error_and_a_bad_value_still_refused() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        Reporter(OFFLINE, DECLARED, batchsize=5)  # type: ignore[call-arg]
    with pytest.raises(InvalidParameterError):
        Reporter(OFFLINE, DECLARED, delivery=Delivery(batch_size=0),
                 storage=Storage(privacy_dir=":memory:"))
    with pytest.raises(InvalidParameterError, match="insecure_skip_verify"):
        Reporter(OFFLINE, DECLARED, connection=Connection(verify=False),
                 storage=Storage(privacy_dir=":memory:"))


TYPED = '''\
from deniable.client import Connection, Delivery, Privacy, Reporter, Storage

Reporter("https://t.example.com", metrics={"m": "rr:3/4:1/2"}, storage=Storage(durability="sync"),
         delivery=Delivery(batch_size=5), privacy=Privacy(fresh={"m"}),
         connection=Connection(timeout=(1.0, 2.0))).close()
Reporter("https://t.example.com", batch_size=5).close()   # deprecated, still typed
Reporter("https://t.example.com", batch_size="5").close()
Delivery(batch_size="5")
Storage(durability="later")
'''


@pytest.mark.slow
def test_mypy_strict_checks_the_objects_and_the_old_keywords(tmp_path: Path) -> None:
    (tmp_path / "typed.py").write_text(TYPED)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--namespace-packages",
         "--explicit-package-bases", "--cache-dir", str(tmp_path / ".mypy_cache"), "typed.py"],
        cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "MYPYPATH": str(ROOT / "src")})
    errors = [line.split(":")[1] for line in done.stdout.splitlines() if ": error:" in line]
    assert errors == ["7", "8", "9"], done.stdout[-3000:]  # the three wrong types, no more
