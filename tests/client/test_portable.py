"""The client without ``fcntl`` (as on Windows): it imports, reports, keeps its privacy state
and locks it, with ``sys.modules['fcntl'] = None`` in a child process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deniable.client import locking

NO_FCNTL = "import sys; sys.modules['fcntl'] = None; sys.modules['msvcrt'] = None\n"


def run(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", NO_FCNTL + textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_client_imports_and_reports_without_fcntl(live_collector, tmp_path: Path) -> None:
    state = tmp_path / "state"
    out = run("""
        import json, sys
        from deniable.client import Reporter, locking
        assert locking.mechanism() == "directory"
        with Reporter(sys.argv[1], metrics={"feature_x_enabled": "rr:1/2:1/2"},
                      privacy_dir=sys.argv[2], one_per_period=False) as reporter:
            for _ in range(5):
                reporter.report("feature_x_enabled", True)
            assert reporter.flush(timeout=10)
            print(json.dumps({"sent": reporter.stats().sent,
                              "handed": reporter.ledger()["feature_x_enabled"].handed_n}))
    """, live_collector.url, str(state))
    assert json.loads(out) == {"sent": 5, "handed": 5}
    assert (state / "secret").stat().st_size == 32
    assert "feature_x_enabled" in (state / "ledger.json").read_text()
    assert not any(p.name.endswith(".d") for p in state.iterdir())  # every lock released


@pytest.mark.slow
def test_the_fallback_lock_excludes_other_processes(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    child = """
        import os, sys, time
        from pathlib import Path
        from deniable.client.locking import exclusive
        counter = Path(sys.argv[1])
        for _ in range(100):
            with exclusive(str(counter) + ".lock"):
                value = int(counter.read_text())
                time.sleep(0.0005)  # widen the read-modify-write window
                counter.write_text(str(value + 1))
    """
    procs = [subprocess.Popen([sys.executable, "-c", NO_FCNTL + textwrap.dedent(child),
                               str(counter)]) for _ in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert counter.read_text() == "200"


def test_the_fallback_breaks_a_dead_holders_lock_and_never_a_live_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locking, "_module", lambda name: None)
    assert locking.mechanism() == "directory"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    lock_dir = tmp_path / "lock.d"
    lock_dir.mkdir()
    (lock_dir / "owner").write_text(f"{int(dead.stdout)} feedface")
    with locking.exclusive(tmp_path / "lock"):  # the dead holder's lock is broken
        assert (lock_dir / "owner").read_text().startswith(f"{os.getpid()} ")
    assert not lock_dir.exists() and list(tmp_path.iterdir()) == []
    lock_dir.mkdir()
    (lock_dir / "owner").write_text(f"{os.getppid()} cafe")  # alive: never broken
    assert locking._break_if_stale(lock_dir) is False and lock_dir.exists()
    os.unlink(lock_dir / "owner")  # no owner yet and young: taken as held
    assert locking._break_if_stale(lock_dir) is False and lock_dir.exists()
