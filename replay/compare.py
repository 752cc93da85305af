"""Compare two policy versions (or a version against the recording) over many requests.

(Over 500 lines: the walk, the pairing SQL and the aggregates with their exact merge belong
together, since the distributed engine relies on the merge being the walk's.)

``compare(store, registry, a, b, flt)`` walks the requests matching ``flt`` in chunks
(``replay.engine.chunks``), replays each chunk under both sides with ``replay_chunk`` (side
A ``"recorded"`` reads the chunk's recorded rows in one query instead), and pairs the two
sides' records in DuckDB on (assembly_id, record_kind, record_id), classifying each pair as
``replay.diff`` does for one request. Only bounded aggregates are kept while it walks:

- requests compared, and requests **affected**: what the model receives differs (a record
  newly included, newly omitted, re-rendered, or moved among the records both include);
- records newly included, newly omitted and re-rendered, counted by record kind, reason
  (B's reason for a newly omitted record, A's for a newly included one, B's for a
  re-rendered one) and privacy class;
- tokens (the included records' tokens, as a diff counts them) on each side, and the
  distribution of per-request deltas (exact: a count per distinct delta), as percentiles
  and histogram bins fitted to the deltas' range (``histogram_bins``);
- the ``top`` most-changed requests (safety regressions, then changed records, then the
  size of the token delta);
- **safety** (``replay/safety.py``, the one definition): both sides' findings for every
  request whose included records or renderings differ (a request whose selection is equal
  on both sides has equal findings), as ``regressions`` (B has, A has not) and ``fixes``;
  with side A the recording, ``in_recording`` is every finding in what was sent, over all
  compared requests. Both are read with the SQL form of the definition
  (``ingest.store.lint.safety_query``: ``graph_findings`` over a chunk's replayed records
  and graph, ``Store.safety_violations`` over the recording), which the tests hold equal to
  ``SafetyContext.findings`` on the sample and on generated graphs.
  Each group counts findings per kind of finding, with the requests and records involved
  (the first few of each, so memory stays flat).
- each side's **effective token budget** (``replay.policy.effective_budget``): per policy
  version, its budget and reserve, and how many requests the model's context limit capped;
  each request's own on its per-request row (``budget_a``, ``budget_b``).

The per-request rows (``REQUEST_SCHEMA``) go to ``out`` (a callable taking an Arrow table)
chunk by chunk as they are computed; ``ParquetOut`` writes them to a Parquet file.

The walk is ``compare_chunks``, the one per-partition function: the local engine runs it over
the whole store, ``replay.distributed`` over each partition of conversations
(``compare_partition``) and merges the partial results in walk order (``Comparison.merge``;
``tally_in_recording`` for the findings in the recording), to exactly the same aggregates.
"""

from __future__ import annotations

import bisect
import functools
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.errors import ContextlensError
from ingest.interrupts import full_reason, remove_dead_scratch
from ingest.sql import registered, scratch_connection
from ingest.tags import UNATTRIBUTED_TOKENS, int_tag_column
from ingest.text import natural_key

from .assembler import get_assembler
from .engine import (
    CONVERSATIONS_PER_CHUNK, REPLAY_COLUMNS, REPLAY_SCHEMA, Chunk, chunk_facts, chunks,
    has_columnar_form, in_processes, replay_chunk, worker_count,
)
from .policy import PolicyRegistry, RuntimePolicy, effective_budgets
from .findings_text import details
from .safety import FINDING_OF_RULE, graph_findings, standard_blocked, standard_windows

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter
    from ingest.store import Store

__all__ = ["CHANGES", "RECORDED", "REQUEST_SCHEMA", "Comparison", "CompareCancelled",
           "ParquetOut", "compare", "compare_chunks", "compare_partition", "in_recording_rows",
           "tally_in_recording"]

RECORDED = "recorded"
# the record changes compare counts by kind, reason and privacy class
CHANGES = ("newly_included", "newly_omitted", "rerendered")
TOP = 10  # most-changed requests kept
EXAMPLES = 5  # requests named per safety finding
EXAMPLE_RECORDS = 20  # records named per safety finding
HISTOGRAM_BINS = 12  # at most this many histogram bins (``histogram_bins``)
PERCENTILES = (1, 5, 25, 50, 75, 95, 99)

REQUEST_SCHEMA = pa.schema([
    ("assembly_id", pa.string()), ("conversation_id", pa.string()),
    ("tokens_a", pa.int64()), ("tokens_b", pa.int64()), ("delta", pa.int64()),
    ("newly_included", pa.int64()), ("newly_omitted", pa.int64()), ("rerendered", pa.int64()),
    ("safety_regressions", pa.int64()), ("safety_fixes", pa.int64()), ("changed", pa.bool_()),
    # each side's effective token budget of the request (replay.policy.effective_budget);
    # null where the side keeps none (a runtime policy) or its version is not in the registry
    ("budget_a", pa.int64()), ("budget_b", pa.int64()),
])


# Each pair of records (one side may be missing) classified as replay.diff classifies it;
# "moved" compares ranks among the records both sides include, ordered by (position, kind, id).
_PAIRS_SQL = """
WITH p AS (
  SELECT coalesce(a.assembly_id, b.assembly_id) AS assembly_id,
         coalesce(a.record_kind, b.record_kind) AS record_kind,
         coalesce(a.record_id, b.record_id) AS record_id,
         coalesce(a.decision = 'included', false) AS ia,
         coalesce(b.decision = 'included', false) AS ib,
         a.assembly_id IS NULL OR b.assembly_id IS NULL AS one_side,
         a.rendering AS ar, b.rendering AS br, a.reason_code AS ra, b.reason_code AS rb,
         a.position AS ap, b.position AS bp, a.tokens AS a_tok, b.tokens AS b_tok
  FROM side_a a FULL OUTER JOIN side_b b
    ON a.assembly_id = b.assembly_id AND a.record_kind = b.record_kind
   AND a.record_id = b.record_id
), r AS (
  SELECT *,
    CASE WHEN ia AND ib THEN row_number() OVER (PARTITION BY assembly_id, ia AND ib
                                                ORDER BY ap, record_kind, record_id) END AS rank_a,
    CASE WHEN ia AND ib THEN row_number() OVER (PARTITION BY assembly_id, ia AND ib
                                                ORDER BY bp, record_kind, record_id) END AS rank_b
  FROM p
)
SELECT assembly_id, record_kind, record_id, ia, ib, a_tok, b_tok, ar, br,
  CASE WHEN ib AND NOT ia THEN 'newly_included'
       WHEN ia AND NOT ib THEN 'newly_omitted'
       WHEN ia AND ib AND ar IS DISTINCT FROM br THEN 'rerendered'
       WHEN ia AND ib AND ra IS DISTINCT FROM rb THEN 'reason_changed'
       WHEN ia AND ib AND rank_a <> rank_b THEN 'moved'
       WHEN ia AND ib THEN 'unchanged'
       WHEN one_side OR ra IS DISTINCT FROM rb THEN 'reason_changed'
       ELSE 'unchanged' END AS change,
  CASE WHEN ib AND NOT ia THEN ra ELSE rb END AS reason
FROM r
"""

