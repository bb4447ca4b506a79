"""Request input: the one parser for JSON bodies, time ranges and whole-number query parameters,
shared by the API, the admin API and the dashboard (the ingest endpoint has its own fast path,
ingest.py).

Every failure is an ``APIError`` that names the offending field or parameter: 400 for a body
that is not JSON or repeats a key, 415 for another media type, 422 for a bad parameter. No
input reaches date arithmetic, ``int()`` or Redis unchecked:

- times must be ASCII ISO 8601 between ``EARLIEST`` and ``LATEST`` (UTC), so no range, period
  alignment or default ``from`` can overflow ``datetime``;
- whole numbers must be ASCII digits (``str.isdigit`` alone takes "²" and "٣"), and short.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from flask import request

from deniable.client.errors import Problem
from deniable.client.wire import MEDIA_TYPE
from deniable.collector.errors import APIError
from deniable.collector.jsonbody import parse_json, repeated_key
from deniable.collector.settings import current_settings

EARLIEST = datetime(2000, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9000, 1, 1, tzinfo=timezone.utc)
"""Times a query may name: [EARLIEST, LATEST] in UTC. Counts start long after 2000, and
9000 leaves room for any range and week alignment below ``datetime.max``."""
MAX_DIGITS = 9
"""Longest whole number a query parameter may hold, in digits."""


def json_body() -> object:
    """The request's parsed JSON body.

    Raises:
        APIError: 415 if it is not ``application/json``; 400 if malformed or if an object in
            it repeats a key.
    """
    if request.mimetype != MEDIA_TYPE:
        raise APIError(415, f"the body must be {MEDIA_TYPE}")
    body = request.get_data(cache=False)
    doc = parse_json(body)
    key = repeated_key(body)
    if key is not None:
        pointer = "/" + key.replace("~", "~0").replace("/", "~1")
        raise APIError(400, "the body repeats a JSON key; each key may appear once per object",
                       [Problem(pointer, "appears more than once in its object")])
    return doc


def time_range(default_days: int = 7) -> tuple[datetime, datetime]:
    """The ``from``/``to`` query range, in UTC: by default the ``default_days`` up to now.

    Raises:
        APIError: 422 naming the parameter, for a bad time, one outside [EARLIEST, LATEST],
            an empty or a too long range.
    """
    end = parse_time("to", datetime.now(timezone.utc))
    start = parse_time("from", end - timedelta(days=default_days))
    if start >= end:
        raise APIError(422, "'from' must come before 'to'", parameters={"from": "after 'to'"})
    limit = current_settings().limits.counts_max_days
    if end - start > timedelta(days=limit):
        raise APIError(422, "the range is too long",
                       parameters={"from": f"at most {limit} days before 'to'"})
    return start, end


def parse_time(parameter: str, default: datetime) -> datetime:
    """The query parameter as an aware UTC time (UTC if it names no offset), or ``default``.

    Raises:
        APIError: 422 naming ``parameter``: not ASCII ISO 8601, or outside
            [EARLIEST, LATEST].
    """
    raw = request.args.get(parameter)
    if not raw:
        return default
    try:
        if not raw.isascii():
            raise ValueError("not ASCII")
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise APIError(422, f"'{parameter}' is not an ISO 8601 time",
                       parameters={parameter: "must be an ISO 8601 time"}) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    # Aware comparisons never overflow, even for year 1 with an offset; conversion might.
    if not EARLIEST <= moment <= LATEST:
        raise APIError(422, f"'{parameter}' is out of range",
                       parameters={parameter: f"must lie between {EARLIEST:%Y-%m-%d} and "
                                              f"{LATEST:%Y-%m-%d} (UTC)"})
    return moment.astimezone(timezone.utc)


def whole_number(parameter: str, default: int, low: int, high: int) -> int:
    """The query parameter as a whole number in [low, high], or ``default`` if absent.

    Raises:
        APIError: 422 naming ``parameter``: not ASCII digits, too long, or out of range.
    """
    raw = request.args.get(parameter)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= MAX_DIGITS
            and low <= int(raw) <= high):
        raise APIError(422, f"'{parameter}' must be a whole number in [{low}, {high}]",
                       parameters={parameter: f"a whole number in [{low}, {high}]"})
    return int(raw)
