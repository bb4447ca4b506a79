"""Kind plugins: metric kinds kept outside this package, registered by name at start-up.

A package ships a kind by naming it in the entry-point group ``deniable.kinds``::

    [project.entry-points."deniable.kinds"]
    rating = "mypkg.rating:KIND"        # a Kind instance, or a zero-argument factory

and an operator who does not package names it as ``module:attribute`` (the collector's and the
CLI's ``DENIABLE_KINDS=mypkg.rating:KIND,other:make``). ``load_plugins`` registers both with
``deniable.client.kinds.register``; the collector's app factory and the ``deniable`` command
call it at start, an app calls it before it declares a metric of such a kind.

Guarantees: a bad entry (its import fails, it is not a Kind, its name is a built-in kind's or
another kind's) raises ``PluginError`` naming the entry, before anything of it is registered;
a plugin never replaces a built-in kind; loading again is a no-op (each entry is imported and
its factory called once per process). The log line names the kinds and their entries only.
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from deniable.client import kinds
from deniable.client.errors import InvalidParameterError, PluginError
from deniable.client.kinds import Kind

GROUP = "deniable.kinds"
"""The entry-point group a package names its kinds in."""
SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
"""An operator's entry: ``module:attribute`` (dotted names on either side)."""

log = logging.getLogger("deniable.client")
_LOADED: dict[str, Kind] = {}
"""Each entry loaded in this process (by its description) and the kind it gave."""


@dataclass(frozen=True)
class _Entry:
    """One plugin entry: what to load, and how messages name it."""

    label: str
    load: Callable[[], object]


def split_specs(value: object, setting: str = "DENIABLE_KINDS") -> tuple[str, ...]:
    """The ``module:attribute`` entries of a setting: a string of entries separated by commas
    or spaces, or a list of them (also as JSON text); None or empty is none.

    Raises:
        PluginError: any other value, or an entry not of the form ``module:attribute``.
    """
    if value is None or value == "":
        return ()
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)  # a JSON list, as the collector's settings read it
        except ValueError:
            pass
    if isinstance(value, str):
        specs = tuple(s for s in re.split(r"[,\s]+", value) if s)
    elif isinstance(value, (list, tuple)) and all(isinstance(s, str) for s in value):
        specs = tuple(value)
    else:
        raise PluginError(f"{setting} must be module:attribute entries separated by commas. "
                          f"Got {value!r} instead.")
    for spec in specs:
        if not SPEC.match(spec):
            raise PluginError(f"{setting} entry {spec!r} must be module:attribute "
                              f"(e.g. mypkg.rating:KIND)")
    return specs


def load_plugins(specs: Sequence[str] = (), *, setting: str = "DENIABLE_KINDS",
                 group: str | None = GROUP) -> tuple[Kind, ...]:
    """Register the kinds of the entry points in ``group`` and of ``specs``, once each.

    Args:
        specs: ``module:attribute`` entries (``split_specs``), each a ``Kind`` or a
            zero-argument factory of one.
        setting: where ``specs`` came from, for messages (e.g. ``DENIABLE_KINDS``).
        group: the entry-point group to read (None: read none, only ``specs``).

    Returns:
        The kinds the entries name, in order (entry points first), registered now or before.

    Raises:
        PluginError: an entry that does not load or does not give a ``Kind``, or whose kind's
            name is a built-in kind's or another registered kind's; names the entry.
    """
    entries = list(_entry_points(group)) if group else []
    entries += [_spec_entry(spec, setting) for spec in split_specs(list(specs), setting)]
    found = []
    for entry in entries:
        kind = _LOADED.get(entry.label)
        if kind is None or kinds.REGISTRY.get(kind.name) is not kind:
            kind = _register(entry, kind or _kind_of(entry))
            _LOADED[entry.label] = kind
            log.info("kind plugin loaded: %s from %s", kind.name, entry.label)
        found.append(kind)
    return tuple(found)


def _entry_points(group: str) -> Iterable[_Entry]:
    for point in sorted(entry_points(group=group), key=lambda p: p.name):
        dist = f"{point.dist.name} {point.dist.version}" if point.dist else "no distribution"
        yield _Entry(f"'{point.name} = {point.value}' (entry point of {group}, {dist})",
                     point.load)


def _spec_entry(spec: str, setting: str) -> _Entry:
    return _Entry(f"'{spec}' ({setting})", EntryPoint(spec, spec, GROUP).load)


def _kind_of(entry: _Entry) -> Kind:
    """The kind an entry names: the object itself, or what its factory returns."""
    try:
        found = entry.load()
        if not isinstance(found, Kind) and callable(found):
            found = found()
    except Exception as exc:  # an import or factory error of the plugin's own code
        raise PluginError(f"kind plugin {entry.label} does not load: "
                          f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(found, Kind):
        raise PluginError(f"kind plugin {entry.label} must name a Kind or a zero-argument "
                          f"factory of one. Got a {type(found).__name__} instead.")
    return found


def _register(entry: _Entry, kind: Kind) -> Kind:
    """Register ``kind`` unless this very object is registered already (an app's module that
    calls ``register`` at import)."""
    name = getattr(kind, "name", None)
    if not isinstance(name, str):
        raise PluginError(f"kind plugin {entry.label} gives a kind with no name. Got "
                          f"{name!r} instead.")
    if name in kinds.BUILT_IN:
        raise PluginError(f"kind plugin {entry.label} names a kind {name!r}, a built-in "
                          f"kind's name: a plugin never replaces a built-in kind")
    if kinds.REGISTRY.get(name) is kind:
        return kind
    if name in kinds.REGISTRY:
        raise PluginError(f"kind plugin {entry.label} names a kind {name!r}, which another "
                          f"kind registered already has")
    try:
        return kinds.register(kind)
    except InvalidParameterError as exc:
        raise PluginError(f"kind plugin {entry.label} does not register: {exc}") from exc
