"""Verify: trust nothing stored about a recording.

Every recorded assembly (matching a filter) is replayed under its recorded policy version
and the replay is compared with the RECORDED ROWS record by record, paired by
(record_kind, record_id): decision, reason code, rendering, position and tokens. The
selection hash is recomputed from the recorded rows and compared with the stored one.

Verdicts, one per assembly:

- ``faithful``: the recording is consistent and the replay selects exactly what it recorded;
- ``drifted``: the replay differs (each differing record and field is named);
- ``inconsistent``: the recording contradicts itself: its stored ``selection_hash`` is not
  the hash of its own rows, or a total it stores on ``context_assemblies`` is not what its
  rows add up to (``STORED_TOTALS``: ``assembled_tokens`` and the counts; each differing
  field is named, stored against its rows' value). It wins over the others: an
  inconsistent recording that also drifted, or has no policy to replay it, is reported
  inconsistent (with the differing records when it could be replayed);
- ``not_replayable``: no policy for its version (transcripts recorded under ``observed``
  never have one).

Work is streamed per chunk of conversations (``replay.engine.chunks``): the engine replays
the chunk (``replay_chunk``), its recorded rows are read in one query, their hashes are
recomputed at once (``ingest.contract.selection_hashes``), and recording and replay are
compared in DuckDB (a full outer join on assembly, kind and id over ``COMPARED_FIELDS``), so
Python touches only the records that differ. Every request adds to a count; only the
non-faithful ones get details (their records, their safety), and a caller can take each as
it is found (``on_verdict``) instead of keeping them all.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ingest.contract import selection_hash, selection_hashes
from ingest.errors import ContextlensError
from ingest.sql import registered, scratch_connection
from ingest.tags import UNATTRIBUTED_TOKENS, int_tag_column, unattributed_tokens

from .assembler import AssemblerPlugin, get_assembler
from .columnar import selection_hashes as replay_selection_hashes
from .diff import SafetyDelta
from .engine import (
    CONVERSATIONS_PER_CHUNK, Chunk, chunks, in_processes, replay_chunk, worker_count,
)
from .policy import PolicyRegistry, load_registry
from .safety import SafetyContext
from .snapshot import request_from_row, snapshots_from_graphs

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter
    from ingest.store import Store

__all__ = [
    "COMPARED_FIELDS",
    "OBSERVED",
    "VERDICTS",
    "AssemblyVerdict",
    "FieldDifference",
    "RecordDifference",
    "STORED_TOTALS",
    "TotalDifference",
    "VerifyResult",
    "finish_verify",
    "merge_verify",
    "stored_totals",
    "verify",
    "verify_chunks",
]

Progress = Callable[[int, int], None]
VERDICTS = ("faithful", "drifted", "inconsistent", "not_replayable")
# the fields of a record that a replay must reproduce
COMPARED_FIELDS = ("decision", "reason_code", "rendering", "position", "tokens")
# the policy version transcript adapters record: an observed runtime, no policy to replay
OBSERVED = "observed"
_HASH_PROBLEM = "stored selection_hash is not the hash of the recorded rows"

# The totals a request stores on context_assemblies, as its recorded rows give them (SQL
# aggregates over one assembly's assembly_records rows; ``stored_totals`` is the same rule
# for a producer's rows in Python). ``assembled_tokens`` also counts the request's
# ``unattributed_tokens`` tag (ingest/tags.py): what a transcript's request sent beyond its
# records (system prompt, tool schemas). A raw artifact is one sent as itself (verbatim or
# rehydrated), not as a reference or a runtime's placeholder. The baseline totals are not
# here: they count records of the conversation the request's rows do not list.
_INCLUDED = "decision = 'included'"
STORED_TOTALS: dict[str, str] = {
    "assembled_tokens": f"sum(tokens) FILTER (WHERE {_INCLUDED})",
    "assembled_message_count": f"count(*) FILTER (WHERE {_INCLUDED} AND record_kind = 'message')",
    "raw_artifact_count": (f"count(*) FILTER (WHERE {_INCLUDED} AND record_kind = 'tool_artifact' "
                           "AND rendering IN ('verbatim', 'rehydrated_raw'))"),
    "selected_memory_count": f"count(*) FILTER (WHERE {_INCLUDED} AND record_kind = 'tool_memory')",
    "rehydrated_artifact_count": f"count(*) FILTER (WHERE {_INCLUDED} AND rendering = 'rehydrated_raw')",
}


def stored_totals(records: list[dict[str, Any]], tags: list[str] | None = None) -> dict[str, int]:
    """``STORED_TOTALS`` of one assembly's rows (contract keys), for a producer writing them."""
    inc = [r for r in records if r["decision"] == "included"]

    def count(kind: str | None, renderings: tuple[str, ...] | None = None) -> int:
        return sum(1 for r in inc if (kind is None or r["record_kind"] == kind)
                   and (renderings is None or r["rendering"] in renderings))

    return {
        "assembled_tokens": sum(int(r["tokens"]) for r in inc) + (unattributed_tokens(tags) or 0),
        "assembled_message_count": count("message"),
        "raw_artifact_count": count("tool_artifact", ("verbatim", "rehydrated_raw")),
        "selected_memory_count": count("tool_memory"),
        "rehydrated_artifact_count": count(None, ("rehydrated_raw",)),
    }


