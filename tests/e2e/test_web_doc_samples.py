"""Every JavaScript sample of README.md and docs/*.md (```js, ```javascript, ```html; a ```ts
one, of which there is none, would run as JavaScript, so it must be type-free) runs, as
written, against a real collector started as the README says (``deploy/metrics.example.toml``,
auth on, an ingest key made with ``deniable keys create``; the page's origin in
``DENIABLE_CORS_ORIGINS``), and the collector counts every report it sends.

- A sample that imports ``deniable-client/node`` runs in Node (``node sample.mjs`` in a temp dir
  whose ``node_modules/deniable-client`` is web/, as an installed package); every other one in
  a page, in headless Chromium (a fresh profile per sample: its own IndexedDB), with an import
  map giving ``deniable-client`` and ``deniable-client/all`` (web/dist, which the README's embed
  loads from ``/assets/deniable-client/``). A page sample without a store would drop its
  memoized reports in Node (docs/web.md, "No silent in-memory state"): the page is where it is
  meant to run.
- The names a sample uses without defining are given, as the docs describe them: ``INGEST_KEY``
  (the key; also ``process.env.INGEST_KEY`` and the README's ``"INGEST_KEY"`` placeholder),
  ``metrics`` (the app's metrics file as JSON, each table naming the mechanism the collector
  chose, as docs/web.md says to declare it; also the ``./metrics.json`` docs/web.md imports).
  ``https://telemetry.example.com`` is the test's collector, ``/var/lib/myapp`` a temp dir.
- After the sample, the harness closes its ``reporter`` (5 s) and reads ``stats()``: nothing
  queued, dropped, dead-lettered, refused or withheld; each ``report()`` call sent (or skipped
  by the period gate: a metric's second call of the day), at least one; and the collector's
  counts grew by exactly ``stats().sent``.
- A sample marked ```js fragment is not run. There is one: docs/web.md's consent switch
  (``await reporter.setEnabled(false)``), which continues another sample's ``reporter`` and
  drops what it queued by design.

Needs node, the built web/dist and chromium (as tests/e2e/test_web_client.py). Takes about 10 s.
"""
from __future__ import annotations

import functools
import json
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from deniable.collector.embedded import free_port
from deniable.collector.server import CollectorProcess
from tests.e2e.test_web_client import WEB, _Quiet, node, web_declarations

pytestmark = pytest.mark.slow

ROOT = WEB.parent
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?P<lang>javascript|js|typescript|ts|html)(?P<info>(?: [^\n]*)?)\n"
                   r"(?P<code>.*?)^```", re.M | re.S)
EXAMPLE_URL = "https://telemetry.example.com"
CLEAN = ("queued", "dropped", "deadLettered", "droppedNoCatalogue", "droppedEarly",
         "droppedUnknownMetric", "droppedNoState", "withheld", "capRefused")
"""The stats that must be 0 after a sample: everything it reported was sent."""