# The rows safety is judged on: a record's findings depend on the request and on the
# record's own (kind, id, rendering) only (replay/safety.py, record_findings), so a record
# included on both sides with the same rendering has the same findings on both and is never
# a regression or a fix. Only the records whose inclusion or rendering changed are judged.
PAIR_CHANGES = ("newly_included", "newly_omitted", "rerendered", "reason_changed", "moved",
                "unchanged")


def _run_starts(ids: pa.ChunkedArray) -> np.ndarray:
    """True where a run of equal ``ids`` (sorted, so one run per assembly) starts."""
    n = len(ids)
    starts = np.ones(n, dtype=bool)
    if n > 1:
        starts[1:] = np.asarray(pc.not_equal(ids.slice(1), ids.slice(0, n - 1)))
    return starts


def aligned_pairs(side_a: pa.Table, side_b: pa.Table) -> pa.Table | None:
    """``_PAIRS_SQL``'s result computed row by row, when both sides hold the same records in
    the same order (two replays of one chunk share its candidate rows, in (assembly_id,
    record_kind, record_id) order): no join on three strings. None when they do not (a
    recording, or a replay by another assembler), for the SQL to pair them by key. The
    rows keep the sides' order."""
    n = side_a.num_rows
    if side_b.num_rows != n or not all(side_a[k].equals(side_b[k])
                                       for k in ("assembly_id", "record_kind", "record_id")):
        return None
    ia = np.asarray(pc.fill_null(pc.equal(side_a["decision"], "included"), False))
    ib = np.asarray(pc.fill_null(pc.equal(side_b["decision"], "included"), False))
    both = ia & ib

    def distinct(name: str) -> np.ndarray:  # SQL's IS DISTINCT FROM
        x, y = side_a[name], side_b[name]
        differ = np.asarray(pc.fill_null(pc.not_equal(x, y), True))
        return differ & ~(np.asarray(x.is_null()) & np.asarray(y.is_null()))

    # "moved": the rank among the records both include, by position, differs; rows are in
    # (assembly, kind, id) order and positions are distinct within an assembly
    ids = side_a["assembly_id"]
    group = np.cumsum(_run_starts(ids)) - 1
    moved = np.zeros(n, dtype=bool)
    rows = np.flatnonzero(both)
    if len(rows):
        g = group[rows]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = g[1:] != g[:-1]
        start = np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0))

        def rank(side: pa.Table) -> np.ndarray:
            pos = np.asarray(pc.fill_null(side["position"], 0))[rows]
            order = np.lexsort((pos, g))
            out = np.empty(len(rows), dtype=np.int64)
            out[order] = np.arange(len(rows)) - start
            return out

        moved[rows] = rank(side_a) != rank(side_b)
    rerendered, reason_changed = distinct("rendering"), distinct("reason_code")
    change = np.select(
        [ib & ~ia, ia & ~ib, both & rerendered, both & reason_changed, both & moved, both,
         reason_changed],
        [0, 1, 2, 3, 4, 5, 3], default=5)
    newly_in = pa.array(ib & ~ia)
    return pa.table({
        "assembly_id": ids, "record_kind": side_a["record_kind"],
        "record_id": side_a["record_id"], "ia": pa.array(ia), "ib": pa.array(ib),
        "a_tok": side_a["tokens"], "b_tok": side_b["tokens"],
        "ar": side_a["rendering"], "br": side_b["rendering"],
        "change": pa.array(PAIR_CHANGES, pa.string()).take(pa.array(change.astype(np.int32))),
        "reason": pc.if_else(newly_in, side_a["reason_code"], side_b["reason_code"]),
    })


def aligned_per_request(pairs: pa.Table, requests: pa.Table) -> tuple[pa.Table, list[tuple[str, int]]]:
    """``_PER_REQUEST_SQL``'s rows for ``aligned_pairs``' pairs (in assembly order, so each
    request's pairs are one run of rows), and the count of each change: sums over runs
    instead of a join and a grouping on strings."""
    n = pairs.num_rows
    ids = pairs["assembly_id"]
    first = np.flatnonzero(_run_starts(ids))
    change = np.asarray(pc.index_in(pairs["change"], value_set=pa.array(PAIR_CHANGES)))
    ia, ib = np.asarray(pairs["ia"]), np.asarray(pairs["ib"])

    def per_run(values: np.ndarray) -> np.ndarray:
        return (np.add.reduceat(values.astype(np.int64), first) if n
                else np.zeros(0, dtype=np.int64))

    sums = {
        "tokens_a": per_run(np.where(ia, np.asarray(pc.fill_null(pairs["a_tok"], 0)), 0)),
        "tokens_b": per_run(np.where(ib, np.asarray(pc.fill_null(pairs["b_tok"], 0)), 0)),
        **{name: per_run(change == PAIR_CHANGES.index(name))
           for name in ("newly_included", "newly_omitted", "rerendered", "moved",
                        "reason_changed")},
    }
    # each request's run (a request without records has none: zeros)
    run_of = pc.fill_null(pc.index_in(requests["assembly_id"],
                                      value_set=ids.take(pa.array(first))), -1)
    run_idx = np.asarray(run_of).astype(np.int64)
    has = run_idx >= 0

    def of_request(values: np.ndarray) -> pa.Array:
        return pa.array(np.where(has, values[np.maximum(run_idx, 0)] if len(values) else 0, 0),
                        pa.int64())

    columns = {name: of_request(values) for name, values in sums.items()}
    table = pa.table({
        "assembly_id": requests["assembly_id"], "conversation_id": requests["conversation_id"],
        "tokens_a": columns["tokens_a"], "tokens_b": columns["tokens_b"],
        "delta": pc.subtract(columns["tokens_b"], columns["tokens_a"]),
        **{name: columns[name] for name in ("newly_included", "newly_omitted", "rerendered",
                                            "moved", "reason_changed")},
        "ord": requests["ord"],
    })
    counts = np.bincount(change, minlength=len(PAIR_CHANGES)) if n else np.zeros(len(PAIR_CHANGES), np.int64)
    return table, [(name, int(c)) for name, c in zip(PAIR_CHANGES, counts) if c]


