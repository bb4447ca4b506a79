"""What access control and rate limiting cost on the ingest path, measured side by side.

Runs one real gunicorn collector per configuration on the same private Redis, in turns, and
drives each with wrk (POST batches of 100 reports, a fresh batch id per request):

  open     DENIABLE_AUTH=off, no rate limits (the baseline)
  auth     auth on with an ingest key (verified keys cached per process), no rate limits
  limited  auth on, plus per-IP and per-key token buckets (limits high enough never to refuse)

Prints requests/s, reports/s and p99 per configuration and the ratio to ``open``, best of
``--rounds`` interleaved rounds. Needs wrk (Debian: apt-get install wrk).

    ./dev bench auth_overhead [--seconds 5] [--rounds 2] [--workers 2]
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

from deniable.collector import auth
from deniable.collector.embedded import RedisServer
from deniable.collector.server import CollectorProcess

REPORTS = 100
WRK_LUA = """
local counter = 0
local token = os.getenv("BENCH_TOKEN")
local reports = {}
for i = 1, %(reports)d do
  reports[i] = '{"metric":"feature_x_enabled","mechanism":"rr:1/2:1/2","bit":' .. (i %% 2) .. '}'
end
local tail = '","reports":[' .. table.concat(reports, ",") .. ']}'
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
function init(args)
  -- unique batch ids across threads and runs: run number, thread number, counter
  prefix = string.format("%%04x%%04x", tonumber(os.getenv("BENCH_RUN")), tid)
end
request = function()
  counter = counter + 1
  local body = '{"batch_id":"' .. prefix .. string.format("%%024x", counter) .. tail
  local headers = {["Content-Type"] = "application/json"}
  if token ~= nil and token ~= "" then headers["Authorization"] = "Bearer " .. token end
  return wrk.format("POST", "/v1/reports", headers, body)
end
"""
NO_LIMITS = {"DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0", "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0"}
CONFIGS = {
    "open": {"DENIABLE_AUTH": "off", **NO_LIMITS},
    "auth": {"DENIABLE_AUTH": "on", **NO_LIMITS},
    "limited": {"DENIABLE_AUTH": "on", "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "1000000",
                "DENIABLE_RATE_LIMIT_IP_BURST": "1000000",
                "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "1000000",
                "DENIABLE_RATE_LIMIT_KEY_BURST": "1000000"},
}


def run_wrk(url: str, script: Path, seconds: int, token: str,
            run: int) -> tuple[float, float, int]:
    """(requests/s, p99 ms, non-2xx responses) of one wrk run."""
    out = subprocess.run(
        ["wrk", "-t2", "-c16", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True, text=True, check=True, timeout=seconds + 30,
        env={"BENCH_TOKEN": token, "BENCH_RUN": str(run), "PATH": "/usr/bin:/bin"}).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    p99_ms = float(p99.group(1)) * scale[p99.group(2)] if p99 else float("nan")
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, p99_ms, int(bad.group(1)) if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("bench: wrk not found (apt-get install wrk)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="deniable-bench-") as tmp, \
            RedisServer(Path(tmp) / "redis") as server:
        metrics = Path(tmp) / "metrics.toml"
        metrics.write_text('[metrics.feature_x_enabled]\nmechanism = "rr:1/2:1/2"\n')
        script = Path(tmp) / "post.lua"
        script.write_text(WRK_LUA % {"reports": REPORTS})
        client = redis.Redis.from_url(server.url)
        token = auth.create_key(client, "ingest", "bench").secret
        client.close()
        best: dict[str, tuple[float, float]] = {}
        run = 0
        for _ in range(args.rounds):
            for name, env in CONFIGS.items():
                run += 1
                with CollectorProcess(server.url, metrics, workers=args.workers,
                                      env=env) as collector:
                    rps, p99, bad = run_wrk(collector.url, script, args.seconds,
                                            "" if name == "open" else token, run)
                if bad:
                    print(f"bench: {name}: {bad} non-2xx answers", file=sys.stderr)
                    return 1
                if rps > best.get(name, (0.0, 0.0))[0]:
                    best[name] = (rps, p99)
    base = best["open"][0]
    print(f"{'config':<8} {'req/s':>8} {'reports/s':>10} {'p99 ms':>7} {'vs open':>8}")
    for name, (rps, p99) in best.items():
        print(f"{name:<8} {rps:>8.0f} {rps * REPORTS:>10.0f} {p99:>7.1f} {rps / base:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
