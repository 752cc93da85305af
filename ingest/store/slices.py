"""The rows one request needs, as an export slice (an incident bundle is written from it).

``Store.export_slice(assembly_id)`` returns, per contract table, the rows of the request's
conversation **as of the request** (a row enters at its time: messages, branches, memories,
skill states and checkpoints at ``created_at``, model runs at ``started_at``, tool calls at
``requested_at``, an artifact at its creation or its call's request, whichever is first;
conversations and participants always), then every row those rows or the request's own
records name through a foreign key of the contract, repeatedly, so the slice is a valid
export: the request's row, its assembly records and its decision trace. Rows after the
request that it names (an artifact of a call still running, a memory's later replacement)
are in: the assembler and safety look them up, and decide with their times themselves, so a
replay over the slice equals a replay over the whole store.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..contract import RECORD_TABLES, TABLES
from ..sql import q
from .database import Database, cols_of
from .graph import GRAPH_TABLES

__all__ = ["ExportSlice", "SliceQueries"]

# the column whose time lets a graph row into the conversation "as of" a request
_ENTERS_AT: dict[str, str] = {
    "branches": "created_at",
    "messages": "created_at",
    "model_runs": "started_at",
    "tool_calls": "requested_at",
    "tool_artifacts": "created_at",
    "tool_memories": "created_at",
    "skill_states": "created_at",
    "checkpoints": "created_at",
}


@dataclass(frozen=True)
class ExportSlice:
    """Contract tables (contract columns, ordered by primary key) of one request's slice."""

    assembly_id: str
    export_id: str
    tables: dict[str, pa.Table]

    def rows(self) -> dict[str, int]:
        return {name: t.num_rows for name, t in self.tables.items()}


class SliceQueries(Database):
    """The export-slice area of ``Store``."""

    def export_slice(self, assembly_id: str) -> ExportSlice:
        request = self._one(
            f"SELECT {cols_of('context_assemblies')}, export_id FROM context_assemblies "
            "WHERE assembly_id = ? ORDER BY export_id LIMIT 1",
            [assembly_id],
        )
        if request is None:
            from ..errors import NotFoundError

            raise NotFoundError(f"unknown assembly '{assembly_id}'")
        export_id = request["export_id"]
        at = request["assembled_at"]
        graph = self.conversation_graph(  # type: ignore[attr-defined]  (GraphQueries, in Store)
            request["conversation_id"], export_id)
        pool = {name: graph[name] for name in GRAPH_TABLES}
        kept = {name: _entered(name, pool[name], at) for name in GRAPH_TABLES}
        # an artifact enters with its call, when that was requested first
        calls = pool["tool_calls"].filter(pc.is_in(pool["tool_calls"]["tool_call_id"],
                                                   pa.array(sorted(kept["tool_calls"]), pa.string())))
        arts = pool["tool_artifacts"]
        with_call = arts.filter(pc.is_in(arts["tool_call_id"], calls["tool_call_id"]))
        kept["tool_artifacts"] |= set(with_call["artifact_id"].to_pylist())

        own = {
            "context_assemblies": self._arrow(
                f"SELECT {cols_of('context_assemblies')} FROM context_assemblies "
                "WHERE export_id = ? AND assembly_id = ?", [export_id, assembly_id]),
            "assembly_records": self._arrow(
                f"SELECT {cols_of('assembly_records')} FROM assembly_records "
                "WHERE export_id = ? AND assembly_id = ? ORDER BY record_kind, record_id",
                [export_id, assembly_id]),
            "policy_decisions": self._arrow(
                f"SELECT {cols_of('policy_decisions')} FROM policy_decisions "
                "WHERE export_id = ? AND assembly_id = ? ORDER BY decision_id",
                [export_id, assembly_id]),
        }
        wanted: dict[str, set[str]] = {name: set() for name in GRAPH_TABLES}
        records = own["assembly_records"]
        for kind, ids in _group(records["record_kind"].to_pylist(),
                                records["record_id"].to_pylist()).items():
            if kind in RECORD_TABLES:
                wanted[RECORD_TABLES[kind][0]] |= ids
        wanted["tool_artifacts"] |= set(request["exact_evidence_ids"] or [])
        for name in ("context_assemblies",):
            _named(name, own[name], wanted)
        self._close(pool, kept, wanted, export_id)

        tables: dict[str, pa.Table] = {}
        for name in GRAPH_TABLES:
            pk = TABLES[name].primary_key[0]
            table = pool[name].filter(pc.is_in(pool[name][pk],
                                               pa.array(sorted(kept[name]), pa.string())))
            tables[name] = table.sort_by([(c, "ascending") for c in TABLES[name].primary_key])
        tables.update(own)
        return ExportSlice(assembly_id, export_id, tables)

    def _close(self, pool: dict[str, pa.Table], kept: dict[str, set[str]],
               wanted: dict[str, set[str]], export_id: str) -> None:
        """Keep every row a kept row names, until nothing new is named. A name outside the
        conversation's graph is looked up in the export once; one it lacks stays dangling
        (a soft key: broken provenance in the store too)."""
        tried: dict[str, set[str]] = {name: set() for name in GRAPH_TABLES}
        while True:
            for name in GRAPH_TABLES:
                pk = TABLES[name].primary_key[0]
                rows = pool[name].filter(pc.is_in(pool[name][pk],
                                                  pa.array(sorted(kept[name]), pa.string())))
                _named(name, rows, wanted)
            grew = False
            for name in GRAPH_TABLES:
                new = wanted[name] - kept[name]
                if not new:
                    continue
                pk = TABLES[name].primary_key[0]
                have = set(pool[name][pk].to_pylist())
                fetch = sorted(new - have - tried[name])
                if fetch:
                    tried[name] |= set(fetch)
                    found = self._arrow(
                        f"SELECT {cols_of(name)}{self.facts_column(name)} FROM {q(name)} "  # type: ignore[attr-defined]
                        "WHERE export_id = ? "
                        f"AND {q(pk)} IN (SELECT unnest(?::VARCHAR[]))",
                        [export_id, fetch],
                    )
                    if found.num_rows:
                        pool[name] = pa.concat_tables(
                            [pool[name], found.cast(pool[name].schema)])
                        have |= set(found[pk].to_pylist())
                add = (new & have) - kept[name]
                if add:
                    kept[name] |= add
                    grew = True
            if not grew:
                return


def _entered(name: str, table: pa.Table, at: dt.datetime) -> set[str]:
    pk = TABLES[name].primary_key[0]
    column = _ENTERS_AT.get(name)
    if column is None:
        return set(table[pk].to_pylist())
    mask = pc.fill_null(pc.less_equal(table[column], pa.scalar(at, table[column].type)), False)
    return set(table.filter(mask)[pk].to_pylist())


def _named(name: str, rows: pa.Table, wanted: dict[str, set[str]]) -> None:
    """Add to ``wanted`` every id the foreign keys of ``rows`` name (lists flattened)."""
    if not rows.num_rows:
        return
    for fk in TABLES[name].foreign_keys:
        if fk.table not in wanted:
            continue
        col = rows[fk.column]
        if pa.types.is_list(col.type):
            col = pc.list_flatten(col)
        wanted[fk.table] |= {v for v in col.to_pylist() if v is not None}


def _group(kinds: list[Any], ids: list[Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for kind, rid in zip(kinds, ids, strict=True):
        out.setdefault(kind, set()).add(rid)
    return out
