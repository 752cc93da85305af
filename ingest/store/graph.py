"""Conversation queries: the conversation screen's lists, and the conversation graph replay
rebuilds assemblies from.

One query form decides which rows belong to a conversation (``conversation_graphs``, many
conversations of one export at once); ``conversation_graph`` is that form for one.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..contract import TABLES, TRANSCRIPT_FACT_TABLES, TRANSCRIPT_FACTS
from ..errors import NotFoundError
from ..sql import q
from .database import Database

__all__ = ["BODIES", "GRAPH_TABLES", "GraphQueries"]

# the tables of a conversation graph
GRAPH_TABLES: tuple[str, ...] = (
    "conversations", "branches", "participants", "messages", "model_runs", "tool_calls",
    "tool_artifacts", "tool_memories", "skill_states", "checkpoints",
)

# tables whose rows name their conversation directly
_OWN_CONVERSATION = ("conversations", "branches", "participants", "messages", "model_runs",
                     "tool_memories")
# tables whose rows belong to a conversation through their model run
_THROUGH_RUN = ("tool_calls", "skill_states", "checkpoints")
# the free-text bodies of the graph, which no columnar replay or safety judgement reads
# (an artifact's result_preview is: its length is part of a reference's tokens)
BODIES: dict[str, tuple[str, ...]] = {"messages": ("content",), "tool_memories": ("summary",)}


def _span(table: pa.Table, column: str) -> list[str]:
    """[least, greatest] of a column's values ("" and "" when it has none): a BETWEEN that
    lets DuckDB skip the row groups of other conversations."""
    values = pc.drop_null(table.column(column))
    if not len(values):
        return ["", ""]
    bounds = pc.min_max(values)
    return [bounds["min"].as_py(), bounds["max"].as_py()]


class GraphQueries(Database):
    """The conversation area of ``Store``."""

    # ---- conversation screen
    def conversations(self) -> pa.Table:
        return self._arrow(
            "SELECT c.conversation_id, c.title, c.owner_id, c.created_at, "
            "coalesce(b.n, 0) AS branch_count, coalesce(s.n, 0) AS assembly_count "
            "FROM conversations c "
            "LEFT JOIN (SELECT conversation_id, export_id, count(*) AS n FROM branches "
            "           GROUP BY ALL) b ON b.conversation_id = c.conversation_id AND b.export_id = c.export_id "
            "LEFT JOIN (SELECT conversation_id, export_id, count(*) AS n FROM assembly_summary "
            "           GROUP BY ALL) s ON s.conversation_id = c.conversation_id AND s.export_id = c.export_id "
            "ORDER BY c.created_at, c.conversation_id, c.export_id"
        )

    def branches(self, conversation_id: str) -> pa.Table:
        return self._arrow(
            "SELECT branch_id, parent_branch_id, fork_message_id, name, created_at FROM branches "
            "WHERE conversation_id = ? ORDER BY created_at, branch_id",
            [conversation_id],
        )

    def model_runs(self, conversation_id: str) -> pa.Table:
        return self._arrow(
            "SELECT model_run_id, branch_id, participant_id, runtime_kind, parent_model_run_id, "
            "status, provider, model, started_at FROM model_runs WHERE conversation_id = ? "
            "ORDER BY started_at, model_run_id",
            [conversation_id],
        )

    def assemblies_of_conversation(self, conversation_id: str) -> pa.Table:
        return self._arrow(
            "SELECT assembly_id, model_run_id, branch_id, participant_id, policy_version, "
            "assembled_at, scenario FROM assembly_summary WHERE conversation_id = ? "
            "ORDER BY assembled_at, assembly_id",
            [conversation_id],
        )

    def facts_column(self, name: str, alias: str = "") -> str:
        """``, <expr> AS transcript_facts`` for a table that can hold a transcript's runtime
        facts (replay/runtimes.py): the column, or NULL in a store whose exports have none;
        empty for other tables."""
        if name not in TRANSCRIPT_FACT_TABLES:
            return ""
        prefix = f"{alias}." if alias else ""
        facts = (f"{prefix}{q(TRANSCRIPT_FACTS)}" if TRANSCRIPT_FACTS in self.table_columns(name)
                 else "NULL::VARCHAR")
        return f", {facts} AS {q(TRANSCRIPT_FACTS)}"

    def conversation_graph(self, conversation_id: str, export_id: str | None = None) -> dict[str, pa.Table]:
        """Every graph table's rows of one conversation (contract columns, no export_id).

        Rows are taken from ``export_id`` (default: the first export holding the conversation).
        Membership is ``conversation_graphs``'.
        """
        if export_id is None:
            row = self._one(
                "SELECT export_id FROM conversations WHERE conversation_id = ? "
                "ORDER BY export_id LIMIT 1",
                [conversation_id],
            )
            if row is None:
                raise NotFoundError(f"unknown conversation '{conversation_id}'")
            export_id = row["export_id"]
        graphs = self.conversation_graphs([conversation_id], export_id)
        return {name: t.drop_columns(["graph_conversation_id"]) for name, t in graphs.items()}

    def conversation_graphs(self, conversation_ids: list[str], export_id: str,
                            bodies: bool = True) -> dict[str, pa.Table]:
        """The graph rows of many conversations of one export, in one query per table.

        A row belongs to a conversation when it names it; tool calls, skill states and
        checkpoints through their model run; an artifact through its branch, its tool call or
        its owner run. Each table has the contract columns plus ``graph_conversation_id`` (the conversation
        the row belongs to; a row reachable from two conversations appears once for each),
        ordered by graph_conversation_id, then the table's primary key. Messages, tool calls,
        tool artifacts and model runs also have ``transcript_facts`` (null but for transcripts).

        ``bodies=False`` leaves the free-text bodies no columnar replay or safety judgement
        reads (``BODIES``: a message's content, a memory's summary) null, in the same
        schema: about half of what a chunk's messages cost to read (compare)."""
        ids = list(conversation_ids)
        if not ids:
            ids = [""]  # no conversation is named "": every table comes back empty
        # the ids are a registered table (``_graph_conversations``), and each use comes with
        # their range: it adds nothing to the list but lets DuckDB skip the row groups
        # outside it by their min/max (the list alone reads the whole table, so a chunk's
        # graph would cost more as the store grows)
        conv = "SELECT cid FROM _graph_conversations"
        scope = [min(ids), max(ids)]
        out: dict[str, pa.Table] = {}
        with self._registered(_graph_conversations=pa.table({"cid": pa.array(ids, pa.string())})):
            for name in _OWN_CONVERSATION:
                out[name] = self._arrow(
                    f"SELECT {self._graph_columns(name, bodies)}, "
                    f"t.conversation_id AS graph_conversation_id FROM {q(name)} t "
                    f"WHERE t.export_id = ? AND t.conversation_id BETWEEN ? AND ? "
                    f"AND t.conversation_id IN ({conv}) {_order(name)}",
                    [export_id, *scope])
        # the rows reached through a run, a branch or a call join the chunk's own runs,
        # branches and calls, read already (a query of the store would read them again)
        keys = {"_graph_runs": _keys(out["model_runs"], "model_run_id"),
                "_graph_branches": _keys(out["branches"], "branch_id")}
        with self._registered(**keys):
            for name in _THROUGH_RUN:
                out[name] = self._arrow(
                    f"SELECT {self._graph_columns(name, bodies)}, "
                    f"r.cid AS graph_conversation_id FROM {q(name)} t "
                    "JOIN _graph_runs r ON r.key = t.model_run_id "
                    f"WHERE t.export_id = ? AND t.model_run_id BETWEEN ? AND ? {_order(name)}",
                    [export_id, *_span(out["model_runs"], "model_run_id")])
            with self._registered(_graph_calls=_keys(out["tool_calls"], "tool_call_id")):
                out["tool_artifacts"] = self._artifact_rows(
                    self._graph_columns("tool_artifacts", bodies), export_id, out)
        return {name: out[name] for name in GRAPH_TABLES}

    def _graph_columns(self, name: str, bodies: bool) -> str:
        """The select list of a graph table's rows (alias ``t``): its contract columns, a
        body null unless ``bodies``, and its transcript facts (``facts_column``)."""
        skipped = () if bodies else BODIES.get(name, ())
        return ", ".join(f"NULL::VARCHAR AS {q(c)}" if c in skipped else f"t.{q(c)}"
                         for c in TABLES[name].column_names) + self.facts_column(name, "t")

    def _artifact_rows(self, cols: str, export_id: str, fetched: dict[str, pa.Table]) -> pa.Table:
        """The chunk's tool_artifacts rows (``conversation_graphs``): an artifact belongs to
        a conversation through its branch, its owner run or its tool call (the chunk's
        branches, runs and calls, registered as ``_graph_branches``, ``_graph_runs`` and
        ``_graph_calls``). Which rows, each with its conversation, is found by their rowids
        (each way scanning only the span of its keys), then those rows are read, in one
        query: DuckDB passes the rowids' range from the join to the last scan (a dynamic
        filter, "rowid IN PRF" in its plan), which then skips the row groups outside it."""
        return self._arrow(
            "WITH p AS ("
            "SELECT b.cid, a.rowid AS rid FROM tool_artifacts a "
            "JOIN _graph_branches b ON b.key = a.branch_id "
            "WHERE a.export_id = ? AND a.branch_id BETWEEN ? AND ? "
            "UNION SELECT r.cid, a.rowid FROM tool_artifacts a "
            "JOIN _graph_runs r ON r.key = a.owner_model_run_id "
            "WHERE a.export_id = ? AND a.owner_model_run_id BETWEEN ? AND ? "
            "UNION SELECT c.cid, a.rowid FROM tool_artifacts a "
            "JOIN _graph_calls c ON c.key = a.tool_call_id "
            "WHERE a.export_id = ? AND a.tool_call_id BETWEEN ? AND ?) "
            f"SELECT {cols}, p.cid AS graph_conversation_id FROM tool_artifacts t "
            f"JOIN p ON p.rid = t.rowid {_order('tool_artifacts')}",
            [export_id, *_span(fetched["branches"], "branch_id"),
             export_id, *_span(fetched["model_runs"], "model_run_id"),
             export_id, *_span(fetched["tool_calls"], "tool_call_id")])


def _order(name: str) -> str:
    """The order of a graph table's rows: by conversation, then primary key."""
    return "ORDER BY graph_conversation_id, " + ", ".join(
        f"t.{q(c)}" for c in TABLES[name].primary_key)


def _keys(table: pa.Table, column: str) -> pa.Table:
    """(cid, key): each distinct pair of a fetched graph table's conversation and ``column``."""
    return table.select(["graph_conversation_id", column]).rename_columns(
        ["cid", "key"]).group_by(["cid", "key"], use_threads=False).aggregate([])
