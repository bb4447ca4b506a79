"""One distribution, `deniable`: the client installs light, and a built wheel works."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("flask", "redis", "numpy", "werkzeug", "orjson", "rich")


@pytest.mark.slow
def test_the_client_imports_nothing_heavy() -> None:
    code = ("import sys, deniable.client, deniable.client.reporter, deniable.client.wire;"
            "from deniable.client import Reporter;"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_built_wheel_runs_the_client_with_nothing_but_requests(
        tmp_path: Path, source_tree_build: None) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True)
    [wheel] = wheels.glob("deniable-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False, system_site_packages=False)
    python = env_dir / "bin" / "python"
    # Install the wheel alone, with this interpreter's requests on the path as its one dependency.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(tmp_path / "site"), str(wheel)], check=True,
                   capture_output=True)
    import requests
    import urllib3
    import idna
    import certifi
    import charset_normalizer

    deps = tmp_path / "deps"  # requests and its own dependencies, and nothing else
    for module in (requests, urllib3, idna, certifi, charset_normalizer):
        package = Path(module.__file__).parent
        shutil.copytree(package, deps / package.name)
    path = f"{tmp_path / 'site'}:{deps}"
    code = ("import sys; from deniable.client import Reporter, RandomizedResponse;"
            "rr = RandomizedResponse.from_id('rr:1/2:1/2'); assert rr.perturb(1) in (0, 1);"
            f"assert not any(m in sys.modules for m in {HEAVY!r}); print(rr.epsilon)")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": path}, check=True)
    assert out.stdout.strip() == "1.0986122886681098"
    collector = tmp_path / "site" / "deniable" / "collector"
    assert (collector / "ingest.lua").is_file()
    assert (collector / "templates" / "dashboard.html").is_file()  # the dashboard's files
    assert (collector / "static" / "dashboard.js").is_file()


@pytest.mark.slow
def test_the_client_type_checks_strictly(tmp_path: Path) -> None:
    # The src layout: mypy finds the package in src/ (the editable install's hook it cannot follow).
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--namespace-packages",
         "--explicit-package-bases", "--cache-dir", str(tmp_path / ".mypy_cache"),
         "-p", "deniable.client"],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "MYPYPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stdout[-3000:]
