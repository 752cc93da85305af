"""The reference assembler's eleven stages over every request of a chunk at once.

This module keeps the sources, the expansion, the budget pass and the finish; stages 1-10
are each family's ``columnar`` step in ``replay/rules/`` (beside its reference step), run
over ``Rows`` in ``replay.rules.STAGES`` order. tests/unit/test_rules_families.py holds the
two forms equal family by family.

``replay_columnar(graphs, requests, policies)`` gives, for every request, exactly what
``replay.assembler.assemble`` gives for it (decision, rendering, position, policy_family,
reason_code and tokens of every record; selection hash, assembled and baseline tokens,
included and omitted counts of every assembly); tests/unit/test_engine_differential.py
holds the two against each other. ``detail`` and the decision chain are not produced.

How it is computed (no Python loop per record; per assembly only the policy look-up; the
selection hashes by the contract's columnar rule, ``ingest.contract.selection_hashes``):

* DuckDB SQL over the chunk's graph tables (Arrow, registered in an in-memory connection)
  reads each conversation's records once ("sources"), with the facts of the record alone:
  the resolved owner (its owner participant, else its owner run's participant, if a
  participant of the conversation), the call behind a call or artifact with the earliest
  success of a later identical call, when an artifact enters (its call's request time),
  missing memory sources; the branch lineage of each requesting branch with its fork
  cut-offs (a recursive CTE); the subagent depth of each run below each participant (a
  recursive CTE over the runs); the links between sources (supersession from both sides
  of the link, artifact -> derived memory, conflicts); exact-evidence pairs.
* numpy expands the (assembly x candidate) rows, one per record of the answer, in the
  output's (assembly_id, record_kind, record_id) order: each request's candidates are four
  ranges of the sources (its run's checkpoints, the messages, its run's skill states, the
  artifacts, calls and memories) filtered by time; per-request facts (on the lineage,
  owner is the requester, shared with them, subagent depth, exact evidence, the call's
  state at the request's time) are integer-keyed lookups; links become row pairs.
* Stages 1-10 are numpy masks over the rows, each policy setting looked up per row
  through the assembly's policy (each request may have its own): not_yet_created,
  retention, branch lineage and shared fill, audit-only / owner_unknown / subagent
  promotion (auto, explicit one level at a time, never) / participant isolation, privacy
  and provider, supersession in both link directions, a replacement hidden by stages 4-5,
  conflicts (shown on both sides, or the outweighed side dropped), broken provenance and freshness windows, the rehydration
  byte budget, raw artifacts waiting for their derived memory, call states ("a later
  identical call succeeded") and recovery protection, the message window.
* Stage 11 (the budget: protected records first, then the ranking with "no holes" for
  messages, then the raw artifacts whose memory did not make it into the prompt) and the
  rehydration byte budget are sequential per assembly; ``_greedy`` runs them across all
  assemblies at once, one numpy step per rank, so the loop count is the largest
  assembly's size, not the number of records.

Nothing falls back to the oracle: every feature of the reference assembler is computed
here, conflicts without show_both_sides included (the lower-confidence side is dropped one
memory at a time in id order, so one drop changes the next comparison: walked like the
budget, the k-th conflicting memory of every assembly at once). An assembler other than
the built-in reference (a plugin, or the reference with ``invert_supersession``) is not
handled here at all: ``replay.engine`` sends it through the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.contract import ENUMS, TABLES, selection_hash
from ingest.contract import selection_hashes as contract_selection_hashes
from ingest.sql import registered, scratch_connection

from .policy import Policy, effective_budgets
from .render import (SUMMARY_LENGTH, reference_length, revalidation_hint_length,
                     stale_marker_length, tokens_for_length)
from .rules import POLICY_FAMILIES, REASONS, STAGES, policy_settings
from .rules import rehydration
from .rules._kit import K_ART, K_CALL, K_CKPT, K_MEM, K_MSG, K_SKILL, KINDS, SCOPES, STATES
from .rules._kit import greedy as _greedy
from .rules._kit import groups as _groups
from .rules._kit import mask as _mask
from .rules.branch import LINEAGE_SQL as _LINEAGE_SQL
from .rules.budget import RANK_KEYS, call_tokens_sql
from .rules.privacy import provider_rules
from .rules.visibility import CHILD_SQL as _CHILD_SQL
from .snapshot import GRAPH_TABLES, Snapshot

__all__ = ["ColumnarFacts", "ColumnarResult", "columnar_facts", "graphs_from_snapshots", "replay_columnar",
           "Rows", "selection_hashes"]

PROMPT_ORDER = np.array([0, 3, 1, 5, 4, 2])  # KIND_ORDER of replay.assembler, by kind code

PRIVACY = ENUMS["privacy_class"]
RETENTION = ENUMS["retention_class"]
FRESH = ENUMS["freshness_class"]
KIND_RANK_KEY = np.array([RANK_KEYS.index(k) for k in KINDS])
RK_EXACT = RANK_KEYS.index("exact_evidence")

RENDERINGS = ENUMS["rendering"]
F = {name: i for i, name in enumerate(POLICY_FAMILIES)}
R = {name: i for i, name in enumerate(REASONS)}
RD = {name: i for i, name in enumerate(RENDERINGS)}

def _code(column: str, values: Sequence[str]) -> str:
    """SQL: the index of ``column`` in ``values`` (-1 for anything else, null included)."""
    whens = " ".join(f"WHEN '{v}' THEN {i}" for i, v in enumerate(values))
    return f"(CASE {column} {whens} ELSE -1 END)::TINYINT"


# Every record any request of the chunk could see, once per conversation ("sources"): the
# conversation's messages, tool calls, artifacts and memories, and the skill states and
# checkpoints of each run; with the facts of the record alone (owner, call, provenance).
# Ordered by (conversation, kind, run of a skill state or checkpoint, id), so one request's
# candidates are four ranges of it (its run's checkpoints, the messages, its run's skill
# states, the artifacts, calls and memories), each already in (kind, id) order.
_SOURCES_SQL = f"""
WITH
runs AS (SELECT graph_conversation_id AS cid, model_run_id, branch_id, participant_id
         FROM g_model_runs),
