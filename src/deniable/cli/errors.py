"""The CLI's error root: a command could not do its job (exit status 1)."""
from __future__ import annotations

from deniable.client.errors import DeniableError


class CLIError(DeniableError):
    """A command could not do its job; the message says why. Exit status 1."""
