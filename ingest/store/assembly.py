"""Queries about one assembly: its row, its records (labelled), its policy decisions, the
prompt records of its included records, the record rows replay compares against, and the
provenance walk from a record to what it derives from.

An assembly id is looked up in the first export (by id) that holds it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..contract import RECORD_TABLES
from ..errors import ContextlensError, NotFoundError
from ..sql import q
from .database import Database, clip, cols_of

__all__ = ["AssemblyQueries"]

# kinds whose rows carry a privacy class
_PRIVATE_KINDS = ("tool_artifact", "tool_memory")

# A label quotes the start of its record's text on one line. It is cut here only to bound
# what one assembly reads; the read model masks secrets in it first and cuts it for display
# after, so a secret is never cut in half before it is masked.
LABEL_SOURCE_CHARS = 1000

# kind -> (table, id column, label expression, created-at expression)

_LABELS: dict[str, tuple[str, str, str, str]] = {
    "message": ("messages", "message_id", f"role || ': ' || {clip('content', LABEL_SOURCE_CHARS)}", "created_at"),
    "tool_call": (
        "tool_calls", "tool_call_id", f"tool_name || '(' || {clip('arguments_json', LABEL_SOURCE_CHARS)} || ')'",
        "requested_at",
    ),
    "tool_artifact": (
        "tool_artifacts", "artifact_id",
        f"tool_name || ' ' || status || ' ' || {clip('result_preview', LABEL_SOURCE_CHARS)}", "created_at",
    ),
    "tool_memory": ("tool_memories", "memory_id", clip("summary", LABEL_SOURCE_CHARS), "created_at"),
    "skill_state": (
        "skill_states", "skill_state_id", "'skills: ' || array_to_string(loaded_skills, ', ')",
        "created_at",
    ),
    "checkpoint": ("checkpoints", "checkpoint_id", "kind || ' checkpoint'", "created_at"),
    "model_run": (
        "model_runs", "model_run_id",
        "runtime_kind || ' run of ' || participant_id || ' (' || provider || '/' || model || ', ' || status || ')'",
        "started_at",
    ),
}

# kind -> expressions for prompt_records' per-kind columns
_NULLS = {
    "role": "NULL::VARCHAR", "speaker_label": "NULL::VARCHAR", "content": "NULL::VARCHAR",
    "privacy_class": "NULL::VARCHAR", "storage_ref": "NULL::VARCHAR", "sha256": "NULL::VARCHAR",
    "observed_at": "NULL::TIMESTAMPTZ", "stale_after": "NULL::TIMESTAMPTZ",
    "revalidation_tools": "NULL::VARCHAR[]", "tool_name": "NULL::VARCHAR",
    "status": "NULL::VARCHAR", "error": "NULL::VARCHAR",
}
_PROMPT_COLUMNS: dict[str, dict[str, str]] = {
    "message": {"role": "role", "speaker_label": "speaker_label", "content": "content"},
    "tool_memory": {
        "content": "summary", "privacy_class": "privacy_class", "observed_at": "observed_at",
        "stale_after": "stale_after", "revalidation_tools": "revalidation_tools",
        "tool_name": "array_to_string(source_tool_names, ', ')",
    },
    "tool_artifact": {
        "content": "result_preview", "privacy_class": "privacy_class",
        "storage_ref": "storage_ref", "sha256": "sha256", "tool_name": "tool_name",
        "status": "status", "error": "error", "observed_at": "created_at",
    },
    "tool_call": {"content": "arguments_json", "tool_name": "tool_name", "status": "status"},
    "checkpoint": {"content": "state_json"},
    "skill_state": {
        "content": "'skills: ' || array_to_string(loaded_skills, ', ') || '; profiles: ' || "
        "array_to_string(active_profiles, ', ') || '; tools: ' || array_to_string(direct_tools, ', ')",
    },
}

# included by prompt position; omitted by reason and kind, then by time (ids are not a
# usable order: m2 would sort after m10), then id
_RECORD_ORDER = (
    "ORDER BY (r.decision <> 'included'), "
    "CASE WHEN r.decision = 'included' THEN r.position END NULLS LAST, "
    "r.reason_code, r.record_kind, l.created_at NULLS LAST, r.record_id"
)


# Provenance also walks through model runs, which are not assembly records.
_LINK_TABLES: dict[str, tuple[str, str]] = {**RECORD_TABLES, "model_run": ("model_runs", "model_run_id")}


def _record_table(kind: str) -> tuple[str, str]:
    try:
        return _LINK_TABLES[kind]
    except KeyError:
        raise ContextlensError(
            f"unknown record kind '{kind}' (known: {', '.join(_LINK_TABLES)})"
        ) from None


def _edges(kind: str, row: dict[str, Any], is_root: bool) -> list[tuple[str, str | None, str, bool]]:
    """(target kind, target id, via column, follow further) for one provenance step."""
    if kind == "tool_memory":
        out = [("tool_artifact", a, "source_artifact_ids", True) for a in row.get("source_artifact_ids") or []]
        if row.get("superseded_by"):
            out.append(("tool_memory", row["superseded_by"], "superseded_by", False))
        out += [("tool_memory", m, "supersedes", False) for m in row.get("supersedes") or []]
        return out
    if kind == "tool_artifact":
        return [("tool_call", row.get("tool_call_id"), "tool_call_id", True)]
    if kind in ("tool_call", "skill_state", "checkpoint"):
        return [("model_run", row.get("model_run_id"), "model_run_id", True)]
    if kind == "model_run":
        return [("message", row.get("trigger_message_id"), "trigger_message_id", False)]
    if kind == "message" and is_root:
        return [("model_run", row.get("model_run_id"), "model_run_id", True)]
    return []


class AssemblyQueries(Database):
    """The one-assembly area of ``Store``."""

    # ---- one assembly
    def assembly(self, assembly_id: str) -> dict[str, Any]:
        row = self._one(
            "SELECT a.*, s.included_count, s.omitted_count, s.scenario FROM context_assemblies a "
            "JOIN assembly_summary s ON s.assembly_id = a.assembly_id AND s.export_id = a.export_id "
            "WHERE a.assembly_id = ? ORDER BY a.export_id LIMIT 1",
            [assembly_id],
        )
        if row is None:
            raise NotFoundError(f"unknown assembly '{assembly_id}'")
        return row

    def _assembly_export(self, assembly_id: str) -> str:
        rows = self._rows(
            "SELECT export_id FROM assembly_summary WHERE assembly_id = ? "
            "ORDER BY export_id LIMIT 1",
            [assembly_id],
        )
        if not rows:
            raise NotFoundError(f"unknown assembly '{assembly_id}'")
        return rows[0][0]

    def _record_ids(self, assembly_id: str, export_id: str, decision: str | None) -> dict[str, list[str]]:
        sql = (
            "SELECT record_kind, list(record_id) FROM assembly_records "
            "WHERE assembly_id = ? AND export_id = ?"
        )
        params: list[Any] = [assembly_id, export_id]
        if decision is not None:
            sql += " AND decision = ?"
            params.append(decision)
        sql += " GROUP BY record_kind"
        return {k: list(ids) for k, ids in self._rows(sql, params)}

    def assembly_records(self, assembly_id: str, decision: str | None = None) -> pa.Table:
        """Every record of the assembly (or those of one decision) with its one-line label,
        creation time and privacy class (null for kinds without one), in display order:
        included by position, then omitted by reason, kind and id."""
        if decision not in (None, "included", "omitted"):
            raise ContextlensError(f"decision must be 'included' or 'omitted', not '{decision}'")
        export_id = self._assembly_export(assembly_id)
        ids = self._record_ids(assembly_id, export_id, decision)
        parts, params = [], []
        for kind, id_list in sorted(ids.items()):
            if kind not in _LABELS:
                continue
            table, id_col, label, created = _LABELS[kind]
            privacy = "privacy_class" if kind in _PRIVATE_KINDS else "NULL::VARCHAR"
            parts.append(
                f"SELECT ? AS kind, {q(id_col)} AS id, {label} AS label, {created} AS created_at, "
                f"{privacy} AS privacy_class "
                f"FROM {q(table)} WHERE export_id = ? AND {q(id_col)} IN (SELECT unnest(?::VARCHAR[]))"
            )
            params += [kind, export_id, id_list]
        labels = " UNION ALL ".join(parts) or (
            "SELECT NULL::VARCHAR AS kind, NULL::VARCHAR AS id, NULL::VARCHAR AS label, "
            "NULL::TIMESTAMPTZ AS created_at, NULL::VARCHAR AS privacy_class WHERE false"
        )
        where = "r.assembly_id = ? AND r.export_id = ?"
        rparams: list[Any] = [assembly_id, export_id]
        if decision is not None:
            where += " AND r.decision = ?"
            rparams.append(decision)
        sql = (
            f"WITH labels AS ({labels}) "
            "SELECT r.record_kind, r.record_id, r.decision, r.rendering, r.position, "
            "r.policy_family, r.reason_code, r.detail, r.tokens, l.label, l.created_at, "
            "l.privacy_class "
            f"FROM assembly_records r LEFT JOIN labels l ON l.kind = r.record_kind AND l.id = r.record_id "
            f"WHERE {where} {_RECORD_ORDER}"
        )
        return self._arrow(sql, params + rparams)

    def policy_decisions(self, assembly_id: str, record_id: str | None = None) -> pa.Table:
        export_id = self._assembly_export(assembly_id)
        sql = (
            "SELECT decision_id, step, record_kind, record_id, policy_family, outcome, "
            "reason_code, detail FROM policy_decisions WHERE assembly_id = ? AND export_id = ?"
        )
        params: list[Any] = [assembly_id, export_id]
        if record_id is not None:
            sql += " AND record_id = ?"
            params.append(record_id)
        return self._arrow(sql + " ORDER BY step, decision_id", params)

    def record_decision(self, assembly_id: str, record_id: str) -> dict[str, Any]:
        export_id = self._assembly_export(assembly_id)
        row = self._one(
            "SELECT record_kind, record_id, decision, rendering, position, policy_family, "
            "reason_code, detail, tokens FROM assembly_records "
            "WHERE assembly_id = ? AND export_id = ? AND record_id = ? "
            "ORDER BY record_kind LIMIT 1",
            [assembly_id, export_id, record_id],
        )
        if row is None:
            raise NotFoundError(f"record '{record_id}' is not in assembly '{assembly_id}'")
        return row

    def record(self, record_kind: str, record_id: str, export_id: str | None = None) -> dict[str, Any] | None:
        table, id_col = _record_table(record_kind)
        sql = f"SELECT * FROM {q(table)} WHERE {q(id_col)} = ?"
        params: list[Any] = [record_id]
        if export_id is not None:
            sql += " AND export_id = ?"
            params.append(export_id)
        return self._one(sql + " ORDER BY export_id LIMIT 1", params)

    def _label(self, kind: str, record_id: str, export_id: str) -> str | None:
        table, id_col, label, _ = _LABELS[kind]
        rows = self._rows(
            f"SELECT {label} FROM {q(table)} WHERE {q(id_col)} = ? AND export_id = ? LIMIT 1",
            [record_id, export_id],
        )
        return rows[0][0] if rows else None

    def provenance(self, record_kind: str, record_id: str) -> list[dict[str, Any]]:
        """The record (depth 0) and the chain it derives from, walked breadth first.

        memory -> source artifacts -> tool call -> model run -> trigger message, plus the
        memory's supersession links. A reference to a missing row is a link with
        ``broken=True`` and the walk does not continue past it.
        """
        _record_table(record_kind)
        root = self.record(record_kind, record_id)
        if root is None:
            raise NotFoundError(f"unknown {record_kind} '{record_id}'")
        export_id = root["export_id"]
        links: list[dict[str, Any]] = [
            {
                "kind": record_kind, "id": record_id,
                "label": self._label(record_kind, record_id, export_id) or record_id,
                "broken": False, "depth": 0, "via": None,
                "privacy_class": root.get("privacy_class"),
            }
        ]
        seen = {(record_kind, record_id)}
        queue: list[tuple[str, dict[str, Any], int]] = [(record_kind, root, 0)]
        while queue:
            kind, row, depth = queue.pop(0)
            for target_kind, target_id, via, follow in _edges(kind, row, is_root=depth == 0):
                if not target_id or (target_kind, target_id) in seen:
                    continue
                seen.add((target_kind, target_id))
                target = self._row(target_kind, target_id, export_id)
                links.append(
                    {
                        "kind": target_kind,
                        "id": target_id,
                        "label": (
                            self._label(target_kind, target_id, export_id)
                            if target is not None
                            else f"missing {target_kind} {target_id}"
                        ),
                        "broken": target is None,
                        "depth": depth + 1,
                        "via": via,
                        "privacy_class": (target or {}).get("privacy_class"),
                    }
                )
                if target is not None and follow:
                    queue.append((target_kind, target, depth + 1))
        return links

    def _row(self, kind: str, record_id: str, export_id: str) -> dict[str, Any] | None:
        table, id_col = _LINK_TABLES[kind]
        return self._one(
            f"SELECT * FROM {q(table)} WHERE {q(id_col)} = ? AND export_id = ? LIMIT 1",
            [record_id, export_id],
        )

    def prompt_records(self, assembly_id: str) -> pa.Table:
        export_id = self._assembly_export(assembly_id)
        ids = self._record_ids(assembly_id, export_id, "included")
        parts, params = [], []
        for kind, id_list in sorted(ids.items()):
            if kind not in _PROMPT_COLUMNS:
                continue
            table, id_col = RECORD_TABLES[kind]
            exprs = {**_NULLS, **_PROMPT_COLUMNS[kind]}
            cols = ", ".join(f"{exprs[c]} AS {c}" for c in _NULLS)
            parts.append(
                f"SELECT ? AS kind, {q(id_col)} AS id, {cols} FROM {q(table)} "
                f"WHERE export_id = ? AND {q(id_col)} IN (SELECT unnest(?::VARCHAR[]))"
            )
            params += [kind, export_id, id_list]
        if not parts:
            parts = ["SELECT NULL::VARCHAR AS kind, NULL::VARCHAR AS id, "
                     + ", ".join(f"{v} AS {k}" for k, v in _NULLS.items()) + " WHERE false"]
        sql = (
            f"WITH body AS ({' UNION ALL '.join(parts)}) "
            "SELECT r.record_kind, r.record_id, r.position, r.rendering, r.tokens, r.detail, "
            + ", ".join(f"b.{c}" for c in _NULLS)
            + " FROM assembly_records r LEFT JOIN body b ON b.kind = r.record_kind AND b.id = r.record_id "
            "WHERE r.assembly_id = ? AND r.export_id = ? AND r.decision = 'included' "
            "ORDER BY r.position NULLS LAST, r.record_kind, r.record_id"
        )
        return self._arrow(sql, params + [assembly_id, export_id])

    def recorded_records(self, assembly_ids: list[str], export_id: str) -> pa.Table:
        """assembly_records rows (contract columns) of many assemblies of one export, ordered by
        assembly_id, record_kind, record_id."""
        ids = list(assembly_ids)
        if not ids:
            return self._arrow(f"SELECT {cols_of('assembly_records')} FROM assembly_records "
                               "WHERE false")
        # the range adds nothing to the IN list but lets DuckDB skip the row groups outside
        # it by their min/max (an IN list alone reads the whole table: a chunk's read then
        # grows with the store)
        with self._registered(_chunk_assemblies=pa.table({"aid": pa.array(ids, pa.string())})):
            return self._arrow(
                f"SELECT {cols_of('assembly_records')} FROM assembly_records WHERE export_id = ? "
                "AND assembly_id BETWEEN ? AND ? "
                "AND assembly_id IN (SELECT aid FROM _chunk_assemblies) "
                "ORDER BY assembly_id, record_kind, record_id",
                [export_id, min(ids), max(ids)],
            )

    def recorded_decisions(self, assembly_id: str) -> pa.Table:
        """policy_decisions rows (contract columns) of one assembly, by step and decision id."""
        export_id = self._assembly_export(assembly_id)
        return self._arrow(
            f"SELECT {cols_of('policy_decisions')} FROM policy_decisions "
            "WHERE assembly_id = ? AND export_id = ? ORDER BY step, decision_id",
            [assembly_id, export_id],
        )

