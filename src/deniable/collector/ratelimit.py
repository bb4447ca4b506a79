"""Per-IP and per-key token buckets in Redis, checked in one round trip (one per bucket on a
Redis Cluster, where each bucket has its own slot).

Each bucket holds up to ``burst`` tokens and refills at ``rate`` tokens per second; a request
takes one. The bucket lives in a Redis hash updated by one Lua script using Redis's clock, so
every collector process and host shares it. A full bucket's key expires (``burst / rate``
seconds after its last use), so idle clients leave nothing behind.

Client IPs are used in memory only: the bucket key holds ``HMAC-SHA256(secret, ip)``
(128 bits, hex), never the address, and the secret never leaves the process. Without a
configured secret, each process draws a random one at start: a Redis dump then cannot be
matched against the 2^32 IPv4 addresses, but processes that do not share a secret keep
separate buckets, so the effective per-IP limit is multiplied by their number.
"""
from __future__ import annotations

import hashlib
import hmac
import math
import secrets

import redis
import redis.cluster

from deniable.core import keys
from deniable.collector.errors import APIError
from deniable.collector.store import HotScript, script_errors

# KEYS: one bucket each. ARGV[2i-1], ARGV[2i]: bucket i's rate (tokens/s) and burst (tokens).
# Each bucket gives a token if it has one; one that has none gives nothing. Returns 0 if every
# bucket gave one, else the longest wait in milliseconds until the empty ones have one.
_TOKEN_BUCKET_LUA = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local longest = 0
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'ts')
  local tokens = tonumber(state[1])
  local ts = tonumber(state[2])
  if tokens == nil or ts == nil then
    tokens = burst
    ts = now
  end
  tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
  if tokens >= 1 then
    tokens = tokens - 1
  else
    longest = math.max(longest, math.ceil((1 - tokens) * 1000 / rate))
  end
  redis.call('HSET', KEYS[i], 'tokens', tostring(tokens), 'ts', now)
  redis.call('PEXPIRE', KEYS[i], math.ceil(burst * 1000 / rate) + 1000)
end
return longest
"""


class RateLimiter:
    """Token buckets per client IP and per API key.

    Args:
        client: the collector's Redis.
        ip_rate, ip_burst: per-IP refill (requests/s; 0 switches it off) and bucket size.
        key_rate, key_burst: the same per API key.
        secret: HMAC key for IPs; None draws a random one (this process only).
    """

    def __init__(self, client: redis.Redis, *, ip_rate: float, ip_burst: int,
                 key_rate: float, key_burst: int, secret: str | bytes | int | float | None = None) -> None:
        self.client = client
        self.ip = (float(ip_rate), max(1, int(ip_burst)))
        self.key = (float(key_rate), max(1, int(key_burst)))
        if secret is None or secret == "":
            secret = secrets.token_bytes(32)
        # str(): DENIABLE_* values are parsed as JSON, so an all-digit secret arrives as a number.
        self._secret = secret if isinstance(secret, bytes) else str(secret).encode()
        self._script = client.register_script(_TOKEN_BUCKET_LUA)
        # Standalone: both buckets in one script on the hot path's connection. A cluster keeps
        # each bucket in its own slot: one script call per bucket (redis-py refuses scripts in
        # a cluster pipeline), each routed to the node holding its slot.
        self._hot = (None if isinstance(client, redis.cluster.RedisCluster)
                     else HotScript(client, _TOKEN_BUCKET_LUA))

    def ip_subject(self, ip: str) -> str:
        """The keyed hash standing for ``ip`` in Redis: 32 hex chars, not reversible."""
        return hmac.new(self._secret, ip.encode(), hashlib.sha256).hexdigest()[:32]

    def wait_seconds(self, ip: str | None, key_id: str | None) -> float:
        """Take a token from the IP's and the key's buckets; 0.0 if allowed, else the wait.

        Both buckets are checked in one round trip; on a cluster, one per bucket.
        """
        checks: list[tuple[str, tuple[float, int]]] = []
        if self.ip[0] > 0:
            checks.append((keys.rate_limit("ip", self.ip_subject(ip or "unknown")), self.ip))
        if key_id is not None and self.key[0] > 0:
            checks.append((keys.rate_limit("key", key_id), self.key))
        if not checks:
            return 0.0
        if self._hot is not None:
            args: list[str | int] = []
            for _, (rate, burst) in checks:
                args.extend((repr(rate), burst))
            return int(self._hot([bucket for bucket, _ in checks], args)) / 1000.0
        waits = []
        for bucket, (rate, burst) in checks:
            with script_errors():
                waits.append(int(self._script(keys=[bucket], args=[repr(rate), burst])))
        return max(waits) / 1000.0

    def check(self, ip: str | None, key_id: str | None) -> None:
        """Raise 429 with Retry-After (whole seconds, at least 1) if either bucket is empty."""
        wait = self.wait_seconds(ip, key_id)
        if wait > 0:
            raise APIError(429, "too many requests from this client or key; retry later",
                           headers={"Retry-After": str(max(1, math.ceil(wait)))})