# Each stored total of each request that its rows do not give: (assembly_id, field, stored,
# expected, unattributed), in (assembly, STORED_TOTALS) order.
_TOTALS_SQL = f"""
WITH r AS (SELECT assembly_id, {", ".join(f"{expr} AS {name}" for name, expr in STORED_TOTALS.items())}
           FROM recorded GROUP BY assembly_id),
pairs AS (
{" UNION ALL ".join(
    f"SELECT q.assembly_id, {i} AS n, '{name}' AS field, q.{name}::BIGINT AS stored, "
    f"(coalesce(r.{name}, 0){' + q.unattributed' if name == 'assembled_tokens' else ''})::BIGINT AS expected, "
    f"{'q.unattributed' if name == 'assembled_tokens' else '0'}::BIGINT AS unattributed "
    "FROM totals_stored q LEFT JOIN r ON r.assembly_id = q.assembly_id"
    for i, name in enumerate(STORED_TOTALS))})
SELECT assembly_id, field, stored, expected, unattributed FROM pairs
WHERE stored IS DISTINCT FROM expected
ORDER BY assembly_id, n
"""


@dataclass(frozen=True)
class FieldDifference:
    field: str
    recorded: Any
    replayed: Any

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "recorded": self.recorded, "replayed": self.replayed}


@dataclass(frozen=True)
class TotalDifference:
    """A total stored on the request that its own rows do not give."""

    field: str
    stored: int
    expected: int  # what the recorded rows give (with the unattributed tokens)
    unattributed: int = 0  # of ``expected``: the request's unattributed_tokens tag

    def sentence(self) -> str:
        extra = (f" ({self.expected - self.unattributed:,} in its records and "
                 f"{self.unattributed:,} unattributed)" if self.unattributed else "")
        return f"stored {self.field} {self.stored:,} is not its rows' {self.expected:,}{extra}"

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "stored": self.stored, "expected": self.expected,
                **({"unattributed": self.unattributed} if self.unattributed else {})}


@dataclass(frozen=True)
class RecordDifference:
    """One record whose recorded row and replayed row differ. A record on one side only has
    a single difference, field ``record``: its decision on that side, None on the other."""

    record_kind: str
    record_id: str
    fields: tuple[FieldDifference, ...]

    def to_json(self) -> dict[str, Any]:
        return {"record_id": self.record_id, "record_kind": self.record_kind,
                "fields": [f.to_json() for f in self.fields]}


