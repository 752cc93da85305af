"""Small exports for the store, validation and filter tests, written with ExportWriter.

``base_rows()`` is one valid conversation: two branches, a user and a model participant,
messages, a model run with a tool call, two artifacts (one with a blob), three memories
(one superseded by another, one naming a missing artifact: broken provenance), a skill
state, a checkpoint and two assemblies with records and decisions.
``rewrite_table()`` replaces a table's Parquet with arbitrary Arrow data (any schema) and
fixes the manifest, so a test can build exports the writer itself would refuse.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.writer import ExportWriter, table_sha256

T0 = dt.datetime(2025, 3, 1, 9, 0, tzinfo=dt.timezone.utc)


def ts(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


BLOB = b"date,amount\n2025-03-01,12.50\n2025-03-02,7.25\n"


def base_rows(blob_sha: str = "0" * 64) -> dict[str, list[dict[str, Any]]]:
    return {
        "conversations": [
            {"conversation_id": "c1", "title": "Budget review", "owner_id": "u1", "created_at": ts(0)},
            {"conversation_id": "c2", "title": "Calendar", "owner_id": "u1", "created_at": ts(1)},
        ],
        "branches": [
            {"branch_id": "b1", "conversation_id": "c1", "parent_branch_id": None,
             "fork_message_id": None, "name": "main", "created_at": ts(0)},
            {"branch_id": "b2", "conversation_id": "c1", "parent_branch_id": "b1",
             "fork_message_id": "msg1", "name": "alt", "created_at": ts(5)},
            {"branch_id": "b3", "conversation_id": "c2", "parent_branch_id": None,
             "fork_message_id": None, "name": "main", "created_at": ts(1)},
        ],
        "participants": [
            {"participant_id": "p-user", "conversation_id": "c1", "label": "User", "kind": "user",
             "provider": None, "model": None},
            {"participant_id": "p-model", "conversation_id": "c1", "label": "Assistant",
             "kind": "model", "provider": "acme", "model": "acme-large"},
        ],
        "messages": [
            {"message_id": "msg1", "conversation_id": "c1", "branch_id": "b1",
             "parent_message_id": None, "role": "user", "participant_id": "p-user",
             "model_run_id": None, "speaker_label": "User",
             "content": "Please total my March expenses from the CSV.", "content_tokens": 12,
             "visibility_scope": "conversation", "created_at": ts(1)},
            {"message_id": "msg2", "conversation_id": "c1", "branch_id": "b1",
             "parent_message_id": "msg1", "role": "assistant", "participant_id": "p-model",
             "model_run_id": "run1", "speaker_label": "Assistant",
             "content": "The total is 19.75.", "content_tokens": 6,
             "visibility_scope": "conversation", "created_at": ts(3)},
        ],
        "model_runs": [
            {"model_run_id": "run1", "conversation_id": "c1", "branch_id": "b1",
             "participant_id": "p-model", "trigger_message_id": "msg1", "runtime_kind": "chat",
             "parent_model_run_id": None, "subagent_batch_id": None, "provider": "acme",
             "model": "acme-large", "status": "succeeded", "started_at": ts(2), "ended_at": ts(3)},
        ],
        "tool_calls": [
            {"tool_call_id": "tc1", "model_run_id": "run1", "tool_name": "read_csv",
             "arguments_json": '{"path": "march.csv"}', "status": "succeeded", "retryable": False,
             "parallel_group": None, "requested_at": ts(2), "completed_at": ts(2)},
        ],
        "tool_artifacts": [
            {"artifact_id": "a1", "tool_call_id": "tc1", "tool_name": "read_csv",
             "status": "succeeded", "result_preview": "date,amount 2025-03-01,12.50 ...",
             "error": None, "byte_size": len(BLOB), "sha256": blob_sha,
             "storage_ref": f"blobs/{blob_sha}", "content_type": "text/csv",
             "content_tokens": 20, "privacy_class": "user_private",
             "visibility_scope": "conversation", "owner_participant_id": "p-model",
             "owner_model_run_id": "run1", "shared_with": [], "branch_id": "b1",
             "retention_class": "keep", "created_at": ts(2)},
            {"artifact_id": "a2", "tool_call_id": "tc1", "tool_name": "read_csv",
             "status": "failed", "result_preview": "", "error": "timeout",
             "byte_size": 0, "sha256": "e" * 64, "storage_ref": None,
             "content_type": "text/plain", "content_tokens": 0, "privacy_class": "internal",
             "visibility_scope": "conversation", "owner_participant_id": "p-model",
             "owner_model_run_id": "run1", "shared_with": [], "branch_id": "b1",
             "retention_class": "keep", "created_at": ts(2)},
        ],
        "tool_memories": [
            _memory("m1", ["a1"], "March expenses total 19.75", superseded_by="m2"),
            _memory("m2", ["a1"], "March expenses total 19.75 (two rows)", supersedes=["m1"]),
            _memory("m3", ["a1", "a-404"], "Calendar free on Friday", freshness="volatile"),
        ],
        "skill_states": [
            {"skill_state_id": "s1", "model_run_id": "run1", "loaded_skills": ["csv", "math"],
             "active_profiles": ["default"], "direct_tools": ["read_csv"], "content_tokens": 30,
             "created_at": ts(2)},
        ],
        "checkpoints": [
            {"checkpoint_id": "k1", "model_run_id": "run1", "kind": "continuation",
             "state_json": '{"step": 2}', "content_tokens": 5, "created_at": ts(2)},
        ],
        "context_assemblies": [
            _assembly("as1", ts(2), "v4", ["scenario:exact_csv", "team:finance"]),
            _assembly("as2", ts(4), "v5", ["scenario:incident"], runtime_kind="multi_model",
                      model="acme-small"),
        ],
        "assembly_records": [
            _rec("as1", "message", "msg1", "included", "verbatim", 0, "window", "in_window", 12),
            _rec("as1", "tool_memory", "m2", "included", "compact_memory", 1, "promotion",
                 "compact_memory", 9),
            _rec("as1", "tool_artifact", "a1", "included", "rehydrated_raw", 2, "rehydration",
                 "rehydrated_exact", 20),
            _rec("as1", "skill_state", "s1", "included", "summary", 3, "recovery",
                 "skill_active", 30),
            _rec("as1", "checkpoint", "k1", "included", "verbatim", 4, "recovery",
                 "checkpoint_restore", 5),
            _rec("as1", "tool_call", "tc1", "included", "reference", 5, "window", "in_window", 4),
            _rec("as1", "tool_memory", "m1", "omitted", None, None, "contradiction",
                 "superseded", 8),
            _rec("as1", "tool_memory", "m3", "omitted", None, None, "freshness", "stale", 7),
            _rec("as1", "tool_artifact", "a2", "omitted", None, None, "budget", "over_budget", 3),
            _rec("as2", "message", "msg1", "included", "verbatim", 0, "window", "in_window", 12),
            _rec("as2", "message", "msg2", "omitted", None, None, "window", "not_yet_created", 6),
        ],
        "policy_decisions": [
            _dec("d1", "as1", 1, "tool_memory", "m1", "contradiction", "replace", "superseded"),
            _dec("d2", "as1", 2, "tool_memory", "m3", "freshness", "deny", "stale"),
            _dec("d3", "as1", 3, "tool_artifact", "a1", "rehydration", "rehydrate",
                 "rehydrated_exact"),
            _dec("d4", "as2", 1, "message", "msg2", "window", "deny", "not_yet_created"),
        ],
    }


def _memory(mid, sources, summary, superseded_by=None, supersedes=(), freshness="durable"):
    return {
        "memory_id": mid, "conversation_id": "c1", "branch_id": "b1",
        "source_artifact_ids": list(sources), "source_tool_names": ["read_csv"],
        "summary": summary, "structured_json": None, "content_tokens": 9, "confidence": 0.9,
        "trust_source": "tool", "ambiguity_notes": None, "privacy_class": "user_private",
        "freshness_class": freshness, "observed_at": ts(2), "stale_after": ts(60),
        "revalidation_tools": ["read_csv"], "provenance_locators": [], "conflicts_with": [],
        "supersedes": list(supersedes), "superseded_by": superseded_by,
        "promotion_policy": "auto", "promoted": True, "visibility_scope": "conversation",
        "owner_participant_id": "p-model", "owner_model_run_id": "run1", "created_at": ts(2),
    }


def _assembly(aid, at, policy, tags, runtime_kind="chat", model="acme-large"):
    return {
        "assembly_id": aid, "model_run_id": "run1", "conversation_id": "c1", "branch_id": "b1",
        "participant_id": "p-model", "runtime_kind": runtime_kind, "provider": "acme",
        "model": model, "policy_version": policy, "assembler_version": "ref-1.0",
        "assembled_at": at, "token_budget": 4000, "byte_budget": 65536,
        "exact_evidence_ids": [], "baseline_tokens": 200, "assembled_tokens": 80,
        "baseline_message_count": 2, "assembled_message_count": 1, "raw_artifact_count": 1,
        "selected_memory_count": 1, "rehydrated_artifact_count": 1, "graph_query_ms": 1.5,
        "policy_eval_ms": 0.5, "serialization_ms": 0.2, "selection_hash": "h" * 64,
        "payload_sha256": None, "tags": list(tags),
    }


def _rec(aid, kind, rid, decision, rendering, position, family, reason, tokens):
    return {
        "assembly_id": aid, "record_kind": kind, "record_id": rid, "decision": decision,
        "rendering": rendering, "position": position, "policy_family": family,
        "reason_code": reason, "detail": f"{reason} detail", "tokens": tokens,
    }


def _dec(did, aid, step, kind, rid, family, outcome, reason):
    return {
        "decision_id": did, "assembly_id": aid, "step": step, "record_kind": kind,
        "record_id": rid, "policy_family": family, "outcome": outcome, "reason_code": reason,
        "detail": f"{reason} detail",
    }


def make_export(
    out_dir: Path,
    export_id: str = "exp-test",
    edit: Callable[[dict[str, list[dict[str, Any]]]], None] | None = None,
    with_blob: bool = True,
) -> Path:
    """Write the base export (optionally edited in place first) to ``out_dir``."""
    import hashlib

    blob_sha = hashlib.sha256(BLOB).hexdigest()
    rows = copy.deepcopy(base_rows(blob_sha))
    if edit is not None:
        edit(rows)
    with ExportWriter(out_dir, export_id=export_id, producer="tests/1", created_at=T0) as w:
        for name, table_rows in rows.items():
            w.write(name, table_rows)
        if with_blob:
            assert w.add_blob(BLOB) == blob_sha
    return out_dir


def rewrite_table(
    export_dir: Path,
    table: str,
    data: pa.Table,
    fix_manifest: bool = True,
) -> None:
    """Replace ``table``'s single Parquet file with ``data`` (any schema) and, by default,
    update manifest.json's rows and sha256 so only the content is wrong."""
    path = export_dir / f"{table}.parquet"
    pq.write_table(data, path)
    if fix_manifest:
        manifest_path = export_dir / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
        entry = manifest["tables"][table]
        entry["rows"] = data.num_rows
        entry["sha256"] = table_sha256(export_dir, entry["files"])
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))