parts AS (SELECT DISTINCT graph_conversation_id AS cid, participant_id FROM g_participants),
calls AS (
    SELECT c.graph_conversation_id AS cid, c.tool_call_id, c.model_run_id, c.tool_name,
           c.arguments_json, c.status, epoch_us(c.requested_at) AS req_us,
           epoch_us(c.completed_at) AS done_us, r.branch_id AS run_branch
    FROM g_tool_calls c JOIN runs r
      ON r.cid = c.graph_conversation_id AND r.model_run_id = c.model_run_id),
-- a failed call is resolved once a later identical call has succeeded: the earliest such
-- success
fixes AS (
    SELECT a.cid, a.tool_call_id, min(b.done_us) AS fix_us
    FROM calls a JOIN calls b
      ON b.cid = a.cid AND b.tool_name IS NOT DISTINCT FROM a.tool_name
     AND b.arguments_json IS NOT DISTINCT FROM a.arguments_json
     AND b.req_us > a.req_us AND b.status = 'succeeded' AND b.done_us IS NOT NULL
    WHERE a.status = 'failed' GROUP BY ALL),
callx AS (SELECT c.*, f.fix_us FROM calls c
          LEFT JOIN fixes f ON f.cid = c.cid AND f.tool_call_id = c.tool_call_id),
missing AS (
    SELECT DISTINCT s.cid, s.memory_id
    FROM (SELECT graph_conversation_id AS cid, memory_id, unnest(source_artifact_ids) AS src
          FROM g_tool_memories) s
    ANTI JOIN (SELECT graph_conversation_id AS cid, artifact_id FROM g_tool_artifacts) a
      ON a.cid = s.cid AND a.artifact_id = s.src),
pool AS (
    SELECT graph_conversation_id AS cid, 'message' AS kind, message_id AS rid,
           epoch_us(created_at) AS enter_us, epoch_us(created_at) AS created_us,
           content_tokens AS tokens, branch_id AS branch, participant_id AS owner0,
           model_run_id AS orun, visibility_scope AS scope, role, participant_id AS mpart
    FROM g_messages
    UNION ALL BY NAME
    SELECT cid, 'tool_call' AS kind, tool_call_id AS rid, req_us AS enter_us,
           req_us AS created_us, {call_tokens_sql('arguments_json')} AS tokens,
           run_branch AS branch, model_run_id AS orun, 'participant_private' AS scope,
           status AS cstatus, done_us, fix_us, true AS has_call
    FROM callx
    UNION ALL BY NAME
    SELECT a.graph_conversation_id AS cid, 'tool_artifact' AS kind, a.artifact_id AS rid,
           CASE WHEN c.req_us IS NOT NULL AND c.req_us < epoch_us(a.created_at) THEN c.req_us
                ELSE epoch_us(a.created_at) END AS enter_us,
           epoch_us(a.created_at) AS created_us, a.content_tokens AS tokens,
           a.branch_id AS branch, a.owner_participant_id AS owner0,
           a.owner_model_run_id AS orun, a.visibility_scope AS scope, a.shared_with AS shared,
           a.privacy_class AS privacy, a.retention_class AS retention, a.status AS astatus,
           a.byte_size, c.status AS cstatus, c.done_us, c.fix_us,
           -- what a reference to it shows besides its words: id, sha256, preview
           length(a.artifact_id) AS id_chars, length(coalesce(a.sha256, '')) AS sha_chars,
           length(coalesce(a.result_preview, '')) AS preview_chars,
           c.tool_call_id IS NOT NULL AS has_call
    FROM g_tool_artifacts a
    LEFT JOIN callx c ON c.cid = a.graph_conversation_id AND c.tool_call_id = a.tool_call_id
    UNION ALL BY NAME
    SELECT m.graph_conversation_id AS cid, 'tool_memory' AS kind, m.memory_id AS rid,
           epoch_us(m.created_at) AS enter_us, epoch_us(m.created_at) AS created_us,
           m.content_tokens AS tokens, m.branch_id AS branch, m.owner_participant_id AS owner0,
           m.owner_model_run_id AS orun, m.visibility_scope AS scope,
           m.privacy_class AS privacy, m.confidence AS conf, m.freshness_class AS fclass,
           epoch_us(m.observed_at) AS obs_us, m.promotion_policy AS promo, m.promoted,
           epoch_us(m.stale_after) AS stale_after_us,
           length(coalesce(array_to_string(m.revalidation_tools, ', '), '')) AS tools_chars,
           x.memory_id IS NOT NULL AS missing
    FROM g_tool_memories m
    LEFT JOIN missing x ON x.cid = m.graph_conversation_id AND x.memory_id = m.memory_id
    UNION ALL BY NAME
    SELECT graph_conversation_id AS cid, 'skill_state' AS kind, skill_state_id AS rid,
           model_run_id AS grp_run, epoch_us(created_at) AS enter_us,
           epoch_us(created_at) AS created_us, content_tokens AS tokens
    FROM g_skill_states
    UNION ALL BY NAME
    SELECT graph_conversation_id AS cid, 'checkpoint' AS kind, checkpoint_id AS rid,
           model_run_id AS grp_run, epoch_us(created_at) AS enter_us,
           epoch_us(created_at) AS created_us, content_tokens AS tokens
    FROM g_checkpoints)
