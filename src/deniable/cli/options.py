"""Parsing helpers shared by the subcommands."""
from __future__ import annotations

import argparse
import os
from datetime import datetime, timezone


def iso_time(text: str) -> datetime:
    """An ISO 8601 time; naive times are UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def env_default(name: str, fallback: str | None = None) -> str | None:
    """The value of DENIABLE_<name>, else ``fallback``."""
    return os.environ.get(f"DENIABLE_{name}", fallback)


def confidence_level(text: str) -> float:
    """A confidence level strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {value}")
    return value
