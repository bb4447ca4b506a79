"""The v1 wire format: THE one shape of a batch, shared by the client and the collector.

A batch is one JSON object::

    {"batch_id": "<32 lowercase hex chars, random per batch>",
     "reports": [{"metric": "feature_x_enabled", "mechanism": "rr:1/2:1/2", "bit": 1}, ...]}

A report carries its perturbed value in the one field its mechanism names
(``deniable.client.kinds.payload_field``): ``"bit": 0 | 1`` for randomized response (``rr:``)
and 1BitMean (``bm:``), ``"index": <0..d-1>`` for k-ary randomized response (``grr:``), and
``"bits": "<hex>"`` for unary encoding (``oue:``; bit i of the number is category i, written
in exactly ceil(d / 4) lowercase hex digits), and ``"cell": <0..cells-1>`` for the open-domain
sketch (``od:``; ``OpenDomainSketch.cell_of``). Clients that send only bits are unchanged.

A report may also carry ``"dims": {"platform": "ios", ...}``: the metric's declared public
dimensions (``deniable.client.dimensions``), in clear and from closed allow-lists; they are
not protected by local differential privacy, and the collector counts them as marginals.

It carries perturbed values only: no true value, device id, user id or device timestamp.
The collector counts a re-sent ``batch_id`` once. It accepts a batch whole or not at all,
unless the request carries ``Prefer: handling=lenient`` (RFC 7240; ``LENIENT_PREFERENCE``):
then it counts the metrics whose reports are all valid and refuses the others per metric,
answering which and why (``refused_document``, read back by ``parse_refused``)::

    202 {"batch_id": "...", "accepted": 7,
         "refused": [{"metric": "os", "reports": 3,
                      "problems": [{"pointer": "/reports/2/mechanism", "detail": "..."}]}]}

A refused metric's reports were not counted; a client keeps them (the Python client's
``Reporter.retry_refused``) and may send them again, in a new batch, once the collector
accepts them. If every metric is refused, the answer is the 422 problem document with the
same ``refused`` member, and nothing is recorded.
"""
from __future__ import annotations

import hashlib
import json
import operator
import re
import secrets
from collections import Counter
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from deniable.client.dimensions import NONE, DimensionError, Dimensions
from deniable.client.errors import InvalidParameterError, Problem, WireFormatError
from deniable.client.kinds import payload_field, parse_mechanism

API_VERSION = "v1"
REPORTS_PATH = f"/{API_VERSION}/reports"
METRICS_PATH = f"/{API_VERSION}/metrics"
MEDIA_TYPE = "application/json"

METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")
"""Metric names: lowercase letters, digits and underscores, at most 64 characters. This keeps
Redis glob and hash-tag characters out of every key."""
BATCH_ID = re.compile(r"^[0-9a-f]{32}\Z")
BATCH_FIELDS = frozenset({"batch_id", "reports"})
REPORT_FIELDS = frozenset({"metric", "mechanism", "bit"})
"""The fields of a report whose mechanism sends a ``bit`` (``rr:`` and ``bm:``)."""
PAYLOAD_FIELDS = ("bit", "index", "bits", "cell")
SPARSE_FIELD = "cell"
"""The payload field of the sparse mechanisms (``od:``): a batch sums them per touched slot."""
DEFAULT_MAX_REPORTS = 1000
"""The default cap on reports per batch, for the client and the collector alike."""
MAX_PROBLEMS = 50
"""At most this many offending fields are listed in one error."""
MAX_METRIC_PROBLEMS = 5
"""At most this many offending fields are listed per refused metric (lenient handling)."""
PREFER_HEADER = "Prefer"
LENIENT_PREFERENCE = "handling=lenient"
"""``Prefer: handling=lenient`` (RFC 7240 section 4.4) asks for per-metric acceptance; the
collector then answers ``Preference-Applied: handling=lenient``. Without it, a batch is
accepted whole or not at all, as clients that do not read ``refused`` expect."""


def wants_lenient(prefer: str | None) -> bool:
    """Whether a ``Prefer`` header's value asks for ``handling=lenient`` (RFC 7240:
    comma-separated preferences, each ``token[=value]`` with optional ``;`` parameters;
    case-insensitive, spaces around ``=`` allowed)."""
    if not prefer:
        return False
    for preference in prefer.split(","):
        name, _, value = preference.partition(";")[0].partition("=")
        if name.strip().lower() == "handling" and value.strip().strip('"').lower() == "lenient":
            return True
    return False