@dataclass(frozen=True)
class AssemblyVerdict:
    """A non-faithful assembly and why."""

    assembly_id: str
    verdict: str
    policy_version: str
    assembler_version: str
    records: tuple[RecordDifference, ...]
    recorded_hash: str  # as stored on the request
    recomputed_hash: str  # from the recorded rows
    replay_hash: str | None  # None when not replayed
    problems: tuple[str, ...] = ()  # how the recording contradicts itself
    # the one safety function on both sides: what the replay would newly expose
    # (regressions), what it would withhold (fixes), and what the recording sent (in_recording)
    safety: SafetyDelta = field(default_factory=SafetyDelta)
    # stored totals its rows do not give (each also a line of ``problems``)
    totals: tuple[TotalDifference, ...] = ()

    @property
    def hash_mismatch(self) -> bool:
        return self.recorded_hash != self.recomputed_hash

    @property
    def replayable(self) -> bool:
        return self.replay_hash is not None

    @property
    def position_only(self) -> int:
        """How many of the differing records only sit elsewhere in the prompt (a record let
        in or left out moves the ones after it; a diff counts them as unchanged)."""
        return sum(1 for r in self.records if {f.field for f in r.fields} == {"position"})

    def differences(self) -> str:
        """``2 records differ, 4 more only shifted in position``: the 2 are what the diff
        it opens lists as changed, the 4 it counts as unchanged."""
        moved = self.position_only
        n = len(self.records) - moved

        def records(k: int) -> str:
            return f"{k} record{'s' if k != 1 else ''}"

        if not moved:
            return f"{records(n)} differ{'s' if n == 1 else ''}"
        if not n:
            return f"{records(moved)} only shifted in position"
        return f"{records(n)} differ{'s' if n == 1 else ''}, {moved} more only shifted in position"

    @property
    def runtime_only(self) -> bool:
        """Recorded by a runtime whose policy is not modelled (policy ``observed``), and
        nothing else to say: consistent, and nothing unsafe in what it sent."""
        return (self.verdict == "not_replayable" and self.policy_version == OBSERVED
                and not self.problems and not self.safety.in_recording)

    def to_json(self) -> dict[str, Any]:
        return {
            "assembly_id": self.assembly_id, "verdict": self.verdict,
            "policy_version": self.policy_version, "assembler_version": self.assembler_version,
            "records": [r.to_json() for r in self.records],
            "recorded_hash": self.recorded_hash, "recomputed_hash": self.recomputed_hash,
            "replay_hash": self.replay_hash, "problems": list(self.problems),
            "totals": [t.to_json() for t in self.totals],
            "safety": self.safety.to_json(),
        }


@dataclass
class VerifyResult:
    checked: int = 0
    faithful: int = 0
    drifted: int = 0
    inconsistent: int = 0
    not_replayable: int = 0
    # every non-faithful assembly, by assembly id
    results: list[AssemblyVerdict] = field(default_factory=list)
    # one line naming the policy versions recorded but missing from the registry
    # ("observed" is not one), or None
    missing_policies: str | None = None

    @property
    def ok(self) -> bool:
        """Nothing drifted and nothing is inconsistent."""
        return not self.drifted and not self.inconsistent

    def failed(self, strict: bool = False) -> bool:
        """Whether verify fails: drifted or inconsistent, or (``strict``) not replayable."""
        return not self.ok or (strict and self.not_replayable > 0)

    def of(self, verdict: str) -> list[AssemblyVerdict]:
        return [r for r in self.results if r.verdict == verdict]

    def to_json(self) -> dict[str, Any]:
        return {
            "checked": self.checked, "faithful": self.faithful, "drifted": self.drifted,
            "inconsistent": self.inconsistent, "not_replayable": self.not_replayable,
            "missing_policies": self.missing_policies,
            "results": [r.to_json() for r in self.results],
        }


