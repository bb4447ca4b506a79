"""Imports point one way, checked from the source (every import, lazy ones inside functions too,
and dynamic ``import_module`` calls, which import-linter cannot see): the client imports nothing
of ours; the collector and the analysis import only the client and core, never each other
(tests/test_house.py runs import-linter for the whole order)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "deniable"
PACKAGES = ("client", "core", "collector", "analysis", "audit", "cli")


def imported_packages(package: str) -> dict[str, list[str]]:
    """Our package -> the ``file:line`` of every import of it in ``package``'s source."""
    found: dict[str, list[str]] = {}
    for path in sorted((SRC / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):  # walks function bodies: lazy imports count
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                names = [f"deniable.{package}"]  # relative: within the package
            elif isinstance(node, ast.Call) and _dynamic_import(node):
                names = [node.args[0].value]  # type: ignore[attr-defined]
            for name in names:
                parts = name.split(".")
                if parts[0] == "deniable" and len(parts) > 1 and parts[1] in PACKAGES:
                    found.setdefault(parts[1], []).append(
                        f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    found.pop(package, None)
    return found


def _dynamic_import(call: ast.Call) -> bool:
    """``importlib.import_module("...")`` or ``__import__("...")`` with a constant name."""
    func = call.func
    named = (isinstance(func, ast.Name) and func.id in ("__import__", "import_module")) or \
        (isinstance(func, ast.Attribute) and func.attr == "import_module")
    return named and bool(call.args) and isinstance(call.args[0], ast.Constant) \
        and isinstance(call.args[0].value, str)


def test_the_walker_sees_lazy_imports(tmp_path: Path) -> None:
    (tmp_path / "lazy.py").write_text(
        "def f():\n    from deniable.analysis.x import y\n"
        "    return __import__('deniable.cli.report')\n")
    global ROOT, SRC
    saved, ROOT, SRC = (ROOT, SRC), tmp_path.parent, tmp_path.parent
    try:
        found = imported_packages(tmp_path.name)
    finally:
        ROOT, SRC = saved
    assert sorted(found) == ["analysis", "cli"]


def test_the_client_imports_nothing_of_ours() -> None:
    assert imported_packages("client") == {}


def test_the_packages_are_all_walked() -> None:
    assert all((SRC / package / "__init__.py").is_file() for package in PACKAGES)
    assert set(imported_packages("cli")) >= {"analysis", "collector", "audit"}


def test_core_imports_only_the_client() -> None:
    assert set(imported_packages("core")) <= {"client"}


def test_the_collector_and_the_analysis_import_only_the_client_and_core() -> None:
    collector = imported_packages("collector")
    analysis = imported_packages("analysis")
    assert "analysis" not in collector, f"the collector imports the analysis: {collector['analysis']}"
    assert "collector" not in analysis, f"the analysis imports the collector: {analysis['collector']}"
    assert set(collector) <= {"client", "core"} and set(analysis) <= {"client", "core"}
