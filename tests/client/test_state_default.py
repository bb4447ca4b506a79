"""The privacy state's default home: a persistent device secret unless the app asks otherwise.

Every test here runs with XDG_DATA_HOME pointed at a temp dir (tests/conftest.py), so nothing
is written into the real home directory, by this process or by the children it starts.
"""
from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from deniable.client import IN_MEMORY, InvalidParameterError, Privacy, Reporter, Storage
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import DEFAULT, RandomizedResponse
from deniable.client.memo import memo_bit
from deniable.client.metrics import describe_metric
from deniable.client.state import (
    StateDir,
    check_namespace,
    default_state_dir,
    origin_namespace,
    user_data_dir,
)
from tests.servers import recording_collector

ROOT = Path(__file__).resolve().parents[2]
DARK = RandomizedResponse("3/4", "1/2")
CATALOGUE = {"metrics": [describe_metric("feature_x_enabled", "X", DEFAULT),
                         describe_metric("dark_mode", "Dark", DARK)]}
METRICS = {"feature_x_enabled": DEFAULT, "dark_mode": DARK}  # declared: no catalogue wait


def sent(recorder, metric: str) -> list[int]:  # type: ignore[no-untyped-def]
    return [r["bit"] for body in recorder.bodies for r in json.loads(body)["reports"]
            if r["metric"] == metric]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_data_dir_follows_each_platforms_convention(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert user_data_dir() == tmp_path / "xdg"
    for unusable in ("", "  ", "relative/dir"):  # the XDG spec ignores relative paths
        monkeypatch.setenv("XDG_DATA_HOME", unusable)
        assert user_data_dir() == tmp_path / "home" / ".local" / "share"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert user_data_dir() == tmp_path / "home" / ".local" / "share"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert user_data_dir() == tmp_path / "home" / "Library" / "Application Support"
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert user_data_dir() == tmp_path / "local"
    monkeypatch.delenv("LOCALAPPDATA")
    assert user_data_dir() == tmp_path / "home" / "AppData" / "Local"


def test_the_default_namespace_is_the_collectors_origin() -> None:
    assert origin_namespace("https://Telemetry.Example.com/") == "telemetry.example.com"
    assert origin_namespace("http://telemetry.example.com:80/v1") == "telemetry.example.com"
    assert origin_namespace("https://telemetry.example.com:443") == "telemetry.example.com"
    assert origin_namespace("https://telemetry.example.com:8443") == "telemetry.example.com_8443"
    assert origin_namespace("http://127.0.0.1:5000") == "127.0.0.1_5000"
    assert origin_namespace("http://[::1]:5000") == "1_5000"
    for bad in ("", "not a url", "http://", None):
        with pytest.raises(InvalidParameterError):
            origin_namespace(bad)  # type: ignore[arg-type]
    for bad in ("", ".", "..", "a/b", "../x", "UPPER", "-x", "a" * 129):
        with pytest.raises(InvalidParameterError):
            check_namespace(bad)
    assert default_state_dir("myapp") == user_data_dir() / "deniable" / "myapp"


def test_a_default_reporter_keeps_its_state_in_the_user_data_dir(
        _private_data_home: Path) -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, metrics=METRICS) as reporter:
            reporter.report("dark_mode", True)
        state = _private_data_home / "deniable" / origin_namespace(url)
        assert state == default_state_dir(origin_namespace(url))
        # Private at every level it created: 0700 directories, 0600 files.
        for directory in (_private_data_home / "deniable", state):
            assert mode(directory) == 0o700
        for name in ("secret", "ledger.json", "lock"):
            assert mode(state / name) == 0o600
        secret = StateDir(state).secret()
        assert sent(recorder, "dark_mode") == [memo_bit(secret, "dark_mode", DARK, 1)]