def verify(store: "Store", registry: PolicyRegistry | None = None,
           assembler: str | AssemblerPlugin = "reference", progress: Progress | None = None,
           flt: "AssemblyFilter | str | None" = None,
           on_verdict: Callable[[AssemblyVerdict], None] | None = None,
           conversations_per_chunk: int = CONVERSATIONS_PER_CHUNK,
           workers: int | None = 1) -> VerifyResult:
    """Verify every recorded assembly matching ``flt`` (see the module docstring).

    Without ``on_verdict`` the result lists every non-faithful assembly, by assembly id. With
    it, each non-faithful verdict is handed to ``on_verdict`` as its chunk is verified (in the
    store's (export, conversation, time, id) order) and the result holds only the counts, so
    memory stays that of one chunk however large the store.
    """
    reg = registry if registry is not None else load_registry(None)
    plugin = get_assembler(assembler)
    result = VerifyResult()
    kept = result.results
    emit = on_verdict if on_verdict is not None else kept.append
    total = store.count_assemblies(flt)
    report = progress or (lambda _done, _total: None)
    report(0, total)
    versions: Counter[str] = Counter()
    done = 0

    def each(n: int) -> None:
        nonlocal done
        for i in range(done + 1, done + n + 1):
            report(i, total)
        done += n

    verify_chunks(store, reg, plugin, flt, result, emit, versions, each,
                  conversations_per_chunk, worker_count(workers, total))
    finish_verify(result, reg, versions)
    return result


def verify_chunks(store: "Store", reg: PolicyRegistry, plugin: AssemblerPlugin,
                  flt: "AssemblyFilter | str | None", result: VerifyResult,
                  emit: Callable[[AssemblyVerdict], None], versions: Counter,
                  each: Callable[[int], None] | None = None,
                  conversations_per_chunk: int = CONVERSATIONS_PER_CHUNK,
                  workers: int = 1) -> None:
    """The per-partition function of verify: every chunk of the requests of ``store``
    matching ``flt`` verified, counted in ``result``, its non-faithful verdicts handed to
    ``emit`` in walk order, its requests' recorded versions counted in ``versions``, and
    ``each(requests)`` called after each chunk. The local engine runs it over the whole
    store (``workers`` > 1: in that many processes, ``engine.in_processes``, the same
    result); ``replay.distributed`` over each partition's own store."""
    if workers > 1:
        walk = functools.partial(chunks, flt=flt, conversations_per_chunk=conversations_per_chunk)
        for part, verdicts, seen, n in in_processes(store, walk, _worker_chunk, workers,
                                                    start=_worker_start, start_args=(reg, plugin)):
            merge_verify(result, part)
            versions.update(seen)
            for verdict in verdicts:
                emit(verdict)
            if each is not None:
                each(n)
        return
    # the chunks are read on a cursor of their own: the store's connection runs each
    # chunk's queries meanwhile
    walker = store.cursor()
    try:
        for chunk in chunks(walker, flt, conversations_per_chunk):
            versions.update(_versions(chunk))
            for verdict in _verify_chunk(store, chunk, reg, plugin, result):
                emit(verdict)
            if each is not None:
                each(chunk.requests.num_rows)
    finally:
        walker.close()


def _versions(chunk: Chunk) -> Counter:
    """How many requests of ``chunk`` each recorded version has."""
    counts = pc.value_counts(chunk.requests.column("policy_version")).to_pylist()
    return Counter({c["values"]: c["counts"] for c in counts})


# the registry and assembler of each worker process of a parallel verify
_JOB: dict[str, Any] = {}


def _worker_start(reg: PolicyRegistry, plugin: AssemblerPlugin) -> None:
    _JOB.update(reg=reg, plugin=plugin)


def _worker_chunk(store: "Store", chunk: Chunk) -> tuple[VerifyResult, list[AssemblyVerdict],
                                                          Counter, int]:
    """One chunk verified in a worker: its counts, its non-faithful verdicts in walk order,
    its requests' versions and its size."""
    part = VerifyResult()
    verdicts = list(_verify_chunk(store, chunk, _JOB["reg"], _JOB["plugin"], part))
    return part, verdicts, _versions(chunk), chunk.requests.num_rows


