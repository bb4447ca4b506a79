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
