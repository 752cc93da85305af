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

from ingest.contract import TABLES, TRANSCRIPT_FACTS

if TYPE_CHECKING:  # pragma: no cover
    from ingest.store import Store

__all__ = ["GRAPH_TABLES", "Request", "Snapshot", "load_request", "load_snapshot", "load_snapshots",
           "request_from_row", "snapshots_from_graphs"]

GRAPH_TABLES: tuple[str, ...] = (
    "conversations", "branches", "participants", "messages", "model_runs", "tool_calls",
    "tool_artifacts", "tool_memories", "skill_states", "checkpoints",
)


@dataclass
class Request:
    """What the runtime asked for.

    ``token_budget`` and ``byte_budget`` are what the recorded runtime used (informational:
    a replay takes its budgets from the policy). ``context_limit`` is the most input tokens
    the request could carry (the model's context window); it caps the policy's token
    budget. None means unknown (no cap).
    """

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
    context_limit: int | None = None


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


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_US = dt.timedelta(microseconds=1)


def _ts_values(column: Any) -> list[dt.datetime | None]:
    """A timestamp column as aware UTC datetimes. Going through int64 microseconds is ~3x
    cheaper than Arrow's own conversion (which attaches a zoneinfo per value)."""
    import pyarrow as pa

    unit = column.type.unit
    ints = column.cast(pa.timestamp(unit)).cast(pa.int64()).to_pylist()
    scale = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}[unit]
    epoch = _EPOCH
    if scale is None:  # nanoseconds: Python datetimes hold microseconds
        return [None if v is None else epoch + dt.timedelta(microseconds=v // 1000) for v in ints]
    if scale == 1:
        return [None if v is None else epoch + dt.timedelta(microseconds=v) for v in ints]
    return [None if v is None else epoch + dt.timedelta(microseconds=v * scale) for v in ints]


def _rows(table: Any, name: str) -> list[dict[str, Any]]:
    """Arrow table -> row dicts with the contract's columns, timestamps as aware UTC.

    Converted column by column (one Arrow -> Python pass per column, then zipped), which is
    much cheaper than ``Table.to_pylist`` on timestamp columns."""
    import pyarrow as pa

    cols = [c for c in (*TABLES[name].column_names, TRANSCRIPT_FACTS) if c in table.column_names]
    if not table.num_rows:
        return []
    kinds = {c.name: c.kind for c in TABLES[name].columns}
    values: list[list[Any]] = []
    for c in cols:
        col = table.column(c)
        if pa.types.is_timestamp(col.type):
            values.append(_ts_values(col))
        elif kinds.get(c) == "list":
            values.append([v if v is not None else [] for v in col.to_pylist()])
        else:
            values.append(col.to_pylist())
    return [dict(zip(cols, row)) for row in zip(*values)]


def load_snapshot(store: "Store", conversation_id: str, export_id: str | None = None) -> Snapshot:
    """Every graph row of ``conversation_id`` (of ``export_id``, or the first export holding it)."""
    graph = store.conversation_graph(conversation_id, export_id)
    return Snapshot({name: _rows(t, name) for name, t in graph.items()})


def load_snapshots(store: "Store", conversation_ids: list[str], export_id: str) -> dict[str, Snapshot]:
    """``load_snapshot`` of many conversations of one export: one store query per graph
    table for all of them, converted to Python once (verify loads its work in chunks)."""
    return snapshots_from_graphs(store.conversation_graphs(conversation_ids, export_id),
                                 conversation_ids)


def snapshots_from_graphs(graphs: dict[str, Any], conversation_ids: list[str]) -> dict[str, Snapshot]:
    """Snapshots of ``conversation_ids`` from graph tables already read (``Store.
    conversation_graphs``: Arrow, each row tagged ``graph_conversation_id``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    split: dict[str, dict[str, list[dict[str, Any]]]] = {cid: {} for cid in conversation_ids}
    wanted = pa.array(list(split), pa.string())
    for name, table in graphs.items():
        # only the rows of these conversations become Python values (a verify builds the
        # snapshots of its few drifted requests' conversations out of a whole chunk's graph)
        table = table.filter(pc.is_in(table.column("graph_conversation_id"), value_set=wanted))
        keys = table.column("graph_conversation_id").to_pylist()
        for key, row in zip(keys, _rows(table, name)):
            split[key].setdefault(name, []).append(row)
    return {cid: Snapshot(tables) for cid, tables in split.items()}


def load_request(store: "Store", assembly_id: str) -> Request:
    """The Request recorded for ``assembly_id`` (NotFoundError for an unknown id)."""
    return request_from_row(store.assembly(assembly_id))