def new_batch_id() -> str:
    """A fresh random batch id: 128 bits from the secure source, as 32 lowercase hex chars."""
    return secrets.token_hex(16)


def is_metric_name(name: object) -> bool:
    """Whether ``name`` is a valid metric name."""
    return isinstance(name, str) and METRIC_NAME.match(name) is not None


def encode_batch(batch_id: str, reports: Iterable[tuple[Any, ...]]) -> dict[str, Any]:
    """Build the JSON document for a batch of (metric, mechanism id, perturbed value) triples,
    or (metric, mechanism id, perturbed value, dims) quadruples: the value is a bit, a category
    index, or an OUE bitset's hex (``UnaryEncoding.encode_bits``); dims a mapping of public
    dimension values (left out when empty)."""
    return {"batch_id": batch_id, "reports": [_report(*r) for r in reports]}


def _report(metric: str, mechanism: str, value: int | str,
            dims: Mapping[str, str] | None = None) -> dict[str, Any]:
    report: dict[str, Any] = {"metric": metric, "mechanism": mechanism,
                              payload_field(mechanism): value}
    if dims:
        report["dims"] = dict(dims)
    return report


@dataclass(frozen=True)
class Tally:
    """What one batch adds to one metric version: ``counts``, one per counter slot of an hour
    (``keys.width``): ``n`` reports first, then the perturbed counts (``ones`` for a bit; per
    category for a categorical mechanism)."""

    mechanism: str
    counts: tuple[int, ...]
    series: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Per public-dimension series (``"platform=ios"``): the same counts for the reports that
    stated that value; empty when no report stated a dimension."""
    cells: tuple[tuple[int, int], ...] = ()
    """Sparse mechanisms (``od:``, whose width is 1 + levels x seeds x g): ``counts`` is
    ``(n,)`` and the touched slots are (slot, count) pairs here, slot >= 1, ascending."""

    @property
    def n(self) -> int:
        """The reports."""
        return self.counts[0]

    @property
    def ones(self) -> int:
        """The perturbed ones of a one-bit mechanism (``rr:``, ``bm:``)."""
        return self.counts[1]


@dataclass(frozen=True)
class Refusal:
    """One metric's reports that a lenient decode refused: how many, why (at most
    ``MAX_METRIC_PROBLEMS`` fields), and ``content``, the SHA-256 of those reports'
    canonical JSON (for ``Batch.digest``)."""

    n_reports: int
    problems: tuple[Problem, ...]
    content: str = ""


@dataclass(frozen=True)
class Batch:
    """A validated batch, already summed per metric; with lenient handling, also the metrics
    whose reports were refused (not in ``tallies``, never counted)."""

    batch_id: str
    tallies: dict[str, Tally]
    n_reports: int
    refused: Mapping[str, Refusal] = field(default_factory=dict)

    @property
    def n_accepted(self) -> int:
        """The reports counted: every report but the refused metrics'."""
        return self.n_reports - sum(r.n_reports for r in self.refused.values())

    @property
    def digest(self) -> str:
        """SHA-256 of the batch's content (its per-metric tallies, and the refused reports'
        content if any), for idempotency checks.

        A re-sent batch has the same digest; a batch id reused for other content does not.
        A batch with nothing refused has the digest it had before lenient handling existed.
        """
        text = ";".join(f"{metric}|{t.mechanism}|" + "|".join(map(str, t.counts))
                        + "".join(f"|{slot}:{by}" for slot, by in t.cells)
                        + "".join(f"|{label}=" + "/".join(map(str, counts))
                                  for label, counts in sorted(t.series.items()))
                        for metric, t in sorted(self.tallies.items()))
        if self.refused:
            text += "#refused:" + ";".join(f"{metric}|{r.n_reports}|{r.content}"
                                           for metric, r in sorted(self.refused.items()))
        return hashlib.sha256(text.encode()).hexdigest()


def refused_document(refused: Mapping[str, Refusal]) -> list[dict[str, Any]]:
    """The ``refused`` member of the collector's answer: one entry per refused metric, by
    name, with its report count and problems (JSON pointers into the request body)."""
    return [{"metric": metric, "reports": r.n_reports,
             "problems": [{"pointer": p.pointer, "detail": p.detail} for p in r.problems]}
            for metric, r in sorted(refused.items())]


