"""The compact reading of a batch (the collector's hot path) never disagrees with the careful
one: it returns the same batch, or None and leaves the body to the parser."""
from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from deniable.client import WireFormatError
from deniable.client.open_domain import OpenDomainSketch
from deniable.client.wire import decode_batch, decode_compact_batch, encode_batch
from deniable.collector.ingest import repeats_a_key
from tests.client.test_wire import BATCH_ID_OK, MECHANISM_OF, any_report

FIELD_ORDER = ("metric", "mechanism", "bit")
valid_triple = st.sampled_from(sorted(MECHANISM_OF)).flatmap(
    lambda m: st.tuples(st.just(m), st.just(MECHANISM_OF[m]), st.sampled_from([0, 1])))


def in_client_order(report: object) -> object:
    """A report with the three fields in encode_batch's order (others as they are)."""
    if isinstance(report, dict) and set(report) == set(FIELD_ORDER):
        return {field: report[field] for field in FIELD_ORDER}
    return report


def compact(doc: object) -> bytes:
    """A body as the client writes it (src/deniable/client/queue.py)."""
    return json.dumps(doc, separators=(",", ":")).encode()


def careful(body: bytes, max_reports: int = 1000) -> tuple[str, dict[str, tuple[str, int, int]]] | None:
    """What the parser and decode_batch make of a body: (batch_id, tallies), or None if they
    refuse it (not JSON, a repeated key, or a wire-format error)."""
    try:
        doc = orjson.loads(body)
        batch = decode_batch(doc, MECHANISM_OF, max_reports=max_reports)
    except (orjson.JSONDecodeError, WireFormatError):
        return None
    if repeats_a_key(body, batch.n_reports):
        return None
    return batch.batch_id, {m: (t.mechanism, t.n, t.ones) for m, t in batch.tallies.items()}


def quick(body: bytes, max_reports: int = 1000) -> tuple[str, dict[str, tuple[str, int, int]]] | None:
    batch = decode_compact_batch(body, MECHANISM_OF, max_reports=max_reports)
    if batch is None:
        return None
    assert batch.n_reports == sum(t.n for t in batch.tallies.values())
    return batch.batch_id, {m: (t.mechanism, t.n, t.ones) for m, t in batch.tallies.items()}


@pytest.mark.slow
@given(st.lists(valid_triple, min_size=1, max_size=60))
def test_every_batch_the_client_writes_is_read_compactly_as_the_parser_reads_it(triples: list) -> None:
    body = compact(encode_batch(BATCH_ID_OK, triples))
    assert quick(body) is not None
    assert quick(body) == careful(body)


@given(st.lists(any_report, min_size=0, max_size=30))
def test_a_compact_body_with_any_reports_is_read_as_the_parser_reads_it_or_not_at_all(
        reports: list) -> None:
    body = compact({"batch_id": BATCH_ID_OK, "reports": [in_client_order(r) for r in reports]})
    found = quick(body)
    assert found is None or found == careful(body)
    if careful(body) is not None:  # every valid compact batch takes the fast road
        assert found == careful(body)


edit = st.tuples(st.integers(0, 10_000), st.integers(0, 3),
                 st.text(alphabet='{}[],:"\\ \t01ab_/.eE-+tru\u00e9', max_size=4))


@given(st.lists(valid_triple, min_size=1, max_size=8), st.lists(edit, min_size=1, max_size=3))
def test_no_edit_of_a_body_makes_the_two_readings_disagree(triples: list, edits: list) -> None:
    body = compact(encode_batch(BATCH_ID_OK, triples))
    for at, cut, text in edits:  # replace `cut` bytes at `at` by `text`
        at %= len(body) + 1
        body = body[:at] + text.encode() + body[at + cut:]
    found = quick(body)
    assert found is None or found == careful(body)


@pytest.mark.parametrize("body", [
    b' {"batch_id":"%s","reports":[{"metric":"dark_mode","mechanism":"rr:3/4:1/2","bit":1}]}',
    b'{"reports":[{"metric":"dark_mode","mechanism":"rr:3/4:1/2","bit":1}],"batch_id":"%s"}',
    b'{"batch_id":"%s","reports":[{"mechanism":"rr:3/4:1/2","metric":"dark_mode","bit":1}]}',
    b'{"batch_id":"%s","reports":[{"metric":"dark_mode","mechanism":"rr:3\\/4:1\\/2","bit":1}]}',
    b'{"batch_id":"%s","reports":[{"metric":"dark_mode","mechanism":"rr:3/4:1/2","bit":1} ]}',
    b'{"batch_id":"%s","reports":[{"metric":"dark\\u005fmode","mechanism":"rr:3/4:1/2","bit":1}]}',
])
def test_valid_json_in_another_layout_is_left_to_the_parser(body: bytes) -> None:
    body = body.replace(b"%s", BATCH_ID_OK.encode())
    assert quick(body) is None
    assert careful(body) == (BATCH_ID_OK, {"dark_mode": ("rr:3/4:1/2", 1, 1)})


GOOD = b'{"metric":"dark_mode","mechanism":"rr:3/4:1/2","bit":1}'


