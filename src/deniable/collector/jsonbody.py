"""JSON request bodies: parsed, and checked for an object that repeats a key.

Shared by the ingest endpoint (ingest.py) and every other route's body parser (params.py).
"""
from __future__ import annotations

import json

import orjson

from deniable.client.errors import Problem
from deniable.collector.errors import APIError


def parse_json(body: bytes) -> object:
    """The body's JSON; 400 if it is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise APIError(400, "the body is not valid JSON",
                       [Problem("", str(exc).split(":")[0])]) from exc


class RepeatedKeyError(ValueError):
    """A JSON object names the same key twice (the parser would keep only the last)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_repeats(pairs: list[tuple[str, object]]) -> dict[str, object]:
    found: dict[str, object] = {}
    for key, value in pairs:
        if key in found:
            raise RepeatedKeyError(key)
        found[key] = value
    return found


def repeated_key(body: bytes) -> str | None:
    """The first key that some object of a valid JSON ``body`` repeats, or None.

    orjson (and ``json``) silently keep the last of repeated keys, so ``{"name": "ok", ...,
    "name": "other"}`` would act on a name no reviewer saw. Ingest has its own exact check
    for batches (ingest.repeats_a_key); every other JSON body is checked here.
    """
    try:
        json.loads(body, object_pairs_hook=_no_repeats)
    except RepeatedKeyError as exc:
        return exc.key
    return None
