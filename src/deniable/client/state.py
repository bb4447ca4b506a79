"""The on-device privacy state directory: the device secret and the ledger file.

Where it lives (``default_state_dir``): an app may name any directory; by default it is the
platform's per-user data directory, following platformdirs' conventions without depending on
it, under a ``deniable`` folder, one sub-directory per namespace::

    Linux, BSD   $XDG_DATA_HOME/deniable/<namespace>    (~/.local/share if unset or relative)
    macOS        ~/Library/Application Support/deniable/<namespace>
    Windows      %LOCALAPPDATA%\\deniable\\<namespace>

A Reporter's namespace is its collector's origin (``origin_namespace``: host, plus the port
if it is not the scheme's default), or any name the app passes. ``IN_MEMORY`` asks for no
directory at all (memoization and budgets then last one process).

Layout (every file 0600, the directory created 0700)::

    <state dir>/secret        32 random bytes: the key every memoized answer is derived from
    <state dir>/ledger.json   privacy spent per metric (see deniable.client.budget)
    <state dir>/lock          an empty file, locked around every read-modify-write
                              (``deniable.client.locking``: flock, msvcrt or a lock directory)

Guarantees:
- The secret is created once, atomically (written to a temporary file, fsynced, then
  hard-linked into place, which fails if another process won the race): every process sharing
  the directory uses the same secret, and a crash never leaves a half-written secret.
- The ledger is replaced atomically (temporary file, fsync, ``os.replace``, fsync of the
  directory): after a crash it is either the old or the new document, never a mix.
- ``locked()`` takes an exclusive lock on a freshly opened descriptor (``flock`` on POSIX,
  ``msvcrt.locking`` on Windows, a lock directory elsewhere: ``deniable.client.locking``), so
  threads, other processes and forked children sharing the directory are serialized.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from deniable.client.errors import InvalidParameterError, PrivacyStateError
from deniable.client.locking import exclusive
from deniable.client.memo import SECRET_BYTES, check_secret, new_secret

SECRET_FILE = "secret"
LEDGER_FILE = "ledger.json"
LOCK_FILE = "lock"
_FILE_MODE = 0o600
_DIR_MODE = 0o700
_BINARY = getattr(os, "O_BINARY", 0)
"""Windows opens files in text mode unless asked: the secret is bytes."""

IN_MEMORY = ":memory:"
"""Pass as the state directory to keep the device secret and the ledger in memory only."""

APP_FOLDER = "deniable"
"""The folder under the per-user data directory that holds every namespace's state."""

_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def user_data_dir() -> Path:
    """The platform's per-user data directory (platformdirs' ``user_data_dir`` base).

    Linux and other POSIX systems: ``$XDG_DATA_HOME`` if set to an absolute path (the XDG
    spec ignores relative ones), else ``~/.local/share``. macOS:
    ``~/Library/Application Support``. Windows: ``%LOCALAPPDATA%`` (else
    ``~/AppData/Local``).

    Raises:
        PrivacyStateError: the home directory cannot be determined.
    """
    try:
        if sys.platform == "win32":
            local = os.environ.get("LOCALAPPDATA", "").strip()
            return Path(local) if local else Path.home() / "AppData" / "Local"
        if sys.platform == "darwin":
            return Path.home() / "Library" / "Application Support"
        xdg = os.environ.get("XDG_DATA_HOME", "").strip()
        return Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"
    except (RuntimeError, KeyError, OSError) as exc:
        raise PrivacyStateError(
            "cannot find the per-user data directory for the privacy state (no home "
            "directory?): pass privacy_dir= a private, writable directory") from exc


def origin_namespace(collector_url: str) -> str:
    """The namespace of a collector: its host, lowercased, then ``_<port>`` if the port is
    not the scheme's default, e.g. ``telemetry.example.com`` or ``127.0.0.1_8000``.

    The scheme and path are left out, so moving a collector from http to https keeps the
    device's state.

    Raises:
        InvalidParameterError: the URL has no host.
    """
    try:
        parts = urlsplit(collector_url)
        host, port = parts.hostname, parts.port
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidParameterError(
            f"the collector URL must look like 'https://host[:port]'. "
            f"Got {collector_url!r} instead.") from exc
    if not host:
        raise InvalidParameterError(
            f"the collector URL must look like 'https://host[:port]'. "
            f"Got {collector_url!r} instead.")
    name = re.sub(r"[^a-z0-9.-]+", "_", host.lower()).strip("._-") or "host"
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        name = f"{name}_{port}"
    return check_namespace(name[:128])


def check_namespace(namespace: str) -> str:
    """Return ``namespace`` if it names a state folder safely, else InvalidParameterError.

    Lowercase letters, digits, '.', '_' and '-', at most 128, starting with a letter or digit
    (so never '.', '..' or a path).
    """
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise InvalidParameterError(
            f"a privacy state namespace is lowercase letters, digits, '.', '_' and '-' "
            f"(at most 128, starting with a letter or digit). Got {namespace!r} instead.")
    return namespace


def default_state_dir(namespace: str) -> Path:
    """``<user_data_dir()>/deniable/<namespace>``: where a namespace's state lives by default.

    Nothing is created here; ``StateDir`` creates missing directories 0700.

    Raises:
        InvalidParameterError: see ``check_namespace``.
        PrivacyStateError: see ``user_data_dir``.
    """
    return user_data_dir() / APP_FOLDER / check_namespace(namespace)


Stamp = tuple[int, int, int]
"""(inode, mtime in ns, size) of a file: changes whenever the ledger is replaced."""


