"""Duplicate JSON keys are caught by one count of quotes, whatever the layout."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from deniable.collector.ingest import repeats_a_key

report = st.fixed_dictionaries({
    "metric": st.sampled_from(["feature_x_enabled", "dark_mode"]),
    "mechanism": st.sampled_from(["rr:1/2:1/2", "rr:3/4:1/2"]),
    "bit": st.sampled_from([0, 1])})
spacing = st.sampled_from([(",", ":"), (", ", ": "), (",\n", " :\t")])
shadowed = st.one_of(st.integers(), st.text(max_size=5), st.none(), st.booleans())


@given(st.lists(report, min_size=1, max_size=20), spacing)
def test_a_clean_batch_in_any_layout_is_not_flagged(reports: list, separators: tuple) -> None:
    body = json.dumps({"batch_id": "ab" * 16, "reports": reports}, separators=separators)
    assert not repeats_a_key(body.encode(), len(reports))


@given(st.lists(report, min_size=1, max_size=20), spacing, st.data())
def test_any_repeated_key_is_flagged(reports: list, separators: tuple, data) -> None:  # type: ignore[no-untyped-def]
    body = json.dumps({"batch_id": "ab" * 16, "reports": reports}, separators=separators)
    i = data.draw(st.integers(0, len(reports) - 1))
    key = data.draw(st.sampled_from(["metric", "mechanism", "bit"]))
    value = json.dumps(data.draw(shadowed))
    # Repeat one key of report i, with any shadowed value, before the report's first key.
    target = json.dumps(reports[i], separators=separators)
    repeated = "{" + json.dumps(key) + separators[1] + value + separators[0] + target[1:]
    doubled = body.replace(target, repeated, 1)
    assert json.loads(doubled)["reports"][i] == reports[i]  # the parser keeps the last one
    assert repeats_a_key(doubled.encode(), len(reports))
