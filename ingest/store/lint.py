"""The lint queries of the store (``replay/lint.py`` turns their rows into findings).

``LintQueries`` is the lint area of :class:`ingest.store.Store`: every method runs one
parameterised, columnar SQL query through ``self._arrow`` and returns an Arrow table; no
Python loop over records. User text (the filter) only reaches SQL as bound parameters.

Safety invariants (``safety_violations``) hold over recorded assemblies of any source:
an included record must not be

- on a branch off the assembly's lineage (``sibling_branch``): the lineage is the assembly's
  branch and its ancestors, each ancestor only up to the fork time of the child it was left
  by (the fork message's ``created_at``, else the child branch's ``created_at``), computed
  with a recursive CTE over ``branches``. Conversation-scoped memories are exempt (a
  conversation-wide fact may fill in from another branch);
- another participant's ``participant_private`` record the requester is not ``shared_with``
  (``foreign_private``), the owner being the record's owner participant, else its owner
  run's participant (a tool call is private to the participant of its run); a private record whose owner resolves to no participant of the
  conversation counts too (fail closed); a promotable memory of the requester's own subagent
  child run is exempt (promoted child output);
- ``audit_only`` (``audit_only_included``);
- a memory superseded (its ``superseded_by``, or a memory whose ``supersedes`` names it) by a
  replacement that existed at assembly time and that the request may see, or, rendered
  ``compact_memory`` (a current fact), by one it may not see (``superseded_included``). What
  a request may see is ``replay/visibility.py``'s definition (the assembler's stages 3-5
  under the rules that fail closed) in SQL: on the lineage or conversation-scoped; not
  audit-only; not private to another participant or to nobody who resolves, unless it is
  the requester's subagent's; not of a class the recorded policy blocks for the provider;
- a memory rendered ``compact_memory`` (as a current fact) after it went stale
  (``stale_as_current``): after its own ``stale_after``, else after ``observed_at`` plus the
  window of its freshness class under the assembly's recorded policy version (the caller
  passes every version's windows: the definition of ``replay/safety.py``);
- a raw body of a restricted privacy class rendered ``verbatim`` or ``rehydrated_raw``, or
  an artifact or memory of a class the assembly's recorded policy blocks for its provider
  (``restricted_raw_sent``).

Transcript rules (``unanswered_tool_calls``, ``result_placement``, ``serial_read_only_calls``,
``memory_tool_calls``) read the execution graph: model runs grouped in chains (one chain per
branch and subagent), tool calls, artifacts.

The safety query returns facts (timestamps, ids, classes), never sentences:
``replay/findings_text.py`` words every finding, for the lint as for diff, why, compare and
the bundle report.

(About 600 lines: the SQL of each rule sits beside the method that runs it; the safety
query also runs on the few requests of a page, from their conversations' rows.)
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..contract import RESTRICTED_PRIVACY
from ..filters import AssemblyFilter, filter_sql
from ..sql import registered, scratch_connection
from .database import Database, as_filter

__all__ = ["LintQueries", "RESULT_PLACEMENT_COLUMNS", "SLICE_REQUESTS", "safety_query",
           "safety_views"]

# A filter selecting at most this many requests is judged on their own conversations' rows
# (``safety_violations``): the app's list asks this for the markers of each page, and the
# query over the whole store built its joins over every table (1.8 s and 1.3 GB for a
# page of 500 at 1,000,000 requests)
SLICE_REQUESTS = 8192

# the graph tables the safety query reads
SAFETY_GRAPH_TABLES = ("branches", "participants", "messages", "model_runs", "tool_calls",
                       "tool_artifacts", "tool_memories")

# extra tool_artifacts columns written by the transcript adapters (not in the contract)
RESULT_PLACEMENT_COLUMNS: tuple[str, ...] = ("result_message_key", "result_after_text")

# The facts every safety row carries after its record (replay.findings_text.FACTS, which
# words them): the request's, and the record's class and rendering; ``p`` a table prefix
_FACTS = ("{p}asm_branch AS asm_branch, {p}requester AS requester, {p}privacy_class AS privacy_class, "
          "{p}rendering AS rendering, {p}asm_provider_name AS provider, {p}asm_policy AS policy_version, "
          "{raw} AS raw, {p}assembled_at AS assembled_at")


def _where(flt: AssemblyFilter | str | None) -> tuple[str, list[Any]]:
    return filter_sql(as_filter(flt))


# The included records of the selected assemblies, with what the invariants need to know
# about each record: branch, creation time, scope, owner, shared_with.
_INCLUDED = """
sel AS (
    SELECT a.export_id, a.assembly_id, a.conversation_id AS asm_conversation,
           a.branch_id AS asm_branch, a.participant_id AS requester, a.assembled_at,
           a.policy_version AS asm_policy, lower(a.provider) AS asm_provider,
           a.provider AS asm_provider_name
    FROM context_assemblies a
    JOIN (SELECT export_id, assembly_id FROM assembly_summary WHERE {where}) s
      ON s.export_id = a.export_id AND s.assembly_id = a.assembly_id
),
inc AS (
    SELECT r.export_id, r.assembly_id, r.record_kind, r.record_id, r.rendering,
           s.asm_conversation, s.asm_branch, s.requester, s.assembled_at, s.asm_policy,
           s.asm_provider, s.asm_provider_name
    FROM assembly_records r
    JOIN sel s ON s.export_id = r.export_id AND s.assembly_id = r.assembly_id
    WHERE r.decision = 'included'
),
x AS (
    SELECT i.*, m.branch_id AS rec_branch, m.created_at AS rec_at,
           m.visibility_scope AS scope, m.participant_id AS owner, m.model_run_id AS owner_run,
           []::VARCHAR[] AS shared_with, NULL::VARCHAR AS privacy_class,
           NULL::TIMESTAMPTZ AS stale_after, false AS promotable
    FROM inc i JOIN messages m
      ON i.record_kind = 'message' AND m.export_id = i.export_id AND m.message_id = i.record_id
    UNION ALL
    SELECT i.*, t.branch_id, t.created_at, t.visibility_scope, t.owner_participant_id,
           t.owner_model_run_id, coalesce(t.shared_with, []::VARCHAR[]), t.privacy_class,
           NULL::TIMESTAMPTZ, false
    FROM inc i JOIN tool_artifacts t
      ON i.record_kind = 'tool_artifact' AND t.export_id = i.export_id AND t.artifact_id = i.record_id
    UNION ALL
    SELECT i.*, t.branch_id, t.created_at, t.visibility_scope, t.owner_participant_id,
           t.owner_model_run_id, []::VARCHAR[], t.privacy_class,
           coalesce(t.stale_after, t.observed_at + to_hours(CAST(list_extract(
               ?::BIGINT[], list_position(?::VARCHAR[], i.asm_policy || '/' || t.freshness_class))
               AS BIGINT))),
           coalesce(t.promotion_policy = 'auto' OR (t.promotion_policy = 'explicit' AND t.promoted), false)
    FROM inc i JOIN tool_memories t
      ON i.record_kind = 'tool_memory' AND t.export_id = i.export_id AND t.memory_id = i.record_id
    UNION ALL
    SELECT i.*, r.branch_id, c.requested_at, 'participant_private', NULL::VARCHAR, c.model_run_id,
           []::VARCHAR[], NULL::VARCHAR, NULL::TIMESTAMPTZ, false
    FROM inc i JOIN tool_calls c
      ON i.record_kind = 'tool_call' AND c.export_id = i.export_id AND c.tool_call_id = i.record_id
    LEFT JOIN model_runs r ON r.export_id = c.export_id AND r.model_run_id = c.model_run_id
),
bfork AS (
    SELECT b.export_id, b.branch_id, b.parent_branch_id,
           coalesce(m.created_at, b.created_at) AS fork_at
    FROM branches b
    LEFT JOIN messages m ON m.export_id = b.export_id AND m.message_id = b.fork_message_id
),
lin(export_id, root, branch_id, next_branch, next_cut, cutoff, depth) AS (
    SELECT f.export_id, f.branch_id, f.branch_id, f.parent_branch_id, f.fork_at,
           NULL::TIMESTAMPTZ, 0
    FROM bfork f
    JOIN (SELECT DISTINCT export_id, asm_branch FROM sel) ab
      ON ab.export_id = f.export_id AND ab.asm_branch = f.branch_id
    UNION ALL
    SELECT l.export_id, l.root, f.branch_id, f.parent_branch_id, f.fork_at,
           CASE WHEN l.cutoff IS NULL OR l.next_cut < l.cutoff THEN l.next_cut ELSE l.cutoff END,
           l.depth + 1
    FROM lin l JOIN bfork f ON f.export_id = l.export_id AND f.branch_id = l.next_branch
    WHERE l.depth < 100000
),
xl AS (
    SELECT x.*, l.branch_id IS NOT NULL AS on_lineage_branch, l.cutoff
    FROM x LEFT JOIN lin l
      ON l.export_id = x.export_id AND l.root = x.asm_branch AND l.branch_id = x.rec_branch
),
-- every subagent run with the runs above it (itself at depth 0, its parent at 1, ...),
-- up to the first run that is no subagent
sub_up(export_id, conversation_id, start_run, participant, kind, parent, depth) AS (
    SELECT export_id, conversation_id, model_run_id, participant_id, runtime_kind,
           parent_model_run_id, 0
    FROM model_runs WHERE runtime_kind = 'subagent_child'
    UNION ALL
    SELECT u.export_id, u.conversation_id, u.start_run, p.participant_id, p.runtime_kind,
           p.parent_model_run_id, u.depth + 1
    FROM sub_up u JOIN model_runs p
      ON p.export_id = u.export_id AND p.conversation_id = u.conversation_id
     AND p.model_run_id = u.parent
    WHERE u.kind = 'subagent_child' AND u.depth < 1000
)
"""

_SAFETY = """
SELECT 'sibling_branch' AS invariant, export_id, assembly_id, record_kind, record_id,
       rec_branch AS record_branch, rec_at AS record_at,
       CASE WHEN on_lineage_branch THEN cutoff END AS cutoff, {facts}, {no_owner}, {no_newer}
