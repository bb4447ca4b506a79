"""Kind plugins for tests: a minimal installed distribution (``write_distribution``: a
``.dist-info`` directory that ``importlib.metadata`` discovers on ``sys.path`` or a
PYTHONPATH), and the objects its entry points may name, good and bad."""
from __future__ import annotations

from pathlib import Path

from deniable.client.kinds import Kind
from tests.client.kind_rating import Rating

DISTRIBUTION = "kind-rating-plugin"
RATING = Rating()
"""A ``Kind`` instance an entry point may name (``Rating`` itself is a zero-argument factory)."""


def write_distribution(directory: Path, entries: dict[str, str]) -> Path:
    """Write ``kind_rating_plugin-0.dist-info`` into ``directory``, its ``[deniable.kinds]``
    entry points ``name = module:attribute`` from ``entries``; return ``directory``."""
    info = directory / "kind_rating_plugin-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: 0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[deniable.kinds]\n{lines}")
    return directory


class Impostor(Rating):
    name = "boolean"


def impostor() -> Kind:
    """A factory of a kind that takes a built-in kind's name: refused, never registered."""
    return Impostor()


def broken() -> Kind:
    """A factory that fails."""
    raise RuntimeError("the plugin's own bug")


class Nameless(Rating):
    name = ["rating"]  # type: ignore[assignment]


def nameless() -> Kind:
    """A factory of a kind whose name is not a string."""
    return Nameless()