def test_reporters_of_one_app_share_one_state(_private_data_home: Path) -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        # The one-report-per-period gate is off (it is shared too: with it, one report a day
        # in all), so that every call shows the answer the shared memo gives.
        first, second = (Reporter(url, metrics=METRICS, privacy=Privacy(one_per_period=False)),
                         Reporter(url, metrics=METRICS, privacy=Privacy(one_per_period=False)))
        for _ in range(20):
            first.report("feature_x_enabled", True)
            second.report("feature_x_enabled", True)
        assert first.close() and second.close()
        bits = sent(recorder, "feature_x_enabled")
        assert len(bits) == 40 and len(set(bits)) == 1
        with LongitudinalGuard(default_state_dir(origin_namespace(url))) as guard:
            spend = guard.stats()["feature_x_enabled"]
        assert spend.paid_values == 1 and spend.total_charged == DEFAULT.epsilon  # paid once


def test_a_restarted_default_reporter_keeps_one_report_per_period(
        _private_data_home: Path) -> None:
    # The period gate lives in the default state too: an app restarted within the day does not
    # report the metric again.
    with recording_collector(CATALOGUE) as (url, recorder):
        for _ in range(3):
            reporter = Reporter(url, metrics=METRICS)
            reporter.report("feature_x_enabled", True)
            reporter.report("feature_x_enabled", True)
            assert reporter.close()
        assert len(sent(recorder, "feature_x_enabled")) == 1


def test_in_memory_state_is_asked_for_by_name_and_warned_about(
        caplog: pytest.LogCaptureFixture, _private_data_home: Path) -> None:
    with pytest.raises(InvalidParameterError, match="memory"):
        LongitudinalGuard(None)  # type: ignore[arg-type]
    answers = set()
    restarts = 70  # "restarts" in memory: a new secret each time
    with caplog.at_level(logging.WARNING, logger="deniable.client"):
        for _ in range(restarts):
            with LongitudinalGuard(IN_MEMORY) as guard:
                answers.add(guard.perturb("feature_x_enabled", DEFAULT, True))
    assert answers == {0, 1}  # all 70 equal: (3/4)**70 + (1/4)**70 < 1.9e-9 (40 gave 1.0e-5)
    warnings = [r for r in caplog.records if "in memory only" in r.getMessage()]
    assert len(warnings) == restarts
    assert "last only as long as this process" in warnings[0].getMessage()
    with recording_collector(CATALOGUE) as (url, _):
        Reporter(url, metrics=METRICS, storage=Storage(privacy_dir=IN_MEMORY)).close()
    assert not (_private_data_home / "deniable").exists()  # nothing written anywhere


def test_an_unusable_data_dir_is_refused_not_silently_replaced_by_memory(
        _private_data_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = _private_data_home / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocker))
    with recording_collector(CATALOGUE) as (url, _):
        with pytest.raises(Exception, match="state directory"):
            Reporter(url, metrics=METRICS)


@pytest.mark.slow
def test_a_default_reporter_restarted_40_times_sends_the_same_answers(
        _private_data_home: Path) -> None:
    # Forty runs of an app, each a separate process with a default Reporter: the first four are
    # fresh interpreters started together (so they also race to create the secret), the other
    # 36 are forked one after another from a clean zygote that only imported the client. Every
    # run reports each value twice.
    def child(*args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "tests.client.restart_child", url, *args],
                                cwd=ROOT, env=os.environ.copy())

    with recording_collector(CATALOGUE) as (url, recorder):
        fresh = [child() for _ in range(4)]
        assert [process.wait(timeout=120) for process in fresh] == [0] * 4
        assert child("--runs", "36", "--fork").wait(timeout=300) == 0
        x, dark = sent(recorder, "feature_x_enabled"), sent(recorder, "dark_mode")
    assert len(x) == len(dark) == 2 * 40
    assert len(set(x)) == 1 and len(set(dark)) == 1
    secret = StateDir(default_state_dir(origin_namespace(url))).secret()
    assert x[0] == memo_bit(secret, "feature_x_enabled", DEFAULT, 1)
    assert dark[0] == memo_bit(secret, "dark_mode", DARK, 0)
    assert [p.name for p in (_private_data_home / "deniable").iterdir()] == [origin_namespace(url)]
