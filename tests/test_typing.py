"""Every public name of deniable.client is visible to mypy and pyright in strict mode, the
sample app (examples/daily_cli.py) type-checks under both, and a typo in a method name fails
both checks."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import deniable.client

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "examples" / "daily_cli.py"
TYPO = '''\
from deniable.client import Reporter

reporter = Reporter("https://telemetry.example.com", metrics={"dark_mode": "rr:3/4:1/2"})
reporter.reprot("dark_mode", True)
'''
NAMES = "import deniable.client as c\n\n" + "".join(
    f"reveal_type(c.{name})\n" for name in deniable.client.__all__)


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the three files to check; the checkers find ``deniable`` in ``src/``."""
    folder = tmp_path_factory.mktemp("typing")
    shutil.copy(SAMPLE, folder / "daily_cli.py")
    (folder / "typo.py").write_text(TYPO)
    (folder / "names.py").write_text(NAMES)
    return folder


@pytest.mark.slow
def test_mypy_strict(checked: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--namespace-packages",
         "--explicit-package-bases", "--cache-dir", str(checked / ".mypy_cache"),
         "daily_cli.py", "typo.py", "names.py"],
        cwd=checked, capture_output=True, text=True, env={**os.environ, "MYPYPATH": str(ROOT / "src")})
    lines = done.stdout.splitlines()
    errors = [line for line in lines if ": error:" in line]
    assert errors == ['typo.py:4: error: "Reporter" has no attribute "reprot"; maybe "report"?  '
                      '[attr-defined]'], done.stdout[-3000:]
    revealed = [line for line in lines if "Revealed type is" in line]
    assert len(revealed) == len(deniable.client.__all__)
    vague = [line for line in revealed if re.search(r'"(builtins\.object|Any)"', line)]
    assert vague == []


@pytest.mark.slow
def test_pyright_strict(checked: Path) -> None:
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent)) or \
        pytest.fail("pyright is not installed: ./dev setup installs it (the dev extra)")
    (checked / "pyrightconfig.json").write_text(json.dumps({
        "typeCheckingMode": "strict", "extraPaths": [".", str(ROOT / "src")], "pythonVersion": "3.11",
        "include": ["daily_cli.py", "typo.py", "names.py"]}))
    done = subprocess.run([pyright, "--outputjson", "--pythonpath", sys.executable],
                          cwd=checked, capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    found = [(Path(d["file"]).name, d["severity"], d.get("rule", ""), d["message"])
             for d in report["generalDiagnostics"]]
    errors = [f for f in found if f[1] == "error"]
    assert {f[0] for f in errors} == {"typo.py"}, found
    assert any('"reprot"' in f[3] for f in errors)
    revealed = [f[3] for f in found if f[0] == "names.py" and f[3].startswith("Type of")]
    assert len(revealed) == len(deniable.client.__all__), found
    assert [r for r in revealed if re.search(r'is "(object|Unknown|Any)"', r)] == []