SELECT p.cid, p.kind, p.rid, p.grp_run,
       {_code('p.kind', KINDS)} AS k,
       p.enter_us, p.created_us, p.tokens::BIGINT AS tokens, p.branch,
       pp.participant_id AS owner, p.orun, r.participant_id AS orun_part, p.mpart, p.shared,
       {_code('p.scope', SCOPES)} AS scope,
       {_code('p.privacy', PRIVACY)} AS privacy,
       {_code('p.retention', RETENTION)} AS retention,
       coalesce(p.astatus = 'succeeded', false) AS settled,
       {_code('p.astatus', STATES)} AS astatus,
       coalesce(p.byte_size, 0)::BIGINT AS byte_size,
       coalesce(p.has_call, false) AS has_call,
       {_code('p.cstatus', STATES)} AS cstatus,
       p.done_us, p.fix_us,
       coalesce(p.conf, 0)::DOUBLE AS conf,
       {_code('p.fclass', FRESH)} AS fclass,
       p.obs_us,
       {_code('p.promo', ENUMS['promotion_policy'])} AS promo,
       coalesce(p.promoted, false) AS promoted,
       coalesce(p.missing, false) AS missing,
       p.stale_after_us, coalesce(p.tools_chars, 0)::BIGINT AS tools_chars,
       coalesce(p.id_chars, 0)::BIGINT AS id_chars, coalesce(p.sha_chars, 0)::BIGINT AS sha_chars,
       coalesce(p.preview_chars, 0)::BIGINT AS preview_chars,
       coalesce(p.role = 'assistant', false) AS assistant
FROM pool p
LEFT JOIN runs r ON r.cid = p.cid AND r.model_run_id = p.orun
LEFT JOIN parts pp ON pp.cid = p.cid AND pp.participant_id = coalesce(p.owner0, r.participant_id)
"""

# the four source ranges of each request: its run's checkpoints, the conversation's
# messages, its run's skill states, the conversation's artifacts, calls and memories
_RANGES_SQL = """
WITH g AS (SELECT cid, CASE WHEN kind IN ('message') THEN 1
                            WHEN kind IN ('tool_artifact', 'tool_call', 'tool_memory') THEN 3
                            WHEN kind = 'checkpoint' THEN 0 ELSE 2 END AS seg,
                  grp_run, min(src) AS lo, max(src) + 1 AS hi
           FROM src GROUP BY ALL)
SELECT q.a,
       coalesce(c.lo, 0) AS c_lo, coalesce(c.hi, 0) AS c_hi,
       coalesce(m.lo, 0) AS m_lo, coalesce(m.hi, 0) AS m_hi,
       coalesce(s.lo, 0) AS s_lo, coalesce(s.hi, 0) AS s_hi,
       coalesce(t.lo, 0) AS t_lo, coalesce(t.hi, 0) AS t_hi
FROM req q
LEFT JOIN g c ON c.cid = q.cid AND c.seg = 0 AND c.grp_run = q.run
LEFT JOIN g m ON m.cid = q.cid AND m.seg = 1
LEFT JOIN g s ON s.cid = q.cid AND s.seg = 2 AND s.grp_run = q.run
LEFT JOIN g t ON t.cid = q.cid AND t.seg = 3
ORDER BY q.a
"""

# exact evidence: (request, source artifact) pairs
_EXACT_SQL = """
SELECT q.a, s.src FROM (SELECT a, cid, unnest(exact) AS rid FROM req) q
JOIN src s ON s.cid = q.cid AND s.kind = 'tool_artifact' AND s.rid = q.rid
"""

# links between sources of one conversation: supersession (old -> new, from both sides of
# the link), artifact -> derived memory, memory -> conflicting memory
_LINKS_SQL = """
WITH mems AS (SELECT graph_conversation_id AS cid, memory_id, superseded_by, supersedes,
                     source_artifact_ids, conflicts_with FROM g_tool_memories),
pairs AS (
    SELECT 0 AS edge, cid, memory_id AS x, superseded_by AS y FROM mems WHERE superseded_by IS NOT NULL
    UNION
    SELECT 0, cid, unnest(supersedes), memory_id FROM mems
    UNION
    SELECT 1, cid, unnest(source_artifact_ids), memory_id FROM mems
    UNION
    SELECT 2, cid, memory_id, unnest(conflicts_with) FROM mems),
