"""The columnar selection hash: byte-identical to ``selection_hash`` of each assembly, on
the sample store and on generated rows with ids that JSON must escape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.contract import ENUMS, selection_hash, selection_hashes
from ingest.store import Store

SCHEMA = pa.schema([("assembly_id", pa.string()), ("record_kind", pa.string()),
                    ("record_id", pa.string()), ("decision", pa.string()),
                    ("rendering", pa.string()), ("position", pa.int64())])


def one_by_one(rows: list[dict[str, Any]]) -> dict[str, str]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["assembly_id"], []).append(r)
    return {a: selection_hash(g) for a, g in groups.items()}


def test_equal_to_selection_hash_on_every_assembly_of_the_sample(sample_db: Path) -> None:
    with Store.open(sample_db) as store:
        requests = store.assembly_requests()
        ids = requests.column("assembly_id").to_pylist()
        records = store.recorded_records(ids, requests.column("export_id")[0].as_py())
    got = selection_hashes(records)
    assert got.column_names == ["assembly_id", "selection_hash"]
    assert got.column("assembly_id").to_pylist() == sorted(set(records.column("assembly_id").to_pylist()))
    expected = one_by_one(records.to_pylist())
    assert dict(zip(*(got.column(c).to_pylist() for c in got.column_names))) == expected
    # and equal to what the recording stored for each request
    stored = dict(zip(ids, requests.column("selection_hash").to_pylist()))
    assert {a: stored[a] for a in expected} == expected


# ids a recording may carry: quotes, backslashes, control characters, DEL, non-ASCII,
# astral characters (a surrogate pair in JSON), and plain ASCII that sorts around them
NASTY = st.one_of(
    st.sampled_from(['"', "\\", '\\"', "\n", "\x00", "\x7f", "\u2028", "é", "😀", "msg-1", "msg-10",
                     "a b", "Z", "~", " ", "", "null", "[1]"]),
    st.text(max_size=6),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=6),
)
ROW = st.fixed_dictionaries({
    "assembly_id": st.sampled_from(["a1", "a2", "a3", "ä4"]),
    "record_kind": st.sampled_from(list(ENUMS["record_kind"])),
    "record_id": NASTY,
    "decision": st.sampled_from(list(ENUMS["decision"])),
    "rendering": st.one_of(st.none(), st.sampled_from(list(ENUMS["rendering"]))),
    "position": st.one_of(st.none(), st.integers(min_value=-2**40, max_value=2**40)),
})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ROW, max_size=25))
def test_equal_to_selection_hash_on_generated_rows(rows: list[dict[str, Any]]) -> None:
    got = selection_hashes(pa.Table.from_pylist(rows, schema=SCHEMA))
    assert dict(zip(*(got.column(c).to_pylist() for c in got.column_names))) == one_by_one(rows)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a1", "a2"]), NASTY, NASTY), max_size=20))
def test_free_text_in_every_hashed_column(items: list[tuple[str, str, str]]) -> None:
    """Kinds, decisions and renderings are enums in a store, but the hash takes any rows:
    a quote or a non-ASCII character there is escaped the same way too."""
    rows = [{"assembly_id": a, "record_kind": k, "record_id": f"r{n}", "decision": d,
             "rendering": k, "position": n} for n, (a, k, d) in enumerate(items)]
    got = selection_hashes(pa.Table.from_pylist(rows, schema=SCHEMA))
    assert dict(zip(*(got.column(c).to_pylist() for c in got.column_names))) == one_by_one(rows)


def test_a_repeated_record_keeps_the_order_of_the_input_rows() -> None:
    rows = [{"assembly_id": "a", "record_kind": "message", "record_id": "m", "decision": d,
             "rendering": None, "position": p} for d, p in (("omitted", None), ("included", 0))]
    for ordered in (rows, rows[::-1]):
        (got,) = selection_hashes(pa.Table.from_pylist(ordered, schema=SCHEMA)).column(1).to_pylist()
        assert got == selection_hash(ordered)
    assert selection_hash(rows) != selection_hash(rows[::-1])


def test_empty_and_missing_columns() -> None:
    assert selection_hashes(SCHEMA.empty_table()).num_rows == 0
    with pytest.raises(ValueError, match="position"):
        selection_hashes(pa.table({"assembly_id": ["a"], "record_kind": ["message"],
                                   "record_id": ["m"], "decision": ["included"],
                                   "rendering": [None]}))
