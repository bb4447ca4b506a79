"""The house checks that CI runs with the suite (docs/development.md): lint, the lockfile, the
documentation site and the import layers. Each tool comes from the `dev` extra."""
from __future__ import annotations

import os
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


def test_the_lock_pins_every_requirement_ci_installs_within_its_range() -> None:
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    lock = (ROOT / "requirements" / "ci.lock").read_text()
    assert not any(line.startswith(("--index-url", "--extra-index-url", "--find-links"))
                   for line in lock.splitlines()), "the lock names an index: use ./dev lock"
    pins = [Requirement(line) for line in lock.splitlines()
            if "==" in line and not line.startswith(("#", " "))]
    pinned = {canonicalize_name(pin.name): str(pin.specifier).removeprefix("==")
              for pin in pins}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in ("collector", "analysis", "dev"):
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    stale = []
    for requirement in wanted:
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        version = pinned.get(canonicalize_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            stale.append(f"{requirement} (locked: {version})")
        stale += [f"{requirement.name}[{extra}] (not locked)" for extra in requirement.extras
                  if canonicalize_name(extra) not in pinned]  # redis[hiredis]: hiredis
    assert stale == [], f"requirements/ci.lock is stale, refresh it with ./dev lock: {stale}"


def test_the_documentation_site_builds_with_no_broken_link(tmp_path: Path) -> None:
    done = run_tool("mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path))
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}"
    assert (tmp_path / "operations" / "index.html").is_file()


def test_imports_keep_to_the_layers_lazy_imports_included(tmp_path: Path) -> None:
    # import-linter walks the package in src/ (the editable install's hook it cannot follow).
    done = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache",
                           "--no-logo", str(ROOT / "pyproject.toml")],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"an import breaks the layers in pyproject.toml " \
                                 f"([tool.importlinter]):\n{done.stdout}{done.stderr}"
    assert "2 kept, 0 broken" in done.stdout


def test_the_layers_have_no_exception_and_every_package_is_checked_for_cycles() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = {c["type"]: c for c in config["contracts"]}
    assert contracts["layers"]["layers"] == [
        "deniable.cli", "deniable.audit", "deniable.collector | deniable.analysis",
        "deniable.core", "deniable.client"]
    assert all("ignore_imports" not in c for c in config["contracts"])
    assert contracts["acyclic_siblings"]["ancestors"] == ["deniable"]


def test_the_cycle_contract_fails_on_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    import tomllib

    # A package shaped like ours (a sub-package of two modules), with the one cycle hidden
    # behind a function-level import, checked by the cycle contract of pyproject.toml.
    package = tmp_path / "src" / "deniable" / "collector"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "api.py").write_text("from deniable.collector import auth\n")
    (package / "auth.py").write_text("def guard():\n    from deniable.collector import api\n")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    cycles = next(c for c in config["contracts"] if c["type"] == "acyclic_siblings")
    (tmp_path / ".importlinter").write_text(
        f"[importlinter]\nroot_package = deniable\n\n"
        f"[importlinter:contract:cycles]\nname = {cycles['name']}\ntype = acyclic_siblings\n"
        f"ancestors = {' '.join(cycles['ancestors'])}\n")
    done = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache",
                           "--no-logo"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "src")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "No cycles are allowed in deniable.collector" in done.stdout


def test_no_collector_module_reads_the_flat_config_table() -> None:
    # One typed source (issue 31): the collector's modules read Settings (settings_of /
    # current_settings), never Flask's flat app.config; only the factory fills it, and
    # settings.py converts it. Any spelling of the read counts: app.config[...],
    # current_app.config.get(...), or the table bound to a name first.
    import re

    reads = re.compile(r"\.config\s*(\[|\.get\b|\)|$|\s*\n)|\bconfig\s*=\s*\w+\.config\b",
                       re.MULTILINE)
    collector = ROOT / "src" / "deniable" / "collector"
    found = {path.name: [m.group(0) for m in reads.finditer(path.read_text())]
             for path in sorted(collector.glob("*.py")) if path.name not in ("app.py", "settings.py")}
    assert {name: hits for name, hits in found.items() if hits} == {}
    # The scan sees a read when there is one (the factory's own lines).
    assert reads.search((collector / "app.py").read_text())