def parse_refused(doc: object) -> dict[str, str]:
    """metric -> why the collector refused its reports, from an answer's ``refused`` member
    (a 2xx or a 422 problem document); empty if there is none. Entries that are not as
    ``refused_document`` writes them are skipped."""
    entries = doc.get("refused") if isinstance(doc, dict) else None
    found: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict) or not is_metric_name(entry.get("metric")):
            continue
        problems = entry.get("problems")
        details = [f"{p.get('pointer', '')} {p.get('detail', '')}".strip()
                   for p in (problems if isinstance(problems, list) else ())
                   if isinstance(p, dict)]
        found[entry["metric"]] = "; ".join(details)[:500] or "refused by the collector"
    return found


class _Problems:
    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, pointer: str, detail: str) -> None:
        if len(self.items) < MAX_PROBLEMS:
            self.items.append(Problem(pointer, detail))

    def raise_if_any(self) -> None:
        if self.items:
            raise WireFormatError("the batch breaks the v1 wire format", self.items)


def decode_batch(doc: Any, registry: Mapping[str, str],
                 max_reports: int = DEFAULT_MAX_REPORTS, *,
                 older: Mapping[str, AbstractSet[str]] | None = None,
                 dimensions: Mapping[str, Dimensions] | None = None,
                 lenient: bool = False) -> Batch:
    """Validate a parsed batch document against the registered metrics and sum it per metric.

    A report may use its metric's current mechanism or, if ``older`` lists it, the mechanism
    of an earlier version still accepted; one batch uses one mechanism per metric.

    With ``lenient``, a problem in a report that names a valid metric name refuses that
    metric's reports (every one of them in the batch) instead of the batch: they go to
    ``Batch.refused``, not to ``tallies``. Problems of the batch itself (its fields, a report
    that is not an object or names no valid metric) still refuse it whole. The returned batch
    may then count nothing (every metric refused): the caller decides what to answer.

    Args:
        doc: the parsed JSON document.
        registry: metric name -> its registered (current) mechanism id.
        max_reports: the most reports one batch may carry.
        older: metric name -> mechanism ids of its earlier versions that are also accepted.
        dimensions: metric name -> its declared public dimensions (none if absent).
        lenient: refuse per metric, not per batch (see above).

    Raises:
        WireFormatError: listing every offending field as a JSON pointer (up to MAX_PROBLEMS).
    """
    problems = _Problems()
    if type(doc) is not dict:
        problems.add("", "the batch must be a JSON object")
        problems.raise_if_any()
    for unknown in sorted(doc.keys() - BATCH_FIELDS):
        problems.add(f"/{_escape(unknown)}", "unknown field")
    batch_id = doc.get("batch_id")
    if type(batch_id) is not str or not BATCH_ID.match(batch_id):
        problems.add("/batch_id", "must be 32 lowercase hex characters")
    reports = doc.get("reports")
    if type(reports) is not list:
        problems.add("/reports", "must be a list of reports")
        problems.raise_if_any()
    if not reports:
        problems.add("/reports", "must hold at least one report")
    elif len(reports) > max_reports:
        problems.add("/reports", f"holds {len(reports)} reports; the most is {max_reports}")
    problems.raise_if_any()

    tallies = _sum_clean_reports(reports, registry, older)
    if tallies is not None:
        return Batch(batch_id=batch_id, tallies=tallies, n_reports=len(reports))

    counts: dict[str, list[int]] = {}
    cells: dict[str, Counter[int]] = {}  # sparse mechanisms: metric -> slot -> count
    by_series: dict[str, dict[str, list[int]]] = {}
    used: dict[str, str] = {}
    per_metric: Counter[str] = Counter()       # lenient: reports per metric name
    refusing: dict[str, list[Problem]] = {}     # lenient: metric -> its problems
    for i, report in enumerate(reports):
        if type(report) is not dict:
            problems.add(f"/reports/{i}", "must be an object")
            continue
        metric: Any = report.get("metric")
        mechanism: Any = report.get("mechanism")
        own = lenient and is_metric_name(metric)  # a problem here refuses the metric only
        if own:
            per_metric[metric] += 1
        mine = _Problems() if own else problems
        expected = registry.get(metric) if type(metric) is str else None
        accepted = expected is not None and _accepted(metric, mechanism, expected, older)
        field = _payload_field_of(report, mechanism if accepted else expected, mechanism)
        wanted = {"metric", "mechanism", field} | ({"dims"} & report.keys())
        if report.keys() != wanted:
            for missing in sorted(wanted - report.keys()):
                mine.add(f"/reports/{i}/{missing}", "is required")
            for unknown in sorted(report.keys() - wanted):
                mine.add(f"/reports/{i}/{_escape(unknown)}", "unknown field")
            _refuse(refusing, metric, mine, own)
            continue
        if expected is None:
            mine.add(f"/reports/{i}/metric", "is not a registered metric")
        elif not accepted:
            mine.add(f"/reports/{i}/mechanism",
                     f"must be the metric's registered mechanism {expected}"
                     + (" or an earlier version's" if older and older.get(metric) else ""))
        elif used.setdefault(metric, mechanism) != mechanism:
            mine.add(f"/reports/{i}/mechanism",
                     f"one batch must use one mechanism per metric; an earlier report "
                     f"used {used[metric]}")
        row = _row(report[field], mechanism if accepted else None, field)
        if isinstance(row, str):
            mine.add(f"/reports/{i}/{field}", row)
        labels: list[str] = []
        if "dims" in report and expected is not None:
            declared = (dimensions or {}).get(metric, NONE)
            found = _series(report["dims"], declared)
            if isinstance(found, Problem):
                mine.add(f"/reports/{i}/dims{found.pointer}", found.detail)
            else:
                labels = found
        _refuse(refusing, metric, mine, own)
        if problems.items or mine.items or metric in refusing:
            continue
        assert not isinstance(row, str)
        if field == SPARSE_FIELD:  # row = (slot,): one report adds 1 to n and to its slot
            _add(counts, metric, (1,))
            cells.setdefault(metric, Counter())[row[0]] += 1
            if labels:
                mine.add(f"/reports/{i}/dims", "an open-domain metric takes no dims")
                _refuse(refusing, metric, mine, own)
            continue
        _add(counts, metric, row)
        for label in labels:
            _add(by_series.setdefault(metric, {}), label, row)
    problems.raise_if_any()
    refused = {metric: Refusal(per_metric[metric], tuple(found),
                               _content(r for r in reports if r.get("metric") == metric))
               for metric, found in refusing.items()}
    return Batch(batch_id=batch_id,
                 tallies={m: Tally(used[m], tuple(c),
                                   {s: tuple(v) for s, v in by_series.get(m, {}).items()},
                                   tuple(sorted(cells[m].items())) if m in cells else ())
                          for m, c in counts.items() if m not in refused},
                 n_reports=len(reports), refused=refused)