m AS (SELECT src, cid, rid FROM src WHERE kind = 'tool_memory'),
t AS (SELECT src, cid, rid FROM src WHERE kind = 'tool_artifact')
SELECT p.edge, o.src AS x, n.src AS y FROM pairs p
JOIN m o ON p.edge <> 1 AND o.cid = p.cid AND o.rid = p.x
JOIN m n ON n.cid = p.cid AND n.rid = p.y
WHERE p.x <> p.y
UNION ALL
SELECT 1, t.src, n.src FROM pairs p
JOIN t ON p.edge = 1 AND t.cid = p.cid AND t.rid = p.x
JOIN m n ON n.cid = p.cid AND n.rid = p.y
ORDER BY 1, 2, 3
"""


@dataclass(frozen=True)
class ColumnarResult:
    """``records``: the REPLAY_COLUMNS rows of every request, ordered by (assembly_id,
    record_kind, record_id); ``assemblies``: one row per request, in the requests' order
    (assembly_id, assembled_tokens, baseline_tokens, included_count, omitted_count)."""

    records: pa.Table
    assemblies: pa.Table


@dataclass
class ColumnarFacts:
    """What a chunk's graph says of its requests, whatever the policy: the candidate rows
    (``_expand``), the supersession/derivation/conflict edges and the requests in assembly
    id order. A comparison computes them once and runs the stages under both versions."""

    cand: dict[str, Any]
    edges: list[tuple[np.ndarray, np.ndarray]]
    req_a: pa.Table  # the requests, in assembly id order
    by_id: np.ndarray  # request row of each assembly index
    a_of_req: np.ndarray  # assembly index of each request row
    at_us: np.ndarray
    autonomous: np.ndarray
    has_limit: np.ndarray
    limit: np.ndarray


def columnar_facts(graphs: dict[str, pa.Table], requests: pa.Table) -> ColumnarFacts:
    """The policy-independent part of ``replay_columnar``: the graph facts in DuckDB SQL,
    expanded to one candidate row per (request, record)."""
    n_a = requests.num_rows
    ids = requests.column("assembly_id")
    by_id = np.asarray(pc.sort_indices(ids), dtype=np.int64)
    a_of_req = np.empty(n_a, dtype=np.int64)
    a_of_req[by_id] = np.arange(n_a)
    # per assembly: index a is the rank of its id, so (a, kind, id) is the output's order
    req_a = requests.take(pa.array(by_id, pa.int64()))
    at_us = _ints(req_a.column("assembled_at").cast(pa.timestamp("us", "UTC")).cast(pa.int64()), 0)
    limit_col = req_a.column("context_limit").cast(pa.int64())

    # this thread's in-memory connection (making one costs 20-30 ms, a tenth of a chunk);
    # every table registered here is unregistered on the way out
    con = scratch_connection()
    req = pa.table({
        "a": pa.array(np.arange(n_a), pa.int64()),
        "cid": req_a.column("conversation_id"),
        "run": req_a.column("model_run_id"),
        "branch": req_a.column("branch_id"),
        "exact": req_a.column("exact_evidence_ids"),
    })
    with registered(con, req=req, **{f"g_{name}": graphs[name] for name in GRAPH_TABLES}):
        # numbered in (conversation, kind, run, id) order (Arrow sorts strings by code
        # point, as the oracle does, and faster than a window over them; only skill states
        # and checkpoints have a run, so its nulls never meet its values)
        pool = con.sql(_SOURCES_SQL).to_arrow_table()
        order = pc.sort_indices(pool, sort_keys=[("cid", "ascending"), ("kind", "ascending"),
                                                 ("grp_run", "ascending"), ("rid", "ascending")])
        src = pool.take(order)
        src = src.append_column("src", pa.array(np.arange(src.num_rows), pa.int64()))
        with registered(con, src=src):
            ranges = con.sql(_RANGES_SQL).to_arrow_table()
            lineage = con.sql(_LINEAGE_SQL).to_arrow_table()
            children = con.sql(_CHILD_SQL).to_arrow_table()
            exact = con.sql(_EXACT_SQL).to_arrow_table()
            links = con.sql(_LINKS_SQL).to_arrow_table()
    c = _expand(src, ranges, lineage, children, exact, req_a, at_us)
    e_kind, x, y = (_ints(links.column(n), 0) for n in ("edge", "x", "y"))
    edges = [_row_edges(x[e_kind == i], y[e_kind == i], c["a"], c["src"], src.num_rows)
             for i in range(3)]
    return ColumnarFacts(
        cand=c, edges=edges, req_a=req_a, by_id=by_id, a_of_req=a_of_req, at_us=at_us,
        autonomous=_ints(pc.equal(req_a.column("runtime_kind"), "autonomous_discussion"), False)
        .astype(bool),
        has_limit=np.asarray(limit_col.is_valid(), dtype=bool), limit=_ints(limit_col, 0),
    )


def replay_columnar(graphs: dict[str, pa.Table], requests: pa.Table,
                    policies: Sequence[Policy], facts: ColumnarFacts | None = None) -> ColumnarResult:
    """Every request (context_assemblies rows, with conversation_id) replayed under its
    policy (``policies[i]`` for ``requests`` row i). ``graphs``: the graph tables of the
    requests' conversations with ``graph_conversation_id`` (``Store.conversation_graphs``).
    ``facts`` (``columnar_facts`` of the same requests) saves computing them again."""
    f = facts if facts is not None else columnar_facts(graphs, requests)
    distinct: dict[int, int] = {}
    pol_list: list[Policy] = []
    pidx_req = np.zeros(len(policies), dtype=np.int64)
    for i, p in enumerate(policies):
        if id(p) not in distinct:
            distinct[id(p)] = len(pol_list)
            pol_list.append(p)
        pidx_req[i] = distinct[id(p)]
    P = policy_settings(pol_list)
    pidx = pidx_req[f.by_id]
    A = {
        "pidx": pidx, "at": f.at_us,
        "blocked_here": provider_rules(pol_list, pidx, f.req_a.column("provider"), _Codes),
        "autonomous": f.autonomous, "has_limit": f.has_limit, "limit": f.limit,
    }
    return _stages(f.cand, f.edges, f.req_a.column("assembly_id"), f.a_of_req, P, A)


def _ints(column: Any, null: Any) -> np.ndarray:
    """An Arrow column as a numpy array, nulls replaced by ``null``."""
    return np.asarray(pc.fill_null(column, null).to_numpy(zero_copy_only=False))


class _Codes:
    """One integer code per distinct string of a few Arrow columns (null: -1), so that
    strings of different tables compare as integers."""

    def __init__(self, *columns: Any) -> None:
        parts = [pa.chunked_array(c) if not isinstance(c, pa.ChunkedArray) else c for c in columns]
        values = pa.chunked_array([ch for p in parts for ch in p.cast(pa.string()).chunks],
                                  type=pa.string())
        self.values = pc.unique(values).drop_null() if len(values) else pa.array([], pa.string())
        self.size = len(self.values) + 1

    def __call__(self, column: Any) -> np.ndarray:
        if not len(column):
            return np.zeros(0, dtype=np.int64)
        return _ints(pc.index_in(column, value_set=self.values), -1).astype(np.int64)


def _lookup(keys: np.ndarray, table_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each key, whether ``table_keys`` holds it and at which index (table_keys sorted)."""
    if not len(table_keys):
        return np.zeros(len(keys), dtype=bool), np.zeros(len(keys), dtype=np.int64)
    pos = np.searchsorted(table_keys, keys)
    pos = np.minimum(pos, len(table_keys) - 1)
    return table_keys[pos] == keys, pos