def merge_verify(result: VerifyResult, later: VerifyResult) -> None:
    """Add the counts of a partition verified after ``result``'s requests (its verdicts are
    the caller's: kept or handed on as they come)."""
    for name in ("checked", *VERDICTS):
        setattr(result, name, getattr(result, name) + getattr(later, name))


def finish_verify(result: VerifyResult, reg: PolicyRegistry, versions: Counter) -> None:
    """Once every request is verified: the missing policies line, and the kept verdicts in
    assembly id order."""
    if OBSERVED not in reg:
        versions.pop(OBSERVED, None)
    try:
        reg.require(versions)
    except ContextlensError as err:
        result.missing_policies = str(err)
    result.results.sort(key=lambda v: v.assembly_id)


_REQUEST_COLUMNS = ("assembly_id", "conversation_id", "assembled_at", "policy_version",
                    "assembler_version", "selection_hash")
_EMPTY_HASH = selection_hash([])
_SAFETY_COLUMNS = ("record_kind", "record_id", "decision", "rendering")
_DETAIL_BATCH = 256  # non-faithful assemblies whose details are built at once
_RECORD_KEY = ("assembly_id", "record_kind", "record_id")

# Every record that differs between the recording and the replay, for the assemblies that
# were replayed: on one side only, or with a compared field distinct.
_DIFFERENCES_SQL = f"""
SELECT coalesce(a.assembly_id, b.assembly_id) AS assembly_id,
       coalesce(a.record_kind, b.record_kind) AS record_kind,
       coalesce(a.record_id, b.record_id) AS record_id,
       a.record_id IS NOT NULL AS recorded, b.record_id IS NOT NULL AS replayed,
       {", ".join(f"a.{f} AS a_{f}, b.{f} AS b_{f}" for f in COMPARED_FIELDS)}
FROM (SELECT {", ".join(f"{c}::VARCHAR AS {c}" for c in _RECORD_KEY)},
             decision::VARCHAR AS decision, reason_code::VARCHAR AS reason_code,
             rendering::VARCHAR AS rendering, position::BIGINT AS position,
             tokens::BIGINT AS tokens
      FROM recorded WHERE assembly_id IN (SELECT assembly_id FROM replayed_assemblies)) a
FULL OUTER JOIN (SELECT {", ".join(f"{c}::VARCHAR AS {c}" for c in _RECORD_KEY)},
                        decision::VARCHAR AS decision, reason_code::VARCHAR AS reason_code,
                        rendering::VARCHAR AS rendering, position::BIGINT AS position,
                        tokens::BIGINT AS tokens
                 FROM replayed) b
  ON a.assembly_id = b.assembly_id AND a.record_kind = b.record_kind AND a.record_id = b.record_id
WHERE a.record_id IS NULL OR b.record_id IS NULL
   OR {" OR ".join(f"a.{f} IS DISTINCT FROM b.{f}" for f in COMPARED_FIELDS)}
ORDER BY 1, 2, 3
"""

# One row per request of the chunk that is not faithful, with its verdict, in store order
# (inconsistent wins over the others, see the module docstring).
_VERDICTS_SQL = """
WITH v AS (
    SELECT q.assembly_id, q.conversation_id, q.assembled_at, q.policy_version,
           q.assembler_version, q.selection_hash AS recorded_hash,
           coalesce(h.selection_hash, $empty) AS recomputed_hash,
           r.assembly_id IS NOT NULL AS replayed,
           coalesce(d.n, 0) AS differing,
           t.assembly_id IS NOT NULL AS totals_differ
    FROM requests q
    LEFT JOIN hashes h ON h.assembly_id = q.assembly_id
    LEFT JOIN replayed_assemblies r ON r.assembly_id = q.assembly_id
    LEFT JOIN (SELECT assembly_id, count(*) AS n FROM differences GROUP BY assembly_id) d
           ON d.assembly_id = q.assembly_id
    LEFT JOIN (SELECT DISTINCT assembly_id FROM total_differences) t
           ON t.assembly_id = q.assembly_id
)
SELECT *, CASE WHEN recomputed_hash IS DISTINCT FROM recorded_hash OR totals_differ
               THEN 'inconsistent'
               WHEN NOT replayed THEN 'not_replayable'
               WHEN differing > 0 THEN 'drifted'
               ELSE 'faithful' END AS verdict
FROM v
"""