_SAFETY_ROWS_SQL = """
SELECT s.* FROM {side} s SEMI JOIN pairs p
  ON p.assembly_id = s.assembly_id AND p.record_kind = s.record_kind AND p.record_id = s.record_id
 AND p.change IN ('newly_included', 'newly_omitted', 'rerendered')
"""

_PER_REQUEST_SQL = """
SELECT q.assembly_id, q.conversation_id,
  coalesce(sum(c.a_tok) FILTER (WHERE c.ia), 0)::BIGINT AS tokens_a,
  coalesce(sum(c.b_tok) FILTER (WHERE c.ib), 0)::BIGINT AS tokens_b,
  (coalesce(sum(c.b_tok) FILTER (WHERE c.ib), 0) - coalesce(sum(c.a_tok) FILTER (WHERE c.ia), 0))::BIGINT AS delta,
  count(*) FILTER (WHERE c.change = 'newly_included') AS newly_included,
  count(*) FILTER (WHERE c.change = 'newly_omitted') AS newly_omitted,
  count(*) FILTER (WHERE c.change = 'rerendered') AS rerendered,
  count(*) FILTER (WHERE c.change = 'moved') AS moved,
  count(*) FILTER (WHERE c.change = 'reason_changed') AS reason_changed,
  min(q.ord) AS ord
FROM requests q LEFT JOIN pairs c ON c.assembly_id = q.assembly_id
GROUP BY q.assembly_id, q.conversation_id
ORDER BY ord
"""

_GROUPS_SQL = """
SELECT c.change, c.record_kind, c.reason, pv.privacy_class, count(*) AS n
FROM pairs c LEFT JOIN privacy pv ON pv.record_kind = c.record_kind AND pv.record_id = c.record_id
WHERE c.change IN ('newly_included', 'newly_omitted', 'rerendered')
GROUP BY ALL
"""


class CompareCancelled(Exception):
    """The caller's ``cancelled()`` said stop; nothing was written to ``out``'s file."""


@dataclass
class _FindingTally:
    """One kind of safety finding in one group: counts, and the first few requests and
    records (each record with how many requests it appears in)."""

    findings: int = 0
    requests: int = 0
    example_requests: list[str] = field(default_factory=list)
    records: dict[tuple[str, str], int] = field(default_factory=dict)
    # each example record's finding in words (``replay.findings_text``), as first seen
    details: dict[tuple[str, str], str] = field(default_factory=dict)
    # None: every record is counted, in the order first seen (a partition's tally, merged
    # later into one that keeps the first EXAMPLE_RECORDS exactly as a single walk would)
    limit: int | None = EXAMPLE_RECORDS

    def add(self, assembly_id: str, found: list[dict[str, Any]]) -> None:
        self.findings += len(found)
        self.requests += 1
        if len(self.example_requests) < EXAMPLES:
            self.example_requests.append(assembly_id)
        for f in found:
            key = (f["record_kind"], f["record_id"])
            if key in self.records or self.limit is None or len(self.records) < self.limit:
                self.records[key] = self.records.get(key, 0) + 1
                if f.get("detail") is not None:
                    self.details.setdefault(key, f["detail"])

    def merge(self, later: "_FindingTally") -> None:
        """Add the tally of requests walked after this one's (``later`` an unlimited
        partition tally): the same counts and examples as one walk over both."""
        self.findings += later.findings
        self.requests += later.requests
        room = EXAMPLES - len(self.example_requests)
        self.example_requests.extend(later.example_requests[:max(room, 0)])
        # a record enters when first seen while there is room, then counts every time
        for key, n in later.records.items():
            if key in self.records or self.limit is None or len(self.records) < self.limit:
                self.records[key] = self.records.get(key, 0) + n
                if key in later.details:
                    self.details.setdefault(key, later.details[key])

    def to_json(self, finding: str) -> dict[str, Any]:
        return {"finding": finding, "findings": self.findings, "requests": self.requests,
                "example_requests": list(self.example_requests),
                "records": [{"record_kind": k, "record_id": r, "requests": n,
                             **({"detail": self.details[(k, r)]} if (k, r) in self.details else {})}
                            for (k, r), n in sorted(  # ties by kind, then id in natural order
                                self.records.items(),
                                key=lambda item: (-item[1], item[0][0], natural_key(item[0][1])))]}