class StateDir:
    """One directory of privacy state, shared safely by threads and processes.

    Args:
        path: the directory; created 0700 if missing (with any missing parents, also 0700).

    Raises:
        PrivacyStateError: the directory cannot be created or is not a directory.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.erased = False
        """Set by ``erase``: this object then refuses to create the secret or write a file."""
        try:
            # Every missing directory is created 0700 (the XDG spec asks the same of data
            # directories), so the list of namespaces is private too.
            for directory in reversed([self.path, *self.path.parents]):
                if not directory.exists():
                    directory.mkdir(mode=_DIR_MODE, exist_ok=True)
        except OSError as exc:
            raise PrivacyStateError(f"cannot create the state directory {self.path}") from exc
        if not self.path.is_dir():
            raise PrivacyStateError(f"the state path {self.path} is not a directory")

    # -- the device secret ---------------------------------------------------------------

    def secret(self) -> bytes:
        """The device secret, created from the secure source on first use.

        Raises:
            PrivacyStateError: the secret file exists but is not exactly 32 bytes.
        """
        path = self.path / SECRET_FILE
        self._check_not_erased()
        try:
            try:
                return self._read_secret(path)
            except FileNotFoundError:
                pass
            tmp = self._tmp_name(SECRET_FILE)
            try:
                self._write_file(tmp, new_secret())
                os.link(tmp, path)  # atomic create-if-absent: a racing process's secret wins
            except FileExistsError:
                pass
            finally:
                tmp.unlink(missing_ok=True)
            self._sync_dir()
            return self._read_secret(path)
        except OSError as exc:
            raise PrivacyStateError(f"cannot read or create the device secret {path}") from exc

    def _read_secret(self, path: Path) -> bytes:
        fd = os.open(path, os.O_RDONLY | _BINARY)
        try:
            if os.fstat(fd).st_mode & 0o077 and hasattr(os, "fchmod"):  # POSIX permissions
                os.fchmod(fd, _FILE_MODE)  # never leave the key readable by others
            data = os.read(fd, SECRET_BYTES + 1)
        finally:
            os.close(fd)
        try:
            return check_secret(data)
        except PrivacyStateError as exc:
            raise PrivacyStateError(
                f"the device secret {path} is corrupt ({len(data)} bytes, expected "
                f"{SECRET_BYTES}); refusing to replace it, as a new secret would redraw every "
                f"memoized answer") from exc

    # -- the ledger document -------------------------------------------------------------

    def stamp(self, name: str = LEDGER_FILE) -> Stamp | None:
        """The file's (inode, mtime_ns, size), or None if it does not exist."""
        try:
            st = os.stat(self.path / name)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def read_json(self, name: str = LEDGER_FILE) -> dict[str, Any] | None:
        """The JSON object stored under ``name``, or None if there is none.

        Raises:
            PrivacyStateError: the file is not a JSON object.
        """
        path = self.path / name
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise PrivacyStateError(f"cannot read the privacy ledger {path}") from exc
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise PrivacyStateError(f"the privacy ledger {path} is not valid JSON") from exc
        if not isinstance(doc, dict):
            raise PrivacyStateError(f"the privacy ledger {path} must hold a JSON object")
        return doc

    def write_json(self, doc: dict[str, Any], name: str = LEDGER_FILE) -> None:
        """Replace ``name`` with ``doc`` atomically and durably.

        Raises:
            PrivacyStateError: the file cannot be written, or the state was erased.
        """
        self._check_not_erased()
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
        tmp = self._tmp_name(name)
        try:
            self._write_file(tmp, data)
            os.replace(tmp, self.path / name)
            self._sync_dir()
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise PrivacyStateError(
                f"cannot write the privacy ledger in {self.path}: nothing is released until "
                f"the spend is on disk") from exc

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold an exclusive lock on the directory (blocks until it is free)."""
        with exclusive(self.path / LOCK_FILE):
            yield

    def erase(self, also: tuple[str, ...] = ()) -> None:
        """Delete the device secret, the ledger, the files named in ``also`` and any
        temporary file, under the lock; then the lock file and the directory if empty.

        From then on this object refuses to create a secret or write a file
        (``PrivacyStateError``), so a writer racing the erasure cannot bring the state back.
        Another object on the same directory (another process) can: each must erase its own.

        Raises:
            PrivacyStateError: a file cannot be deleted.
        """
        self.erased = True
        if not self.path.is_dir():
            return  # erased already (by this object or another)
        try:
            with self.locked():
                for name in (SECRET_FILE, LEDGER_FILE, *also):
                    (self.path / name).unlink(missing_ok=True)
                for leftover in self.path.glob(".*.tmp"):
                    leftover.unlink(missing_ok=True)
                self._sync_dir()
        except OSError as exc:
            raise PrivacyStateError(f"cannot erase the privacy state in {self.path}") from exc
        with contextlib.suppress(OSError):
            (self.path / LOCK_FILE).unlink()
            self.path.rmdir()  # only if nothing else is left in it

    def _check_not_erased(self) -> None:
        if self.erased:
            raise PrivacyStateError(
                f"the privacy state in {self.path} was erased (Reporter.set_enabled(False))")

    # -- helpers -------------------------------------------------------------------------

    def _tmp_name(self, name: str) -> Path:
        # Unique per writer: a shared name could let one writer truncate a file another has
        # just linked into place.
        return self.path / f".{name}.{os.getpid()}.{os.urandom(6).hex()}.tmp"

    @staticmethod
    def _write_file(path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY, _FILE_MODE)
        try:
            if hasattr(os, "fchmod"):  # POSIX: whatever the umask
                os.fchmod(fd, _FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def _sync_dir(self) -> None:
        if os.name == "nt":  # a directory cannot be opened there; NTFS orders the rename
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