def _verify_chunk(store: "Store", chunk: Chunk, reg: PolicyRegistry, plugin: AssemblerPlugin,
                  result: VerifyResult) -> Iterator[AssemblyVerdict]:
    """Count every request of ``chunk`` in ``result``, then yield the non-faithful ones with
    their details.

    The chunk is replayed by the engine; its recorded rows are read in one query, their
    hashes recomputed at once, and recording and replay are compared in DuckDB, so Python
    only touches the records of assemblies that are not faithful, ``_DETAIL_BATCH``
    assemblies at a time."""
    # the chunk's graph as Arrow, for the engine; Python snapshots only of the conversations
    # of the requests reported below (faithful ones need none)
    graphs = store.conversation_graphs(list(chunk.conversation_ids), chunk.export_id)
    # drift is found record by record, so the replay's selection hashes are not needed to
    # judge; they are worked out below only for the requests reported (a fifth of verify's
    # time went to hashing every replayed assembly)
    replay = replay_chunk(store, chunk, reg, assembler=plugin, graphs=graphs, hashes=False)
    requests = chunk.requests.select(list(_REQUEST_COLUMNS))
    ids = requests.column("assembly_id").to_pylist()
    recorded = store.recorded_records(ids, chunk.export_id)
    con = scratch_connection()
    stored = chunk.requests.select(["assembly_id", *STORED_TOTALS]).append_column(
        "unattributed", int_tag_column(chunk.requests.column("tags"), UNATTRIBUTED_TOKENS))
    tables = {"requests": requests, "recorded": recorded, "replayed": replay.records,
              "replayed_assemblies": replay.assemblies.select(["assembly_id"]),
              "hashes": selection_hashes(recorded), "totals_stored": stored}
    with registered(con, **tables):
        differences = con.sql(_DIFFERENCES_SQL).to_arrow_table()
        total_differences = con.sql(_TOTALS_SQL).to_arrow_table()
        with registered(con, differences=differences, total_differences=total_differences):
            verdicts = con.sql(_VERDICTS_SQL, params={"empty": _EMPTY_HASH}).to_arrow_table()
    for c in pc.value_counts(verdicts.column("verdict")).to_pylist():
        setattr(result, c["values"], getattr(result, c["values"]) + c["counts"])
    result.checked += verdicts.num_rows
    reported = verdicts.filter(pc.not_equal(verdicts.column("verdict"), "faithful")).sort_by(
        [("conversation_id", "ascending"), ("assembled_at", "ascending"),
         ("assembly_id", "ascending")])
    # safety looks at the records in the prompt only
    included = {name: t.filter(pc.equal(t.column("decision"), "included"))
                for name, t in (("recorded", recorded), ("replayed", replay.records))}
    snapshots = (snapshots_from_graphs(graphs, pc.unique(reported.column("conversation_id"))
                                       .to_pylist()) if reported.num_rows else {})
    del graphs
    for start in range(0, reported.num_rows, _DETAIL_BATCH):
        batch = reported.slice(start, _DETAIL_BATCH)
        wanted = batch.column("assembly_id").combine_chunks()
        hashes = _replay_hashes(replay, batch.filter(batch.column("replayed")))
        yield from _details(batch.to_pylist(), hashes, snapshots, reg,
                            _by_assembly(chunk.requests, wanted),
                            _by_assembly(differences, wanted),
                            _by_assembly(total_differences, wanted),
                            _by_assembly(included["recorded"], wanted, _SAFETY_COLUMNS),
                            _by_assembly(included["replayed"], wanted, _SAFETY_COLUMNS))


