"""Round trips and fuzzing: export -> store -> export is lossless for any valid graph, and
any corruption of one is rejected with a ValidationError that leaves the store untouched.

Graphs are drawn by hypothesis: conversations, branches (each forking from an earlier one,
so acyclic), participants, messages, model runs, tool calls, artifacts, memories (a memory
is only ever replaced by a later one, so supersession is acyclic), skill states,
checkpoints and assemblies with records and decisions; text fields take any Unicode.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.contract import ADDED_COLUMNS, ENUMS, INCLUDED_REASONS, OMITTED_REASONS, TABLES
from ingest.errors import ContextlensError, ValidationError
from ingest.reexport import export_store
from ingest.store import Store, ingest
from ingest.writer import ExportWriter, table_sha256
from support.stores import make_export, prefixed_ids, read_table, rewrite_table, set_value

T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.timezone.utc)
CREATED = T0 + dt.timedelta(days=3)
TEXT = st.text(max_size=40)
IDS = st.text(alphabet="abcdefghij-_.:/ [é漢\x1b", min_size=1, max_size=6)


def _table_rows(export: Path, name: str) -> list[dict[str, Any]]:
    entry = json.loads((export / "manifest.json").read_text())["tables"][name]
    parts = [pq.read_table(export / f) for f in sorted(entry["files"])]
    table = pa.concat_tables(parts) if parts else TABLES[name].arrow_schema.empty_table()
    cols = TABLES[name].column_names
    rows = table.select(cols).to_pylist()
    pk = TABLES[name].primary_key
    return sorted(rows, key=lambda r: tuple(r[k] for k in pk))


def assert_same_tables(a: Path, b: Path) -> None:
    for name in TABLES:
        assert _table_rows(a, name) == _table_rows(b, name), name


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- graphs


@st.composite
def graphs(draw: st.DrawFn) -> dict[str, list[dict[str, Any]]]:
    counter = iter(range(10**6))

    def new_id(prefix: str) -> str:
        # unique by construction; a drawn suffix keeps odd characters in ids
        return f"{prefix}{next(counter)}{draw(IDS)}"

    def at(lo: int = 0) -> dt.datetime:
        return T0 + dt.timedelta(minutes=lo, microseconds=draw(st.integers(0, 10**8)))

    def pick(seq: list[Any]) -> Any:
        return draw(st.sampled_from(seq))

    def maybe(seq: list[Any]) -> Any:
        return draw(st.sampled_from([None, *seq])) if seq else None

    def strs(max_size: int = 3) -> list[str]:
        return draw(st.lists(TEXT, max_size=max_size))

    t: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    records: list[tuple[str, str]] = []
    for _c in range(draw(st.integers(1, 2))):
        cid = new_id("c")
        t["conversations"].append({"conversation_id": cid, "title": draw(TEXT),
                                   "owner_id": draw(IDS), "created_at": T0})
        branches: list[str] = []
        for _b in range(draw(st.integers(1, 3))):
            bid = new_id("b")
            t["branches"].append({"branch_id": bid, "conversation_id": cid,
                                  "parent_branch_id": maybe(branches), "fork_message_id": None,
                                  "name": draw(TEXT), "created_at": at()})
            branches.append(bid)
        parts: list[str] = []
        for _p in range(draw(st.integers(1, 3))):
            pid = new_id("p")
            t["participants"].append({"participant_id": pid, "conversation_id": cid,
                                      "label": draw(TEXT),
                                      "kind": pick(list(ENUMS["participant_kind"])),
                                      "provider": draw(st.none() | TEXT), "model": draw(st.none() | TEXT)})
            parts.append(pid)
        msgs: list[str] = []
        runs: list[str] = []
        for _m in range(draw(st.integers(0, 4))):
            mid = new_id("m")
            t["messages"].append({
                "message_id": mid, "conversation_id": cid, "branch_id": pick(branches),
                "parent_message_id": maybe(msgs), "role": pick(list(ENUMS["message_role"])),
                "participant_id": maybe(parts), "model_run_id": None,
                "speaker_label": draw(st.none() | TEXT), "content": draw(st.text(max_size=200)),
                "content_tokens": draw(st.integers(0, 2**40)),
                "visibility_scope": pick(list(ENUMS["visibility_scope"])), "created_at": at(1)})
            msgs.append(mid)
            records.append(("message", mid))
        for _r in range(draw(st.integers(0, 2))):
            rid = new_id("r")
            start = at(2)
            t["model_runs"].append({
                "model_run_id": rid, "conversation_id": cid, "branch_id": pick(branches),
                "participant_id": pick(parts), "trigger_message_id": maybe(msgs),
                "runtime_kind": pick(list(ENUMS["runtime_kind"])),
                "parent_model_run_id": maybe(runs), "subagent_batch_id": draw(st.none() | IDS),
                "provider": draw(TEXT), "model": draw(TEXT),
                "status": pick(list(ENUMS["model_run_status"])), "started_at": start,
                "ended_at": draw(st.sampled_from([None, start + dt.timedelta(seconds=5)]))})
            runs.append(rid)
            for _k in range(draw(st.integers(0, 2))):
                tcid = new_id("tc")
                requested = at(3)
                t["tool_calls"].append({
                    "tool_call_id": tcid, "model_run_id": rid, "tool_name": draw(TEXT),
                    "arguments_json": json.dumps({"q": draw(TEXT), "n": draw(st.integers())}),
                    "status": pick(list(ENUMS["tool_call_status"])), "retryable": draw(st.booleans()),
                    "parallel_group": draw(st.none() | IDS), "requested_at": requested,
                    "completed_at": draw(st.sampled_from([None, requested, requested + dt.timedelta(seconds=1)]))})
                records.append(("tool_call", tcid))
                for _a in range(draw(st.integers(0, 2))):
                    aid = new_id("a")
                    t["tool_artifacts"].append({
                        "artifact_id": aid, "tool_call_id": tcid, "tool_name": draw(TEXT),
                        "status": pick(list(ENUMS["tool_call_status"])),
                        "result_preview": draw(st.text(max_size=100)), "error": draw(st.none() | TEXT),
                        "byte_size": draw(st.integers(0, 2**50)), "sha256": "ab" * 32,
                        "storage_ref": None, "content_type": draw(TEXT),
                        "content_tokens": draw(st.integers(0, 10**6)),
                        "privacy_class": pick(list(ENUMS["privacy_class"])),
                        "visibility_scope": pick(list(ENUMS["visibility_scope"])),
                        "owner_participant_id": pick(parts), "owner_model_run_id": rid,
                        "shared_with": strs(), "branch_id": pick(branches),
                        "retention_class": pick(list(ENUMS["retention_class"])), "created_at": at(4)})
                    records.append(("tool_artifact", aid))
            if draw(st.booleans()):
                sid = new_id("s")
                t["skill_states"].append({"skill_state_id": sid, "model_run_id": rid,
                                          "loaded_skills": strs(), "active_profiles": strs(),
                                          "direct_tools": strs(), "content_tokens": 3,
                                          "created_at": at(3)})
                records.append(("skill_state", sid))
            if draw(st.booleans()):
                kid = new_id("k")
                t["checkpoints"].append({"checkpoint_id": kid, "model_run_id": rid,
                                         "kind": pick(list(ENUMS["checkpoint_kind"])),
                                         "state_json": json.dumps([draw(TEXT)]), "content_tokens": 1,
                                         "created_at": at(3)})
                records.append(("checkpoint", kid))
        mems: list[dict[str, Any]] = []
        for _n in range(draw(st.integers(0, 4))):
            memid = new_id("mem")
            earlier = [m["memory_id"] for m in mems]
            replaced = draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True)) if earlier else []
            mem = {
                "memory_id": memid, "conversation_id": cid, "branch_id": pick(branches),
                "source_artifact_ids": [a["artifact_id"] for a in t["tool_artifacts"][-2:]],
                "source_tool_names": strs(), "summary": draw(st.text(max_size=120)),
                "structured_json": draw(st.sampled_from([None, '{"k": 1}', "[]"])),
                "content_tokens": 5,
                "confidence": draw(st.floats(allow_nan=False, allow_infinity=False)),
                "trust_source": draw(TEXT), "ambiguity_notes": draw(st.none() | TEXT),
                "privacy_class": pick(list(ENUMS["privacy_class"])),
                "freshness_class": pick(list(ENUMS["freshness_class"])),
                "observed_at": at(5), "stale_after": draw(st.none() | st.just(CREATED + dt.timedelta(days=400))),
                "revalidation_tools": strs(), "provenance_locators": strs(),
                "conflicts_with": draw(st.lists(st.sampled_from(earlier), max_size=1)) if earlier else [],
                "supersedes": replaced, "superseded_by": None,
                "promotion_policy": pick(list(ENUMS["promotion_policy"])),
                "promoted": draw(st.booleans()), "visibility_scope": pick(list(ENUMS["visibility_scope"])),
                "owner_participant_id": maybe(parts), "owner_model_run_id": maybe(runs),
                "created_at": at(5)}
            for old in mems:  # a replaced memory points at its (later) replacement
                if old["memory_id"] in replaced and draw(st.booleans()):
                    old["superseded_by"] = memid
            mems.append(mem)
            records.append(("tool_memory", memid))
        t["tool_memories"] += mems
        for _s in range(draw(st.integers(0, 2))):
            asid = new_id("as")
            t["context_assemblies"].append({
                "assembly_id": asid, "model_run_id": maybe(runs) or "run-404",
                "conversation_id": cid, "branch_id": pick(branches), "participant_id": pick(parts),
                "runtime_kind": pick(list(ENUMS["runtime_kind"])), "provider": draw(TEXT),
                "model": draw(TEXT), "policy_version": draw(IDS), "assembler_version": "ref-1",
                "assembled_at": at(6), "token_budget": 4000, "byte_budget": 65536,
                "exact_evidence_ids": strs(), "baseline_tokens": draw(st.integers(0, 10**9)),
                "assembled_tokens": draw(st.integers(0, 10**9)), "baseline_message_count": 1,
                "assembled_message_count": 1, "raw_artifact_count": 0, "selected_memory_count": 0,
                "rehydrated_artifact_count": 0,
                "graph_query_ms": draw(st.floats(0, 1e6)), "policy_eval_ms": 0.5,
                "serialization_ms": 0.25, "selection_hash": "h" * 64,
                "payload_sha256": draw(st.none() | st.just("p" * 64)), "tags": strs()})
            chosen = draw(st.lists(st.sampled_from(records), unique=True, max_size=6)) if records else []
            position = 0
            for step, (kind, rid) in enumerate(chosen):
                included = draw(st.booleans())
                reason = pick(sorted(INCLUDED_REASONS if included else OMITTED_REASONS))
                family = pick(list(ENUMS["policy_family"]))
                t["assembly_records"].append({
                    "assembly_id": asid, "record_kind": kind, "record_id": rid,
                    "decision": "included" if included else "omitted",
                    "rendering": pick(list(ENUMS["rendering"])) if included else None,
                    "position": position if included else None, "policy_family": family,
                    "reason_code": reason, "detail": draw(TEXT), "tokens": draw(st.integers(0, 999))})
                position += included
                if draw(st.booleans()):
                    t["policy_decisions"].append({
                        "decision_id": new_id("d"), "assembly_id": asid, "step": step,
                        "record_kind": kind, "record_id": rid, "policy_family": family,
                        "outcome": pick(list(ENUMS["policy_outcome"])), "reason_code": reason,
                        "detail": draw(TEXT)})
    return t


def write_graph(rows: dict[str, list[dict[str, Any]]], out: Path, export_id: str = "exp-fuzz") -> Path:
    with ExportWriter(out, export_id=export_id, producer="fuzz/1", created_at=CREATED) as w:
        for name, table_rows in rows.items():
            if table_rows:
                w.write(name, table_rows)
    return out


# ----------------------------------------------------------------------------- corruptions


def _nonempty(rows, names):
    return [n for n in names if rows[n]]


def _corruptions(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    out = ["manifest_sha", "manifest_rows", "truncate", "drop_column", "null_required", "bad_enum"]
    if any(len(rows[n]) >= 2 for n in TABLES):
        out.append("duplicate_key")
    if _nonempty(rows, [n for n, t in TABLES.items() if any(not fk.soft for fk in t.foreign_keys)]):
        out.append("dangling_fk")
    if rows["tool_memories"]:
        out.append("self_superseded")
    if rows["tool_calls"]:
        out += ["bad_json", "completed_before_requested"]
    if any(b["parent_branch_id"] for b in rows["branches"]):
        out.append("branch_cycle")
    return out


def corrupt(export: Path, rows: dict[str, list[dict[str, Any]]], kind: str, data: st.DataObject) -> None:
    manifest_path = export / "manifest.json"

    def row_of(name: str) -> int:
        return data.draw(st.integers(0, len(rows[name]) - 1), label=f"{name} row")

    def table_with(pred) -> str:
        names = sorted(n for n in TABLES if pred(n))
        return data.draw(st.sampled_from(names), label="table")

    if kind in ("manifest_sha", "manifest_rows"):
        name = table_with(lambda n: True)
        manifest = json.loads(manifest_path.read_text())
        if kind == "manifest_sha":
            manifest["tables"][name]["sha256"] = "f" * 64
        else:
            manifest["tables"][name]["rows"] += data.draw(st.sampled_from([-1, 1, 1000]))
        manifest_path.write_text(json.dumps(manifest))
    elif kind == "truncate":
        name = table_with(lambda n: True)
        path = export / f"{name}.parquet"
        body = path.read_bytes()
        path.write_bytes(body[: data.draw(st.integers(0, len(body) - 1), label="keep bytes")])
    elif kind == "drop_column":
        name = table_with(lambda n: True)
        col = data.draw(st.sampled_from([c for c in TABLES[name].column_names if (name, c) not in ADDED_COLUMNS]),
                        label="column")
        rewrite_table(export, name, read_table(export, name).drop_columns([col]))
    elif kind == "null_required":
        name = table_with(lambda n: bool(rows[n]))
        col = data.draw(st.sampled_from([c.name for c in TABLES[name].columns if not c.nullable]))
        set_value(export, name, col, row_of(name), None)
    elif kind == "bad_enum":
        name = table_with(lambda n: bool(rows[n]) and any(c.enum for c in TABLES[n].columns))
        col = data.draw(st.sampled_from([c.name for c in TABLES[name].columns if c.enum]))
        set_value(export, name, col, row_of(name), data.draw(st.sampled_from(["", "INCLUDED", "x'; DROP TABLE messages; --"])))
    elif kind == "duplicate_key":
        name = table_with(lambda n: len(rows[n]) >= 2)
        table = read_table(export, name)
        i = row_of(name)
        j = (i + 1) % len(rows[name])
        for col in TABLES[name].primary_key:
            set_value(export, name, col, j, table.column(col)[i].as_py())
    elif kind == "dangling_fk":
        name = table_with(lambda n: bool(rows[n]) and any(not fk.soft for fk in TABLES[n].foreign_keys))
        col = data.draw(st.sampled_from([fk.column for fk in TABLES[name].foreign_keys if not fk.soft]))
        set_value(export, name, col, row_of(name), "zz-404")
    elif kind == "self_superseded":
        i = row_of("tool_memories")
        set_value(export, "tool_memories", "superseded_by", i, rows["tool_memories"][i]["memory_id"])
    elif kind == "bad_json":
        set_value(export, "tool_calls", "arguments_json", row_of("tool_calls"), "{not json")
    elif kind == "completed_before_requested":
        i = row_of("tool_calls")
        set_value(export, "tool_calls", "completed_at", i,
                  rows["tool_calls"][i]["requested_at"] - dt.timedelta(microseconds=1))
    elif kind == "branch_cycle":
        # a root becomes the child of one of its own descendants (or of itself)
        child = next(b for b in rows["branches"] if b["parent_branch_id"])
        root = child["parent_branch_id"]
        i = next(k for k, b in enumerate(rows["branches"]) if b["branch_id"] == root)
        set_value(export, "branches", "parent_branch_id", i, child["branch_id"])
    else:  # pragma: no cover
        raise AssertionError(kind)


# ----------------------------------------------------------------------------- tests

FUZZ = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def base_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base")
    db = root / "store.duckdb"
    ingest(make_export(root / "exp", export_id="exp-fuzz"), db)  # same id as the fuzzed exports
    return db


@FUZZ
@given(rows=graphs())
def test_valid_graphs_round_trip_losslessly(rows) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        export = write_graph(rows, root / "exp")
        db = root / "store.duckdb"
        result = ingest(export, db)
        assert result.changed
        assert result.rows == {n: len(rows[n]) for n in TABLES}
        again = export_store(db, root / "again")
        assert_same_tables(export, again)
        manifest = json.loads((again / "manifest.json").read_text())
        assert manifest["export_id"] == "exp-fuzz" and manifest["producer"] == "fuzz/1"


@FUZZ
@given(rows=graphs(), data=st.data())
def test_corrupted_graphs_are_rejected_cleanly(rows, data, base_store: Path) -> None:
    kind = data.draw(st.sampled_from(_corruptions(rows)), label="corruption")
    before = _sha(base_store)
    with tempfile.TemporaryDirectory() as tmp:
        export = write_graph(rows, Path(tmp) / "exp")
        corrupt(export, rows, kind, data)
        with pytest.raises(ContextlensError) as info:  # never another exception
            ingest(export, base_store)
        message = str(info.value)
        assert "\n" not in message and message.startswith("export exp: ")
        assert isinstance(info.value, ValidationError), message
    assert _sha(base_store) == before
    assert sorted(p.name for p in base_store.parent.iterdir()) == ["exp", "store.duckdb"]


def test_the_sample_round_trips_with_blobs_and_policies(sample_export: Path, sample_db: Path, tmp_path: Path) -> None:
    out = export_store(sample_db, tmp_path / "again")
    assert_same_tables(sample_export, out)
    assert sorted(p.name for p in (out / "blobs").iterdir()) == sorted(
        p.name for p in (sample_export / "blobs").iterdir()
    )
    for toml in (sample_export / "policies").glob("*.toml"):
        assert (out / "policies" / toml.name).read_text() == toml.read_text()
    # writing the same store twice gives the same bytes (rows ordered by primary key)
    twice = export_store(sample_db, tmp_path / "twice")
    a, b = (json.loads((p / "manifest.json").read_text())["tables"] for p in (out, twice))
    assert a == b
    with Store.open(sample_db) as store:
        assert store.count_assemblies() == len(_table_rows(out, "context_assemblies"))


def test_export_store_names_the_export_when_a_store_holds_several(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    ingest(make_export(tmp_path / "one", export_id="exp-1"), db)
    ingest(make_export(tmp_path / "two", export_id="exp-2", edit=prefixed_ids("2-")), db)
    with pytest.raises(ContextlensError, match="holds 2 exports; name one of: exp-1, exp-2"):
        export_store(db, tmp_path / "out")
    with pytest.raises(ContextlensError, match="no export 'exp-3'"):
        export_store(db, tmp_path / "out", "exp-3")
    out = export_store(db, tmp_path / "out", "exp-2")
    assert_same_tables(tmp_path / "two", out)
    assert (out / "blobs").is_dir()


def test_export_store_refuses_what_is_not_a_store(tmp_path: Path) -> None:
    bogus = tmp_path / "x.duckdb"
    bogus.write_bytes(b"not a database at all")
    with pytest.raises(ContextlensError, match="not a contextlens store"):
        export_store(bogus, tmp_path / "out")
    with pytest.raises(ContextlensError, match="no store at"):
        export_store(tmp_path / "missing.duckdb", tmp_path / "out")
    assert not (tmp_path / "out").exists()
