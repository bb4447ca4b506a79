"""Installing the web client from a path builds it (issue 27): `npm install <path to web/>`
into a fresh app runs the package's `prepare` (scripts/prepare.mjs: devDependencies from the
lockfile, then tsc), so both entries and deniable-client/node import. A source copy without
node_modules or dist stands for a fresh clone.

Needs node and npm (./dev test installs them) and the npm registry or its cache.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_web_client import WEB, node

pytestmark = pytest.mark.slow


def test_npm_install_from_a_path_builds_the_package(tmp_path: Path) -> None:
    node()
    npm = shutil.which("npm") or pytest.fail("npm is not installed: run ./dev test")
    source = tmp_path / "web"
    shutil.copytree(WEB, source, ignore=shutil.ignore_patterns("node_modules", "dist", "test",
                                                               "e2e"))
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(json.dumps({"name": "app", "version": "1.0.0",
                                                  "type": "module", "private": True}))
    done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefer-offline",
                           str(source)], cwd=app, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (app / "t.mjs").write_text(
        'import {Reporter} from "deniable-client";\n'
        'import {Reporter as All} from "deniable-client/all";\n'
        'import {nodeStorage} from "deniable-client/node";\n'
        'console.log(JSON.stringify([typeof Reporter, typeof All, typeof nodeStorage]));\n')
    ran = subprocess.run([node(), "t.mjs"], cwd=app, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout) == ["function", "function", "function"]
