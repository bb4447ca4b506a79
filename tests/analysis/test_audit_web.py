"""The audit of the web client (``deniable audit --client web``): the built web/dist passes
every check, and a copy of it made wrong in one place fails the check that should catch it.

Needs node and the built web client (``./dev test``, or ``npm ci && npm run build`` in web/).
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from deniable.audit.mechanisms import Audit, KindSubject, Subject, builtin_subjects
from deniable.audit.open_domain import OpenSubject, check_open_reports
from deniable.audit.web import WebClient
from deniable.cli.main import main
from deniable.client.kinds import MetricSpec
from tests.e2e.test_web_client import WEB, node

# A correct client must pass: the epsilon bounds at this confidence fail a true claim at most
# once in a million runs; each distribution check (chi-square, or 5 standard errors) fails a
# true claim at most once in a million runs too.
SURE = 1 - 1e-6
SUBJECTS = {s.name: s for s in builtin_subjects()}


@pytest.fixture(scope="module")
def web() -> WebClient:
    node()  # fails with how to build when web/dist is missing
    return WebClient.find(WEB)


def broken(tmp_path: Path, file: str, old: str, new: str) -> WebClient:
    """A copy of the built web client with ``old`` replaced by ``new`` in ``dist/<file>``."""
    root = tmp_path / "web"
    root.mkdir()
    shutil.copy(WEB / "package.json", root)
    shutil.copytree(WEB / "dist", root / "dist")
    path = root / "dist" / file
    text = path.read_text()
    assert text.count(old) == 1, f"{file} no longer holds {old!r}: update this test"
    path.write_text(text.replace(old, new))
    return WebClient.find(root)


def rows(results: list, check: str) -> list:
    return [r for r in results if r.check == check]


# -- the real web client passes ---------------------------------------------------------------

@pytest.mark.slow
def test_every_builtin_subject_passes_every_check_of_the_web_client(web: WebClient) -> None:
    results = Audit(trials=5_000, confidence=SURE, client=web).run(list(SUBJECTS.values()))
    assert [r for r in results if not r.passed] == []
    checks = {(r.subject, r.check) for r in results}
    for name, subject in SUBJECTS.items():
        wanted = {"epsilon", "distribution", "exact"}
        if isinstance(subject, Subject):
            wanted.add("repeated x4")
        assert {(name, c) for c in wanted} <= checks
        assert (name, "timing") not in checks  # the Python Reporter's checks are not run
    assert {("web client", "no-float"), ("web client", "randomness")} <= checks
    exact = next(r for r in results if r.subject == "open_16b_ln9" and r.check == "exact")
    assert exact.bound == pytest.approx(math.log(9), abs=1e-12)


def test_the_web_client_s_randomness_and_sources_pass(web: WebClient) -> None:
    assert [(r.check, r.passed) for r in web.client_checks()] == [("no-float", True),
                                                                   ("randomness", True)]


# -- a web client made wrong fails --------------------------------------------------------------

@pytest.mark.slow
def test_an_open_sketch_that_keeps_the_truth_too_often_fails(tmp_path: Path) -> None:
    wrong = broken(tmp_path, "open.js", "const keep = below(rng, this.p.den) < this.p.num;",
                   "const keep = below(rng, 5n) < 3n;")  # 3/5 where the id says 1/2
    subject = SUBJECTS["open_16b_ln9"]
    assert isinstance(subject, OpenSubject)
    # A hit rate of 3/5 for 1/2 is 14 standard errors at 5,000 reports per string.
    _, distribution = check_open_reports(subject, 5_000, 0.95, reports=wrong.open_reports)
    assert not distribution.passed
    assert not wrong.check_exact(subject).passed  # its GRR keeps 3/5, not 1/2


@pytest.mark.slow
def test_an_open_sketch_that_picks_the_level_by_the_value_fails_exact(tmp_path: Path) -> None:
    wrong = broken(tmp_path, "open.js", "const level = Number(below(rng, BigInt(this.levels)));",
                   "const level = padded[0] === 98 ? 0 : Number(below(rng, "
                   "BigInt(this.levels)));")  # a string starting with "b": always level 0
    result = wrong.check_exact(SUBJECTS["open_16b_ln9"])
    assert not result.passed and result.bound == math.inf
    assert "for 'b', perturbPadded does not draw (level, seed)" in result.detail


@pytest.mark.slow
def test_a_grr_whose_p_is_off_by_two_percent_fails(tmp_path: Path) -> None:
    wrong = broken(tmp_path, "kinds.js", "const keep = below(rng, this.p.den) < this.p.num;",
                   "const keep = below(rng, 100n) < 52n;")  # 52/100 where the id says 1/2
    subject = SUBJECTS["os_grr_ln5"]
    assert isinstance(subject, KindSubject)
    exact = wrong.check_exact(subject)
    assert not exact.passed and "P(0)" in exact.detail
    # 2/100 is 12.6 standard errors at 100,000 reports per input.
    results = Audit(trials=100_000, confidence=SURE, client=wrong).run([subject])
    assert not rows(results, "distribution")[0].passed


@pytest.mark.slow
def test_a_memo_layer_that_does_not_compose_to_the_wire_mechanism_fails(tmp_path: Path) -> None:
    wrong = broken(tmp_path, "layers.js",
                   "return fromProbabilities(div(sub(p1w, qb), spread), div(sub(qw, qb), spread));",
                   "return fromProbabilities(div(sub(p1w, qb), spread), div(qw, spread));")
    subject = SUBJECTS["two_coin_irr"]
    results = Audit(trials=2_000, confidence=SURE, client=wrong).run([subject])
    exact = rows(results, "exact")[0]
    assert not exact.passed and "memo layer is" in exact.detail
    # Its reports follow P(1|no) = 3/8 instead of 1/4: 12.9 standard errors at 2,000.
    assert not rows(results, "distribution")[0].passed


@pytest.mark.parametrize("retry", [
    "return BigInt(value % n);",  # a modulo instead of a rejection: biased
    # one rejection, then a modulo: looks like a restart for one word only
    "{ const again = source.bits(k); return BigInt(again < n ? again : again % n); }",
])
def test_a_below_that_does_not_reject_exactly_fails_exact(tmp_path: Path, retry: str) -> None:
    wrong = broken(tmp_path, "random.js", """            if (value < n)
                return BigInt(value);
        }""", f"""            if (value < n)
                return BigInt(value);
            {retry}
        }}""")
    result = wrong.check_exact(SUBJECTS["os_grr_ln5"])  # below(5) picks the other category
    assert not result.passed and "P(" in result.detail


def test_a_web_client_that_reads_no_csprng_or_uses_math_random_fails(tmp_path: Path) -> None:
    wrong = broken(tmp_path, "random.js", "globalThis.crypto.getRandomValues(out);",
                   "for (let i = 0; i < n; i++) out[i] = Math.floor(Math.random() * 256);")
    no_float, randomness = wrong.client_checks()
    assert not no_float.passed and "random.js" in no_float.detail
    assert not randomness.passed


def test_a_bitmean_spec_goes_to_the_web_client_as_its_id(web: WebClient) -> None:
    subject = KindSubject.of("bm", MetricSpec.build("numeric", mechanism="bm:1/4:0:1000",
                                                    lower=0, upper=1000))
    reports = web.kind_reports(subject, 1000, 2000, lambda label, done: None)
    assert set(reports) == {0, 1} and len(reports) == 2000


# -- the command ------------------------------------------------------------------------------

def test_the_command_without_node_exits_2_saying_so(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["audit", "--client", "web", "two_coin"]) == 2
    assert "no node on PATH" in capsys.readouterr().err


def test_the_command_without_a_built_client_exits_2_saying_how(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node()
    assert main(["audit", "--client", "web", "--web-client", str(tmp_path), "two_coin"]) == 2
    err = capsys.readouterr().err
    assert "holds no built web client" in err and "npm run build" in err


def test_web_client_without_client_web_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--web-client", str(WEB), "two_coin"]) == 2
    assert "--client web" in capsys.readouterr().err


@pytest.mark.slow
def test_the_command_audits_the_web_client(capsys: pytest.CaptureFixture[str]) -> None:
    node()
    status = main(["audit", "--client", "web", "--trials", "4000", "--confidence", str(SURE),
                   "os_grr_ln5", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["passed"] and out["client"] == "web"
    assert {r["check"] for r in out["results"]} == {"no-float", "randomness", "epsilon",
                                                    "distribution", "exact"}
