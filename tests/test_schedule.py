"""The xdist schedule (tests/schedule.py): the heaviest files go first, nothing is dropped, a
file's tests stay together and in order, and every file it names exists."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from tests.schedule import HEAVIEST, heaviest_first

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class FakeItem:
    nodeid: str


def test_every_file_named_heaviest_exists_once() -> None:
    assert [path for path in HEAVIEST if not (ROOT / path).is_file()] == []
    assert len(set(HEAVIEST)) == len(HEAVIEST)


def test_the_heaviest_files_come_first_and_the_rest_by_their_number_of_tests() -> None:
    light, many, heavy, heavier = "tests/a.py", "tests/b.py", HEAVIEST[1], HEAVIEST[0]
    ids = [f"{light}::t1", f"{heavy}::t1", f"{many}::t1", f"{heavier}::t1", f"{many}::t2",
           f"{heavy}::t2", f"{many}::t3"]
    items = [FakeItem(nodeid) for nodeid in ids]
    heaviest_first(cast(list[pytest.Item], items))
    assert [item.nodeid for item in items] == [
        f"{heavier}::t1", f"{heavy}::t1", f"{heavy}::t2",
        f"{many}::t1", f"{many}::t2", f"{many}::t3", f"{light}::t1"]