def _refuse(refusing: dict[str, list[Problem]], metric: str, found: _Problems,
            own: bool) -> None:
    """Lenient handling: record a report's problems against its metric (at most
    MAX_METRIC_PROBLEMS per metric), which refuses the metric."""
    if own and found.items:
        listed = refusing.setdefault(metric, [])
        listed.extend(found.items[:MAX_METRIC_PROBLEMS - len(listed)])


def _content(reports: Iterable[dict[str, Any]]) -> str:
    """SHA-256 of reports' canonical JSON (sorted keys, sorted reports): the same for a
    re-sent batch however it is laid out."""
    texts = sorted(json.dumps(r, sort_keys=True, separators=(",", ":"), default=str)
                   for r in reports)
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()


def _add(totals: dict[str, list[int]], key: str, row: tuple[int, ...]) -> None:
    """Add one report's row to ``totals[key]``, slot by slot in C (``map``): a 1025-slot OUE
    row costs microseconds, not a Python loop over every slot."""
    tally = totals.get(key)
    totals[key] = list(row) if tally is None else list(map(operator.add, tally, row))


def _series(stated: object, declared: Dimensions) -> list[str] | Problem:
    """The series labels a report's ``dims`` adds to, or the problem with them."""
    if type(stated) is not dict:
        return Problem("", "must be an object mapping dimension names to values")
    try:
        return declared.series(declared.normalize(stated))
    except DimensionError as exc:
        return Problem(f"/{_escape(exc.field)}", str(exc))


def _payload_field_of(report: dict[str, Any], *mechanisms: object) -> str:
    """The payload field a report must carry: of ``mechanisms`` (the accepted or registered
    one, then the one it names) that are ids, the first whose field the report has, so that
    only the real problem is named (a report naming another mechanism, with that mechanism's
    payload, is refused for its mechanism); else the first one's; else the field it has,
    else ``bit``."""
    fields = []
    for mechanism in mechanisms:
        if type(mechanism) is str:
            try:
                fields.append(payload_field(mechanism))
            except InvalidParameterError:
                pass
    for field in fields:
        if field in report:
            return field
    if fields:
        return fields[0]
    present = [name for name in PAYLOAD_FIELDS if name in report]
    return present[0] if len(present) == 1 else "bit"