def _expand(src: pa.Table, ranges: pa.Table, lineage: pa.Table, children: pa.Table,
            exact: pa.Table, req: pa.Table, at_us: np.ndarray) -> dict[str, Any]:
    """The candidate rows (assembly x source), in (assembly, kind, id) order, with every
    column the stages read."""
    n_a = req.num_rows
    lo = np.stack([_ints(ranges.column(f"{s}_lo"), 0) for s in "cmst"], axis=1).ravel()
    hi = np.stack([_ints(ranges.column(f"{s}_hi"), 0) for s in "cmst"], axis=1).ravel()
    length = hi - lo
    total = int(length.sum())
    offsets = np.cumsum(length) - length
    srcidx = np.arange(total, dtype=np.int64) - np.repeat(offsets - lo, length)
    a = np.repeat(np.repeat(np.arange(n_a, dtype=np.int64), 4), length)
    enter = _ints(src.column("enter_us"), np.iinfo(np.int64).max)
    keep = enter[srcidx] <= at_us[a]
    srcidx, a = srcidx[keep], a[keep]

    def col(name: str, null: Any = 0) -> np.ndarray:
        return _ints(src.column(name), null)[srcidx]

    k = col("k", -1).astype(np.int64)
    own = (k == K_SKILL) | (k == K_CKPT)  # the request's own run: its branch, always on lineage
    created = col("created_us")
    branches = _Codes(src.column("branch"), req.column("branch_id"), lineage.column("start"),
                      lineage.column("branch"))
    b_src = branches(src.column("branch"))[srcidx]
    b_req = branches(req.column("branch_id"))[a]
    # lookups key on the conversation too: a row reachable from two conversations (an
    # artifact) is judged by each conversation's own branches and runs
    convs = _Codes(req.column("conversation_id"), lineage.column("cid"), children.column("cid"))
    conv = convs(req.column("conversation_id"))[a]
    lin_keys = ((convs(lineage.column("cid")) * branches.size + branches(lineage.column("start")))
                * branches.size + branches(lineage.column("branch")))
    order = np.argsort(lin_keys, kind="stable")
    found, pos = _lookup((conv * branches.size + b_req) * branches.size + b_src, lin_keys[order])
    cutoffs = _ints(lineage.column("cutoff"), np.iinfo(np.int64).max)[order]
    cutoff = cutoffs[pos] if len(cutoffs) else np.zeros(len(pos), np.int64)
    on = own | (found & (created <= cutoff))

    who = _people(src, req, children, srcidx, a, conv, convs)

    exact_keys = np.sort(_ints(exact.column("a"), 0) * src.num_rows + _ints(exact.column("src"), 0))
    is_exact, _ = _lookup(a * src.num_rows + srcidx, exact_keys)

    # a call's state at the request's time (an artifact without its call: its own status)
    at = at_us[a]
    never = np.iinfo(np.int64).max
    cstatus = col("cstatus", -1)
    open_ = col("done_us", never) > at
    state = np.where(open_, np.where(cstatus == STATES.index("deferred"), STATES.index("deferred"),
                                     STATES.index("pending")),
                     np.where(cstatus == STATES.index("failed"),
                              np.where(col("fix_us", never) <= at, STATES.index("resolved"),
                                       STATES.index("failed")),
                              cstatus))
    state = np.where(col("has_call", False), state, col("astatus", -1))

    return {
        "a": a, "src": srcidx, "k": k, "created_us": created, "tokens": col("tokens"),
        "on_lineage": on, "same_branch": own | (b_src == b_req),
        "scope": col("scope", -1).astype(np.int64), **who,
        "privacy": col("privacy", -1).astype(np.int64),
        "retention": col("retention", -1).astype(np.int64),
        "settled": col("settled", False), "byte_size": col("byte_size"), "exact": is_exact,
        "state": state.astype(np.int64), "conf": col("conf", 0.0),
        "fclass": col("fclass", -1).astype(np.int64), "age_us": at - col("obs_us", 0),
        "promo": col("promo", -1).astype(np.int64), "promoted": col("promoted", False),
        "missing": col("missing", False), "assistant": col("assistant", False),
        "obs_us": col("obs_us", 0), "obs_valid": _valid(src.column("obs_us"))[srcidx],
        "stale_after_us": col("stale_after_us", 0),
        "stale_after_valid": _valid(src.column("stale_after_us"))[srcidx],
        "tools_chars": col("tools_chars"), "id_chars": col("id_chars"),
        "sha_chars": col("sha_chars"), "preview_chars": col("preview_chars"),
        **{name: rank[srcidx] for name, rank in _source_orders(src).items()},
        "n_src": src.num_rows,
        "kind": src.column("kind"), "rid": src.column("rid"),
    }


