"""Access control: API keys with one role each, checked by ``require(*roles)``.

Roles:

=========  ==============================================================================
ingest     apps send reports (``POST /v1/reports``) and fetch the catalogue; one key per app
read       analysts read counts and metric lists
admin      registers and retires metrics (``/v1/admin/...``)
=========  ==============================================================================

A key is one role; no role includes another, so a leaked ingest key cannot read data and a
read key cannot register metrics. An API key looks like ``dnk_<key id>_<secret>``: the key id
(16 hex chars) is public and names the Redis record; the secret is 256 bits from ``secrets``.
Redis keeps only the SHA-256 of the whole key, compared with ``hmac.compare_digest``. A fast
hash is enough because the secret is random and long: there is no dictionary to try.

Errors (problem+json): no or malformed ``Authorization`` -> 401 with ``WWW-Authenticate:
Bearer``; an unknown, wrong or revoked key -> 401 (``error="invalid_token"``); a valid key of
another role -> 403. ``AUTH = "off"`` (``DENIABLE_AUTH=off``) is dev mode: no key is needed.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

import redis
from flask import Flask, current_app, g, request

from deniable.core import keys
from deniable.collector.errors import APIError, CollectorError
from deniable.collector.guard import storage_guard
from deniable.collector.ratelimit import RateLimiter
from deniable.collector.settings import settings_of

ROLES = ("ingest", "read", "admin")
KEY_PREFIX = "dnk"
KEY_PATTERN = re.compile(r"^dnk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})\Z")
APP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
"""App names: letters, digits, '.', '_' and '-', at most 64 characters."""
CACHE_LIMIT = 10_000
"""Most verified keys one process caches; the cache is emptied when it is full."""
REALM = 'Bearer realm="deniable"'

log = logging.getLogger("deniable.collector")
View = TypeVar("View", bound=Callable[..., Any])


class AuthError(CollectorError):
    """A key operation failed: unknown key id, bad role or app name."""


@dataclass(frozen=True)
class KeyInfo:
    """An API key as stored: never its secret, nor (outside this module) its hash."""

    key_id: str
    role: str
    app: str
    created: datetime
    revoked: datetime | None = None


@dataclass(frozen=True)
class NewKey:
    """A freshly created key. ``secret`` is the whole bearer token, shown once."""

    info: KeyInfo
    secret: str


def digest(token: str) -> str:
    """Hex SHA-256 of a bearer token: what Redis stores instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


# --- Key management (used by `deniable keys`) ---------------------------------------------

def create_key(client: redis.Redis, role: str, app: str = "") -> NewKey:
    """Create a key of ``role`` (for ``app``); store its hash; return it with its secret.

    Raises:
        AuthError: an unknown role, an ingest key without an app, or a bad app name.
    """
    if role not in ROLES:
        raise AuthError(f"role must be one of {', '.join(ROLES)}. Got {role!r} instead.")
    if role == "ingest" and not app:
        raise AuthError("an ingest key is per app: name the app")
    if app and not APP_NAME.match(app):
        raise AuthError("app names are letters, digits, '.', '_' and '-', at most 64 "
                        f"characters. Got {app!r} instead.")
    key_id = secrets.token_hex(8)
    token = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
    created = datetime.now(timezone.utc).replace(microsecond=0)
    pipe = client.pipeline(transaction=True)
    pipe.hset(keys.api_key(key_id), mapping={"role": role, "app": app, "sha256": digest(token),
                                             "created": created.isoformat()})
    pipe.sadd(keys.api_key_index(), key_id)
    pipe.execute()
    _audit("key_create", key_id=key_id, role=role, app=app)
    return NewKey(KeyInfo(key_id, role, app, created), token)


def list_keys(client: redis.Redis) -> list[KeyInfo]:
    """Every key ever created, oldest first, revoked ones included."""
    ids = sorted(_text(k) for k in client.smembers(keys.api_key_index()))
    pipe = client.pipeline(transaction=False)
    for key_id in ids:
        pipe.hgetall(keys.api_key(key_id))
    found = [_info(key_id, raw) for key_id, raw in zip(ids, pipe.execute()) if raw]
    return sorted(found, key=lambda k: (k.created, k.key_id))


def revoke_key(client: redis.Redis, key_id: str) -> KeyInfo:
    """Mark a key revoked; every collector refuses it within AUTH_CACHE_SECONDS.

    Raises:
        AuthError: no key has this id.
    """
    record = keys.api_key(key_id)
    revoked = datetime.now(timezone.utc).replace(microsecond=0)
    # HSET only if the record exists: a typo must not create a half record.
    if not re.fullmatch(r"[0-9a-f]{16}", key_id) or not client.exists(record):
        raise AuthError(f"no key has the id {key_id!r} (see `deniable keys list`)")
    client.hsetnx(record, "revoked", revoked.isoformat())
    info = _info(key_id, client.hgetall(record))
    _audit("key_revoke", key_id=key_id, role=info.role, app=info.app,
           revoked=info.revoked.isoformat() if info.revoked else None)
    return info


def _audit(action: str, **fields: Any) -> None:
    """One audit line (observability.audit) for a key created or revoked: never the key."""
    # Imported here: prometheus_client picks its multiprocess mode at import (see errors.py).
    from deniable.collector.observability import audit

    audit(action, **fields)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _info(key_id: str, raw: Mapping[Any, Any]) -> KeyInfo:
    text = {_text(k): _text(v) for k, v in raw.items()}
    revoked = text.get("revoked")
    return KeyInfo(key_id, text.get("role", ""), text.get("app", ""),
                   datetime.fromisoformat(text["created"]),
                   datetime.fromisoformat(revoked) if revoked else None)


# --- Verification ---------------------------------------------------------------------------