FROM xl
WHERE rec_branch IS NOT NULL
  AND NOT (record_kind = 'tool_memory' AND scope = 'conversation')
  AND (NOT on_lineage_branch OR (cutoff IS NOT NULL AND rec_at > cutoff))
UNION ALL
SELECT 'foreign_private', xl.export_id, xl.assembly_id, xl.record_kind, xl.record_id,
       {no_branch}, {facts_xl}, po.participant_id, xl.shared_with, {no_newer}
FROM xl
LEFT JOIN model_runs cr ON cr.export_id = xl.export_id AND cr.model_run_id = xl.owner_run
LEFT JOIN model_runs pr ON pr.export_id = cr.export_id AND pr.model_run_id = cr.parent_model_run_id
LEFT JOIN participants po ON po.export_id = xl.export_id AND po.conversation_id = xl.asm_conversation
                         AND po.participant_id = coalesce(xl.owner, cr.participant_id)
WHERE xl.scope = 'participant_private' AND po.participant_id IS DISTINCT FROM xl.requester
  AND NOT list_contains(xl.shared_with, xl.requester)
  -- NULL (no owner run, no parent) is no exemption: a private record stays a finding
  AND NOT coalesce(xl.record_kind = 'tool_memory' AND xl.promotable
                   AND cr.runtime_kind = 'subagent_child' AND pr.participant_id = xl.requester, false)
