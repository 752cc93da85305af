"""The scale sample is faithful: its recorded rows are the reference assembler's, except
the assemblies it says it drifted on purpose, and verify finds exactly those."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ingest.contract import selection_hash
from ingest.store import Store, ingest
from replay.assembler import assemble
from replay.policy import load_registry
from replay.sample_export import write_big_assembly, write_scale
from replay.snapshot import load_snapshot, request_from_row
from replay.verify import verify

SCALE, DRIFT, SEED = 300, 0.05, 11


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scale") / "export"
    write_scale(out, SCALE, seed=SEED, drift=DRIFT)
    return out


@pytest.fixture(scope="module")
def db(export: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scale-db") / "store.duckdb"
    ingest(export, path)
    return path


def _drift_file(export: Path) -> dict:
    return json.loads((export / "drift.json").read_text())


def _column(export: Path, table: str, column: str) -> list:
    single = export / f"{table}.parquet"
    files = [single] if single.exists() else sorted((export / table).glob("*.parquet"))
    return [v for f in files for v in pq.read_table(f, columns=[column]).column(column).to_pylist()]


def test_verify_finds_exactly_the_assemblies_drifted_on_purpose(export: Path, db: Path) -> None:
    listed = _drift_file(export)
    assert listed["assemblies"] == SCALE and listed["drift"] == DRIFT
    assert listed["drifted"] == round(SCALE * DRIFT) == len(listed["drifted_ids"])
    with Store.open(db) as store:
        result = verify(store, load_registry(None))
    assert (result.checked, result.faithful, result.drifted) == (SCALE, SCALE - 15, 15)
    assert result.inconsistent == 0 and result.not_replayable == 0
    assert sorted(v.assembly_id for v in result.of("drifted")) == sorted(listed["drifted_ids"])
    for v in result.of("drifted"):  # each drifted assembly differs in one record only
        assert len(v.records) == 1, v.to_json()


def test_recorded_rows_are_the_reference_assemblers_to_the_detail(db: Path, export: Path) -> None:
    """Verify compares decisions, not the text: every faithful assembly's records and
    decisions (details with renamed ids and shifted times included) and its row's totals
    are exactly what the reference assembler writes for it."""
    drifted = set(_drift_file(export)["drifted_ids"])
    registry = load_registry(None)
    with Store.open(db) as store:
        rows = store.assembly_requests(None).to_pylist()
        snapshots: dict[str, object] = {}
        seen_times = 0
        for row in rows:
            if row["assembly_id"] in drifted:
                continue
            cid = row["conversation_id"]
            if cid not in snapshots:
                snapshots[cid] = load_snapshot(store, cid)
            out = assemble(snapshots[cid], request_from_row(row), registry.get(row["policy_version"]))
            recorded = store.assembly_records(row["assembly_id"]).to_pylist()
            fields = ("record_kind", "record_id", "decision", "rendering", "position",
                      "policy_family", "reason_code", "detail", "tokens")
            key = lambda r: (r["record_kind"], r["record_id"])  # noqa: E731
            assert ([{f: r[f] for f in fields} for r in sorted(recorded, key=key)]
                    == [{f: r[f] for f in fields} for r in sorted(out.records, key=key)]), row["assembly_id"]
            seen_times += sum(" UTC" in r["detail"] for r in recorded)
            decisions = store.policy_decisions(row["assembly_id"]).to_pylist()
            dfields = ("decision_id", "step", "record_kind", "record_id", "policy_family",
                       "outcome", "reason_code", "detail")
            assert ([{f: d[f] for f in dfields} for d in sorted(decisions, key=lambda d: d["decision_id"])]
                    == [{f: d[f] for f in dfields} for d in out.decisions]), row["assembly_id"]
            full = store.assembly(row["assembly_id"])
            assert (full["selection_hash"], full["assembled_tokens"], full["baseline_tokens"],
                    full["baseline_message_count"]) == (out.selection_hash, out.assembled_tokens,
                                                        out.baseline_tokens, out.baseline_message_count)
    assert seen_times > 0  # details with times (not_yet_created, stale) were checked


def test_drifted_recordings_are_consistent_with_themselves(db: Path, export: Path) -> None:
    with Store.open(db) as store:
        for aid in _drift_file(export)["drifted_ids"]:
            records = store.assembly_records(aid).to_pylist()
            row = store.assembly(aid)
            inc = [r for r in records if r["decision"] == "included"]
            assert row["selection_hash"] == selection_hash(records)
            assert row["assembled_tokens"] == sum(r["tokens"] for r in inc)
            assert sorted(r["position"] for r in inc) == list(range(len(inc)))


def test_ids_are_unique_across_replicas(export: Path) -> None:
    for table, column in (("context_assemblies", "assembly_id"), ("conversations", "conversation_id"),
                          ("messages", "message_id"), ("tool_calls", "tool_call_id"),
                          ("tool_artifacts", "artifact_id"), ("tool_memories", "memory_id"),
                          ("model_runs", "model_run_id"), ("policy_decisions", "decision_id")):
        values = _column(export, table, column)
        assert values and len(values) == len(set(values)), table
        assert not any("@T@" in v for v in values), table  # no placeholder left
    assert not any("@T@" in d for d in _column(export, "assembly_records", "detail"))
    # several replicas of the same template, told apart by their prefix
    convs = _column(export, "context_assemblies", "conversation_id")
    assert len(set(convs)) > 20
    titles = Counter(_column(export, "conversations", "title"))
    assert max(titles.values()) > 1


def test_the_same_seed_writes_the_same_bytes(export: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    write_scale(again, SCALE, seed=SEED, drift=DRIFT)
    files = sorted(p.relative_to(export) for p in export.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for rel in files:
        assert (export / rel).read_bytes() == (again / rel).read_bytes(), rel
    other = write_scale(tmp_path / "other", SCALE, seed=SEED + 1, drift=DRIFT)
    assert other.drifted_ids != _drift_file(export)["drifted_ids"]


def test_no_drift_means_every_assembly_is_faithful(tmp_path: Path) -> None:
    out = tmp_path / "clean"
    result = write_scale(out, 60, seed=5, drift=0.0)
    assert result.drifted_ids == []
    db = tmp_path / "clean.duckdb"
    ingest(out, db)
    with Store.open(db) as store:
        v = verify(store, load_registry(None))
    assert (v.checked, v.faithful) == (60, 60)


def test_the_big_assembly_is_faithful_and_has_2000_records(tmp_path: Path) -> None:
    aid = write_big_assembly(tmp_path / "big", candidates=2000)
    db = tmp_path / "big.duckdb"
    ingest(tmp_path / "big", db)
    with Store.open(db) as store:
        assert 1900 <= store.assembly_records(aid).num_rows <= 2200
        v = verify(store, load_registry(None))
    assert (v.checked, v.faithful) == (1, 1)