@dataclass
class Comparison:
    """The aggregates of a compare (see the module docstring); ``to_json`` gives them as
    plain data, safety first."""

    a: str
    b: str
    filter: str
    requests: int = 0
    affected: int = 0
    counts: Counter = field(default_factory=Counter)  # change class -> records
    groups: Counter = field(default_factory=Counter)  # (change, kind, reason, privacy) -> n
    tokens_a: int = 0
    tokens_b: int = 0
    deltas: Counter = field(default_factory=Counter)  # per-request delta -> requests
    most_changed: list[dict[str, Any]] = field(default_factory=list)
    safety: dict[str, dict[str, _FindingTally]] = field(
        default_factory=lambda: {"regressions": {}, "fixes": {}, "in_recording": {}})
    safety_requests: Counter = field(default_factory=Counter)  # group -> requests with one
    # side ("a", "b") -> policy version -> its requests' effective budgets
    budgets: dict[str, dict[str, "_BudgetTally"]] = field(
        default_factory=lambda: {"a": {}, "b": {}})
    # a partition's comparison: its tallies keep every record, for ``merge``
    partial: bool = False
    # requests B sends past the model's context window (replay.diff.over_context_window):
    # how many, and the first few (assembly_id, tokens_b, context_limit)
    over_window: int = 0
    over_window_examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def a_recorded(self) -> bool:
        return self.a == RECORDED

    def tally(self, group: str, finding: str) -> _FindingTally:
        tallies = self.safety[group]
        if finding not in tallies:
            tallies[finding] = _FindingTally(limit=None if self.partial else EXAMPLE_RECORDS)
        return tallies[finding]

    def merge(self, later: "Comparison", top: int = TOP) -> None:
        """Add a partition's comparison (``later``, partial, over requests that come after
        all of this one's in the walk order): afterwards this holds what one walk over both
        would. ``in_recording`` is not merged (see ``tally_in_recording``)."""
        self.requests += later.requests
        self.affected += later.affected
        self.counts.update(later.counts)
        self.groups.update(later.groups)
        self.tokens_a += later.tokens_a
        self.tokens_b += later.tokens_b
        self.deltas.update(later.deltas)
        for group in ("regressions", "fixes"):
            for finding, tally in later.safety[group].items():
                self.tally(group, finding).merge(tally)
            self.safety_requests[group] += later.safety_requests[group]
        for side, tallies in later.budgets.items():
            for version, tally in tallies.items():
                self.budgets[side].setdefault(version, tally.empty()).merge(tally)
        self.most_changed = sorted(self.most_changed + later.most_changed, key=_rank)[:top]
        self.over_window += later.over_window
        self.over_window_examples = (self.over_window_examples + later.over_window_examples)[:EXAMPLES]

    def records_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for change in CHANGES:
            rows = [{"record_kind": k, "reason": r, "privacy_class": p, "count": n}
                    for (c, k, r, p), n in self.groups.items() if c == change]
            rows.sort(key=lambda g: (-g["count"], g["record_kind"], g["reason"] or "",
                                     g["privacy_class"] or ""))
            out[change] = {"total": int(self.counts[change]), "by": rows}
        out["moved"] = {"total": int(self.counts["moved"])}
        out["reason_changed"] = {"total": int(self.counts["reason_changed"])}
        return out

    def tokens_json(self) -> dict[str, Any]:
        return {"a": self.tokens_a, "b": self.tokens_b, "delta": self.tokens_b - self.tokens_a,
                "per_request": distribution(self.deltas)}

    def safety_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for group, tallies in self.safety.items():
            if group == "in_recording" and not self.a_recorded:
                out[group] = None
                continue
            out[group] = [tallies[f].to_json(f) for f in sorted(
                tallies, key=lambda f: (-tallies[f].findings, f))]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a, "b": self.b, "filter": self.filter,
            "safety": self.safety_json(),
            "over_context_window": {"requests": self.over_window,
                                    "examples": [dict(e) for e in self.over_window_examples]},
            "requests": self.requests, "affected": self.affected,
            "records": self.records_json(),
            "tokens": self.tokens_json(),
            "budget": self.budgets_json(),
            "most_changed": [dict(r) for r in self.most_changed],
        }

    def budgets_json(self) -> dict[str, Any]:
        """Per side, one entry per policy version (side A the recording: each request's
        own): its budget and reserve, how many requests, and in how many the model's
        context limit was below the policy's budget (``capped``, down to ``lowest_budget``)."""
        return {side: [tallies[v].to_json(v) for v in sorted(tallies, key=natural_key)]
                for side, tallies in self.budgets.items()}