def _by_assembly(table: pa.Table, ids: pa.Array,
                 columns: tuple[str, ...] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The rows of ``table`` (only ``columns``, or all) whose assembly_id is one of ``ids``,
    grouped by assembly."""
    rows = table.filter(pc.is_in(table.column("assembly_id"), value_set=ids))
    if columns is not None:
        rows = rows.select(["assembly_id", *columns])
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows.to_pylist():
        out.setdefault(row["assembly_id"], []).append(row)
    return out


def _replay_hashes(replay: Any, reported: pa.Table) -> dict[str, str]:
    """The replay's selection hash of each ``reported`` (replayed) request: the engine's
    where it gave one (another assembler's), else the contract's over the replayed rows."""
    ids = reported.column("assembly_id").to_pylist()
    if not ids:
        return {}
    given = replay.assemblies.filter(pc.is_in(replay.assemblies.column("assembly_id"),
                                              value_set=pa.array(ids, pa.string())))
    hashes = {a: h for a, h in zip(given.column("assembly_id").to_pylist(),
                                   given.column("selection_hash").to_pylist()) if h is not None}
    missing = [a for a in ids if a not in hashes]
    if missing:
        rows = replay.records.filter(pc.is_in(replay.records.column("assembly_id"),
                                              value_set=pa.array(missing, pa.string())))
        hashes.update(replay_selection_hashes(rows, missing))
    return hashes


def _details(reported: list[dict[str, Any]], hashes: dict[str, str],
             snapshots: dict[str, Any], reg: PolicyRegistry,
             requests: dict[str, list[dict[str, Any]]],
             differences: dict[str, list[dict[str, Any]]],
             totals: dict[str, list[dict[str, Any]]],
             recorded: dict[str, list[dict[str, Any]]],
             replayed: dict[str, list[dict[str, Any]]]) -> Iterator[AssemblyVerdict]:
    for v in reported:
        aid = v["assembly_id"]
        request = request_from_row(requests[aid][0])
        replayable = bool(v["replayed"])
        replay_hash = hashes[aid] if replayable else None
        # safety is judged only for what is reported (faithful ones add only to a count)
        context = SafetyContext(snapshots[v["conversation_id"]], request, reg)
        safety = SafetyDelta.between(
            context.findings(recorded.get(aid, [])),
            context.findings(replayed.get(aid, [])) if replayable else [], a_recorded=True)
        off = tuple(TotalDifference(t["field"], int(t["stored"]) if t["stored"] is not None else 0,
                                    int(t["expected"]), int(t["unattributed"]))
                    for t in totals.get(aid, []))
        problems = ((_HASH_PROBLEM,) if v["recomputed_hash"] != v["recorded_hash"] else ()) \
            + tuple(t.sentence() for t in off)
        yield AssemblyVerdict(
            assembly_id=aid, verdict=v["verdict"], policy_version=v["policy_version"],
            assembler_version=v["assembler_version"],
            records=tuple(_difference(d) for d in differences.get(aid, [])),
            recorded_hash=v["recorded_hash"], recomputed_hash=v["recomputed_hash"],
            replay_hash=replay_hash, problems=problems, safety=safety, totals=off,
        )


def _difference(row: dict[str, Any]) -> RecordDifference:
    """A row of ``_DIFFERENCES_SQL`` as the record's differing fields."""
    if not (row["recorded"] and row["replayed"]):
        fields: tuple[FieldDifference, ...] = (
            FieldDifference("record", row["a_decision"], row["b_decision"]),)
    else:
        fields = tuple(FieldDifference(f, row[f"a_{f}"], row[f"b_{f}"]) for f in COMPARED_FIELDS
                       if row[f"a_{f}"] != row[f"b_{f}"])
    return RecordDifference(row["record_kind"], row["record_id"], fields)