UNION ALL
SELECT 'audit_only_included', export_id, assembly_id, record_kind, record_id,
       {no_branch}, {facts}, {no_owner}, {no_newer}
FROM xl WHERE scope = 'audit_only'
UNION ALL
SELECT DISTINCT 'superseded_included', export_id, assembly_id, record_kind, record_id,
       {no_branch}, {facts}, {no_owner},
       -- the first replacement as the Python form takes it (replay/assembler.py's
       -- replaced_by: the memory's own superseded_by, then those naming it, by id)
       first.newer, first.newer_at, first.seen, first.why, NULL::TIMESTAMPTZ
FROM (
    SELECT *, arg_min({{'newer': newer, 'newer_at': newer_at, 'seen': seen, 'why': why}},
                      src || newer) OVER (PARTITION BY export_id, assembly_id, record_kind, record_id)
              AS first
    FROM (
    -- each replacement as the request sees it (replay/visibility.py, the assembler's stages
    -- 3-5 under the rules that fail closed): absent (not on the lineage), hidden (audit-only,
    -- private to another participant or to nobody who resolves, or of a class the recorded
    -- policy blocks for the provider), else visible (a subagent's record below the
    -- requester included: promotion decides it later)
    SELECT s.*,
           CASE WHEN NOT (s.newer_scope = 'conversation'
                          OR (nl.branch_id IS NOT NULL AND (nl.cutoff IS NULL OR s.newer_at <= nl.cutoff)))
                THEN 'absent'
                WHEN s.newer_scope = 'audit_only'
                  OR (s.newer_scope = 'participant_private' AND np.participant_id IS NULL)
                  OR (s.newer_scope = 'participant_private' AND np.participant_id <> s.requester
                      AND NOT coalesce((
                          -- the requester's subagent child (or a child's child...): walking up
                          -- from its run, the first run that is the requester's or no subagent
                          -- is the requester's, and is not the record's own run
                          SELECT min(u.depth) FILTER (WHERE u.participant = s.requester) = min(u.depth)
                                 AND min(u.depth) >= 1
                          FROM sub_up u
                          WHERE u.export_id = s.export_id AND u.conversation_id = s.asm_conversation
                            AND u.start_run = s.newer_run
                            AND (u.participant = s.requester OR u.kind <> 'subagent_child')), false))
                  OR list_contains(?::VARCHAR[], s.asm_policy || '/' || s.asm_provider || '/' || s.newer_class)
                THEN 'hidden' ELSE 'visible' END AS seen,
           -- the deciding reason code of a hidden replacement, in replay/visibility.py's
           -- order of its checks
           CASE WHEN s.newer_scope = 'audit_only' THEN 'audit_only'
                WHEN s.newer_scope = 'participant_private' AND np.participant_id IS NULL
                THEN 'owner_unknown'
                WHEN s.newer_scope = 'participant_private' AND np.participant_id <> s.requester
                THEN 'participant_private'
                ELSE 'provider_restricted' END AS why
    FROM (
        SELECT o.*, '0' AS src, n.memory_id AS newer, n.created_at AS newer_at, n.branch_id AS newer_branch,
               n.visibility_scope AS newer_scope, n.owner_participant_id AS newer_owner,
               n.owner_model_run_id AS newer_run, n.privacy_class AS newer_class
        FROM xl o
        JOIN tool_memories old ON o.record_kind = 'tool_memory' AND old.export_id = o.export_id
                              AND old.memory_id = o.record_id
        JOIN tool_memories n ON n.export_id = old.export_id AND n.memory_id = old.superseded_by
                            AND n.conversation_id = o.asm_conversation
        UNION ALL
        SELECT o.*, '1', n.memory_id, n.created_at, n.branch_id, n.visibility_scope, n.owner_participant_id,
               n.owner_model_run_id, n.privacy_class
        FROM xl o
        JOIN (SELECT export_id, conversation_id, memory_id, created_at, branch_id, visibility_scope,
                     owner_participant_id, owner_model_run_id, privacy_class, unnest(supersedes) AS old_id
              FROM tool_memories) n
          ON o.record_kind = 'tool_memory' AND n.export_id = o.export_id AND n.old_id = o.record_id
         AND n.conversation_id = o.asm_conversation
    ) s
    LEFT JOIN lin nl ON nl.export_id = s.export_id AND nl.root = s.asm_branch AND nl.branch_id = s.newer_branch
    -- the replacement's owner as for any record: its owner, else its run's participant, and
    -- only a participant of the conversation
    LEFT JOIN model_runs nr ON nr.export_id = s.export_id AND nr.model_run_id = s.newer_run
                           AND nr.conversation_id = s.asm_conversation
    LEFT JOIN participants np ON np.export_id = s.export_id AND np.conversation_id = s.asm_conversation
                             AND np.participant_id = coalesce(s.newer_owner, nr.participant_id)
    WHERE s.newer <> s.record_id AND s.newer_at <= s.assembled_at
) v
WHERE seen = 'visible' OR (seen = 'hidden' AND rendering = 'compact_memory')
) w
UNION ALL
SELECT 'stale_as_current', export_id, assembly_id, record_kind, record_id,
       {no_branch}, {facts}, {no_owner}, NULL, NULL::TIMESTAMPTZ, NULL, NULL, stale_after
