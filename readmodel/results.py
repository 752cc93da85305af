"""The answers of the read model: frozen, already masked unless revealed.

The CLI prints them (text or JSON) and the screens display them; neither computes privacy,
masking, token accounting or a why-sentence of its own. Tables are Arrow (one page, one
assembly's records: bounded); rows are read-only mappings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

import pyarrow as pa

from replay.diff import budgets_json

if TYPE_CHECKING:  # pragma: no cover
    # annotations only: importing replay.policy imports pydantic, which a request list
    # does not need
    from replay.policy import EffectiveBudget

__all__ = [
    "AssemblyView",
    "BisectResult",
    "CompareResult",
    "ConversationView",
    "DiffView",
    "SafetyView",
    "PolicyInfo",
    "PromptPartView",
    "PromptView",
    "ProvenanceLink",
    "RecordWhy",
    "RequestPage",
    "ReplayView",
    "TokenAccounting",
    "TokenReportRow",
    "frozen_row",
]


def frozen_row(row: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A read-only copy of one row."""
    return MappingProxyType(dict(row or {}))


@dataclass(frozen=True)
class RequestPage:
    """One page of the request list.

    ``rows`` has the store's list columns (``ingest.store.LIST_COLUMNS``), text masked (ids
    too, where one looks like a secret); ``keys`` holds each row's real assembly_id and
    conversation_id, to open it; ``matched`` requests match the filter, ``total`` are in the
    store."""

    rows: pa.Table
    keys: pa.Table
    matched: int
    total: int
    offset: int


@dataclass(frozen=True)
class TokenAccounting:
    """Where a request's tokens went.

    ``assembled_tokens`` is what the request sent (recorded by the runtime when
    ``recorded``); ``included_estimate`` is the sum of the included records' tokens;
    ``unattributed`` is what the records do not explain (system prompt, tool schemas,
    estimator error), only for recorded counts, split (transcripts) into ``fixed_overhead``
    (the fewest tokens any request of its chain left unexplained: system prompt, tool schemas)
    and ``estimator_residual`` (the rest); ``calibration`` says how the estimates were made
    (``ingest/adapters/calibration.py``); ``by_kind`` and ``omitted_tokens`` give the
    shape of the prompt."""

    recorded: bool
    assembled_tokens: int
    token_budget: int
    baseline_tokens: int
    included_estimate: int
    omitted_tokens: int
    unattributed: int | None
    by_kind: Mapping[str, int] = field(default_factory=dict)
    fixed_overhead: int | None = None
    estimator_residual: int | None = None
    calibration: str | None = None

    def unattributed_sentence(self) -> str:
        """What the records explain of a recorded count and what they do not, as words."""
        told = f"the included records explain {self.included_estimate:,}"
        if self.calibration:
            told += f" (estimates {self.calibration})"
        if self.fixed_overhead is None or self.estimator_residual is None:
            return (f"{told}; unattributed {self.unattributed:,} "
                    "(system prompt, tool schemas, estimator error)")
        return (f"{told}; unattributed {self.unattributed:,}: fixed overhead "
                f"{self.fixed_overhead:,} (system prompt, tool schemas: sent with every request) "
                f"and estimator residual {self.estimator_residual:,}")

    def to_json(self) -> dict[str, Any]:
        return {
            "recorded": self.recorded,
            "assembled_tokens": self.assembled_tokens,
            "token_budget": self.token_budget,
            "baseline_tokens": self.baseline_tokens,
            "included_estimate": self.included_estimate,
            "omitted_tokens": self.omitted_tokens,
            "unattributed_tokens": self.unattributed,
            "fixed_overhead_tokens": self.fixed_overhead,
            "estimator_residual_tokens": self.estimator_residual,
            "calibration": self.calibration,
            "by_kind": dict(self.by_kind),
        }