def _people(src: pa.Table, req: pa.Table, children: pa.Table, srcidx: np.ndarray,
            a: np.ndarray, conv: np.ndarray, convs: "_Codes") -> dict[str, np.ndarray]:
    """Who each candidate row is to its requester: no resolved owner, owned by them, shared
    with them, said by them, and its subagent depth below them (0: not a subagent's)."""
    shared = src.column("shared")
    people = _Codes(src.column("owner"), src.column("mpart"), src.column("orun_part"),
                    req.column("participant_id"), children.column("who"),
                    pc.list_flatten(shared) if len(shared) else pa.array([], pa.string()))
    me = people(req.column("participant_id"))[a]
    owner = people(src.column("owner"))[srcidx]
    src_ids = np.arange(src.num_rows, dtype=np.int64)
    if len(shared):
        flat = pc.list_flatten(shared)
        parents = np.asarray(pc.list_parent_indices(shared).to_numpy(), dtype=np.int64)
        share_keys = np.sort(src_ids[parents] * people.size + people(flat))
    else:
        share_keys = np.zeros(0, dtype=np.int64)
    shared_me, _ = _lookup(srcidx * people.size + me, share_keys)

    runs = _Codes(src.column("orun"), children.column("start"))
    child_keys = ((convs(children.column("cid")) * runs.size + runs(children.column("start")))
                  * people.size + people(children.column("who")))
    corder = np.argsort(child_keys, kind="stable")
    orun = runs(src.column("orun"))[srcidx]
    hit, cpos = _lookup((conv * runs.size + orun) * people.size + me, child_keys[corder])
    depths = _ints(children.column("depth"), 0)[corder] if children.num_rows else np.zeros(1, np.int64)
    depth = np.where(hit & (orun >= 0) & (people(src.column("orun_part"))[srcidx] != me),
                     depths[cpos], 0)

    return {"owner_null": owner < 0, "owner_me": (owner >= 0) & (owner == me),
            "shared_me": shared_me, "depth": depth,
            "said_by_me": people(src.column("mpart"))[srcidx] == me}


def _row_edges(x: np.ndarray, y: np.ndarray, a: np.ndarray, srcidx: np.ndarray,
               n_src: int) -> tuple[np.ndarray, np.ndarray]:
    """Links between sources (x -> y) as links between candidate rows of one assembly:
    for every row of a source x, the row of y in the same assembly, if y is a candidate."""
    empty = np.zeros(0, dtype=np.int64)
    if not len(x) or not len(a):
        return empty, empty
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    degree = np.bincount(x, minlength=n_src)
    first = np.cumsum(degree) - degree
    d = degree[srcidx]
    rows = np.flatnonzero(d)
    if not len(rows):
        return empty, empty
    dd = d[rows]
    rep = np.repeat(rows, dd)
    nth = np.arange(int(dd.sum())) - np.repeat(np.cumsum(dd) - dd, dd)
    targets = a[rep] * n_src + y[first[srcidx[rep]] + nth]
    found, pos = _lookup(targets, a * n_src + srcidx)  # row keys increase with the row
    return rep[found], pos[found]


class Rows:
    """One chunk's candidate rows (``_expand``) while the stages run: each row's last
    decision (step, family, reason), whether it is alive, its rendering; the policy
    settings ``P`` (per policy number) and per-assembly arrays ``A``; and what one family's
    step leaves for a later one (``child``, ``depth``, ``waiting``, ``protected``, the
    baseline)."""

    def __init__(self, cand: dict[str, Any], edges: list[tuple[np.ndarray, np.ndarray]],
                 n_a: int, P: dict[str, np.ndarray], A: dict[str, np.ndarray]) -> None:
        self.cand, self.edges, self.P, self.A = cand, edges, P, A
        self.n = n = len(cand["a"])
        self.n_a = n_a
        self.a = cand["a"]
        k = self.k = cand["k"]
        self.pol = A["pidx"][self.a] if n else np.zeros(0, np.int64)
        self.created = cand["created_us"]
        self.tokens = cand["tokens"].astype(np.int64)
        self.is_msg, self.is_call, self.is_art = (k == K_MSG), (k == K_CALL), (k == K_ART)
        self.is_mem, self.is_skill, self.is_ckpt = (k == K_MEM), (k == K_SKILL), (k == K_CKPT)
        self.alive = np.ones(n, dtype=bool)
        self.step = np.zeros(n, dtype=np.int8)
        self.fam = np.zeros(n, dtype=np.int8)
        self.reason = np.zeros(n, dtype=np.int8)
        self.rend = np.full(n, -1, dtype=np.int8)
        none = np.zeros(n, dtype=bool)
        self.baseline_tokens = np.zeros(n_a, dtype=np.int64)
        self.child, self.waiting, self.protected = none, none, none
        self.depth = np.zeros(n, dtype=np.int64)

    def add(self, mask: np.ndarray, st: int, family: str, code: str, deny: bool) -> None:
        """Record one decision on the rows of ``mask`` (a deny takes them out)."""
        self.step[mask] = st
        self.fam[mask] = F[family]
        self.reason[mask] = R[code]
        if deny:
            self.alive[mask] = False

    def render(self, mask: np.ndarray, rendering: str) -> None:
        self.rend[mask] = RD[rendering]

    def unrendered(self) -> np.ndarray:
        return self.rend < 0

    def any_edge(self, src: np.ndarray, ok: np.ndarray) -> np.ndarray:
        """Rows that are the source of at least one link where ``ok``."""
        out = np.zeros(self.n, dtype=bool)
        out[src[ok]] = True
        return out


