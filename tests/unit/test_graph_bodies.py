"""``Store.conversation_graphs(..., bodies=False)``: compare reads a chunk's graph without
the free-text bodies no columnar replay or safety judgement reads (issue 28: the chunked
read was 6-8x reading the same tables whole). The same rows, in the same order and schema,
only the bodies null; and compare's answer is the same as over the whole graph."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pytest

from ingest.store import Store
from ingest.store.graph import BODIES, GRAPH_TABLES


def test_a_graph_without_bodies_is_the_graph_with_its_bodies_null(sample_db: Path) -> None:
    with Store.open(sample_db) as store:
        conversations = store._arrow(
            "SELECT export_id, conversation_id FROM conversations ORDER BY ALL")
        export = conversations["export_id"][0].as_py()
        ids = pc.filter(conversations["conversation_id"],
                        pc.equal(conversations["export_id"], export)).to_pylist()
        whole = store.conversation_graphs(ids, export)
        lean = store.conversation_graphs(ids, export, bodies=False)
    assert list(lean) == list(GRAPH_TABLES)
    assert whole["messages"].num_rows and whole["tool_memories"].num_rows
    for name in GRAPH_TABLES:
        assert lean[name].schema == whole[name].schema, name
        skipped = BODIES.get(name, ())
        for column in lean[name].column_names:
            if column in skipped:
                assert lean[name][column].null_count == lean[name].num_rows
                assert whole[name][column].null_count < whole[name].num_rows  # it has some
            else:
                assert lean[name][column].equals(whole[name][column]), (name, column)


def test_compare_reads_no_bodies_and_answers_the_same(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compare v4 -> v5 over graphs read without bodies equals the same compare over
    graphs read whole (forced by a wrapper that drops the flag)."""
    from replay.compare import compare
    from replay.policy import load_registry

    registry = load_registry(None)
    asked: list[bool] = []
    real = Store.conversation_graphs

    def recorded_flag(self: Store, ids: list[str], export_id: str, bodies: bool = True) -> dict:
        asked.append(bodies)
        return real(self, ids, export_id, bodies)

    def whole(self: Store, ids: list[str], export_id: str, bodies: bool = True) -> dict:
        return real(self, ids, export_id)

    with Store.open(sample_db) as store:
        monkeypatch.setattr(Store, "conversation_graphs", recorded_flag)
        lean = compare(store, registry, "v4", "v5", workers=1).to_json()
        monkeypatch.setattr(Store, "conversation_graphs", whole)
        full = compare(store, registry, "v4", "v5", workers=1).to_json()
    assert asked and not any(asked)
    assert lean == full
