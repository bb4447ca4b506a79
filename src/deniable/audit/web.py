"""The audit of the web client (``deniable audit --client web``): the same checks, judged by
the same functions, on reports and samplers of the built TypeScript client.

    client = WebClient.find()              # the repo's web/, built (web/dist), and node >= 18
    results = Audit(client=client).run(builtin_subjects())

One ``node`` process per subject, check and input runs ``web_sampler.mjs`` (beside this module),
which imports the web client's own modules from ``<dir>/dist`` (those its Reporter uses) and:

- streams reports (``reports``): a boolean metric's permanent answer from ``memoBit`` with a
  new device secret (32 bytes of ``crypto.getRandomValues``) per device, re-perturbed by its
  instantaneous layer (``split``, ``Rr.perturb``) or drawn fresh; every other kind through
  ``MetricSpec.perturb`` with the client's ``SYSTEM_BITS``, an open string after its kind's
  ``encode``: what ``report()`` calls (src/all.ts). The ``epsilon``, ``distribution`` and
  ``repeated`` checks of ``deniable.audit.mechanisms`` and ``deniable.audit.open_domain``
  judge them.
- enumerates samplers (``exact``) over scripted random words, every sequence lightest first
  (each word of k bits at its 2**k values; rejection loops leave the mass of their longest
  runs, stated), and prints the exact probabilities, which this module compares with the
  id's fractions (Python's definitions): every randomized-response layer; GRR's ``perturb``
  (keep and the other categories); OUE's ``perturb`` (another category's bit and the true
  bit, the other bytes fixed) and its coin; subset selection's coin; 1BitMean's ``perturb``
  at both ends and the midpoint; the open sketch's (level, seed) draw over every word,
  its bucket (against Python's documented hash) and its GRR at one (level, seed).
- checks its randomness (``randomness``): ``SYSTEM_BITS`` is a ``SecureBits`` that reads
  ``crypto.getRandomValues``.

``no-float`` reads web/src (or, for an installed package, its dist) for float randomness.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from deniable.audit.mechanisms import (AnySubject, KindSubject, Progress, Subject, exact_ratio)
from deniable.audit.open_domain import (Distribution, OpenEnumeration, OpenSubject,
                                        judge_open_exact)
from deniable.audit.results import CheckResult
from deniable.client.categorical import (KaryRandomizedResponse, SubsetSelection,
                                         UnaryEncoding)
from deniable.client.composition import split
from deniable.client.errors import DeniableError
from deniable.client.kinds import kind_of
from deniable.client.mechanism import RandomizedResponse
from deniable.client.metrics import DECLARATION_FIELDS
from deniable.client.numeric import BitMean
from deniable.client.open_domain import OpenDomainSketch, bucket, normalise

MIN_NODE = 18
"""The oldest node the web client supports (its package.json ``engines``)."""
SAMPLER = Path(__file__).with_name("web_sampler.mjs")
_UNDECIDED_MASS = Fraction(1, 10 ** 9)
_FLOAT_RANDOM = re.compile(r"Math\.random\b|from [\"'](?:seedrandom|random-js|pure-rand)[\"']")
"""A float or non-cryptographic random source in the web client's code."""


class WebClientError(DeniableError):
    """The web client cannot be audited here: no node >= 18, or no built client."""