@dataclass(frozen=True)
class AssemblyView:
    """One recorded request: its row, its records, its decision trace.

    ``records`` holds every record: included first in prompt order, then omitted by
    reason, kind and id; columns record_kind, record_id, decision, rendering, position,
    policy_family, reason_code, detail, tokens, label, created_at, privacy_class (labels
    and details masked). ``trace`` holds the policy decisions by step. ``budget`` is the
    effective token budget of the request under its recorded policy version
    (``replay.policy.effective_budget``), None when the registry lacks that version."""

    request: Mapping[str, Any]
    records: pa.Table
    trace: pa.Table
    tokens: TokenAccounting
    masked: int
    budget: EffectiveBudget | None = None

    @property
    def assembly_id(self) -> str:
        return str(self.request["assembly_id"])

    def included(self) -> pa.Table:
        import pyarrow.compute as pc

        return self.records.filter(pc.equal(self.records["decision"], "included"))

    def omitted(self) -> pa.Table:
        import pyarrow.compute as pc

        return self.records.filter(pc.equal(self.records["decision"], "omitted"))

    def decision_of(self, kind: str, record_id: str) -> Mapping[str, Any] | None:
        """The record's row in this assembly, None when it was not a candidate."""
        import pyarrow.compute as pc

        hit = self.records.filter(
            pc.and_(pc.equal(self.records["record_kind"], kind),
                    pc.equal(self.records["record_id"], record_id))
        )
        return frozen_row(hit.slice(0, 1).to_pylist()[0]) if hit.num_rows else None


@dataclass(frozen=True)
class ProvenanceLink:
    """One step of a record's provenance chain (depth 0 is the record itself)."""

    kind: str
    id: str
    label: str  # masked
    broken: bool
    depth: int
    via: str | None
    privacy_class: str | None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "label": self.label, "broken": self.broken,
                "depth": self.depth, "via": self.via, "privacy_class": self.privacy_class}


@dataclass(frozen=True)
class RecordWhy:
    """Why one record was in or out of one side (the recording, or a replay)."""

    assembly_id: str
    side: str  # "recorded <v>" or "replay <v>"
    policy_version: str
    record_kind: str
    record_id: str
    exists: bool  # the record's own row is in the store
    decision: Mapping[str, Any] | None  # its row on this side; None: not a candidate
    sentence: str  # masked
    policy_key: str | None
    trace: tuple[Mapping[str, Any], ...]  # details masked
    provenance: tuple[ProvenanceLink, ...]
    content: str  # masked, whole: the caller cuts
    privacy_class: str | None
    # the request's effective token budget under this side's policy version
    # (replay.policy.effective_budget); None: no such version in the registry
    budget: EffectiveBudget | None = None

    def to_json(self) -> dict[str, Any]:
        d = dict(self.decision or {})
        return {
            "assembly_id": self.assembly_id,
            "side": self.side,
            "record_kind": self.record_kind,
            "record_id": self.record_id,
            "decision": d.get("decision"),
            "rendering": d.get("rendering"),
            "reason_code": d.get("reason_code"),
            "policy_family": d.get("policy_family"),
            "detail": d.get("detail"),
            "tokens": d.get("tokens"),
            "explanation": self.sentence,
            "policy_key": self.policy_key,
            "budget": self.budget.to_json() if self.budget is not None else None,
            "privacy_class": self.privacy_class,
            "content": self.content,
            "decisions": [dict(t) for t in self.trace],
            "provenance": [p.to_json() for p in self.provenance],
        }


@dataclass(frozen=True)
class PromptPartView:
    record_kind: str
    record_id: str
    position: int
    rendering: str
    tokens: int
    header: str  # masked
    body: str  # masked
    masked: bool


@dataclass(frozen=True)
class PromptView:
    assembly_id: str
    parts: tuple[PromptPartView, ...]

    @property
    def masked(self) -> int:
        return sum(1 for p in self.parts if p.masked)


@dataclass(frozen=True)
class ReplayView:
    """A request re-assembled under a policy version (no model call)."""

    assembly_id: str
    policy_version: str
    assembler: str
    selection_hash: str
    assembled_tokens: int
    baseline_tokens: int
    included: tuple[Mapping[str, Any], ...]  # prompt order; details masked
    omitted: tuple[Mapping[str, Any], ...]
    budget: EffectiveBudget | None = None  # the token budget the replay was assembled under


