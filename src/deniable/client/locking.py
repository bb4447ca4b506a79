"""An exclusive, blocking lock on a file, on every platform, from the standard library only.

``exclusive(path)`` holds the lock for the ``with`` block. It serializes threads, processes and
forked children alike (each call opens its own descriptor). Which mechanism, in this order:

- POSIX (Linux, macOS, BSD): ``fcntl.flock`` on ``path``. The kernel releases it when the
  holder's descriptor closes, so a crashed holder never leaves it taken.
- Windows: ``msvcrt.locking`` of the file's first byte (``LK_LOCK``, retried until granted).
  Windows releases it when the holder's handle closes, including after a crash.
- Neither module (a platform without both, or a test that hides them): a lock *directory*
  ``<path>.d`` created with ``os.mkdir`` (atomic everywhere), holding an ``owner`` file with
  the holder's pid and a random token. A holder that died (POSIX: its pid no longer exists)
  is detected and its directory renamed away, then checked to be the dead holder's and not a
  newer one's (else put back). A directory without an owner file is taken as held until it is
  ``STALE_SECONDS`` old (a crash between ``mkdir`` and writing the owner).

Nothing is imported from ``fcntl`` or ``msvcrt`` at module level: the client imports and works
where either is missing.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

STALE_SECONDS = 30.0
"""Seconds after which a fallback lock directory without an owner file is taken as left by a
crash between its ``mkdir`` and the owner's write."""
_FILE_MODE = 0o600
_POLL_SECONDS = (0.001, 0.05)
"""The fallback's wait between attempts: from the first value, doubling, up to the second."""


def _module(name: str) -> ModuleType | None:
    """``name`` imported, or None where the platform lacks it (or a test set it to None)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def mechanism() -> str:
    """The mechanism ``exclusive`` uses here: ``"flock"``, ``"msvcrt"`` or ``"directory"``."""
    if _module("fcntl") is not None:
        return "flock"
    if _module("msvcrt") is not None:
        return "msvcrt"
    return "directory"


@contextlib.contextmanager
def exclusive(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created 0600 if missing) for the block; blocks until
    it is free.

    Raises:
        OSError: the lock file (or directory) cannot be created.
    """
    fcntl = _module("fcntl")
    if fcntl is not None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, _FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock
        return
    msvcrt = _module("msvcrt")
    if msvcrt is not None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), _FILE_MODE)
        try:
            while True:
                try:
                    os.lseek(fd, 0, os.SEEK_SET)
                    msvcrt.locking(fd, msvcrt.LK_LOCK, 1)  # gives up after ~10 s: go again
                    break
                except OSError:
                    continue
            try:
                yield
            finally:
                os.lseek(fd, 0, os.SEEK_SET)
                msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        finally:
            os.close(fd)
        return
    with _directory_lock(Path(f"{os.fspath(path)}.d")):
        yield


@contextlib.contextmanager
def _directory_lock(lock_dir: Path) -> Iterator[None]:
    """The fallback: hold ``lock_dir`` (see the module docstring)."""
    owner = f"{os.getpid()} {secrets.token_hex(16)}"
    wait = _POLL_SECONDS[0]
    while True:
        try:
            os.mkdir(lock_dir, 0o700)
        except FileExistsError:
            if not _break_if_stale(lock_dir):
                time.sleep(wait)
                wait = min(wait * 2, _POLL_SECONDS[1])
            continue
        break
    try:
        fd = os.open(lock_dir / "owner", os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
        try:
            os.write(fd, owner.encode())
        finally:
            os.close(fd)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_dir / "owner")
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(lock_dir)


def _owner(lock_dir: Path) -> str | None:
    try:
        return (lock_dir / "owner").read_text(encoding="ascii")
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None


def _break_if_stale(lock_dir: Path) -> bool:
    """Remove ``lock_dir`` if its holder is gone; True if it was removed (go again at once)."""
    seen = _owner(lock_dir)
    if seen is None:
        try:
            age = time.time() - os.stat(lock_dir).st_mtime
        except FileNotFoundError:
            return True  # released meanwhile
        if age < STALE_SECONDS:
            return False
    elif _alive(seen):
        return False
    tomb = lock_dir.with_name(f"{lock_dir.name}.stale.{secrets.token_hex(8)}")
    try:
        os.rename(lock_dir, tomb)
    except OSError:
        return True  # released or broken by another waiter meanwhile: go again
    if _owner(tomb) != seen:  # a new holder took it between our read and the rename
        try:
            os.rename(tomb, lock_dir)
        except OSError:
            pass
        return False
    with contextlib.suppress(OSError):
        if seen is not None:
            os.unlink(tomb / "owner")
        os.rmdir(tomb)
    return True


def _alive(owner: str) -> bool:
    """Whether the process named by an owner line may still hold the lock: its pid exists
    (POSIX). Where that cannot be asked, or the line is not understood: True (never break)."""
    try:
        pid = int(owner.split()[0])
    except (IndexError, ValueError):
        return True
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # e.g. PermissionError: it exists, owned by another user
    return True
