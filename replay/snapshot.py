"""What an assembler reads: the request (a recorded context_assemblies row) and the snapshot
(the rows of one conversation's execution graph, as plain Python values).

Rows are the contract's columns with Python shapes: aware UTC datetimes, lists of strings,
None for nulls; ``export_id`` is not part of them. The assembler applies "as of the
request's time" itself, so one snapshot serves every assembly of its conversation.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ingest.contract import TABLES

if TYPE_CHECKING:  # pragma: no cover
    from ingest.store import Store

__all__ = ["GRAPH_TABLES", "Request", "Snapshot", "load_request", "load_snapshot", "request_from_row"]

GRAPH_TABLES: tuple[str, ...] = (
    "conversations", "branches", "participants", "messages", "model_runs", "tool_calls",
    "tool_artifacts", "tool_memories", "skill_states", "checkpoints",
)


@dataclass
class Request:
    """What the runtime asked for; budgets of None fall back to the policy's defaults."""

    assembly_id: str
    model_run_id: str
    conversation_id: str
    branch_id: str
    participant_id: str
    runtime_kind: str
    provider: str
    model: str
    assembled_at: dt.datetime
    policy_version: str
    assembler_version: str
    token_budget: int | None
    byte_budget: int | None
    exact_evidence_ids: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)


_REQUEST_FIELDS = tuple(Request.__dataclass_fields__)


def request_from_row(row: dict[str, Any]) -> Request:
    """A Request from a context_assemblies row (extra keys are ignored)."""
    values = {k: row.get(k) for k in _REQUEST_FIELDS}
    values["exact_evidence_ids"] = list(values["exact_evidence_ids"] or [])
    values["tags"] = list(values["tags"] or [])
    at = values["assembled_at"]
    if isinstance(at, dt.datetime):
        values["assembled_at"] = _utc(at)
    return Request(**values)


def _utc(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


class Snapshot:
    """Graph rows per table. ``tables`` maps a graph table name to a list of row dicts.

    The assembler caches its per-conversation indexes on the snapshot (``_indexes``);
    rows must not be mutated after the first assembly.
    """

    def __init__(self, tables: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.tables: dict[str, list[dict[str, Any]]] = {
            name: list((tables or {}).get(name, [])) for name in GRAPH_TABLES
        }
        self._indexes: dict[str, Any] = {}

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(v)}" for k, v in self.tables.items() if v)
        return f"Snapshot({sizes})"


def _rows(table: Any, name: str) -> list[dict[str, Any]]:
    """Arrow table -> row dicts with the contract's columns, timestamps as aware UTC."""
    cols = [c for c in TABLES[name].column_names if c in table.column_names]
    rows = table.select(cols).to_pylist()
    ts_cols = [c.name for c in TABLES[name].columns if c.kind == "ts"]
    list_cols = [c.name for c in TABLES[name].columns if c.kind == "list"]
    for r in rows:
        for c in ts_cols:
            v = r.get(c)
            if v is not None:
                r[c] = _utc(v)
        for c in list_cols:
            if c in r and r[c] is None:
                r[c] = []
    return rows


def load_snapshot(store: "Store", conversation_id: str, export_id: str | None = None) -> Snapshot:
    """Every graph row of ``conversation_id`` (of ``export_id``, or the first export holding it)."""
    graph = store.conversation_graph(conversation_id, export_id)
    return Snapshot({name: _rows(t, name) for name, t in graph.items()})


def load_request(store: "Store", assembly_id: str) -> Request:
    """The Request recorded for ``assembly_id`` (NotFoundError for an unknown id)."""
    return request_from_row(store.assembly(assembly_id))