def _stages(cand: dict[str, Any], edges: list[tuple[np.ndarray, np.ndarray]],
            ids: pa.ChunkedArray, a_of_req: np.ndarray, P: dict[str, np.ndarray],
            A: dict[str, np.ndarray]) -> ColumnarResult:
    """The eleven stages over the candidate rows (``_expand``); ``A``: per-assembly arrays.
    Stages 1-10 are each family's columnar step (``replay.rules``); 11 is the budget pass."""
    s = Rows(cand, edges, len(ids), P, A)
    for _stage, _family, _reference, columnar in STAGES:
        if columnar is not None:
            columnar(s)
    shown = _budget(s)
    return _finish(cand, ids, a_of_req, s.a, s.tokens, s.alive, s.fam, s.reason,
                   s.rend, shown, s.baseline_tokens)


def _budget(s: Rows) -> np.ndarray:
    """Stage 11 (``replay.rules.budget``) for every assembly at once: protected rows
    first, then the ranking with "no holes" for messages, then the raw artifacts whose
    memory did not make it into the prompt. Returns each row's tokens as rendered."""
    cand, P, A, a, n, n_a = s.cand, s.P, s.A, s.a, s.n, s.n_a
    pidx, alive, rend = A["pidx"], s.alive, s.rend
    budget = P["token_budget"][pidx] if n_a else np.zeros(0, np.int64)
    _, available, _ = effective_budgets(budget, P["reserve"][pidx] if n_a else 0, A["limit"],
                                        A["has_limit"])

    def shown() -> np.ndarray:
        return _rendered_tokens(cand, rend, s.step, s.reason, s.tokens, P["windows"], s.pol)

    keep = alive & s.protected
    used = np.bincount(a[keep], weights=shown()[keep], minlength=n_a).astype(np.int64)
    rest = alive & ~s.protected
    rend[rest & (rend < 0)] = np.where(s.is_mem, RD["compact_memory"], RD["verbatim"])[rest & (rend < 0)]
    rows = np.flatnonzero(rest)
    if len(rows):
        n_src = int(cand["n_src"])
        key = np.where(rend == RD["rehydrated_raw"], RK_EXACT, KIND_RANK_KEY[s.k])
        keyrank = P["ranks"][s.pol, key]
        order = rows[np.argsort((a[rows] * (len(RANK_KEYS) + 1) + keyrank[rows]) * n_src
                                + cand["ranking"][rows], kind="stable")]
        fits = _greedy(a, order, shown(), used, available, cut_kind=s.is_msg)
        s.add(_mask(n, order[~fits]), 11, "budget", "over_budget", True)
    # raw artifacts with a derived memory: replaced only by a memory that is in the prompt,
    # else shown as a reference if what the budget has left allows
    late = rehydration.columnar_replaced(s)
    if len(late):
        fits = _greedy(a, late, shown(), used, available)
        s.add(_mask(n, late[~fits]), 11, "budget", "over_budget", True)
    s.add(s.step == 0, 11, "budget", "redundant", True)  # the oracle's guard; no stage path leaves one
    return shown()


def _rendered_tokens(cand: dict[str, Any], rend: np.ndarray, step: np.ndarray, reason: np.ndarray,
                     tokens: np.ndarray, windows: np.ndarray, pol: np.ndarray) -> np.ndarray:
    """Each row's tokens as rendered (``replay.render.rendering_tokens``, from the lengths
    of the wrapper's columns): the content's tokens plus the wrapper's; a reference, its
    whole text. A stale marker says "stale since" the policy's window end when its last
    decision is the freshness stage's mark, else the memory's ``stale_after`` (as the
    prompt view reads it off the decision's detail)."""
    out = tokens.copy()
    rows = np.flatnonzero(rend == RD["stale_marker"])
    if len(rows):
        obs = cand["obs_us"][rows]
        by_window = (step[rows] == 7) & (reason[rows] == R["stale_marker"])
        window = windows[pol[rows], cand["fclass"][rows]]
        since = np.where(by_window, obs + window, cand["stale_after_us"][rows])
        since_valid = np.where(by_window, cand["obs_valid"][rows], cand["stale_after_valid"][rows])
        chars = stale_marker_length(obs, cand["obs_valid"][rows], since, since_valid,
                                    cand["tools_chars"][rows])
        out[rows] += tokens_for_length(chars)
    rows = np.flatnonzero(rend == RD["revalidation_hint"])
    if len(rows):
        out[rows] += tokens_for_length(revalidation_hint_length(cand["tools_chars"][rows]))
    rows = np.flatnonzero(rend == RD["summary"])
    if len(rows):
        out[rows] += tokens_for_length(SUMMARY_LENGTH)
    rows = np.flatnonzero(rend == RD["reference"])
    if len(rows):
        chars = reference_length(cand["id_chars"][rows], cand["sha_chars"][rows])
        out[rows] = tokens_for_length(chars + cand["preview_chars"][rows])
    return out


def _valid(column: Any) -> np.ndarray:
    """Where an Arrow column is not null."""
    return np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _source_orders(src: pa.Table) -> dict[str, Any]:
    """Each source's rank in the three orders the stages sort one assembly's rows by (all of
    an assembly's sources are of one conversation, so a rank over the chunk's sources
    orders them): ``prompt`` (kind's prompt order, created, id), ``newest_first`` (messages:
    created, id, both descending), ``ranking`` (the budget's order after the kind's policy
    rank: higher confidence first for memories, then newest, then id; ties by kind)."""
    n = src.num_rows
    k = _ints(src.column("k"), -1).astype(np.int64)
    created = _ints(src.column("created_us"), 0)
    rid = _rid_rank(src.column("rid"))
    conf = np.where(k == K_MEM, -_ints(src.column("conf"), 0.0), 0.0)

    def rank(order: np.ndarray) -> np.ndarray:
        out = np.empty(n, dtype=np.int64)
        out[order] = np.arange(n)
        return out

    return {
        "prompt": rank(np.lexsort((rid, created, PROMPT_ORDER[k] if n else k))),
        "newest_first": rank(np.lexsort((-rid, -created))),
        "ranking": rank(np.lexsort((k, rid, -created, conf))),
        "confidence_rank": rank(np.lexsort((rid, -conf))),  # higher confidence, then id
    }