def distribution(deltas: Counter) -> dict[str, Any]:
    """Percentiles (nearest rank), mean, min, max and the histogram (``histogram_bins``) of
    the per-request token deltas, from their exact counts."""
    n = sum(deltas.values())
    if not n:
        return {"count": 0, "min": None, "max": None, "mean": None, "percentiles": {},
                "histogram": []}
    values = sorted(deltas)
    cumulative, running = [], 0
    for v in values:
        running += deltas[v]
        cumulative.append(running)

    def nearest_rank(p: float) -> int:
        rank = max(1, -(-p * n // 100))  # ceil(p/100 * n)
        return values[bisect.bisect_left(cumulative, rank)]

    lo, hi = values[0], values[-1]
    bins = [{"lo": a, "hi": b, "count": 0} for a, b in histogram_bins(deltas)]
    starts = [b["lo"] for b in bins]
    for v in values:
        bins[bisect.bisect_right(starts, v) - 1]["count"] += deltas[v]
    return {"count": n, "min": lo, "max": hi,
            "mean": round(sum(v * c for v, c in deltas.items()) / n, 3),
            "percentiles": {f"p{p}": nearest_rank(p) for p in PERCENTILES},
            "histogram": bins}


def histogram_bins(deltas: Counter) -> list[tuple[int, int]]:
    """The histogram's bins for these counts of integer deltas, as ``(lo, hi)`` edges
    (``lo`` inclusive, ``hi`` exclusive), fitted to the data: the range split in as many
    bins as there are distinct deltas, Sturges' count for this many requests or
    ``HISTOGRAM_BINS`` - 2 allow, whichever is fewest (two distinct deltas: a few bins, not
    twenty mostly empty ones), of a round width (1, 2, 5, 10, 20, 25, 50…) at its
    multiples, from the lowest delta's bin to the highest's. Zero within the range is a bin
    of its own, ``[0, 1)``: the requests whose token count did not change are not merged
    with small gains, and zero always shows. ``HISTOGRAM_BINS`` bins at most."""
    if not deltas:
        return []
    values = sorted(deltas)
    lo, hi = values[0], values[-1]
    sturges = math.ceil(math.log2(sum(deltas.values()))) + 1
    # at most two more than the target: the aligned edges' spare bin and zero's own
    target = max(1, min(len(values), sturges, HISTOGRAM_BINS - 2))
    width = next(w for w in _round_widths() if w * target >= hi - lo + 1)
    edges = list(range(lo - lo % width, hi - hi % width + width + 1, width))
    if lo > 0:
        edges[0] = max(edges[0], 1)  # all gains: the first bin starts at +1, not at 0
    if lo <= 0 <= hi and width > 1:
        edges = sorted(set(edges) | {0, 1})  # 0 is an edge (a multiple): add its own bin
        # no empty bin past the data: [1, w) when the highest delta is 0
        edges = [e for e in edges if e <= hi] + [next(e for e in edges if e > hi)]
    return list(zip(edges, edges[1:]))


def _round_widths() -> Iterator[int]:
    """1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, …"""
    yield from (1, 2, 5)
    scale = 10
    while True:
        yield from (scale, 2 * scale, 25 * scale // 10, 5 * scale)
        scale *= 10


class ParquetOut:
    """Writes the per-request rows to ``path`` as they come (``pyarrow.parquet.ParquetWriter``)
    into a temporary file next to it, renamed over ``path`` only when the compare finished:
    a cancelled or failed run leaves no half file. An existing ``path`` is an error unless
    ``force``; both that and an unwritable folder fail before any replay."""

    def __init__(self, path: str | os.PathLike[str], force: bool = False) -> None:
        import pyarrow.parquet as pq

        self.path = Path(path)
        if self.path.is_dir():
            raise ContextlensError(f"{self.path}: is a folder, not a Parquet file to write")
        if (self.path.exists() or self.path.is_symlink()) and not force:  # a dangling link too
            raise ContextlensError(f"{self.path}: already exists (use --force to replace it)")
        folder = self.path.parent
        if not folder.is_dir():
            raise ContextlensError(f"{self.path}: cannot write: no folder {folder}")
        if not os.access(folder, os.W_OK):
            raise ContextlensError(f"{self.path}: cannot write: folder {folder} is not writable")
        # a run killed before its rename left its temporary file: removed by the next one
        remove_dead_scratch(folder, f".{self.path.name}.", ".tmp")
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.writer = pq.ParquetWriter(str(self.tmp), REQUEST_SCHEMA)
        except OSError as err:
            self.tmp.unlink(missing_ok=True)
            raise self._write_failed(err) from None
        self.rows = 0

    def _write_failed(self, err: BaseException) -> ContextlensError:
        """One line naming the file (Arrow's text of a full disk names neither)."""
        return ContextlensError(f"{self.path}: cannot write: {full_reason(err)}")

    def __call__(self, table: pa.Table) -> None:
        try:
            self.writer.write_table(table)
        except OSError as err:  # a full disk (ENOSPC), a size limit (EFBIG), ...
            raise self._write_failed(err) from None
        self.rows += table.num_rows

    def __enter__(self) -> "ParquetOut":
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            try:
                self.writer.close()  # writes the footer: a full disk may fail it
            except OSError as err:
                if exc_type is None:
                    raise self._write_failed(err) from None
            if exc_type is None:
                os.replace(self.tmp, self.path)
        finally:
            self.tmp.unlink(missing_ok=True)  # whatever ended the run: no half file left


def _recorded_side(store: "Store", chunk: Chunk) -> pa.Table:
    ids = chunk.requests.column("assembly_id").to_pylist()
    rows = store.recorded_records(ids, chunk.export_id)
    return pa.table({name: rows.column(name).cast(REPLAY_SCHEMA.field(name).type)
                     for name in REPLAY_COLUMNS}, schema=REPLAY_SCHEMA)


def _privacy(graphs: dict[str, pa.Table]) -> pa.Table:
    """(record_kind, record_id, privacy_class) of the chunk's artifacts and memories, from
    its graph (read already; a query of the store would read whole tables, each chunk)."""
    parts = []
    for table, kind, key in (("tool_artifacts", "tool_artifact", "artifact_id"),
                             ("tool_memories", "tool_memory", "memory_id")):
        # a row reachable from two conversations of the chunk is in its graph twice
        rows = graphs[table].select([key, "privacy_class"]).group_by(
            [key, "privacy_class"], use_threads=False).aggregate([])  # see distributed.py
        parts.append(pa.table({
            "record_kind": pa.array([kind] * rows.num_rows, pa.string()),
            "record_id": rows[key].cast(pa.string()),
            "privacy_class": rows["privacy_class"].cast(pa.string()),
        }))
    return pa.concat_tables(parts)


def _safety(result: Comparison, registry: PolicyRegistry, chunk: Chunk,
            graphs: dict[str, pa.Table], con: duckdb.DuckDBPyConnection,
            side_a: pa.Table, side_b: pa.Table, ids: list[str]) -> pa.Table:
    """Both sides' findings for the requests ``ids`` (whose selection differs, in walk
    order), tallied into ``result``; returns (assembly_id, safety_regressions,
    safety_fixes). The findings of the whole chunk come from one SQL query per side
    (``graph_findings``); only the few findings themselves become Python values."""
    counts: dict[str, list[Any]] = {"assembly_id": [], "safety_regressions": [], "safety_fixes": []}
    sides: list[dict[str, dict[tuple[str, str, str], str]]] = [{}, {}]
    if ids:  # a chunk whose selections are all equal needs no query
        wanted = chunk.requests.filter(pc.is_in(chunk.requests["assembly_id"],
                                                pa.array(ids, pa.string())))
        sides = [_by_assembly(found) for found in graph_findings(
            con, graphs, chunk.export_id, wanted, (side_a, side_b), registry)]
    for aid in ids:
        a, b = sides[0].get(aid, {}), sides[1].get(aid, {})
        # as SafetyDelta.between: B's findings A has not, and A's B has not, by record
        for group, found, words in (("regressions", sorted(b.keys() - a.keys()), b),
                                    ("fixes", sorted(a.keys() - b.keys()), a)):
            by_finding: dict[str, list[dict[str, Any]]] = {}
            for kind, rid, finding in found:
                by_finding.setdefault(finding, []).append(
                    {"record_id": rid, "record_kind": kind, "finding": finding,
                     "detail": words[(kind, rid, finding)]})
            for finding, items in by_finding.items():
                result.tally(group, finding).add(aid, items)
            if found:
                result.safety_requests[group] += 1
        counts["assembly_id"].append(aid)
        counts["safety_regressions"].append(len(b.keys() - a.keys()))
        counts["safety_fixes"].append(len(a.keys() - b.keys()))
    return pa.table(counts, schema=pa.schema([("assembly_id", pa.string()),
                                              ("safety_regressions", pa.int64()),
                                              ("safety_fixes", pa.int64())]))


def _by_assembly(found: pa.Table) -> dict[str, dict[tuple[str, str, str], str]]:
    """{assembly: {(record_kind, record_id, finding): detail}} of ``graph_findings`` rows."""
    out: dict[str, dict[tuple[str, str, str], str]] = {}
    for aid, kind, rid, finding, detail in zip(*(found.column(c).to_pylist() for c in (
            "assembly_id", "record_kind", "record_id", "finding", "detail"))):
        out.setdefault(aid, {})[(kind, rid, finding)] = detail
    return out


def _in_recording(result: Comparison, store: "Store", registry: PolicyRegistry,
                  flt: "AssemblyFilter | None") -> None:
    tally_in_recording(result, in_recording_rows(store, registry, flt))


def in_recording_rows(store: "Store", registry: PolicyRegistry,
                      flt: "AssemblyFilter | None") -> pa.Table:
    """The findings in what was sent (invariant, assembly_id, record_kind, record_id,
    detail), over the requests of ``store`` matching ``flt``: one row per finding, its
    detail in the words every other path uses (``replay.findings_text``)."""
    rows = store.safety_violations(flt, standard_windows(registry), standard_blocked(registry))
    finding = pc.fill_null(pa.array([FINDING_OF_RULE.get(r, r) for r in
                                     rows.column("invariant").to_pylist()], pa.string()), "")
    words = details(rows.append_column("finding", finding))
    return rows.select(["invariant", "assembly_id", "record_kind", "record_id"]).append_column(
        "detail", words)


def tally_in_recording(result: Comparison, rows: pa.Table) -> None:
    """``result``'s ``in_recording`` group from the rows of ``in_recording_rows`` (of one
    store, or of every partition's concatenated: the tally orders them itself)."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows.to_pylist():
        finding = FINDING_OF_RULE.get(r["invariant"], r["invariant"])
        by.setdefault((r["assembly_id"], finding), []).append(r)
    requests: set[str] = set()
    for (aid, finding), items in sorted(by.items()):
        result.tally("in_recording", finding).add(aid, items)
        requests.add(aid)
    result.safety_requests["in_recording"] = len(requests)


def _rank(r: dict[str, Any]) -> tuple:
    """Most changed first: safety regressions, then changed records, then the size of the
    token delta, then safety fixes; ties by id in natural order (r25 before r100)."""
    changed = r["newly_included"] + r["newly_omitted"] + r["rerendered"]
    return (-r["safety_regressions"], -changed, -abs(r["delta"]), -r["safety_fixes"],
            natural_key(r["assembly_id"]))


def _top(best: list[dict[str, Any]], rows: pa.Table, top: int) -> list[dict[str, Any]]:
    """The ``top`` most-changed requests of ``best`` and a chunk's changed ``rows``."""
    rows = rows.filter(rows["changed"])
    if not rows.num_rows:
        return best
    changed = pc.add(pc.add(rows["newly_included"], rows["newly_omitted"]), rows["rerendered"])
    keys = ["safety_regressions", "_changed", "_size", "safety_fixes"]
    scored = rows.append_column("_changed", changed).append_column("_size", pc.abs(rows["delta"]))
    scored = scored.sort_by([(k, "descending") for k in keys])
    head = scored.slice(0, top)
    if scored.num_rows > top:
        # Arrow orders ids by code point (r100 before r25): of the rows tied with the last
        # one kept, those first in natural order are kept (``_rank``)
        tied = functools.reduce(pc.and_, [pc.equal(scored[k], scored[k][top - 1]) for k in keys])
        first = pc.index(tied, True).as_py()  # the tied rows are contiguous, sorted
        group = scored.filter(tied)
        ids = group["assembly_id"].to_pylist()
        chosen = sorted(range(len(ids)), key=lambda i: natural_key(ids[i]))[:top - first]
        head = pa.concat_tables([scored.slice(0, first), group.take(chosen)])
    return sorted(best + head.drop_columns(["_changed", "_size"]).to_pylist(), key=_rank)[:top]


def compare(store: "Store", registry: PolicyRegistry, a: str, b: str,
            flt: "AssemblyFilter | str | None" = None,
            progress: Callable[[int, int], None] | None = None,
            cancelled: Callable[[], bool] | None = None,
            out: Callable[[pa.Table], None] | None = None,
            top: int = TOP, workers: int | None = 1) -> Comparison:
    """Side A (``"recorded"`` or a version) against side B (a version) over the requests
    matching ``flt``. ``progress(done, total)`` is called per chunk; when ``cancelled()``
    turns true the walk stops with ``CompareCancelled``. Unknown versions and a bad filter
    raise ContextlensError before any replay. ``workers`` > 1 compares the chunks in that
    many processes (None: one per free CPU; the same result; ``engine.worker_count``)."""
    from ingest.filters import parse_filter

    registry.get(b)
    if a != RECORDED:
        registry.get(a)
    parsed = parse_filter(flt) if isinstance(flt, str) or flt is None else flt
    result = Comparison(a, b, parsed.text)
    total = store.count_assemblies(parsed)
    report = progress or (lambda _d, _t: None)
    report(0, total)
    done = 0
    best: list[dict[str, Any]] = []

    def each(rows: pa.Table) -> None:
        nonlocal done, best
        best = _top(best, rows, top)
        if out is not None:
            out(rows)
        done += rows.num_rows
        report(done, total)

    compare_chunks(store, registry, a, b, parsed, result, each, cancelled,
                   worker_count(workers, total))
    if a == RECORDED:
        _in_recording(result, store, registry, parsed)
    result.most_changed = best
    return result


def compare_chunks(store: "Store", registry: PolicyRegistry, a: str, b: str,
                   parsed: "AssemblyFilter", result: Comparison,
                   each: Callable[[pa.Table], None],
                   cancelled: Callable[[], bool] | None = None, workers: int = 1,
                   conversations_per_chunk: int = CONVERSATIONS_PER_CHUNK) -> None:
    """The per-partition function of compare: every chunk of the requests of ``store``
    matching ``parsed`` compared, its aggregates added to ``result`` and its per-request rows
    (``REQUEST_SCHEMA``, in walk order) handed to ``each``. The local engine runs it over
    the whole store; ``replay.distributed`` over each partition's own store, merging the
    partitions' results with ``Comparison.merge``. ``workers`` > 1: see
    ``_compare_chunks_in_processes``."""
    walk = functools.partial(chunks, flt=parsed, conversations_per_chunk=conversations_per_chunk)
    if workers > 1:
        _compare_chunks_in_processes(store, registry, a, b, walk, result, each, cancelled,
                                     workers)
        return
    # chunks streams its requests from an open result: the chunk's own queries (snapshots,
    # recorded rows) need another connection to the same database
    walker = store.cursor()
    try:
        for chunk in walk(walker):
            if cancelled is not None and cancelled():
                raise CompareCancelled
            each(_compare_chunk(store, registry, a, b, chunk, result))
        if cancelled is not None and cancelled():
            raise CompareCancelled
    finally:
        walker.close()


# what each worker process of a parallel compare holds: the sides it compares (the store
# is engine.in_processes')
_JOB: dict[str, Any] = {}


def _worker_start(registry: PolicyRegistry, a: str, b: str) -> None:
    _JOB.update(job=(registry, a, b))


def _worker_chunk(store: "Store", chunk: Chunk) -> tuple[Comparison, pa.Table]:
    registry, a, b = _JOB["job"]
    part = Comparison(a, b, "", partial=True)
    return part, _compare_chunk(store, registry, a, b, chunk, part)


def _compare_chunks_in_processes(store: "Store", registry: PolicyRegistry, a: str, b: str,
                                 walk: Callable[[Any], Iterator[Chunk]], result: Comparison,
                                 each: Callable[[pa.Table], None],
                                 cancelled: Callable[[], bool] | None, workers: int) -> None:
    """``compare_chunks`` with its chunks compared by ``workers`` processes
    (``engine.in_processes``), each chunk's partial comparison merged in walk order
    (``Comparison.merge``, exact as for Ray's partitions)."""
    for part, rows in in_processes(store, walk, _worker_chunk, workers, cancelled,
                                   _worker_start, (registry, a, b)):
        result.merge(part)
        each(rows)
    if cancelled is not None and cancelled():
        raise CompareCancelled


def _compare_chunk(store: "Store", registry: PolicyRegistry, a: str, b: str, chunk: Chunk,
                   result: Comparison) -> pa.Table:
    """One chunk compared: its aggregates added to ``result``; its per-request rows. The
    SQL runs on this thread's scratch connection (``ingest.sql``), every name registered
    there for this chunk only."""
    # the chunk's graph, read once as Arrow for both replays and the safety of the requests
    # whose selection changed; neither the columnar replay nor the safety judgement reads
    # the free-text bodies (a runtime's rule or a plugin, replayed request by request, may)
    runtime = any(isinstance(registry.get(v), RuntimePolicy) for v in (a, b) if v != RECORDED)
    graphs = store.conversation_graphs(
        list(chunk.conversation_ids), chunk.export_id,
        bodies=runtime or not has_columnar_form(get_assembler()))
    facts = None
    if a != RECORDED and not runtime:
        # both sides replay one graph: its policy-independent facts are computed once
        facts = chunk_facts(chunk, graphs)
    # records are compared, not selection hashes: none are computed
    side_b = replay_chunk(store, chunk, registry, b, graphs=graphs, facts=facts, hashes=False).records
    side_a = (_recorded_side(store, chunk) if a == RECORDED
              else replay_chunk(store, chunk, registry, a, graphs=graphs, facts=facts,
                                hashes=False).records)
    requests = chunk.requests.select(["assembly_id", "conversation_id"]).append_column(
        "ord", pa.array(range(chunk.requests.num_rows), pa.int64()))
    con = scratch_connection()
    with registered(con, side_a=side_a, side_b=side_b, requests=requests):
        rows = _compare_sides(result, registry, chunk, graphs, con, side_a, side_b, requests)
    result.requests += rows.num_rows
    result.affected += pc.sum(rows["changed"].cast(pa.int64())).as_py() or 0
    result.tokens_a += pc.sum(rows["tokens_a"]).as_py() or 0
    result.tokens_b += pc.sum(rows["tokens_b"]).as_py() or 0
    for entry in pc.value_counts(rows["delta"]).to_pylist():
        result.deltas[entry["values"]] += entry["counts"]
    return rows


def _compare_sides(result: Comparison, registry: PolicyRegistry, chunk: Chunk,
                   graphs: dict[str, pa.Table], con: duckdb.DuckDBPyConnection,
                   side_a: pa.Table, side_b: pa.Table, requests: pa.Table) -> pa.Table:
    """``_compare_chunk`` once both sides are replayed and registered in ``con``: the
    pairs, their groups and counts added to ``result``, the safety of the requests whose
    selection changed; the chunk's per-request rows."""
    pairs = aligned_pairs(side_a, side_b)
    aligned = pairs is not None
    if pairs is None:
        pairs = con.sql(_PAIRS_SQL).to_arrow_table()
    with registered(con, pairs=pairs, privacy=_privacy(graphs)):
        if aligned:
            per_request, per_change = aligned_per_request(pairs, requests)
        else:
            per_request = con.sql(_PER_REQUEST_SQL).to_arrow_table()
            per_change = con.sql("SELECT change, count(*) FROM pairs GROUP BY change").fetchall()
        for change, kind, reason, privacy, n in con.sql(_GROUPS_SQL).fetchall():
            result.groups[(change, kind, reason, privacy)] += n
        if aligned:  # the changed records are the same rows of both sides
            judged = pc.is_in(pairs["change"], pa.array(CHANGES))
            rows_a, rows_b = side_a.filter(judged), side_b.filter(judged)
        else:
            rows_a, rows_b = (con.sql(_SAFETY_ROWS_SQL.format(side=side)).to_arrow_table()
                              for side in ("side_a", "side_b"))
    for change, n in per_change:
        result.counts[change] += n
    selection = pc.add(pc.add(per_request["newly_included"], per_request["newly_omitted"]),
                       per_request["rerendered"])
    differs = per_request.filter(pc.greater(selection, 0))["assembly_id"].to_pylist()
    safety = _safety(result, registry, chunk, graphs, con, rows_a, rows_b, differs)
    rows = per_request.join(safety, "assembly_id", join_type="left outer",
                             use_threads=False).sort_by("ord")
    changed = pc.greater(pc.add(selection.cast(pa.int64()),
                                per_request["moved"].cast(pa.int64())), 0)
    # what each request sends whatever its records (a transcript's system prompt and
    # tools) is on both sides of it, as replay.service.outside_records counts it for a diff
    outside = int_tag_column(chunk.requests["tags"], UNATTRIBUTED_TOKENS).take(rows["ord"])
    limits = chunk.requests["context_limit"].cast(pa.int64()).take(rows["ord"])
    rows = pa.table({
        **{name: rows[name].cast(REQUEST_SCHEMA.field(name).type)
           for name in REQUEST_SCHEMA.names[:8]},
        "tokens_a": pc.add(rows["tokens_a"].cast(pa.int64()), outside),
        "tokens_b": pc.add(rows["tokens_b"].cast(pa.int64()), outside),
        "safety_regressions": pc.fill_null(rows["safety_regressions"], 0),
        "safety_fixes": pc.fill_null(rows["safety_fixes"], 0),
        "changed": changed,
        **{f"budget_{side}": _side_budgets(result, registry, chunk.requests, side, version)
           .take(rows["ord"]) for side, version in (("a", result.a), ("b", result.b))},
    }, schema=REQUEST_SCHEMA)
    if result.b != RECORDED:
        _tally_over_window(result, rows, limits)
    return rows


def _tally_over_window(result: Comparison, rows: pa.Table, limits: pa.Array) -> None:
    """Count the requests B sends past the model's context window (``limits``: each row's
    recorded context_limit; null: unknown, never marked), as replay.diff marks one."""
    over = pc.fill_null(pc.greater(rows["tokens_b"], limits), False)
    n = pc.sum(over.cast(pa.int64())).as_py() or 0
    if not n:
        return
    result.over_window += n
    if len(result.over_window_examples) < EXAMPLES:
        found = pa.table({"assembly_id": rows["assembly_id"], "tokens_b": rows["tokens_b"],
                          "context_limit": limits}).filter(over)
        result.over_window_examples += found.slice(
            0, EXAMPLES - len(result.over_window_examples)).to_pylist()


@dataclass
class _BudgetTally:
    """The effective budgets of one side's requests under one policy version: the
    policy's budget and reserve (None: a runtime policy, or ``known`` False: not in the
    registry), how many requests, how many the model's limit capped (the lowest budget
    that left) and how many recorded no limit."""

    known: bool
    policy_budget: int | None
    reserve_tokens: int | None
    requests: int = 0
    capped: int = 0
    no_limit: int = 0
    lowest: int | None = None
    limit_min: int | None = None  # the recorded model context limits (windows), lowest
    limit_max: int | None = None  # and highest

    def empty(self) -> "_BudgetTally":
        return _BudgetTally(self.known, self.policy_budget, self.reserve_tokens)

    def merge(self, later: "_BudgetTally") -> None:
        self.requests += later.requests
        self.capped += later.capped
        self.no_limit += later.no_limit
        if later.lowest is not None:
            self.lowest = later.lowest if self.lowest is None else min(self.lowest, later.lowest)
        if later.limit_min is not None:
            self.limit_min = (later.limit_min if self.limit_min is None
                              else min(self.limit_min, later.limit_min))
            self.limit_max = (later.limit_max if self.limit_max is None
                              else max(self.limit_max, later.limit_max))

    def to_json(self, version: str) -> dict[str, Any]:
        return {"policy_version": version, "known": self.known,
                "policy_budget": self.policy_budget, "reserve_tokens": self.reserve_tokens,
                "requests": self.requests, "capped": self.capped,
                "no_context_limit": self.no_limit, "lowest_budget": self.lowest,
                "context_limit_min": self.limit_min, "context_limit_max": self.limit_max}


def _side_budgets(result: Comparison, registry: PolicyRegistry, requests: pa.Table, side: str,
                  version: str) -> pa.Array:
    """Each request's effective token budget on one side (``version``, or each request's
    recorded one when ``RECORDED``), in ``requests``' order, tallied into ``result``: one
    numpy pass per policy version (``replay.policy.effective_budgets``)."""
    n = requests.num_rows
    limits = requests["context_limit"].cast(pa.int64())
    has_limit = np.asarray(limits.is_valid(), dtype=bool)
    limit = np.asarray(pc.fill_null(limits, 0), dtype=np.int64)
    recorded = requests["policy_version"] if version == RECORDED else None
    versions = (pc.unique(recorded).to_pylist() if recorded is not None else [version])
    out = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    for v in versions:
        rows = (np.asarray(pc.fill_null(pc.equal(recorded, v), False), dtype=bool)
                if recorded is not None else np.ones(n, dtype=bool))
        known = recorded is None or v in registry
        policy = registry.get(v) if known else None
        budgeted = policy is not None and not isinstance(policy, RuntimePolicy)
        tally = _BudgetTally(known, policy.budget.token_budget if budgeted else None,  # type: ignore[union-attr]
                             policy.budget.reserve_tokens if budgeted else None)  # type: ignore[union-attr]
        tally.requests = int(rows.sum())
        tally.no_limit = int((rows & ~has_limit).sum())
        if tally.no_limit < tally.requests:
            limits_here = limit[rows & has_limit]
            tally.limit_min, tally.limit_max = int(limits_here.min()), int(limits_here.max())
        if budgeted and tally.requests:
            budget, _available, capped = effective_budgets(
                tally.policy_budget, tally.reserve_tokens, limit[rows], has_limit[rows])
            out[rows], valid[rows] = budget, True
            tally.capped, tally.lowest = int(capped.sum()), int(budget.min())
        result.budgets[side].setdefault(v, tally.empty()).merge(tally)
    return pa.array(out, pa.int64(), mask=~valid)


def compare_partition(store: "Store", registry: PolicyRegistry, a: str, b: str,
                      parsed: "AssemblyFilter", out: Callable[[pa.Table], None],
                      top: int = TOP) -> tuple[Comparison, pa.Table | None]:
    """``compare`` over one partition (a store holding some conversations), as a partial
    ``Comparison`` for ``Comparison.merge``, and with side A the recording its
    ``in_recording_rows`` (for ``tally_in_recording`` once every partition is in)."""
    result = Comparison(a, b, parsed.text, partial=True)
    best: list[dict[str, Any]] = []

    def each(rows: pa.Table) -> None:
        nonlocal best
        best = _top(best, rows, top)
        out(rows)

    compare_chunks(store, registry, a, b, parsed, result, each)
    result.most_changed = best
    recorded = in_recording_rows(store, registry, parsed) if a == RECORDED else None
    return result, recorded