def repo_web_dir() -> Path | None:
    """The repository's web/ when this is a source checkout, else None."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "web" / "package.json").is_file() and (parent / "src" / "deniable").is_dir():
            return parent / "web"
    return None


@dataclass(frozen=True)
class WebClient:
    """A built web client and the node that runs it.

    Attributes:
        directory: the package directory (package.json and dist/).
        node: the node executable.
    """

    directory: Path
    node: str
    name: str = "web"

    @classmethod
    def find(cls, directory: Path | None = None, node: str | None = None) -> WebClient:
        """The client in ``directory`` (default: the repo's web/), run by ``node`` (default:
        ``node`` on PATH).

        Raises:
            WebClientError: no node >= 18, or no built client there (the message says how to
                get one).
        """
        found = node or shutil.which("node")
        if found is None:
            raise WebClientError(f"--client web runs the web client in node >= {MIN_NODE}, "
                                 f"and there is no node on PATH: install Node.js")
        try:
            version = subprocess.run([found, "--version"], capture_output=True, text=True,
                                     timeout=30, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            raise WebClientError(f"cannot run {found} --version: {exc}") from exc
        match = re.match(r"v(\d+)\.", version)
        if match is None or int(match.group(1)) < MIN_NODE:
            raise WebClientError(f"--client web needs node >= {MIN_NODE}; {found} is "
                                 f"{version or 'unknown'}")
        if directory is None:
            directory = repo_web_dir()
            if directory is None:
                raise WebClientError(
                    "no web client to audit: give --web-client DIR, the built package "
                    "directory (an installed deniable-client, e.g. node_modules/"
                    "deniable-client, or a checkout's web/ after `npm ci && npm run build`)")
        directory = Path(directory)
        if not (directory / "dist" / "all.js").is_file():
            raise WebClientError(
                f"{directory} holds no built web client ({directory / 'dist' / 'all.js'} is "
                f"missing): run `cd {directory} && npm ci && npm run build`, or give "
                f"--web-client DIR")
        return cls(directory, found)

    # -- running the sampler ---------------------------------------------------------------

    def _lines(self, job: dict[str, Any]) -> Iterator[str]:
        """The sampler's output lines for ``job``.

        Raises:
            WebClientError: the sampler failed (its stderr, shortened).
        """
        with subprocess.Popen([self.node, str(SAMPLER), str(self.directory), json.dumps(job)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "NODE_NO_WARNINGS": "1"}) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            yield from (line.rstrip("\n") for line in proc.stdout)
            error = proc.stderr.read()
            if proc.wait() != 0:
                raise WebClientError(f"the web client's sampler failed: {error.strip()[-800:]}")

    def _json(self, job: dict[str, Any]) -> Any:
        return json.loads("".join(self._lines(job)))

    def _stream(self, job: dict[str, Any], label: str, progress: Progress) -> list[str]:
        """The reports of one value (a job with one value), as their wire spellings."""
        out: list[str] = []
        for line in self._lines(job):
            if line in ("E",) or line.startswith("V "):
                continue
            chunk = line.split(",")
            out.extend(chunk)
            progress(label, len(chunk))
        return out

    # -- reports ---------------------------------------------------------------------------

    def boolean_reports(self, subject: Subject, value: bool, devices: int, k: int,
                        progress: Progress) -> list[int]:
        job = {"op": "reports", "metric": subject.metric, "declaration": subject.mechanism.id,
               "mode": subject.mode, "irr": subject.irr.id if subject.irr else None,
               "values": [value], "devices": devices, "k": k}
        label = f"{subject.name} (web): {'yes' if value else 'no'}"
        return [int(x) for x in self._stream(job, label, progress)]

    def kind_reports(self, subject: KindSubject, value: Fraction | int, n: int,
                     progress: Progress) -> list[int]:
        mechanism = subject.mechanism
        shown: Any = str(Fraction(value)) if isinstance(mechanism, BitMean) else value
        job = {"op": "reports", "metric": subject.metric, "declaration": _declaration(subject),
               "values": [shown], "devices": n, "k": 1}
        raw = self._stream(job, f"{subject.name} (web): {value}", progress)
        hexed = isinstance(mechanism, (UnaryEncoding, SubsetSelection))
        return [int(x, 16) if hexed else int(x) for x in raw]

    def open_reports(self, subject: OpenSubject, value: str, n: int,
                     progress: Progress) -> list[int]:
        job = {"op": "reports", "metric": subject.metric, "declaration": _declaration(subject),
               "values": [value], "devices": n, "k": 1}
        return [int(x) for x in self._stream(job, f"{subject.name} (web): {value[:12]!r}",
                                             progress)]

    # -- client-wide checks ----------------------------------------------------------------

    def client_checks(self) -> list[CheckResult]:
        return [self.check_no_float(), self.check_randomness()]

    def sources(self) -> list[Path]:
        """The files scanned for float randomness: web/src's TypeScript in a checkout, the
        built JavaScript of an installed package."""
        src = self.directory / "src"
        files = sorted(src.rglob("*.ts")) if src.is_dir() else []
        return files or sorted((self.directory / "dist").rglob("*.js"))

    def check_no_float(self) -> CheckResult:
        """No web client module calls a float random source (Math.random) or a source that is
        not crypto.getRandomValues."""
        files = self.sources()
        findings: list[str] = []
        for path in files:
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("//", 1)[0]
                if _FLOAT_RANDOM.search(code):
                    findings.append(f"{path.relative_to(self.directory)}:{number}: "
                                    f"{code.strip()[:60]}")
        return CheckResult(
            "web client", "no-float", bool(files) and not findings,
            "; ".join(findings[:5]) if findings else
            (f"no Math.random or other float source in {len(files)} files of "
             f"{files[0].parent.relative_to(self.directory) if files else 'src'}"
             if files else "no source files found"))

    def check_randomness(self) -> CheckResult:
        """The web client's system source is a SecureBits that reads crypto.getRandomValues,
        and no web module reads randomness elsewhere (``crypto.getRandomValues`` or the Node
        CSPRNG's ``randomBytes`` for the device secret file)."""
        started = time.monotonic()
        problems: list[str] = []
        found = self._json({"op": "randomness"})
        if not found.get("system_is_secure_bits"):
            problems.append("SYSTEM_BITS is not a SecureBits")
        if not found.get("secure_bits_reads"):
            problems.append("a new SecureBits drew without calling crypto.getRandomValues")
        if not found.get("system_bits_reads"):
            problems.append("SYSTEM_BITS drew a block without calling crypto.getRandomValues")
        return CheckResult(
            "web client", "randomness", not problems,
            "; ".join(problems) if problems else
            "SYSTEM_BITS is a SecureBits and every block it draws is read from "
            "crypto.getRandomValues (counted while it drew)",
            seconds=time.monotonic() - started)

    # -- exact -----------------------------------------------------------------------------

    def check_exact(self, subject: AnySubject) -> CheckResult:
        """The web client's samplers, enumerated over every sequence of random words, against
        the id's exact fractions (module docstring)."""
        started = time.monotonic()
        if isinstance(subject, OpenSubject):
            return self._open_exact(subject, started)
        job: dict[str, Any]
        if isinstance(subject, Subject):
            job = {"op": "exact", "metric": subject.metric,
                   "declaration": subject.mechanism.id, "mode": subject.mode,
                   "irr": subject.irr.id if subject.irr else None}
            problems, notes = _boolean_exact(subject, self._json(job))
        else:
            job = {"op": "exact", "metric": subject.metric, "declaration": _declaration(subject)}
            problems, notes = _kind_exact(subject, self._json(job))
        return CheckResult(subject.name, "exact", not problems,
                           "web: " + "; ".join(problems or notes),
                           seconds=time.monotonic() - started)

    def _open_exact(self, subject: OpenSubject, started: float) -> CheckResult:
        reference = OpenDomainSketch.from_id(subject.mechanism.id)
        values = subject.inputs()
        found = self._json({"op": "exact", "metric": subject.metric,
                            "declaration": _declaration(subject), "values": values})
        problems: list[str] = []
        if found.get("id") != reference.id:
            problems.append(f"the web client reads it as {found.get('id')}")
        mass: dict[tuple[int, int], Fraction] = defaultdict(Fraction)
        dists: list[Distribution] = []
        unfinished = Fraction(0)
        paths = 0
        for index, (value, got) in enumerate(zip(values, found["strings"])):
            padded = normalise(value, reference.max_bytes)
            dist: Distribution = defaultdict(dict)
            wrong: list[str] = []
            if "error" in got:
                problems.append(f"for {value!r}, {got['error']}")
                return CheckResult(subject.name, "exact", False,
                                   f"{reference.id}: " + "; ".join(problems),
                                   claim=float(found["epsilon"]), bound=math.inf,
                                   seconds=time.monotonic() - started, mechanism=reference.id)
            unfinished = max(unfinished, Fraction(got["unfinished"]))
            paths = max(paths, len(got["paths"]))
            for level, seed, probability, cell in got["paths"]:
                weight = Fraction(probability)
                if index == 0:
                    mass[(level, seed)] += weight
                want = (level, seed, bucket(padded[:reference.prefix_length(level)], level,
                                            seed, reference.g))
                cell_at = reference.split_cell(cell)
                if cell_at != want and len(wrong) < 3:
                    wrong.append(f"reports (level, seed, bucket) {cell_at} where its draws "
                                 f"give ({level}, {seed}) and the hash bucket {want[2]}")
                row = dist[cell_at[:2]]
                row[cell_at[2]] = row.get(cell_at[2], Fraction(0)) + weight
            problems.extend(f"for {value!r}, {text}" for text in wrong)
            dists.append(dist)
        coin_notes = []
        for value, grr in zip(values, found["grr"]):
            truth = bucket(normalise(value, reference.max_bytes)[:reference.prefix_length(0)],
                           0, 0, reference.g)
            text = _channel_problem(grr, truth, reference.g, reference.p, reference.q)
            if text.startswith("!"):
                problems.append(f"its GRR for {value!r} {text[1:]}")
            coin_notes.append(text)
        return judge_open_exact(
            subject, OpenEnumeration(mass, unfinished, dists, paths), problems,
            (Fraction(found["likelihood_ratio"]), float(found["epsilon"])),
            f"web GRR at (0, 0): {coin_notes[0]}", started)


def _declaration(subject: KindSubject | OpenSubject) -> dict[str, Any] | str:
    """The subject's declaration as the web client's declareMetric takes it."""
    mechanism = subject.mechanism
    spec = subject.spec
    if isinstance(mechanism, OpenDomainSketch):
        return {"kind": "open", "mechanism": mechanism.id, "max_bytes": mechanism.max_bytes}
    if isinstance(mechanism, BitMean) or spec is None:
        return mechanism.id
    # The kind's own catalogue fields that a metrics file declares.
    fields = kind_of(spec.kind).describe(spec)
    return {"kind": spec.kind, "mechanism": mechanism.id,
            **{k: v for k, v in fields.items() if k in DECLARATION_FIELDS}}


def _within(found: dict[str, Any], key: str, claimed: Fraction) -> tuple[bool, Fraction]:
    """Whether an enumeration's P(outcome ``key``) can be ``claimed``: exactly, or within the
    mass it left unfinished. Returns (ok, the mass left)."""
    got = Fraction(found["outcomes"].get(key, "0"))
    left = Fraction(found["unfinished"])
    return got <= claimed <= got + left, left


def _channel_problem(found: dict[str, Any], truth: int, d: int, p: Fraction,
                     q: Fraction) -> str:
    """A GRR enumeration (outcome index -> probability) against (p, q): a note, or a problem
    marked with a leading "!"."""
    wrong = [j for j in range(d) if not _within(found, str(j), p if j == truth else q)[0]]
    if set(found["outcomes"]) - {str(j) for j in range(d)}:
        return f"!reports outside 0..{d - 1}"
    if wrong:
        j = wrong[0]
        return (f"!gives P({j}) = {found['outcomes'].get(str(j), '0')}, the id "
                f"{p if j == truth else q}")
    return _coverage(Fraction(found["unfinished"]))


def _coverage(left: Fraction) -> str:
    """How much of an enumeration was followed, in words."""
    if left == 1:
        return ("not enumerated (a draw wider than 20 bits), left to the distribution "
                "check")
    return "exact over every word" + (f" (within {float(left):.1e})" if left else "")


def _boolean_exact(subject: Subject, found: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Every layer's fractions are Python's for the same id, and its perturb, over every word,
    gives them."""
    problems: list[str] = []
    notes: list[str] = []
    want = {"wire": subject.mechanism}
    if subject.mode == "instantaneous" and subject.irr is not None:
        want["memo"] = split(subject.mechanism, subject.irr)
        want["irr"] = subject.irr
    for label, mechanism in want.items():
        layer = found["layers"].get(label)
        if layer is None:
            problems.append(f"no {label} layer")
            continue
        if layer["id"] != mechanism.id:
            problems.append(f"{label} layer is {layer['id']}, Python's {mechanism.id}")
        parsed = RandomizedResponse.from_id(layer["id"])
        for bit, claimed_text, exact in ((1, layer["p_yes_given_yes"], parsed.p_yes_given_yes),
                                         (0, layer["p_yes_given_no"], parsed.p_yes_given_no)):
            claimed = Fraction(claimed_text)
            if claimed != exact:
                problems.append(f"{label} {layer['id']}: claims P(1|{bit}) = {claimed}, its "
                                f"id gives {exact}")
            ok, left = _within(layer["given"][bit], "1", exact)
            if not ok:
                problems.append(f"{label} {layer['id']}: its perturb gives P(1|{bit}) = "
                                f"{layer['given'][bit]['outcomes'].get('1', '0')}, the id "
                                f"{exact}")
            elif left > _UNDECIDED_MASS:
                notes.append(f"{label} P(1|{bit}): {_coverage(left)}")
    return problems, notes or [f"{', '.join(want)} exact over every random word"]


def _kind_exact(subject: KindSubject, found: dict[str, Any]) -> tuple[list[str], list[str]]:
    """A categorical or numeric mechanism's claims and samplers against its id's fractions."""
    mechanism = subject.mechanism
    problems: list[str] = []
    ratio = exact_ratio(mechanism.id)
    if found["id"] != mechanism.id:
        problems.append(f"the web client reads it as {found['id']}")
    if Fraction(found["likelihood_ratio"]) != ratio:
        problems.append(f"claims likelihood ratio {found['likelihood_ratio']}, the id's "
                        f"distributions give {ratio}")
    if abs(float(found["epsilon"]) - float(_log(ratio))) > 1e-12 * max(1.0, _log(ratio)):
        problems.append(f"claims epsilon {found['epsilon']}, ln of the id's ratio is "
                        f"{_log(ratio)}")
    notes = [f"worst-case ratio {ratio}"]
    if isinstance(mechanism, KaryRandomizedResponse):
        text = _channel_problem(found["index0"], 0, mechanism.d, mechanism.p, mechanism.q)
        (problems.append(f"its perturb {text[1:]}") if text.startswith("!")
         else notes.append(f"perturb {text}"))
    elif isinstance(mechanism, UnaryEncoding):
        for key, claimed in (("other_bit", mechanism.q), ("true_bit", Fraction(1, 2))):
            ok, left = _within(found[key], "1", claimed)
            if not ok:
                problems.append(f"its perturb sets the {key.replace('_', ' ')} with "
                                f"{found[key]['outcomes'].get('1', '0')}, the id {claimed}")
        notes.append("perturb's other bit q and true bit 1/2 exact over every byte")
    if isinstance(mechanism, (UnaryEncoding, SubsetSelection)):
        p = mechanism.q if isinstance(mechanism, UnaryEncoding) else mechanism.channel[0]
        ones, unread = Fraction(found["coin"]["ones"]), Fraction(found["coin"]["unread"])
        if not ones <= p <= ones + unread:
            problems.append(f"its coin draws 1 with probability in [{ones}, {ones + unread}], "
                            f"the id claims {p}")
        notes.append(f"coin exact within {float(unread):.0e}" if unread else "coin exact")
    if isinstance(mechanism, BitMean):
        for x, got in found["p_one"].items():
            claimed = mechanism.p_one(Fraction(x))
            ok, left = _within(got, "1", claimed)
            if not ok:
                problems.append(f"its perturb gives P(1|{x}) = {got['outcomes'].get('1', '0')}, "
                                f"the id {claimed}")
            else:
                notes.append(f"P(1|{x}) {_coverage(left)}")
    return problems, notes


def _log(ratio: Fraction) -> float:
    return math.log(ratio)
