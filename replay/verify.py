"""Verify: trust nothing stored about a recording.

Every recorded assembly (matching a filter) is replayed under its recorded policy version
and the replay is compared with the RECORDED ROWS record by record, paired by
(record_kind, record_id): decision, reason code, rendering, position and tokens. The
selection hash is recomputed from the recorded rows and compared with the stored one.

Verdicts, one per assembly:

- ``faithful``: the recording is consistent and the replay selects exactly what it recorded;
- ``drifted``: the replay differs (each differing record and field is named);
- ``inconsistent``: the recording contradicts itself (its stored ``selection_hash`` is not
  the hash of its own rows). It wins over the others: an inconsistent recording that also
  drifted, or has no policy to replay it, is reported inconsistent (with the differing
  records when it could be replayed);
- ``not_replayable``: no policy for its version (transcripts recorded under ``observed``
  never have one).

Work is streamed per chunk of conversations: one query for the chunk's snapshots and one
for its recorded rows; only the non-faithful assemblies keep any detail.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ingest.contract import selection_hash
from ingest.errors import ContextlensError

from .assembler import AssemblerPlugin, get_assembler
from .diff import SafetyDelta
from .policy import PolicyRegistry, load_registry
from .safety import SafetyContext
from .snapshot import load_snapshots, request_from_row

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
    "VerifyResult",
    "compare_records",
    "verify",
]

Progress = Callable[[int, int], None]
VERDICTS = ("faithful", "drifted", "inconsistent", "not_replayable")
# the fields of a record that a replay must reproduce
COMPARED_FIELDS = ("decision", "reason_code", "rendering", "position", "tokens")
# the policy version transcript adapters record: an observed runtime, no policy to replay
OBSERVED = "observed"
_CHUNK = 256  # conversations per chunk: one store query per graph table and one for the rows
_HASH_PROBLEM = "stored selection_hash is not the hash of the recorded rows"


@dataclass(frozen=True)
class FieldDifference:
    field: str
    recorded: Any
    replayed: Any

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "recorded": self.recorded, "replayed": self.replayed}


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

    @property
    def replayable(self) -> bool:
        return self.replay_hash is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "assembly_id": self.assembly_id, "verdict": self.verdict,
            "policy_version": self.policy_version, "assembler_version": self.assembler_version,
            "records": [r.to_json() for r in self.records],
            "recorded_hash": self.recorded_hash, "recomputed_hash": self.recomputed_hash,
            "replay_hash": self.replay_hash, "problems": list(self.problems),
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


def compare_records(recorded: list[dict[str, Any]],
                    replayed: list[dict[str, Any]]) -> tuple[RecordDifference, ...]:
    """The records whose recorded and replayed rows differ in a compared field, paired by
    (record_kind, record_id), in (kind, id) order."""
    a = {(r["record_kind"], r["record_id"]): r for r in recorded}
    b = {(r["record_kind"], r["record_id"]): r for r in replayed}
    out: list[RecordDifference] = []
    for key in sorted(a.keys() | b.keys()):
        ra, rb = a.get(key), b.get(key)
        if ra is None or rb is None:
            fields: tuple[FieldDifference, ...] = (FieldDifference(
                "record", ra["decision"] if ra else None, rb["decision"] if rb else None),)
        else:
            fields = tuple(FieldDifference(name, _value(ra, name), _value(rb, name))
                           for name in COMPARED_FIELDS if _value(ra, name) != _value(rb, name))
        if fields:
            out.append(RecordDifference(key[0], key[1], fields))
    return tuple(out)


def _value(row: dict[str, Any], name: str) -> Any:
    value = row.get(name)
    return int(value) if name in ("position", "tokens") and value is not None else value


def verify(store: "Store", registry: PolicyRegistry | None = None,
           assembler: str | AssemblerPlugin = "reference", progress: Progress | None = None,
           flt: "AssemblyFilter | str | None" = None) -> VerifyResult:
    """Verify every recorded assembly matching ``flt`` (see the module docstring)."""
    reg = registry if registry is not None else load_registry(None)
    plugin = get_assembler(assembler)
    work = store.assembly_requests(flt).to_pylist()
    total = len(work)
    result = VerifyResult()
    versions = Counter(r["policy_version"] for r in work
                       if r["policy_version"] != OBSERVED or OBSERVED in reg)
    try:
        reg.require(versions)
    except ContextlensError as err:
        result.missing_policies = str(err)
    report = progress or (lambda _done, _total: None)
    report(0, total)
    done = 0
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in work:
        groups.setdefault((row["export_id"], row["conversation_id"]), []).append(row)
    chunks: list[tuple[str, list[str]]] = []
    for export_id, conversation_id in groups:
        if not chunks or chunks[-1][0] != export_id or len(chunks[-1][1]) >= _CHUNK:
            chunks.append((export_id, []))
        chunks[-1][1].append(conversation_id)
    for export_id, conversation_ids in chunks:
        rows = [row for cid in conversation_ids for row in groups[(export_id, cid)]]
        recorded: dict[str, list[dict[str, Any]]] = {}
        table = store.recorded_records([r["assembly_id"] for r in rows], export_id)
        for rec in table.to_pylist():
            recorded.setdefault(rec["assembly_id"], []).append(rec)
        del table
        snapshots = load_snapshots(store, conversation_ids, export_id)
        for conversation_id in conversation_ids:
            snapshot = snapshots.pop(conversation_id)
            for row in groups.pop((export_id, conversation_id)):
                records = recorded.pop(row["assembly_id"], [])
                verdict = _verify_one(row, records, snapshot, reg, plugin)
                result.checked += 1
                if verdict is None:
                    result.faithful += 1
                else:
                    setattr(result, verdict.verdict, getattr(result, verdict.verdict) + 1)
                    result.results.append(verdict)
                done += 1
                report(done, total)
    result.results.sort(key=lambda v: v.assembly_id)
    return result


def _verify_one(row: dict[str, Any], records: list[dict[str, Any]], snapshot: Any,
                reg: PolicyRegistry, plugin: AssemblerPlugin) -> AssemblyVerdict | None:
    """None when faithful, else the verdict with its details."""
    version = row["policy_version"]
    recomputed = selection_hash(records)
    # payload_sha256 is not checked: the contract does not define what it hashes
    problems = (_HASH_PROBLEM,) if recomputed != row["selection_hash"] else ()
    differences: tuple[RecordDifference, ...] = ()
    replay_hash = None
    replayed: list[dict[str, Any]] = []
    request = request_from_row(row)
    if version in reg:
        out = plugin.assemble(snapshot, request, reg.get(version))
        replay_hash = out.selection_hash
        replayed = out.records
        differences = compare_records(records, out.records)
    if problems:
        verdict = "inconsistent"
    elif replay_hash is None:
        verdict = "not_replayable"
    elif differences:
        verdict = "drifted"
    else:
        return None
    # safety is judged only for what is reported (faithful ones add only to a count)
    context = SafetyContext(snapshot, request, reg)
    safety = SafetyDelta.between(context.findings(records),
                                 context.findings(replayed) if replay_hash else [],
                                 a_recorded=True)
    return AssemblyVerdict(
        assembly_id=row["assembly_id"], verdict=verdict, policy_version=version,
        assembler_version=row["assembler_version"], records=differences,
        recorded_hash=row["selection_hash"], recomputed_hash=recomputed,
        replay_hash=replay_hash, problems=problems, safety=safety,
    )
