"""The house checks that CI runs with the suite (docs/development.md): lint, the lockfile, the
documentation site and the import layers. Each tool comes from the `dev` extra."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <tool> ...`` from the venv at the repository root."""
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_the_tree_passes_the_lint_configuration() -> None:
    done = run_tool("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert done.returncode == 0, f"ruff check . found (fix, or see docs/development.md):\n" \
                                 f"{done.stdout}{done.stderr}"