@pytest.mark.parametrize("reports", [
    b'{"metric":"dark_mode","mechanism":"rr:3/4:1/2","bit":true}',
    b'{"metric":"dark_mode","mechanism":"rr:3/4:1/2","bit":1.0}',
    b'{"metric":"dark_mode","mechanism":"rr:3/4:1/2","bit":2}',
    b'{"metric":"dark_mode","mechanism":"rr:1/2:1/2","bit":1}',
    b'{"metric":"no_such_metric","mechanism":"rr:3/4:1/2","bit":1}',
    b'{"metric":"dark_mode","metric":"dark_mode","mechanism":"rr:3/4:1/2","bit":1}',
    b'{"metric":"dark_mode","mechanism":"rr:3/4:1/2","bit":1,"extra":1}',
    b'{"metric":"dark_mode","mechanism":"x},{\\"metric\\":\\"dark_mode","bit":1}',
    b'{"metric":"dark_mode","mechanism":"rr:3/4:1/2","bit":1},' + GOOD + b',{}',
    b'{}',
])
def test_anything_invalid_is_left_to_the_careful_path(reports: bytes) -> None:
    body = b'{"batch_id":"%s","reports":[%s]}' % (BATCH_ID_OK.encode(), reports)
    assert quick(body) is None


def test_too_many_reports_are_left_to_the_careful_path_which_names_the_limit() -> None:
    body = compact(encode_batch(BATCH_ID_OK, [("dark_mode", "rr:3/4:1/2", 1)] * 11))
    assert quick(body, max_reports=11) == (BATCH_ID_OK, {"dark_mode": ("rr:3/4:1/2", 11, 11)})
    assert quick(body, max_reports=10) is None
    assert careful(body, max_reports=10) is None


# Open-domain reports ({"cell": n}, od:) take the compact path too (issue 33).
OD = "od:4:1:16:10:1/2"
OD_CELLS = 640  # OpenDomainSketch.from_id(OD).cells: cells [0, 640)
WITH_OPEN = {**MECHANISM_OF, "crash_sig": OD}
any_open_report = st.one_of(
    st.tuples(st.just("crash_sig"), st.just(OD), st.integers(0, OD_CELLS - 1)),
    valid_triple)


def _tallies(batch: object) -> dict[str, tuple[str, tuple[int, ...], tuple[tuple[int, int], ...]]]:
    return {m: (t.mechanism, t.counts, t.cells) for m, t in batch.tallies.items()}  # type: ignore[attr-defined]


def careful_open(body: bytes) -> object:
    try:
        batch = decode_batch(orjson.loads(body), WITH_OPEN)
    except (orjson.JSONDecodeError, WireFormatError):
        return None
    if repeats_a_key(body, batch.n_reports):
        return None
    return batch.batch_id, _tallies(batch)


def quick_open(body: bytes) -> object:
    batch = decode_compact_batch(body, WITH_OPEN)
    if batch is None:
        return None
    assert batch.n_reports == sum(t.n for t in batch.tallies.values())
    return batch.batch_id, _tallies(batch)


@given(st.lists(any_open_report, min_size=1, max_size=60))
def test_open_reports_are_read_compactly_as_the_parser_reads_them(triples: list) -> None:
    body = compact(encode_batch(BATCH_ID_OK, triples))
    found = quick_open(body)
    assert found is not None and found == careful_open(body)
    cells = [c for m, _, c in triples if m == "crash_sig"]
    if cells:  # n, and one count per touched slot (1 + cell), ascending
        _, tallies = found  # type: ignore[misc]
        assert tallies["crash_sig"][1] == (len(cells),)
        assert dict(tallies["crash_sig"][2]) == {1 + c: cells.count(c) for c in set(cells)}


@given(st.lists(any_open_report, min_size=1, max_size=8), st.lists(edit, min_size=1, max_size=3))
def test_no_edit_of_an_open_body_makes_the_two_readings_disagree(triples: list,
                                                                 edits: list) -> None:
    body = compact(encode_batch(BATCH_ID_OK, triples))
    for at, cut, text in edits:
        at %= len(body) + 1
        body = body[:at] + text.encode() + body[at + cut:]
    found = quick_open(body)
    assert found is None or found == careful_open(body)


@pytest.mark.parametrize("reports", [
    b'{"metric":"crash_sig","mechanism":"%s","cell":640}',     # outside [0, cells)
    b'{"metric":"crash_sig","mechanism":"%s","cell":-1}',
    b'{"metric":"crash_sig","mechanism":"%s","cell":01}',      # not JSON
    b'{"metric":"crash_sig","mechanism":"%s","cell":1.0}',
    b'{"metric":"crash_sig","mechanism":"%s","cell":1e0}',
    b'{"metric":"crash_sig","mechanism":"%s","cell":true}',
    b'{"metric":"crash_sig","mechanism":"%s","bit":1}',         # the wrong field for od:
    b'{"metric":"dark_mode","mechanism":"rr:3/4:1/2","cell":1}',  # and for rr:
    b'{"metric":"crash_sig","mechanism":"od:4:1:16:3:1/2","cell":1}',  # another mechanism
])
def test_an_invalid_open_report_is_left_to_the_careful_path(reports: bytes) -> None:
    assert OpenDomainSketch.from_id(OD).cells == OD_CELLS
    body = b'{"batch_id":"%s","reports":[%s]}' % (BATCH_ID_OK.encode(),
                                                   reports.replace(b"%s", OD.encode()))
    assert quick_open(body) is None
