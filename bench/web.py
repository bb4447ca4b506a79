"""The web client's bundle size and perturbation speed, in one run.

    ./dev bench web [--calls=N] [--rounds=N]

Runs web/bench/bench.mjs under Node (``./dev bench web`` installs and builds web/ first):
the minified, gzipped size of what a page ships for ``import {Reporter} from
"deniable-client"`` (budget 12 KiB), and perturbations per second of the web client against
Math.random-based randomized response, measured side by side.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

WEB = Path(__file__).resolve().parent.parent / "web"


def main() -> int:
    node = shutil.which("node")
    if node is None:
        print("bench/web.py: node is not installed", file=sys.stderr)
        return 1
    return subprocess.run([node, "bench/bench.mjs", *sys.argv[1:]], cwd=WEB).returncode


if __name__ == "__main__":
    sys.exit(main())