def _row(payload: object, mechanism: str | None, field: str) -> tuple[int, ...] | str:
    """One report's counter increments, or what is wrong with its payload."""
    if mechanism is None:  # the mechanism is already reported as a problem
        if field == "bit" and not (type(payload) is int and payload in (0, 1)):
            return "must be the integer 0 or 1"
        return ()
    try:
        parsed = parse_mechanism(mechanism)
        if field == SPARSE_FIELD:  # (the slot of the cell,): never a dense row of the width
            return (1 + parsed.cell_of(payload),)  # type: ignore[union-attr]
        return parsed.counts_of(payload)  # type: ignore[union-attr]
    except InvalidParameterError as exc:
        return str(exc)


def _accepted(metric: str, mechanism: object, expected: str,
              older: Mapping[str, AbstractSet[str]] | None) -> bool:
    """Whether ``mechanism`` is the metric's current mechanism or an accepted older one."""
    if mechanism == expected:
        return True
    return older is not None and type(mechanism) is str and mechanism in older.get(metric, ())


class _NotClean(Exception):
    """A report needs the careful path (which names every offending field)."""


_FIELDS_OF_REPORT = operator.itemgetter("metric", "mechanism", "bit")
_BIT_OF_REPORT = operator.itemgetter("bit")


def _sum_clean_reports(reports: list[Any], registry: Mapping[str, str],
                       older: Mapping[str, AbstractSet[str]] | None = None
                       ) -> dict[str, Tally] | None:
    """Sum a batch whose every report is valid, in C-speed passes; None if any is not.

    The hot path of the collector: the reports are counted per distinct (metric, mechanism,
    bit) triple, so the registry is consulted once per triple, not once per report. Any doubt
    (a missing or unknown field, an unregistered metric, a bool or float bit, a non-object
    report) returns None, and decode_batch's careful loop then lists the problems.
    """
    try:
        triples = Counter(map(_FIELDS_OF_REPORT, reports))
        # Every report has the three fields (else KeyError/TypeError above), so the lengths
        # add up to 3 per report exactly when no report has a fourth.
        if sum(map(len, reports)) != 3 * len(reports):
            return None
        # True == 1 and 1.0 == 1 as dict keys: refuse any bit that is not exactly an int.
        if set(map(type, map(_BIT_OF_REPORT, reports))) != {int}:
            return None
    except (KeyError, TypeError, IndexError):
        return None
    n_by_metric: dict[str, int] = {}
    ones_by_metric: dict[str, int] = {}
    used: dict[str, str] = {}
    for (metric, mechanism, bit), count in triples.items():
        expected = registry.get(metric) if type(metric) is str else None
        if expected is None or not (bit == 0 or bit == 1):
            return None
        if expected != mechanism and not _accepted(metric, mechanism, expected, older):
            return None
        if not _sends_a_bit(mechanism):
            return None
        if used.setdefault(metric, mechanism) != mechanism:
            return None
        n_by_metric[metric] = n_by_metric.get(metric, 0) + count
        ones_by_metric[metric] = ones_by_metric.get(metric, 0) + count * bit
    return {metric: Tally(used[metric], (n, ones_by_metric[metric]))
            for metric, n in n_by_metric.items()}


def _sends_a_bit(mechanism: str) -> bool:
    """Whether a registered mechanism's reports carry a ``bit`` (``rr:``, ``bm:``): asked of
    ``kinds.payload_field``, the one table of payload fields."""
    return payload_field(mechanism) == "bit"


_COMPACT_HEAD = re.compile(rb'\{"batch_id":"([0-9a-f]{32})","reports":\[\{')
_COMPACT_SEPARATOR = b"},{"
_COMPACT_TAIL = b"}]}"
_COMPACT_REPORT = re.compile(  # a mechanism: printable ASCII but for '"' and '\\' (escapes)
    rb'"metric":"([a-z][a-z0-9_]{0,63})","mechanism":"([!#-\[\]-~]*)",'
    rb'(?:"bit":([01])|"cell":(0|[1-9][0-9]{0,9}))')
"""One compact report's inside: a ``bit`` (0 or 1), or an open-domain ``cell`` (an integer
without sign, leading zero or exponent, as ``json.dumps`` and ``JSON.stringify`` write it)."""