@dataclass(frozen=True)
class SafetyView:
    """A diff's safety findings (``replay/safety.py``): regressions (B has, A has not), fixes
    (A has, B has not) and findings in a recorded side. Each entry: record_id, record_kind,
    finding. ``len()`` is the number of regressions."""

    regressions: tuple[Mapping[str, Any], ...] = ()
    fixes: tuple[Mapping[str, Any], ...] = ()
    in_recording: tuple[Mapping[str, Any], ...] = ()

    def __len__(self) -> int:
        return len(self.regressions)

    @property
    def empty(self) -> bool:
        return not (self.regressions or self.fixes or self.in_recording)

    def to_json(self) -> dict[str, Any]:
        return {"regressions": [dict(s) for s in self.regressions],
                "fixes": [dict(s) for s in self.fixes],
                "in_recording": [dict(s) for s in self.in_recording]}


@dataclass(frozen=True)
class DiffView:
    """Side A against side B of one request, safety findings first."""

    assembly_id: str
    a_label: str
    b_label: str
    a_spec: str  # "recorded" or a version
    b_spec: str
    summary: Mapping[str, Any]
    changes: tuple[Mapping[str, Any], ...]  # safety first, then by change class
    safety: SafetyView
    labels: Mapping[tuple[str, str], str]  # (kind, id) -> masked one-line label
    # each side's effective token budget; None: unknown (a recording under a version the
    # registry lacks)
    budget_a: EffectiveBudget | None = None
    budget_b: EffectiveBudget | None = None

    @property
    def changed(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(c for c in self.changes if c["change"] != "unchanged")

    def to_json(self) -> dict[str, Any]:
        return {
            "a_label": self.a_label,
            "b_label": self.b_label,
            "summary": dict(self.summary),
            "changes": [dict(c) for c in self.changes],
            "safety": self.safety.to_json(),
            "budget": budgets_json(self.budget_a, self.budget_b),
        }


@dataclass(frozen=True)
class PolicyInfo:
    version: str
    extends: str | None
    description: str
    # key, parent, value; for a runtime family: key, default (None: as recorded), meaning
    changes: tuple[Mapping[str, Any], ...]
    runtime: bool = False  # a runtime policy family (transcripts), not a registry version

    def to_json(self) -> dict[str, Any]:
        out = {"version": self.version, "extends": self.extends,
               "description": self.description, "changes": [dict(c) for c in self.changes]}
        if self.runtime:
            out["runtime"] = True
        return out


@dataclass(frozen=True)
class TokenReportRow:
    scenario: str
    assemblies: int
    baseline_tokens: int
    assembled_tokens: int
    reduction: float

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "assemblies": self.assemblies,
                "baseline_tokens": self.baseline_tokens,
                "assembled_tokens": self.assembled_tokens, "reduction": self.reduction}


@dataclass(frozen=True)
class ConversationView:
    """A conversation's tree: branches, runs, assemblies, compaction markers, participants."""

    conversation_id: str
    conversation: Mapping[str, Any] | None  # title masked
    branches: tuple[Mapping[str, Any], ...]
    runs: tuple[Mapping[str, Any], ...]
    assemblies: tuple[Mapping[str, Any], ...]
    compactions: tuple[Mapping[str, Any], ...]
    participants: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class BisectResult:
    """At which policy version a record first takes its ``bad`` state, and which policy
    key(s) changed to do it (``replay.bisect``). A state is the record's (decision,
    rendering, reason_code), None when it is not a candidate. Holds ids, codes and policy
    values only: nothing to mask."""

    assembly_id: str
    record_kind: str
    record_id: str
    good: str
    bad: str
    good_state: Mapping[str, Any] | None
    bad_state: Mapping[str, Any] | None
    tried: tuple[Mapping[str, Any], ...]  # version, state: every version from good to bad
    version: str  # the first bad version
    previous: str  # the version before it in registry order
    keys: tuple[Mapping[str, Any], ...]  # key, before, after: the key(s) that flip it
    alone: bool  # each of ``keys`` flips it alone (else only the set together)
    changed: tuple[Mapping[str, Any], ...]  # key, before, after, flips_alone: every change
    first_seen: str  # before ``version`` when the state flipped back and forth
    rule: str  # how the first bad version was chosen, in one sentence

    @property
    def flipped_back(self) -> bool:
        return self.first_seen != self.version

    def to_json(self) -> dict[str, Any]:
        def state(s: Mapping[str, Any] | None) -> dict[str, Any] | None:
            return dict(s) if s is not None else None

        return {
            "assembly_id": self.assembly_id,
            "record_kind": self.record_kind,
            "record_id": self.record_id,
            "good": self.good,
            "bad": self.bad,
            "good_state": state(self.good_state),
            "bad_state": state(self.bad_state),
            "version": self.version,
            "previous": self.previous,
            "keys": [dict(k) for k in self.keys],
            "alone": self.alone,
            "changed": [dict(c) for c in self.changed],
            "tried": [{"version": t["version"], "state": state(t["state"])} for t in self.tried],
            "first_seen": self.first_seen,
            "rule": self.rule,
        }