FROM xl
WHERE record_kind = 'tool_memory' AND rendering = 'compact_memory'
  AND stale_after IS NOT NULL AND stale_after < assembled_at
UNION ALL
SELECT 'restricted_raw_sent', export_id, assembly_id, record_kind, record_id,
       {no_branch}, {facts_raw}, {no_owner}, {no_newer}
FROM xl
WHERE record_kind = 'tool_artifact' AND privacy_class IN (SELECT unnest(?::VARCHAR[]))
  AND rendering IN ('verbatim', 'rehydrated_raw')
UNION ALL
SELECT 'restricted_raw_sent', export_id, assembly_id, record_kind, record_id,
       {no_branch}, {facts}, {no_owner}, {no_newer}
FROM xl
WHERE record_kind IN ('tool_artifact', 'tool_memory')
  AND list_contains(?::VARCHAR[], asm_policy || '/' || asm_provider || '/' || privacy_class)
  AND NOT (record_kind = 'tool_artifact' AND privacy_class IN (SELECT unnest(?::VARCHAR[]))
           AND coalesce(rendering, '') IN ('verbatim', 'rehydrated_raw'))
"""

# Model runs in chains: one chain per conversation branch and subagent; the next request
# of a run is the following run of its chain.
_RUNS = """
runs AS (
    SELECT r.export_id, r.model_run_id, r.conversation_id, r.branch_id, r.parent_model_run_id,
           r.runtime_kind, r.participant_id, r.started_at, r.trigger_message_id,
           lead(r.model_run_id) OVER w AS next_run,
           lead(r.started_at) OVER w AS next_started
    FROM model_runs r
    WHERE {scope}
    WINDOW w AS (PARTITION BY r.export_id, r.conversation_id, r.branch_id,
                              coalesce(r.parent_model_run_id, ''),
                              CASE WHEN r.runtime_kind = 'subagent_child' THEN r.participant_id ELSE '' END
                 ORDER BY r.started_at, r.model_run_id)
),
run_msg AS (
    SELECT export_id, model_run_id, min(message_id) AS message_id FROM messages
    WHERE role = 'assistant' AND model_run_id IS NOT NULL
      -- only the runs in scope: a page's lint then reads that page, not the store
      AND (export_id, model_run_id) IN (SELECT export_id, model_run_id FROM runs)
    GROUP BY ALL
),
run_asm AS (
    SELECT export_id, model_run_id, min(assembly_id) AS assembly_id FROM context_assemblies
    WHERE (export_id, model_run_id) IN (SELECT export_id, model_run_id FROM runs)
    GROUP BY ALL
)
"""

_SCOPE = (
    "(r.export_id, r.conversation_id) IN (SELECT export_id, conversation_id FROM assembly_summary "
    "WHERE {where})"
)


_SAFETY_ORDER = "invariant, export_id, assembly_id, record_kind, record_id"


def safety_query(where: str, windows: dict[str, dict[str, int]] | None,
                 blocked: dict[str, dict[str, list[str]]] | None) -> tuple[str, list[Any]]:
    """The safety invariants as one SQL query (see the module docstring) and its parameters
    after those of ``where``: rows (invariant, export_id, assembly_id, record_kind,
    record_id, then the facts of ``replay.findings_text.FACTS``: never sentences, which that
    module alone writes), unordered, for the assemblies of ``assembly_summary`` matching
    ``where``. It reads the store's tables by their names, so a caller holding other rows
    under those names (compare: one chunk's replayed records and conversation graph, on a
    connection of its own) applies the very same rules to them."""
    keys = sorted((v, c) for v, per in (windows or {}).items() for c in per)
    classes = [f"{v}/{c}" for v, c in keys]
    hours = [int((windows or {})[v][c]) for v, c in keys]
    pairs = sorted(f"{v}/{p}/{c}" for v, per in (blocked or {}).items()
                   for p, cls in per.items() for c in cls)
    restricted = sorted(RESTRICTED_PRIVACY)
    sql = "WITH RECURSIVE " + _INCLUDED.format(where=where) + _SAFETY.format(
        facts=_FACTS.format(p="", raw="false"), facts_raw=_FACTS.format(p="", raw="true"),
        facts_xl=_FACTS.format(p="xl.", raw="false"),
        no_branch="NULL::VARCHAR AS record_branch, NULL::TIMESTAMPTZ AS record_at, "
                  "NULL::TIMESTAMPTZ AS cutoff",
        no_owner="NULL::VARCHAR AS owner, NULL::VARCHAR[] AS shared_with",
        no_newer="NULL::VARCHAR AS newer, NULL::TIMESTAMPTZ AS newer_at, NULL::VARCHAR AS newer_seen, "
                 "NULL::VARCHAR AS hidden_why, NULL::TIMESTAMPTZ AS stale_since",
    )
    return sql, [hours, classes, pairs, restricted, pairs, restricted]


def safety_views(graphs: dict[str, pa.Table], export_id: str, requests: pa.Table,
                 records: pa.Table) -> dict[str, pa.Table]:
    """The tables ``safety_query`` reads, by name, for a slice of one export: ``graphs``
    (``GraphQueries.conversation_graphs`` of the requests' conversations), ``requests``
    (their context_assemblies rows) and ``records`` (assembly_id, record_kind, record_id,
    decision, rendering of their records). Register them on a connection of their own
    and run the query with ``where`` TRUE; a graph row reachable from two conversations
    of the slice is in it twice, so take its rows DISTINCT."""
    views = {name: graphs[name] for name in SAFETY_GRAPH_TABLES}
    views["context_assemblies"] = requests
    views["assembly_summary"] = requests.select(["export_id", "assembly_id"])
    views["assembly_records"] = records
    for name, table in views.items():
        if "graph_conversation_id" in table.column_names:
            table = table.drop_columns(["graph_conversation_id"])
        if "export_id" not in table.column_names:
            table = table.append_column("export_id", pc.fill_null(
                pa.nulls(table.num_rows, pa.string()), export_id))
        views[name] = table
    return views


class LintQueries(Database):
    """Lint SQL, one query area of ``Store``."""

    def _run_scope(self, flt: AssemblyFilter | str | None) -> tuple[str, list[Any]]:
        where, params = _where(flt)
        if where == "TRUE":
            return "TRUE", []
        return _SCOPE.format(where=where), params

    # ---- safety invariants
    def safety_violations(self, flt: AssemblyFilter | str | None = None,
                          windows: dict[str, dict[str, int]] | None = None,
                          blocked: dict[str, dict[str, list[str]]] | None = None) -> pa.Table:
        """invariant, export_id, assembly_id, record_kind, record_id and the finding's facts
        (``replay.findings_text.FACTS``: times, ids, classes; ``details`` words them): one
        row per included record of a selected assembly that breaks a safety invariant, ordered.

        Each assembly is judged against its recorded policy version (its standard):
        ``windows`` maps a version to freshness class to hours (a memory without its own
        ``stale_after`` is stale that long after ``observed_at``; never, for a class or
        version not in it); ``blocked`` maps a version to a lower-case provider to the
        privacy classes blocked for it."""
        where, params = _where(flt)
        if where != "TRUE" and self._rows(
                f"SELECT count(*) FROM assembly_summary WHERE {where}", params)[0][0] <= SLICE_REQUESTS:
            return self._few_safety_violations(flt, windows, blocked)
        sql, standard = safety_query(where, windows, blocked)
        sql = f"SELECT * FROM ({sql}) ORDER BY {_SAFETY_ORDER}"
        return self._arrow(sql, params + standard)

    def _few_safety_violations(self, flt: AssemblyFilter | str | None,
                               windows: dict[str, dict[str, int]] | None,
                               blocked: dict[str, dict[str, list[str]]] | None) -> pa.Table:
        """``safety_violations`` of a few requests, from their conversations' rows alone
        (read per export as the replay engine reads a chunk), judged by the same query on
        this thread's scratch connection: its cost follows the requests, not the store."""
        requests = self.assembly_requests(flt)  # type: ignore[attr-defined]
        sql, standard = safety_query("TRUE", windows, blocked)
        con = scratch_connection()
        exports = pc.unique(requests["export_id"]).to_pylist() or [""]
        parts = []
        for export_id in exports:
            rows = requests.filter(pc.equal(requests["export_id"], export_id))
            graphs = self.conversation_graphs(  # type: ignore[attr-defined]
                pc.unique(rows["conversation_id"]).to_pylist(), export_id)
            records = self.recorded_records(  # type: ignore[attr-defined]
                rows["assembly_id"].to_pylist(), export_id).select(
                ["assembly_id", "record_kind", "record_id", "decision", "rendering"])
            with registered(con, **safety_views(graphs, export_id, rows, records)):
                parts.append(con.sql(f"SELECT DISTINCT * FROM ({sql})",
                                     params=standard).to_arrow_table())
        return pa.concat_tables(parts).sort_by(
            [(c.strip(), "ascending") for c in _SAFETY_ORDER.split(",")])

    # ---- transcript rules
    def unanswered_tool_calls(self, flt: AssemblyFilter | str | None = None) -> pa.Table:
        """Tool calls (not deferred) without a result before the next request of their chain.

        Columns: export_id, tool_call_id, tool_name, status, model_run_id, message_id (the
        calling response), next_run (null when the chain ended), next_assembly_id,
        answered_later (a result came, but after the next request)."""
        scope, params = self._run_scope(flt)
        sql = (
            "WITH " + _RUNS.format(scope=scope) + """,
            res AS (
                SELECT export_id, tool_call_id, min(created_at) AS result_at
                FROM tool_artifacts GROUP BY ALL
            )
            SELECT c.export_id, c.tool_call_id, c.tool_name, c.status, c.model_run_id,
                   m.message_id, r.next_run, na.assembly_id AS next_assembly_id,
                   coalesce(res.result_at, c.completed_at) IS NOT NULL AS answered_later
            FROM tool_calls c
            JOIN runs r ON r.export_id = c.export_id AND r.model_run_id = c.model_run_id
            LEFT JOIN res ON res.export_id = c.export_id AND res.tool_call_id = c.tool_call_id
            LEFT JOIN run_msg m ON m.export_id = c.export_id AND m.model_run_id = c.model_run_id
            LEFT JOIN run_asm na ON na.export_id = r.export_id AND na.model_run_id = r.next_run
            WHERE c.status <> 'deferred'
              AND (coalesce(res.result_at, c.completed_at) IS NULL
                   OR (r.next_run IS NOT NULL AND coalesce(res.result_at, c.completed_at) > r.next_started))
            ORDER BY c.export_id, c.model_run_id, c.tool_call_id
            """
        )
        return self._arrow(sql, params)

    def result_placement(self, flt: AssemblyFilter | str | None = None) -> pa.Table | None:
        """Where the results of each response's calls were placed; None when tool_artifacts
        lacks the adapters' extra columns (``result_message_key``, ``result_after_text``).

        Columns: problem ('split' | 'after_text'), export_id, model_run_id, message_id,
        record_kind, record_id, tool_names (list), message_keys (list), calls (int)."""
        cols = set(self.table_columns("tool_artifacts"))
        if not set(RESULT_PLACEMENT_COLUMNS) <= cols:
            return None
        scope, params = self._run_scope(flt)
        sql = (
            "WITH " + _RUNS.format(scope=scope) + """,
            arts AS (
                SELECT a.export_id, a.artifact_id, a.tool_call_id, c.tool_name, c.model_run_id,
                       a.result_message_key::VARCHAR AS mkey,
                       a.result_after_text::BOOLEAN AS after_text
                FROM tool_artifacts a
                JOIN tool_calls c ON c.export_id = a.export_id AND c.tool_call_id = a.tool_call_id
                JOIN runs r ON r.export_id = c.export_id AND r.model_run_id = c.model_run_id
                WHERE a.result_message_key IS NOT NULL
            )
            SELECT 'split' AS problem, g.export_id, g.model_run_id, m.message_id,
                   'tool_call' AS record_kind, g.first_call AS record_id, g.tool_names,
                   g.message_keys, g.calls
            FROM (
                SELECT export_id, model_run_id, min(tool_call_id) AS first_call,
                       list(tool_name ORDER BY tool_call_id) AS tool_names,
                       list_sort(list(DISTINCT mkey)) AS message_keys, count(*) AS calls
                FROM arts GROUP BY export_id, model_run_id HAVING count(DISTINCT mkey) > 1
            ) g
            LEFT JOIN run_msg m ON m.export_id = g.export_id AND m.model_run_id = g.model_run_id
            UNION ALL
            SELECT 'after_text', a.export_id, a.model_run_id, m.message_id, 'tool_artifact',
                   a.artifact_id, [a.tool_name], [a.mkey], 1
            FROM arts a
            LEFT JOIN run_msg m ON m.export_id = a.export_id AND m.model_run_id = a.model_run_id
            WHERE a.after_text
            ORDER BY 1, 2, 3, 6
            """
        )
        return self._arrow(sql, params)

    def serial_read_only_calls(
        self,
        read_only_names: list[str],
        read_only_prefixes: list[str],
        min_streak: int = 3,
        flt: AssemblyFilter | str | None = None,
    ) -> pa.Table:
        """Streaks of ``min_streak`` or more consecutive requests of one chain, each issuing
        exactly one read-only call, where no call's string arguments appear in the result
        preview of the call before it and no user message came in between.

        A tool name is read-only when its last segment (after ``.``, ``__``, ``/`` or ``:``),
        lowercased, is in ``read_only_names`` or starts with one of ``read_only_prefixes``.
        The preview is the first characters of a result only: callers may re-check a streak
        against the full bodies (``storage_refs``/``sha256s``, per call, through
        ``read_blob``). Columns: export_id, first_call, and per call in order: calls
        ("tool(args)"), run_ids, call_ids, arg_strings (the argument values checked),
        arguments (each call's arguments_json),
        storage_refs, sha256s (of each call's result), message_ids, assembly_ids."""
        scope, params = self._run_scope(flt)
        sql = (
            "WITH " + _RUNS.format(scope=scope) + """,
            one AS (
                SELECT c.export_id, c.model_run_id, count(*) AS n, min(c.tool_call_id) AS call_id,
                       min(c.tool_name) AS tool_name, min(c.arguments_json) AS args
                FROM tool_calls c
                WHERE (c.export_id, c.model_run_id) IN (SELECT export_id, model_run_id FROM runs)
                GROUP BY c.export_id, c.model_run_id
            ),
            prev AS (
                SELECT export_id, tool_call_id, string_agg(result_preview, ' ') AS preview,
                       min(storage_ref) AS storage_ref, min(sha256) AS sha256
                FROM tool_artifacts
                WHERE (export_id, tool_call_id) IN (SELECT export_id, call_id FROM one)
                GROUP BY ALL
            ),
            seq AS (
                SELECT r.export_id, r.model_run_id, r.started_at, r.trigger_message_id,
                       r.conversation_id, r.branch_id,
                       coalesce(r.parent_model_run_id, '') AS parent_key,
                       CASE WHEN r.runtime_kind = 'subagent_child' THEN r.participant_id ELSE '' END
                           AS child_key,
                       o.call_id, o.tool_name, o.args,
                       coalesce(coalesce(o.n, 0) = 1 AND (
                           list_contains(?::VARCHAR[], o.base)
                           OR len(list_filter(?::VARCHAR[], lambda p: starts_with(o.base, p))) > 0
                       ), false) AS ro,
                       list_concat(
                           regexp_extract_all(coalesce(o.args, ''), ':\\s*"([^"]{4,})"', 1),
                           regexp_extract_all(coalesce(o.args, ''), ':\\s*(-?[0-9]{3,})', 1)
                       ) AS arg_strings
                FROM runs r
                LEFT JOIN (SELECT *, lower(list_last(string_split_regex(tool_name, '\\.|__|/|:'))) AS base
                           FROM one) o
                  ON o.export_id = r.export_id AND o.model_run_id = r.model_run_id
            ),
            lagged AS (
                SELECT s.*,
                       lag(s.ro) OVER w AS prev_ro,
                       lag(s.call_id) OVER w AS prev_call,
                       lag(s.trigger_message_id) OVER w AS prev_trigger
                FROM seq s
                WINDOW w AS (PARTITION BY s.export_id, s.conversation_id, s.branch_id, s.parent_key,
                                          s.child_key ORDER BY s.started_at, s.model_run_id)
            ),
            linked AS (
                SELECT l.*, r.storage_ref, r.sha256,
                       CASE WHEN l.ro AND coalesce(l.prev_ro, false)
                                 AND l.trigger_message_id IS NOT DISTINCT FROM l.prev_trigger
                                 AND len(list_filter(l.arg_strings,
                                         lambda v: contains(coalesce(p.preview, ''), v))) = 0
                            THEN 0 ELSE 1 END AS brk
                FROM lagged l
                LEFT JOIN prev p ON p.export_id = l.export_id AND p.tool_call_id = l.prev_call
                LEFT JOIN prev r ON r.export_id = l.export_id AND r.tool_call_id = l.call_id
            ),
            grouped AS (
                SELECT *, sum(brk) OVER (PARTITION BY export_id, conversation_id, branch_id,
                                                      parent_key, child_key
                                         ORDER BY started_at, model_run_id
                                         ROWS UNBOUNDED PRECEDING) AS grp
                FROM linked WHERE TRUE
            )
            SELECT g.export_id, min(g.call_id ORDER BY g.started_at, g.model_run_id) AS first_call,
                   list(g.tool_name || '(' || CASE WHEN length(g.args) > 80
                        THEN left(g.args, 79) || '…' ELSE g.args END || ')'
                        ORDER BY g.started_at, g.model_run_id) AS calls,
                   list(g.model_run_id ORDER BY g.started_at, g.model_run_id) AS run_ids,
                   list(g.call_id ORDER BY g.started_at, g.model_run_id) AS call_ids,
                   list(g.arg_strings ORDER BY g.started_at, g.model_run_id) AS arg_strings,
                   list(g.args ORDER BY g.started_at, g.model_run_id) AS arguments,
                   list(g.storage_ref ORDER BY g.started_at, g.model_run_id) AS storage_refs,
                   list(g.sha256 ORDER BY g.started_at, g.model_run_id) AS sha256s,
                   list(m.message_id ORDER BY g.started_at, g.model_run_id) AS message_ids,
                   list(a.assembly_id ORDER BY g.started_at, g.model_run_id) AS assembly_ids
            FROM grouped g
            LEFT JOIN run_msg m ON m.export_id = g.export_id AND m.model_run_id = g.model_run_id
            LEFT JOIN run_asm a ON a.export_id = g.export_id AND a.model_run_id = g.model_run_id
            WHERE g.ro
            GROUP BY g.export_id, g.conversation_id, g.branch_id, g.parent_key, g.child_key, g.grp
            HAVING count(*) >= ?
            ORDER BY 1, 2
            """
        )
        return self._arrow(
            sql, params + [list(read_only_names), list(read_only_prefixes), int(min_streak)]
        )

    def memory_tool_calls(self, flt: AssemblyFilter | str | None = None) -> pa.Table:
        """Candidate memory-tool calls (checked in Python by the lint): calls named
        ``memory`` (last name segment) or whose arguments mention ``/memories`` or an
        encoded form of it together with a ``command``. Columns: export_id, tool_call_id,
        tool_name, arguments_json, model_run_id, message_id."""
        scope, params = self._run_scope(flt)
        sql = (
            "WITH " + _RUNS.format(scope=scope) + """
            SELECT c.export_id, c.tool_call_id, c.tool_name, c.arguments_json, c.model_run_id,
                   m.message_id
            FROM tool_calls c
            JOIN runs r ON r.export_id = c.export_id AND r.model_run_id = c.model_run_id
            LEFT JOIN run_msg m ON m.export_id = c.export_id AND m.model_run_id = c.model_run_id
            WHERE lower(list_last(string_split_regex(c.tool_name, '\\.|__|/|:'))) = 'memory'
               OR (contains(c.arguments_json, '"command"')
                   AND regexp_matches(lower(c.arguments_json), 'memories'))
            ORDER BY c.export_id, c.tool_call_id
            """
        )
        return self._arrow(sql, params)
