"""The release files: one version everywhere, an sdist that builds a working client, and an npm
tarball that installs into an empty Node project and imports (what ``./dev package`` checks
with real installs from the registries)."""
from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import deniable.client

ROOT = Path(__file__).resolve().parent.parent
SMOKE = """\
import sys
import deniable.client as c
r = c.Reporter("http://127.0.0.1:9", metrics={"dark_mode": "rr:3/4:1/2"}, privacy_dir=c.IN_MEMORY)
r.report("dark_mode", True)
assert r.stats().queued == 1
r.close(timeout=0)
print(c.__version__)
"""


def test_one_version_everywhere() -> None:
    version = deniable.client.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert importlib.metadata.version("deniable") == version
    assert json.loads((ROOT / "web" / "package.json").read_text())["version"] == version
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(r"^## (\S+)", changelog, re.M).group(1) == version  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_sdist_builds_a_client_that_works(
        tmp_path: Path, source_tree_build: None) -> None:
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir",
                    str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    [sdist] = (tmp_path / "dist").glob("deniable-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {Path(n).relative_to(Path(n).parts[0]).as_posix() for n in archive.getnames()
                 if len(Path(n).parts) > 1}
    assert {"src/deniable/client/py.typed", "src/deniable/collector/ingest.lua", "src/deniable/collector/templates/dashboard.html",
            "src/deniable/audit/web_sampler.mjs",
            "pyproject.toml", "README.md"} <= names
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(tmp_path / "site"), str(sdist)],
                   check=True, capture_output=True)
    import certifi
    import charset_normalizer
    import idna
    import requests
    import urllib3

    deps = tmp_path / "deps"  # requests and its own dependencies, and nothing else
    for module in (requests, urllib3, idna, certifi, charset_normalizer):
        package = Path(module.__file__).parent  # type: ignore[arg-type]
        shutil.copytree(package, deps / package.name)
    out = subprocess.run([sys.executable, "-I", "-c",
                          f"import sys; sys.path[:0] = {[str(tmp_path / 'site'), str(deps)]!r}\n"
                          + SMOKE], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == deniable.client.__version__


@pytest.mark.slow
def test_the_npm_tarball_installs_into_an_empty_project(tmp_path: Path) -> None:
    web = ROOT / "web"
    if not (web / "dist" / "index.js").is_file():
        pytest.fail("web/dist is not built: run the web client's build (./dev test does)")
    npm = shutil.which("npm") or pytest.fail("npm is needed: ./dev test installs it")
    # --ignore-scripts: pack the dist/ that ./dev test built; npm's `prepare` would rebuild it in place
    # under tests reading it in parallel (tests/e2e/test_web_install.py covers `prepare`).
    packed = subprocess.run([npm, "pack", "--silent", "--ignore-scripts", "--pack-destination",
                             str(tmp_path)],
                            cwd=web, check=True, capture_output=True, text=True)
    tarball = tmp_path / packed.stdout.strip().splitlines()[-1]
    project = tmp_path / "app"
    project.mkdir()
    (project / "package.json").write_text('{"name": "app", "private": true, "type": "module"}')
    subprocess.run([npm, "install", "--offline", "--no-audit", "--no-fund", "--silent",
                    str(tarball)], cwd=project, check=True, capture_output=True)
    script = """
        const m = await import("deniable-client");
        const all = await import("deniable-client/all");
        const n = await import("deniable-client/node");
        console.log([typeof m.Reporter, typeof all.Reporter, typeof n.nodeStorage].join(" "));
    """
    out = subprocess.run(["node", "--input-type=module", "-e", script], cwd=project,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "function function function", out.stderr[-2000:]