def frozen_tree(value: Any) -> Any:
    """Plain data (dicts, lists) made read-only all the way down."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen_tree(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen_tree(v) for v in value)
    return value


def thawed(value: Any) -> Any:
    """``frozen_tree``'s inverse, for JSON."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value


@dataclass(frozen=True)
class CompareResult:
    """Side A (``"recorded"`` or a version) against side B over many requests
    (``replay.compare``): safety first (``regressions``, ``fixes``, ``in_recording``: per
    finding, counts and example requests and records; ``in_recording`` is None unless A is
    the recording), then requests compared and affected, record changes by kind, reason and
    privacy class, tokens with the per-request delta distribution, and the most-changed
    requests. Ids from logs are masked where they look like secrets; ``most_changed_keys``
    holds the real assembly ids of ``most_changed``, to open one."""

    a: str
    b: str
    filter: str
    requests: int
    affected: int
    safety: Mapping[str, Any]
    records: Mapping[str, Any]
    tokens: Mapping[str, Any]
    most_changed: tuple[Mapping[str, Any], ...]
    most_changed_keys: tuple[str, ...]
    out: str | None = None  # the Parquet file of per-request rows, when one was written
    # per side ("a", "b"), per policy version: its token budget and reserve, and in how many
    # requests the model's context limit capped it (replay.compare.Comparison.budgets_json)
    budget: Mapping[str, Any] = field(default_factory=dict)
    # the requests B sends past the model's context window: {"requests": n, "examples":
    # [{assembly_id, tokens_b, context_limit}]} (replay.compare.Comparison)
    over_context_window: Mapping[str, Any] = field(default_factory=dict)

    @property
    def regressions(self) -> int:
        return sum(g["findings"] for g in self.safety["regressions"])

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "filter": self.filter,
                "safety": thawed(self.safety), "requests": self.requests,
                "affected": self.affected, "records": thawed(self.records),
                "tokens": thawed(self.tokens), "budget": thawed(self.budget),
                "over_context_window": thawed(self.over_context_window),
                "most_changed": thawed(self.most_changed), "out": self.out}


@dataclass(frozen=True)
class SessionRow:
    """One agent session on this machine (``readmodel.sessions.local_sessions``).

    ``runtime`` is the adapter format that reads it and ``path`` the file to open; the
    log's own text is masked unless revealed: ``project`` (the folder it ran in) and
    ``first_prompt`` (one line, control characters escaped, cut to about 80 characters).
    ``last_written`` is the newest modification time of its files, ``size`` their bytes;
    ``requests`` is None where counting them was not cheap (``ingest.sessions``)."""

    runtime: str
    path: str
    project: str | None
    first_prompt: str | None
    started: Any  # datetime.datetime | None (UTC)
    last_written: Any  # datetime.datetime (UTC)
    size: int
    requests: int | None

    def to_json(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "path": self.path, "project": self.project,
                "first_prompt": self.first_prompt,
                "started": self.started.isoformat() if self.started else None,
                "last_written": self.last_written.isoformat(), "size": self.size,
                "requests": self.requests}


@dataclass(frozen=True)
class SessionList:
    """The sessions found, newest first; ``looked_in`` names every place looked in
    (``runtime: path``, those absent too), ``notes`` each file skipped and why, ``masked``
    how many values were masked."""

    rows: tuple[SessionRow, ...]
    looked_in: tuple[str, ...]
    notes: tuple[str, ...]
    masked: int = 0