def _rid_rank(rid: Any) -> np.ndarray:
    """Each record id as a rank in code point order (the oracle's string order); equal ids
    rank equal."""
    if not len(rid):
        return np.zeros(0, dtype=np.int64)
    enc = pc.dictionary_encode(rid).combine_chunks()
    dict_order = np.asarray(pc.sort_indices(enc.dictionary))
    rank_of = np.empty(len(dict_order), dtype=np.int64)
    rank_of[dict_order] = np.arange(len(dict_order))
    return rank_of[enc.indices.to_numpy()]


def _strings(codes: np.ndarray, names: Sequence[str], valid: np.ndarray | None = None) -> pa.Array:
    """Codes as the strings they stand for (null where not ``valid``)."""
    idx = pa.array(np.where(codes < 0, 0, codes).astype(np.int32),
                   mask=None if valid is None else ~valid)
    return pa.array(list(names), pa.string()).take(idx)


def _finish(cand: dict[str, Any], ids: pa.ChunkedArray, a_of_req: np.ndarray, a: np.ndarray,
            tokens: np.ndarray, alive: np.ndarray, fam: np.ndarray, reason: np.ndarray, rend: np.ndarray, shown: np.ndarray,
            baseline_tokens: np.ndarray) -> ColumnarResult:
    n = len(a)
    n_a = len(ids)
    position = np.zeros(n, dtype=np.int64)
    inc = np.flatnonzero(alive)
    if len(inc):
        order = inc[np.argsort(a[inc] * int(cand["n_src"]) + cand["prompt"][inc], kind="stable")]
        rank, _ = _groups(a, order, n_a)
        position[order] = rank
    final_tokens = np.where(alive, shown, tokens)
    if "keys" not in cand:
        # the same rows for every replay of these candidates (compare's two sides): taken
        # once, and the sides then share their key columns
        src = pa.array(cand["src"], pa.int64())
        cand["keys"] = (ids.take(pa.array(a, pa.int64())), cand["kind"].take(src),
                        cand["rid"].take(src))
    assembly_id, record_kind, record_id = cand["keys"]
    records = pa.table({
        "assembly_id": assembly_id,
        "record_kind": record_kind,
        "record_id": record_id,
        "decision": _strings(np.where(alive, 0, 1), ("included", "omitted")),
        "rendering": _strings(rend, RENDERINGS, alive),
        "position": pa.array(position, pa.int64(), mask=~alive),
        "policy_family": _strings(fam, POLICY_FAMILIES),
        "reason_code": _strings(reason, REASONS),
        "tokens": pa.array(final_tokens, pa.int64()),
    })
    included = np.bincount(a[alive], minlength=n_a).astype(np.int64)
    total = np.bincount(a, minlength=n_a).astype(np.int64)
    assembled = np.bincount(a[alive], weights=final_tokens[alive], minlength=n_a).astype(np.int64)
    return ColumnarResult(
        records=records,
        assemblies=pa.table({
            "assembly_id": ids.take(pa.array(a_of_req, pa.int64())),
            "assembled_tokens": pa.array(assembled[a_of_req], pa.int64()),
            "baseline_tokens": pa.array(baseline_tokens[a_of_req], pa.int64()),
            "included_count": pa.array(included[a_of_req], pa.int64()),
            "omitted_count": pa.array((total - included)[a_of_req], pa.int64()),
        }),
    )


def selection_hashes(records: pa.Table, assembly_ids: Sequence[str]) -> dict[str, str]:
    """The selection hash of each of ``assembly_ids`` from ``records`` (REPLAY_COLUMNS):
    the contract's columnar hash (``ingest.contract.selection_hashes``, byte-identical to
    its per-assembly rule); an assembly with no records hashes the empty selection."""
    table = contract_selection_hashes(records) if records.num_rows else None
    out: dict[str, str] = {}
    if table is not None:
        out = dict(zip(table.column("assembly_id").to_pylist(),
                       table.column("selection_hash").to_pylist(), strict=True))
    empty = selection_hash([])
    for aid in assembly_ids:
        out.setdefault(aid, empty)
    return out


def graphs_from_snapshots(snapshots: dict[str, Snapshot]) -> dict[str, pa.Table]:
    """Snapshots (conversation id -> Snapshot, as ``load_snapshots`` gives) as the Arrow
    graph tables ``replay_columnar`` reads, each row tagged with its conversation."""
    out: dict[str, pa.Table] = {}
    for name in GRAPH_TABLES:
        rows: list[dict[str, Any]] = []
        tags: list[str] = []
        for cid, snap in snapshots.items():
            for row in snap.tables.get(name, []):
                rows.append(row)
                tags.append(cid)
        table = _to_arrow(name, rows)
        out[name] = table.append_column("graph_conversation_id", pa.array(tags, pa.string()))
    return out


_ARROW = {"str": pa.string(), "json": pa.string(), "int": pa.int64(), "float": pa.float64(),
          "bool": pa.bool_(), "ts": pa.timestamp("us", tz="UTC"), "list": pa.list_(pa.string())}


def _to_arrow(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    cols = TABLES[name].columns
    return pa.table({c.name: pa.array([r.get(c.name) for r in rows], _ARROW[c.kind]) for c in cols})
