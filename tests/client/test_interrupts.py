"""Ctrl-C in the middle of report() must never leave the client unable to close."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("interrupted_child.py")


@pytest.mark.slow
def test_a_reporter_closes_after_being_interrupted_thousands_of_times() -> None:
    try:
        done = subprocess.run([sys.executable, str(CHILD)], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the reporter hung after KeyboardInterrupts inside report()")
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) > 100  # it really was interrupted, many times
