"""The store: atomic, idempotent ingest and every query the inspector uses."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.errors import ContextlensError, NotFoundError, StoreBusyError, ValidationError
from ingest.store import LIST_COLUMNS, IngestResult, Store, ingest
from support.stores import BLOB, make_export, prefixed_ids, set_value

BLOB_SHA = hashlib.sha256(BLOB).hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, IngestResult]:
    root = tmp_path_factory.mktemp("store")
    export = make_export(root / "exp")
    return export, ingest(export, root / "s.duckdb")


@pytest.fixture
def store(built):
    with Store.open(built[1].db_path) as s:
        yield s


def no_temp_files(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if ".tmp-" in p.name or p.name.endswith(".lock")]


# ---------------------------------------------------------------- ingest


def test_ingest_result(built) -> None:
    _, result = built
    assert result.export_id == "exp-test" and result.changed
    assert result.rows["assembly_records"] == 11 and result.rows["tool_memories"] == 3
    assert result.warnings == [
        "tool_memories row 2 (memory_id=m3): source_artifact_ids names missing "
        "tool_artifacts a-404 (broken provenance)"
    ]
    assert no_temp_files(result.db_path.parent)


def test_progress_reports_stages(tmp_path: Path) -> None:
    seen: list[tuple[str, int, int]] = []
    ingest(make_export(tmp_path / "exp"), tmp_path / "s.duckdb", progress=lambda *a: seen.append(a))
    labels = [s[0] for s in seen]
    assert "loading assembly_records" in labels and labels[-1] == "done"
    final_total = seen[-1][2]
    assert seen[-1][1] == final_total
    assert all(0 <= done <= total for _, done, total in seen)


def test_second_ingest_is_a_no_op(tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp")
    db = tmp_path / "s.duckdb"
    first = ingest(export, db)
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    again = ingest(export, db)
    assert not again.changed
    assert again.rows == first.rows and again.warnings == first.warnings
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before
    assert no_temp_files(tmp_path)


def test_changed_export_replaces_its_rows(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    ingest(make_export(tmp_path / "v1"), db)

    def drop_as2(rows):
        rows["context_assemblies"] = rows["context_assemblies"][:1]
        rows["assembly_records"] = [r for r in rows["assembly_records"] if r["assembly_id"] == "as1"]
        rows["policy_decisions"] = [r for r in rows["policy_decisions"] if r["assembly_id"] == "as1"]

    result = ingest(make_export(tmp_path / "v2", edit=drop_as2), db)
    assert result.changed and result.rows["context_assemblies"] == 1
    with Store.open(db) as store:
        assert store.count_assemblies() == 1
        assert len(store.exports()) == 1
        with pytest.raises(NotFoundError):
            store.assembly("as2")


def test_another_export_is_added(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    ingest(make_export(tmp_path / "one", export_id="exp-1"), db)

    ingest(make_export(tmp_path / "two", export_id="exp-2", edit=prefixed_ids("x")), db)
    with Store.open(db) as store:
        assert store.count_assemblies() == 4
        assert [e["export_id"] for e in store.exports()] == ["exp-1", "exp-2"]
        assert store.assembly("xas1")["export_id"] == "exp-2"
        assert store.assembly_records("xas1").num_rows == 9


def test_failed_ingest_leaves_the_store_untouched(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    ingest(make_export(tmp_path / "good"), db)
    before = db.read_bytes()
    bad = make_export(tmp_path / "bad", export_id="exp-other")
    set_value(bad, "messages", "role", 0, "narrator")
    with pytest.raises(ValidationError):
        ingest(bad, db)
    assert db.read_bytes() == before
    assert no_temp_files(tmp_path)
    with Store.open(db) as store:
        assert [e["export_id"] for e in store.exports()] == ["exp-test"]


def test_failed_first_ingest_creates_nothing(tmp_path: Path) -> None:
    bad = make_export(tmp_path / "bad")
    set_value(bad, "messages", "role", 0, "narrator")
    with pytest.raises(ValidationError):
        ingest(bad, tmp_path / "s.duckdb")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad"]


def test_busy_lock(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    export = make_export(tmp_path / "exp")
    # another process holding the lock the way an ingest does: flock on <db>.lock, its pid in it
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "os.write(fd, str(os.getpid()).encode())\n"
         "print('held', flush=True)\n"
         "time.sleep(30)\n",
         str(tmp_path / "s.duckdb.lock")],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreBusyError) as info:
            ingest(export, db)
        assert str(info.value) == (
            f"store {db} is busy: another ingest (pid {holder.pid}) is writing it"
        )
        assert not db.exists()
        assert (tmp_path / "s.duckdb.lock").read_text() == str(holder.pid)  # untouched
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone (killed, so it could not clean up): the OS released its lock
    assert ingest(export, db).changed
    assert no_temp_files(tmp_path)


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "s.duckdb.lock").write_text(str(dead.pid))
    half_built = tmp_path / f"s.duckdb.tmp-{dead.pid}"
    half_built.write_bytes(b"half a store")
    assert ingest(make_export(tmp_path / "exp"), tmp_path / "s.duckdb").changed
    assert not (tmp_path / "s.duckdb.lock").exists()
    assert not half_built.exists()


def test_ingest_into_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    db = tmp_path / "notes.duckdb"
    db.write_text("my notes")
    with pytest.raises(ContextlensError, match="is not a contextlens store"):
        ingest(make_export(tmp_path / "exp"), db)
    assert db.read_text() == "my notes"


def test_open_rejects_other_files(tmp_path: Path) -> None:
    other = tmp_path / "other.duckdb"
    other.write_bytes(b"\0" * 4096)
    with pytest.raises(ContextlensError) as info:
        Store.open(other)
    assert str(other) in str(info.value) and "not a contextlens store" in str(info.value)
    with pytest.raises(ContextlensError, match="no store at"):
        Store.open(tmp_path / "missing.duckdb")


def test_open_rejects_a_plain_duckdb_database(tmp_path: Path) -> None:
    import duckdb

    path = tmp_path / "plain.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    with pytest.raises(ContextlensError, match="not a contextlens store"):
        Store.open(path)


def test_store_is_read_only_by_default(store: Store) -> None:
    import duckdb

    with pytest.raises(duckdb.Error):
        store._con.execute("DELETE FROM exports")


# ---------------------------------------------------------------- request list


def test_list_assemblies_columns_and_types(store: Store) -> None:
    table = store.list_assemblies()
    assert table.column_names == list(LIST_COLUMNS)
    assert table.schema.field("tags").type == pa.list_(pa.string())
    assert table.schema.field("assembled_at").type == pa.timestamp("us", tz="UTC")
    rows = table.to_pylist()
    assert [r["assembly_id"] for r in rows] == ["as1", "as2"]
    first = rows[0]
    assert first["included_count"] == 6 and first["omitted_count"] == 3
    assert first["scenario"] == "exact_csv"
    assert first["assembled_at"].utcoffset() == dt.timedelta(0)


def test_sort_page_and_count(store: Store) -> None:
    assert store.list_assemblies(sort="assembled_at", descending=True).column(
        "assembly_id").to_pylist() == ["as2", "as1"]
    assert store.list_assemblies(sort="omitted_count").column("assembly_id").to_pylist() == [
        "as2", "as1"]
    # ties broken by assembly_id
    assert store.list_assemblies(sort="token_budget").column("assembly_id").to_pylist() == [
        "as1", "as2"]
    assert store.list_assemblies(limit=1, offset=1).column("assembly_id").to_pylist() == ["as2"]
    assert store.count_assemblies() == 2
    assert store.count_assemblies("policy:v5") == 1


def test_sort_column_is_whitelisted(store: Store) -> None:
    with pytest.raises(ContextlensError, match="cannot sort by"):
        store.list_assemblies(sort="assembly_id; DROP TABLE exports")


def test_distinct_values(store: Store) -> None:
    assert store.distinct_values("policy_version") == ["v4", "v5"]
    assert store.distinct_values("runtime_kind") == ["chat", "multi_model"]
    assert store.distinct_values("participant_id") == ["p-model"]
    assert store.distinct_values("conversation_id") == ["c1"]
    assert "stale" in store.distinct_values("reason_code")
    assert store.distinct_values("tag") == ["scenario:exact_csv", "scenario:incident", "team:finance"]
    with pytest.raises(ContextlensError):
        store.distinct_values("content")


# ---------------------------------------------------------------- one assembly


def test_assembly(store: Store) -> None:
    a = store.assembly("as1")
    assert a["policy_version"] == "v4" and a["included_count"] == 6 and a["omitted_count"] == 3
    assert a["tags"] == ["scenario:exact_csv", "team:finance"]
    assert a["assembled_at"].tzinfo is not None
    with pytest.raises(NotFoundError, match="unknown assembly 'nope'"):
        store.assembly("nope")


def test_assembly_records_order_and_labels(store: Store) -> None:
    table = store.assembly_records("as1")
    assert table.column_names == [
        "record_kind", "record_id", "decision", "rendering", "position", "policy_family",
        "reason_code", "detail", "tokens", "label", "created_at", "privacy_class",
    ]
    rows = table.to_pylist()
    assert [r["record_id"] for r in rows] == [
        "msg1", "m2", "a1", "s1", "k1", "tc1",  # included by position
        "a2", "m3", "m1",  # omitted by reason: over_budget, stale, superseded
    ]
    labels = {r["record_id"]: r["label"] for r in rows}
    assert labels["msg1"] == "user: Please total my March expenses from the CSV."
    assert labels["tc1"] == 'read_csv({"path": "march.csv"})'
    assert labels["s1"] == "skills: csv, math"
    assert labels["k1"] == "continuation checkpoint"
    assert labels["a1"].startswith("read_csv succeeded date,amount")
    assert labels["m2"] == "March expenses total 19.75 (two rows)"
    assert store.assembly_records("as1", "omitted").num_rows == 3
    assert store.assembly_records("as1", "included").num_rows == 6


def test_policy_decisions_and_record_decision(store: Store) -> None:
    d = store.policy_decisions("as1")
    assert d.column("decision_id").to_pylist() == ["d1", "d2", "d3"]
    assert store.policy_decisions("as1", "m3").column("outcome").to_pylist() == ["deny"]
    rec = store.record_decision("as1", "m1")
    assert rec["reason_code"] == "superseded" and rec["decision"] == "omitted"
    with pytest.raises(NotFoundError, match="record 'zz' is not in assembly 'as1'"):
        store.record_decision("as1", "zz")


def test_record(store: Store) -> None:
    assert store.record("tool_memory", "m1")["superseded_by"] == "m2"
    assert store.record("tool_memory", "nope") is None
    with pytest.raises(ContextlensError, match="unknown record kind"):
        store.record("widget", "x")


def test_provenance_walks_to_the_trigger_message_and_marks_broken_links(store: Store) -> None:
    chain = store.provenance("tool_memory", "m3")
    assert [(l["kind"], l["id"], l["broken"], l["depth"], l["via"]) for l in chain] == [
        ("tool_memory", "m3", False, 0, None),
        ("tool_artifact", "a1", False, 1, "source_artifact_ids"),
        ("tool_artifact", "a-404", True, 1, "source_artifact_ids"),
        ("tool_call", "tc1", False, 2, "tool_call_id"),
        ("model_run", "run1", False, 3, "model_run_id"),
        ("message", "msg1", False, 4, "trigger_message_id"),
    ]
    assert chain[2]["label"] == "missing tool_artifact a-404"


def test_provenance_lists_supersession_both_ways(store: Store) -> None:
    old = {(l["via"], l["id"]) for l in store.provenance("tool_memory", "m1")}
    assert ("superseded_by", "m2") in old
    new = {(l["via"], l["id"]) for l in store.provenance("tool_memory", "m2")}
    assert ("supersedes", "m1") in new


def test_provenance_of_message_and_call(store: Store) -> None:
    assert [l["kind"] for l in store.provenance("message", "msg2")] == [
        "message", "model_run", "message"]
    assert [l["kind"] for l in store.provenance("tool_call", "tc1")] == [
        "tool_call", "model_run", "message"]
    with pytest.raises(NotFoundError):
        store.provenance("message", "nope")


def test_prompt_records(store: Store) -> None:
    rows = store.prompt_records("as1").to_pylist()
    assert [r["record_id"] for r in rows] == ["msg1", "m2", "a1", "s1", "k1", "tc1"]
    msg, mem, art = rows[0], rows[1], rows[2]
    assert msg["role"] == "user" and msg["content"].startswith("Please total")
    assert mem["content"] == "March expenses total 19.75 (two rows)"
    assert mem["privacy_class"] == "user_private" and mem["revalidation_tools"] == ["read_csv"]
    assert art["storage_ref"] == f"blobs/{BLOB_SHA}" and art["sha256"] == BLOB_SHA
    assert rows[4]["content"] == '{"step": 2}'


# ---------------------------------------------------------------- blobs


def test_read_blob(store: Store) -> None:
    assert store.read_blob("exp-test", f"blobs/{BLOB_SHA}", BLOB_SHA) == BLOB
    assert store.read_blob("as1", BLOB_SHA) == BLOB  # by assembly id, bare sha


@pytest.mark.parametrize(
    "ref", ["../manifest.json", "blobs/../manifest.json", "/etc/passwd", "", "blobs/"]
)
def test_read_blob_refuses_paths_outside_blobs(store: Store, ref: str) -> None:
    with pytest.raises(ContextlensError, match="refused"):
        store.read_blob("exp-test", ref)


def test_read_blob_never_follows_a_symlink(built, store: Store, tmp_path: Path) -> None:
    """A link planted in blobs/ after ingest (to a file outside, or to a real blob inside)
    is not followed, and reads like a missing blob."""
    export, _ = built
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    outside = export / "blobs" / "escape"
    inside = export / "blobs" / "alias"
    os.symlink(secret, outside)
    os.symlink(export / "blobs" / BLOB_SHA, inside)
    try:
        for ref in ("blobs/escape", "blobs/alias"):
            with pytest.raises(ContextlensError) as info:
                store.read_blob("exp-test", ref)
            assert str(info.value) == f"blob '{ref}' is missing or is not the recorded body"
    finally:
        outside.unlink()
        inside.unlink()


def test_read_blob_missing_and_mismatched_read_the_same(store: Store) -> None:
    """No probing: a reader cannot tell an absent file from one with other content."""
    with pytest.raises(ContextlensError) as mismatched:
        store.read_blob("exp-test", f"blobs/{BLOB_SHA}", "0" * 64)
    with pytest.raises(ContextlensError) as missing:
        store.read_blob("exp-test", "blobs/" + "1" * 64, "1" * 64)
    assert str(mismatched.value) == f"blob 'blobs/{BLOB_SHA}' is missing or is not the recorded body"
    assert str(missing.value) == f"blob 'blobs/{'1' * 64}' is missing or is not the recorded body"


# ---------------------------------------------------------------- conversations


def test_conversation_queries(store: Store) -> None:
    convs = store.conversations().to_pylist()
    assert [(c["conversation_id"], c["branch_count"], c["assembly_count"]) for c in convs] == [
        ("c1", 2, 2), ("c2", 1, 0)]
    assert store.branches("c1").column("branch_id").to_pylist() == ["b1", "b2"]
    assert store.branches("c1").column("parent_branch_id").to_pylist() == [None, "b1"]
    runs = store.model_runs("c1")
    assert runs.column_names == [
        "model_run_id", "branch_id", "participant_id", "runtime_kind", "parent_model_run_id",
        "status", "provider", "model", "started_at"]
    asm = store.assemblies_of_conversation("c1")
    assert asm.column_names == [
        "assembly_id", "model_run_id", "branch_id", "participant_id", "policy_version",
        "assembled_at", "scenario"]
    assert asm.column("scenario").to_pylist() == ["exact_csv", "incident"]


def test_store_is_usable_from_threads(store: Store) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        counts = list(pool.map(lambda _: store.assembly_records("as1").num_rows, range(20)))
    assert counts == [9] * 20


def test_records_written_out_of_order_are_sorted_on_load(tmp_path: Path) -> None:
    import json

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ingest.store.loading import _already_clustered
    from ingest.exportdir import read_layout
    from ingest.writer import table_sha256
    from support.stores import read_table

    export = make_export(tmp_path / "exp")
    data = read_table(export, "assembly_records")
    (export / "assembly_records.parquet").unlink()
    (export / "assembly_records").mkdir()
    # part 0 holds as2, part 1 holds as1: row groups out of order
    pq.write_table(data.filter(pc.equal(data["assembly_id"], "as2")),
                   export / "assembly_records" / "part-00000.parquet")
    pq.write_table(data.filter(pc.equal(data["assembly_id"], "as1")),
                   export / "assembly_records" / "part-00001.parquet")
    files = ["assembly_records/part-00000.parquet", "assembly_records/part-00001.parquet"]
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["tables"]["assembly_records"] = {
        "rows": data.num_rows, "files": files, "sha256": table_sha256(export, files)}
    (export / "manifest.json").write_text(json.dumps(manifest))

    layout = read_layout(export)
    assert not _already_clustered(layout.tables["assembly_records"], "assembly_id")
    assert _already_clustered(layout.tables["policy_decisions"], "assembly_id")
    db = ingest(export, tmp_path / "s.duckdb").db_path
    with Store.open(db) as store:
        assert store.assembly_records("as1").num_rows == 9
        assert store.assembly_records("as2").num_rows == 2
        assert store._con.execute(
            "SELECT list(assembly_id) FROM assembly_records").fetchall()[0][0][0] == "as1"


def test_records_privacy_and_model_run_links(store: Store) -> None:
    rows = {(r["record_kind"], r["record_id"]): r["privacy_class"]
            for r in store.assembly_records("as1").to_pylist()}
    assert rows[("tool_memory", "m2")] == "user_private"
    assert rows[("tool_artifact", "a2")] == "internal"
    assert rows[("message", "msg1")] is None and len(rows) == 9
    chain = store.provenance("tool_memory", "m3")
    assert chain[0]["privacy_class"] == "user_private"
    assert chain[2]["privacy_class"] is None  # the broken link
    run = next(l for l in chain if l["kind"] == "model_run")
    assert store.record("model_run", run["id"])["status"] == "succeeded"
    assert [l["kind"] for l in store.provenance("model_run", "run1")] == ["model_run", "message"]


def test_unwritable_store_folder(tmp_path: Path) -> None:
    # A store path under a regular file cannot be written, even by root.
    not_a_folder = tmp_path / "plain-file"
    not_a_folder.write_text("x")
    with pytest.raises(ContextlensError, match="cannot write the store"):
        ingest(make_export(tmp_path / "exp"), not_a_folder / "s.duckdb")