_COMPACT_REPORTS_SEEN: dict[bytes, tuple[str, str, str, int] | None] = {}
_COMPACT_REPORTS_KEPT = 4096


def _compact_report(piece: bytes) -> tuple[str, str, str, int] | None:
    """(metric, mechanism, payload field, value) of one compact report's inside, or None;
    cached, since the same few reports (two per boolean metric) make up nearly every batch
    (an open metric's reports are spread over its cells: the cache stays bounded)."""
    try:
        return _COMPACT_REPORTS_SEEN[piece]
    except KeyError:
        pass
    match = _COMPACT_REPORT.fullmatch(piece)
    found = None if match is None else (
        match.group(1).decode("ascii"), match.group(2).decode("ascii"),
        "bit" if match.group(3) is not None else SPARSE_FIELD,
        int(match.group(3) if match.group(3) is not None else match.group(4)))
    if len(_COMPACT_REPORTS_SEEN) >= _COMPACT_REPORTS_KEPT:
        _COMPACT_REPORTS_SEEN.clear()  # bounded, whatever a client sends
    _COMPACT_REPORTS_SEEN[piece] = found
    return found


def decode_compact_batch(body: bytes, registry: Mapping[str, str],
                         max_reports: int = DEFAULT_MAX_REPORTS, *,
                         older: Mapping[str, AbstractSet[str]] | None = None) -> Batch | None:
    """The batch in ``body`` if it is written exactly as this module's client writes it:
    ``encode_batch``'s key order, compact ``json.dumps`` separators, every report valid.

    The hot path of the collector: no JSON parser and no object per report. The body is split
    on its ``},{`` separators and the reports counted as bytes; only distinct reports (at most
    two per boolean metric; one per touched cell of an open-domain metric, whose ``cell`` is
    checked against the mechanism's ``cells``) are matched against the rules. Anything else (whitespace, another key
    order, an escape, a bool or float bit, an unregistered metric or other mechanism, too many
    reports) returns None, never a wrong batch: parse such a body and use decode_batch, which
    names every problem. A body accepted here is valid JSON that decode_batch reads as this
    same batch, with no repeated key (tests/client/test_wire.py checks both).
    """
    head = _COMPACT_HEAD.match(body)
    if head is None or not body.endswith(_COMPACT_TAIL):
        return None
    pieces = body[head.end():-len(_COMPACT_TAIL)].split(_COMPACT_SEPARATOR)
    if len(pieces) > max_reports:
        return None
    n_by_metric: dict[str, int] = {}
    ones_by_metric: dict[str, int] = {}
    cells: dict[str, Counter[int]] = {}  # open-domain metrics: metric -> slot -> count
    used: dict[str, str] = {}
    n_cells: dict[tuple[str, str, str], int] = {}  # (metric, mechanism, field) checked: cells
    for piece, count in Counter(pieces).items():
        report = _compact_report(piece)
        if report is None:
            return None
        metric, mechanism, field_name, value = report
        key = (metric, mechanism, field_name)
        if key not in n_cells:  # checked once per metric and mechanism, not per report
            expected = registry.get(metric)
            if expected != mechanism and (
                    expected is None or not _accepted(metric, mechanism, expected, older)):
                return None
            if payload_field(mechanism) != field_name:
                return None
            if used.setdefault(metric, mechanism) != mechanism:
                return None
            n_cells[key] = _compact_cells(mechanism) if field_name == SPARSE_FIELD else 0
        n_by_metric[metric] = n_by_metric.get(metric, 0) + count
        if field_name == SPARSE_FIELD:
            if value >= n_cells[key]:  # (the pattern admits no sign)
                return None
            cells.setdefault(metric, Counter())[1 + value] += count
        else:
            ones_by_metric[metric] = ones_by_metric.get(metric, 0) + count * value
    return Batch(batch_id=head.group(1).decode("ascii"),
                 tallies={metric: (Tally(used[metric], (n,), cells=tuple(sorted(
                                       cells[metric].items()))) if metric in cells
                                   else Tally(used[metric], (n, ones_by_metric[metric])))
                          for metric, n in n_by_metric.items()},
                 n_reports=len(pieces))


def _compact_cells(mechanism: str) -> int:
    """How many cells an open-domain mechanism's reports take (a cell is in [0, cells))."""
    return int(parse_mechanism(mechanism).cells)  # type: ignore[union-attr]


def _escape(token: str) -> str:
    """Escape one JSON-pointer reference token (RFC 6901)."""
    return str(token).replace("~", "~0").replace("/", "~1")
