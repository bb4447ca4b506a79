"""Every ```python sample of README.md and docs/*.md runs, in page order, against a collector
started as the README says (``deploy/metrics.example.toml``, keys made with ``deniable keys
create``, auth on). A sample marked ```python fragment is not run (it continues another, or
needs names it does not define); every other one must run as written, with these names given:
the keys the README makes (``INGEST_KEY``, ``READ_KEY``) and, per page, the few variables its
text describes (``url``, ``app_data_dir``, ...). The README's URLs and paths are pointed at
the test's collector and a temp dir. Each Reporter a page makes must end with nothing refused,
dead-lettered or left queued: the example metrics file holds what the samples report."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from deniable.client import Privacy, Reporter, Storage
from deniable.collector.server import CollectorProcess

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python(?P<info>[^\n]*)\n(?P<code>.*?)^```", re.M | re.S)


def samples(page: str) -> list[tuple[int, str, bool]]:
    """(line of the fence, code, is a fragment) of each ```python block of ``page``."""
    text = (ROOT / page).read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group("code"),
             "fragment" in m.group("info").split())
            for m in FENCE.finditer(text)]


def test_the_harness_finds_samples_and_fragments() -> None:
    found = {page: samples(page) for page in PAGES}
    assert sum(len(s) for s in found.values()) >= 15
    assert any(fragment for s in found.values() for _, _, fragment in s)


@pytest.fixture(scope="module")
def docs_collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[tuple[CollectorProcess, dict[str, str]]]:
    """The README's collector: the example metrics file, auth on, one key per role."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    env = {"DENIABLE_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"}
    keys = {}
    for role, extra in (("ingest", ["--app", "docs-samples"]), ("read", []), ("admin", [])):
        made = subprocess.run([sys.executable, "-m", "deniable.cli", "keys", "create",
                               "--role", role, *extra], env=env, capture_output=True,
                              text=True, check=True)
        keys[role] = made.stdout.strip().splitlines()[-1]
    metrics = ROOT / "deploy" / "metrics.example.toml"
    try:
        with CollectorProcess(redis_url, metrics, workers=1) as collector:
            seed(collector.url, keys["ingest"], metrics)
            yield collector, keys
    finally:
        client.flushdb()  # leave no registry or key behind for the next module's collectors
        client.close()


def seed(url: str, token: str, metrics: Path) -> None:
    """Reports for the analysis samples to read: 300 simulated devices' worth of each example
    metric (one Reporter standing in for many, so ``one_per_period=False``)."""
    values = {"feature_x_enabled": [True, False, False], "dark_mode": [True, False],
              "notifications_on": [True], "os": ["android", "ios", "linux"],
              "crashes_per_week": [0, 1, 3], "startup_ms": [400.0, 900.0]}
    with Reporter(url, metrics=metrics, token=token, storage=Storage(privacy_dir=":memory:"),
                  privacy=Privacy(one_per_period=False, fresh=set(values))) as reporter:
        for i in range(300):
            for metric, choices in values.items():
                dims = ({"app_version": ["2.3", "2.4"][i % 2], "platform": "android"}
                        if metric == "dark_mode" else None)
                reporter.report(metric, choices[i % len(choices)], dims=dims)
        assert reporter.flush(timeout=20) and reporter.stats().sent == 300 * len(values)


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if any(not f for *_, f in samples(p))])
def test_every_python_sample_runs(page: str, docs_collector, redis_url: str,  # type: ignore[no-untyped-def]
                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    collector, keys = docs_collector
    monkeypatch.chdir(tmp_path)
    made: list[Reporter] = []
    original = Reporter.__init__

    def recording_init(self: Reporter, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Reporter, "__init__", recording_init)
    (tmp_path / "data").mkdir()
    # The app ships the collector's metrics file as its declaration (README, "Upgrading"):
    # the samples name it metrics.toml, in the working directory.
    (tmp_path / "metrics.toml").write_bytes((ROOT / "deploy" / "metrics.example.toml").read_bytes())
    names: dict[str, Any] = {
        "INGEST_KEY": keys["ingest"], "READ_KEY": keys["read"], "ADMIN_KEY": keys["admin"],
        "app_data_dir": tmp_path / "data", "data_dir": tmp_path / "data",
        "collector_url": collector.url, "url": collector.url,
        "path": tmp_path / "data" / "queue.db", "user_consented": True,
        "METRICS": {"dark_mode": "rr:1/2:1/2", "feature_x_enabled": "rr:1/2:1/2"},
    }
    if page == "docs/analysis.md":
        names["url"] = redis_url  # RedisSource(url): the collector's Redis
    replace = {"https://telemetry.example.com": collector.url,
               "http://127.0.0.1:8000": collector.url, "/var/lib/myapp": str(tmp_path)}
    try:
        for line, code, fragment in samples(page):
            if fragment:
                continue
            for old, new in replace.items():
                code = code.replace(old, new)
            started = time.monotonic()
            try:
                exec(compile(code, f"{page}:{line}", "exec"), names)  # noqa: S102 - our docs
            except Exception as exc:
                pytest.fail(f"the sample at {page}:{line} failed: {type(exc).__name__}: {exc}")
            took = time.monotonic() - started
            assert took < 8, f"the sample at {page}:{line} took {took:.1f} s"
    finally:
        for reporter in made:
            reporter.close(timeout=5)
    for reporter in made:
        stats = reporter.stats()
        assert (stats.refused, stats.dead_lettered, stats.queued) == (0, 0, 0), (
            f"a Reporter made on {page} ended with {stats}")