def read_table(export_dir: Path, table: str) -> pa.Table:
    return pq.read_table(export_dir / f"{table}.parquet")


def set_value(export_dir: Path, table: str, column: str, row: int, value: Any,
              arrow_type: pa.DataType | None = None) -> None:
    """Set one cell (changing the column's type if ``arrow_type`` is given) and fix the
    manifest."""
    data = read_table(export_dir, table)
    values = data.column(column).to_pylist()
    values[row] = value
    idx = data.schema.get_field_index(column)
    typ = arrow_type or data.schema.field(column).type
    if arrow_type is not None:
        values = [None if v is None else (str(v) if pa.types.is_string(typ) else v) for v in values]
    data = data.set_column(idx, pa.field(column, typ, nullable=True), pa.array(values, typ))
    rewrite_table(export_dir, table, data)


# id columns of the base rows (and the columns and lists that name them)
# The scale store's size (conftest's ``scale_db``): more requests than one engine chunk
# holds, so compare and verify start worker processes.
SCALE_REQUESTS = 10_000

_ID_COLUMNS = {"shared_with", "supersedes", "superseded_by", "conflicts_with", "owner_id"}


def renamed_ids(prefix: str = "", suffix: str = "", keep: tuple[str, ...] = ()
                ) -> Callable[[dict[str, list[dict[str, Any]]]], None]:
    """An edit giving every id of the base rows ``prefix`` and ``suffix`` (the columns named
    ``*_id``, ``*_ids`` and those naming other rows' ids), except the columns ending with one
    of ``keep``: a second export of the same rows that repeats only the kept ids of the first
    (primary keys are unique within a store)."""

    def renamed(value: Any) -> Any:
        return prefix + value + suffix if isinstance(value, str) else value

    def edit(rows: dict[str, list[dict[str, Any]]]) -> None:
        for table in rows.values():
            for row in table:
                for key, value in list(row.items()):
                    if not (key.endswith("_id") or key.endswith("_ids") or key in _ID_COLUMNS):
                        continue
                    if any(key.endswith(k) for k in keep):
                        continue
                    row[key] = ([renamed(v) for v in value] if isinstance(value, list)
                                else renamed(value))

    return edit


def prefixed_ids(prefix: str) -> Callable[[dict[str, list[dict[str, Any]]]], None]:
    """``renamed_ids`` with a prefix: a second export a store can hold beside the first."""
    return renamed_ids(prefix=prefix)


def rename_values(rows: dict[str, list[dict[str, Any]]], renamed: dict[str, str]) -> None:
    """Every value of every row (alone or in a list) that ``renamed`` names, replaced by
    its new name: an export whose ids, models, tools... are planted values."""

    def new(value: Any) -> Any:
        if isinstance(value, str):
            return renamed.get(value, value)
        if isinstance(value, list):
            return [new(v) for v in value]
        return value

    for table in rows.values():
        for row in table:
            for key, value in list(row.items()):
                row[key] = new(value)
