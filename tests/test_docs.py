"""The README documents every setting the code reads."""
from __future__ import annotations

import re
from pathlib import Path

from deniable.collector.settings import DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_every_collector_setting_is_in_the_readme() -> None:
    missing = [name for name in DEFAULTS if f"`DENIABLE_{name}`" not in README]
    assert missing == []


def test_every_environment_variable_the_code_reads_is_in_the_readme() -> None:
    code = "".join(p.read_text() for folder in ("client", "collector", "analysis", "cli", "deploy")
                   for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".conf", ""))
    named = set(re.findall(r"DENIABLE_[A-Z_]+[A-Z]", code))
    named |= {f"DENIABLE_{n}" for n in re.findall(r'env_default\("([A-Z_]+)"', code)}
    undocumented = sorted(n for n in named if n not in README and n != "DENIABLE_")
    assert undocumented == []


def readme_settings_table() -> set[str]:
    """Every ``DENIABLE_*`` named in a row of the README's settings table."""
    section = README.split("### Settings", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `DENIABLE_")]
    return set(re.findall(r"DENIABLE_[A-Z_]+[A-Z]", "\n".join(rows)))


def test_operations_md_links_the_one_complete_settings_table() -> None:
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert "(../README.md#settings)" in operations
    table = readme_settings_table()
    missing = [name for name in DEFAULTS if f"DENIABLE_{name}" not in table]
    assert missing == []  # rate limits and proxy settings included


def test_every_setting_the_docs_and_deploy_files_name_exists() -> None:
    """No stale or misspelt setting in docs/ or deploy/ (e.g. one the code stopped reading)."""
    known = readme_settings_table() | {"DENIABLE_COLLECTOR_URL", "DENIABLE_READ_TOKEN",
                                       "DENIABLE_REDIS_SERVER"}
    files = [*(ROOT / "docs").glob("*.md"), *(p for p in (ROOT / "deploy").rglob("*")
                                             if p.is_file())]
    unknown = sorted({f"{path.relative_to(ROOT)}: {name}" for path in files
                      for name in re.findall(r"DENIABLE_[A-Z_]+[A-Z]", path.read_text())
                      if name not in known})
    assert unknown == []