def samples() -> list[tuple[str, str, str, bool]]:
    """(page:line of the fence, language, code, is a fragment) of every JavaScript sample.
    A ```html block counts only if it holds a script."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for m in FENCE.finditer(text):
            if m.group("lang") == "html" and "<script" not in m.group("code"):
                continue
            found.append((f"{page}:{text.count(chr(10), 0, m.start()) + 1}", m.group("lang"),
                          m.group("code"), "fragment" in m.group("info").split()))
    return found


def test_the_harness_finds_the_web_samples() -> None:
    found = samples()
    assert len(found) >= 7
    assert any(lang == "html" for _, lang, _, _ in found)
    assert any("deniable-client/node" in code for *_, code, _ in found)
    assert sum(fragment for *_, fragment in found) == 1  # the consent switch: see above


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A static file server for a temp dir holding the sample pages, ``dist`` and
    ``assets/deniable-client`` (both web/dist): its URL and the dir."""
    root = tmp_path_factory.mktemp("site")
    (root / "assets").mkdir()
    (root / "dist").symlink_to(WEB / "dist")
    (root / "assets" / "deniable-client").symlink_to(WEB / "dist")
    server = ThreadingHTTPServer(("127.0.0.1", free_port()),
                                 functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def docs_collector(redis_url: str, site: tuple[str, Path]
                   ) -> Iterator[tuple[CollectorProcess, dict[str, str], dict[str, Any]]]:
    """The README's collector (the example metrics file, auth on, the page's origin allowed),
    its ingest and read keys, and the app's declaration as the web client takes it."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    env = {"DENIABLE_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"}
    keys = {}
    for role, extra in (("ingest", ["--app", "web-doc-samples"]), ("read", [])):
        made = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "deniable.cli",
                               "keys", "create", "--role", role, *extra], env=env,
                              capture_output=True, text=True, check=True)
        keys[role] = made.stdout.strip().splitlines()[-1]
    cors = {"DENIABLE_CORS_ORIGINS": json.dumps([site[0]])}
    try:
        with CollectorProcess(redis_url, ROOT / "deploy" / "metrics.example.toml", workers=1,
                              env=cors) as collector:
            catalogue = requests.get(f"{collector.url}/v1/metrics", timeout=5,
                                     headers={"Authorization": f"Bearer {keys['ingest']}"})
            catalogue.raise_for_status()
            yield collector, keys, web_declarations(catalogue.json())
    finally:
        client.flushdb()
        client.close()


def counted(collector: CollectorProcess, read_key: str, metrics: dict[str, Any]) -> int:
    """Reports the collector has counted, over every example metric."""
    total = 0
    for metric in metrics:
        response = requests.get(f"{collector.url}/v1/metrics/{metric}/counts", timeout=5,
                                headers={"Authorization": f"Bearer {read_key}"})
        response.raise_for_status()
        total += sum(b["n"] for b in response.json()["buckets"])
    return total


def prelude(code: str, key: str, metrics: dict[str, Any]) -> str:
    """The names the sample uses without defining them."""
    given = [f"const INGEST_KEY = {json.dumps(key)};"]
    if not re.search(r"\b(import|const|let|var)\s+metrics\b", code):
        given.append(f"const metrics = {json.dumps(metrics)};")
    return "\n".join(given) + "\n"


EPILOGUE = "\nawait reporter.close(5000);\nconst sampleStats = reporter.stats();\n"


def run_in_node(code: str, key: str, metrics: dict[str, Any], where: Path) -> dict[str, Any]:
    (where / "node_modules").mkdir()
    (where / "node_modules" / "deniable-client").symlink_to(WEB)
    (where / "sample.mjs").write_text(
        prelude(code, key, metrics) + code.replace("/var/lib/myapp", str(where))
        + EPILOGUE + "console.log(JSON.stringify(sampleStats));\n")
    done = subprocess.run([node(), "sample.mjs"], cwd=where, capture_output=True, text=True,
                          timeout=30, env={"PATH": "/usr/bin:/bin", "INGEST_KEY": key})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


BROWSER = """
import {chromium} from "playwright-core";
import readline from "node:readline";
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-dev-shm-usage"],
});
for await (const url of readline.createInterface({input: process.stdin})) {
  const context = await browser.newContext();  // a fresh profile: its own IndexedDB
  const page = await context.newPage();
  const logs = [];
  page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
  let title;
  try {
    await page.goto(url);
    await page.waitForFunction(() => /^(done|error) /.test(document.title), null,
                               {timeout: 20000, polling: 50});
    title = await page.title();
  } catch (e) {
    title = `error ${e.message}`;
  }
  await context.close();
  process.stdout.write(JSON.stringify({title, logs}) + "\\n");
}
await browser.close();
"""
"""One headless Chromium for the module (as web/scripts/browse.mjs, run from web/ so that
playwright-core resolves): reads page URLs on stdin, opens each in a fresh context, writes
{title, logs} once the title starts with "done " or "error "."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Callable[[str], dict[str, Any]]]:
    """Open a page in the module's Chromium: its {title, logs}."""
    process = subprocess.Popen([node(), "--input-type=module", "-e", BROWSER], cwd=WEB,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None

    def open_page(url: str) -> dict[str, Any]:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(url + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
        assert line, f"chromium ended (exit code {process.poll()})"
        return json.loads(line)

    try:
        yield open_page
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def run_in_chromium(name: str, lang: str, code: str, key: str, metrics: dict[str, Any],
                    site: tuple[str, Path], browser: Callable[[str], dict[str, Any]]
                    ) -> dict[str, Any]:
    url, root = site
    (root / "metrics.json").write_text(json.dumps(metrics))
    given = prelude(code, key, metrics)
    after = EPILOGUE + 'document.title = "done " + JSON.stringify(sampleStats);\n'
    if lang == "html":
        assert code.count('<script type="module">') == 1, name
        body = code.replace('<script type="module">', '<script type="module">\n' + given)
        body = body.replace("</script>", after + "</script>")
    else:
        body = f'<script type="module">\n{given}{code}{after}</script>\n'
    imports = {"deniable-client": "/dist/index.js", "deniable-client/all": "/dist/all.js"}
    page = (f"<!doctype html>\n<title>running</title>\n"
            f'<script type="importmap">{json.dumps({"imports": imports})}</script>\n'
            '<script>addEventListener("error", (e) => '
            '{ document.title = "error " + e.message; });</script>\n'
            + body.replace('"INGEST_KEY"', json.dumps(key)))
    file = re.sub(r"\W", "_", name) + ".html"
    (root / file).write_text(page)
    result = browser(f"{url}/{file}")
    assert result["title"].startswith("done "), f"{name}: {result}"
    return json.loads(result["title"][len("done "):])


@pytest.mark.parametrize("name,lang,code", [(n, lang, c) for n, lang, c, f in samples() if not f],
                         ids=[n for n, *_, f in samples() if not f])
def test_every_web_sample_runs_and_is_counted(
        name: str, lang: str, code: str,
        docs_collector: tuple[CollectorProcess, dict[str, str], dict[str, Any]],
        site: tuple[str, Path], browser: Callable[[str], dict[str, Any]], tmp_path: Path) -> None:
    collector, keys, metrics = docs_collector
    assert "reporter" in code, f"{name}: the harness reads the sample's `reporter`"
    code = code.replace(EXAMPLE_URL, collector.url)
    before = counted(collector, keys["read"], metrics)
    if "deniable-client/node" in code:
        stats = run_in_node(code, keys["ingest"], metrics, tmp_path)
    else:
        stats = run_in_chromium(name, lang, code, keys["ingest"], metrics, site, browser)
    assert {k: stats[k] for k in CLEAN} == dict.fromkeys(CLEAN, 0), f"{name}: {stats}"
    assert stats["keyRefused"] is False, f"{name}: {stats}"
    # Every report() call was sent, or skipped by the period gate (a metric's second call of
    # the day: docs/web.md, "One report per period"); a sample that reports sends something.
    calls = code.count("reporter.report(")
    assert stats["sent"] + stats["periodSkipped"] == calls, f"{name}: {calls} calls, {stats}"
    assert stats["sent"] >= min(calls, 1), f"{name}: {stats}"
    assert counted(collector, keys["read"], metrics) - before == stats["sent"], name