class Authenticator:
    """Verifies bearer tokens against Redis, caching good ones for ``cache_seconds``.

    Only verified, unrevoked keys are cached (by the token's SHA-256, never the token), so an
    unknown key always costs a Redis lookup, and a revoked key works for at most
    ``cache_seconds`` more in each process.
    """

    def __init__(self, client: redis.Redis, cache_seconds: float) -> None:
        self.client = client
        self.cache_seconds = float(cache_seconds)
        self._cache: dict[str, tuple[float, KeyInfo]] = {}
        self._lock = threading.Lock()

    def verify(self, token: str) -> KeyInfo | None:
        """The key ``token`` names if it is valid and not revoked, else None."""
        match = KEY_PATTERN.match(token)
        if match is None:
            return None
        token_digest = digest(token)
        now = time.monotonic()
        cached = self._cache.get(token_digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        raw = self.client.hgetall(keys.api_key(match.group(1)))
        stored = _text(raw.get(b"sha256", b""))
        # Compare even when nothing is stored, so timing does not tell unknown ids apart.
        good = hmac.compare_digest(stored or "0" * 64, token_digest) and bool(stored)
        if not good or b"revoked" in raw:
            with self._lock:
                self._cache.pop(token_digest, None)
            return None
        info = _info(match.group(1), raw)
        if self.cache_seconds > 0:
            with self._lock:
                if len(self._cache) >= CACHE_LIMIT:
                    self._cache.clear()
                self._cache[token_digest] = (now + self.cache_seconds, info)
        return info


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization`` header value, or None if there is no header.

    Raises:
        APIError: 401 if the header is there but is not ``Bearer <token>``.
    """
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("the Authorization header must be 'Bearer <API key>'",
                            'error="invalid_request"')
    return token.strip()


@dataclass(frozen=True)
class Gate:
    """Admits a request: checks its bearer token's role and charges its rate limits.

    Framework-free, so Flask's routes (``require``) and the ingest endpoint in front of Flask
    share it. Redis errors propagate; callers answer them 503.

    Args:
        authenticator: verifies tokens.
        limiter: the per-IP and per-key token buckets.
        enabled: False in dev mode (``DENIABLE_AUTH=off``): no key is needed.
    """

    authenticator: Authenticator
    limiter: RateLimiter
    enabled: bool

    def admit(self, authorization: str | None, address: str | None,
              roles: tuple[str, ...]) -> KeyInfo | None:
        """The request's key (None in dev mode) if it may act as one of ``roles``.

        Args:
            authorization: the ``Authorization`` header value, if any.
            address: the client IP; used in memory only, for the per-IP rate limit.

        Raises:
            APIError: 401, 403 or 429.
        """
        if not self.enabled:
            self.limiter.check(address, None)
            return None
        token = bearer_token(authorization)
        info = None if token is None else self.authenticator.verify(token)
        # The per-IP bucket is charged before credentials are judged, so guessing costs too.
        self.limiter.check(address, info.key_id if info else None)
        if token is None:
            raise _unauthorized("this endpoint needs an API key: 'Authorization: Bearer <key>'")
        if info is None:
            raise _unauthorized("the API key is unknown, wrong or revoked",
                                'error="invalid_token"')
        if info.role not in roles:
            raise APIError(403, f"{_a(info.role)} key cannot do this; it needs "
                                f"{_a(' or '.join(roles))} key")
        return info


def _a(words: str) -> str:
    """``words`` with its indefinite article: "an ingest", "a read or admin"."""
    return f"{'an' if words[:1] in 'aeiou' else 'a'} {words}"


def _unauthorized(detail: str, error: str = "") -> APIError:
    challenge = f"{REALM}, {error}" if error else REALM
    return APIError(401, detail, headers={"WWW-Authenticate": challenge})


def require(*roles: str) -> Callable[[View], View]:
    """Decorate a view so that only keys of one of ``roles`` reach it (and rate-limit it).

    The verified key is in ``flask.g.deniable_key`` (None in dev mode). Usable on any
    blueprint, e.g. ``@require("read")``.
    """
    unknown = set(roles) - set(ROLES)
    if not roles or unknown:
        raise ValueError(f"roles must be among {ROLES}. Got {roles!r} instead.")

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            g.deniable_key = check(roles)
            return view(*args, **kwargs)

        guarded.deniable_roles = roles  # type: ignore[attr-defined]
        return guarded  # type: ignore[return-value]

    return decorate


def check(roles: tuple[str, ...]) -> KeyInfo | None:
    """Authenticate and rate-limit the current Flask request for ``roles``; return its key.

    Raises:
        APIError: 401, 403 or 429 (503 if Redis is unavailable).
    """
    gate: Gate = current_app.extensions["deniable.gate"]
    with storage_guard():
        return gate.admit(request.headers.get("Authorization"), request.remote_addr, roles)


def init_app(app: Flask, client: redis.Redis) -> None:
    """Set up auth and rate limits for ``app`` from its settings; warn loudly in dev mode."""
    settings = settings_of(app)
    security, limits = settings.security, settings.limits
    enabled = security.auth
    limiter = RateLimiter(
        client, ip_rate=limits.rate_limit_ip_per_second, ip_burst=limits.rate_limit_ip_burst,
        key_rate=limits.rate_limit_key_per_second, key_burst=limits.rate_limit_key_burst,
        secret=security.rate_limit_secret)
    app.extensions["deniable.gate"] = Gate(
        Authenticator(client, security.auth_cache_seconds), limiter, enabled)
    if not enabled:
        log.warning("!!! DENIABLE_AUTH=off: AUTHENTICATION IS DISABLED. Anyone who can reach "
                    "this collector can send reports, read counts and register metrics. "
                    "Dev mode: never expose it. !!!")
