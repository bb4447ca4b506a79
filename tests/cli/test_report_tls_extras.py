"""`deniable report` against a collector behind TLS with a private CA (the VM kit's nginx):
a clear message without --cacert, the numbers with it; and a message naming the extra to
install when an optional dependency is missing."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deniable.analysis import HTTPSource
from deniable.analysis.sources import SourceError
from deniable.cli.main import main
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV
from tests.nginx_kit import private_ca, vm_nginx


@pytest.mark.slow
def test_report_trusts_a_private_ca_with_cacert(redis_url: str, redis_client, metrics_file: Path,  # type: ignore[no-untyped-def]
                                                tmp_path: Path, capsys) -> None:
    tls = private_ca(tmp_path / "tls")
    with CollectorProcess(redis_url, metrics_file, workers=1, env=OPEN_ENV) as collector, \
            vm_nginx(tmp_path / "nginx", tls, collector.port) as nginx:
        url = f"https://127.0.0.1:{nginx.port}"
        assert main(["report", "--collector", url]) == 1
        err = capsys.readouterr().err
        assert "TLS certificate could not be verified" in err and "--cacert FILE" in err
        assert main(["report", "--collector", url, "--cacert", str(tls.ca),
                     "--format", "json"]) == 0
        assert '"metrics"' in capsys.readouterr().out
        assert HTTPSource(url, verify=str(tls.ca)).metrics()
        with pytest.raises(SourceError, match="verify=FILE"):
            HTTPSource(url).metrics()
    with pytest.raises(SystemExit) as bad:
        main(["report", "--collector", url, "--cacert", str(tmp_path / "missing.pem")])
    assert bad.value.code == 2 and "no such file" in capsys.readouterr().err


BLOCK = """
import sys
from importlib.abc import MetaPathFinder
class Block(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {name!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Block())
from deniable.cli.main import main
sys.exit(main({argv!r}))
"""


@pytest.mark.parametrize(("missing", "argv", "extra"), [
    ("numpy", ["report", "--collector", "http://127.0.0.1:9"], "analysis"),
    ("flask", ["serve", "--redis-url", "redis://127.0.0.1:9/0"], "collector")])
def test_a_missing_extra_is_named_not_a_traceback(missing: str, argv: list[str],
                                                  extra: str) -> None:
    done = subprocess.run([sys.executable, "-c", BLOCK.format(name=missing, argv=argv)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert f"needs {missing}" in done.stderr and f"pip install 'deniable[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr
