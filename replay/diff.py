"""Diff two assemblies of the same request, record by record (DESIGN.md section 6).

Records pair by (record_kind, record_id). Each pair gets one change class:

- ``newly_included``: B includes it, A did not (omitted or not a candidate);
- ``newly_omitted``: A included it, B does not;
- ``rendering_changed``: included in both, rendered differently;
- ``reason_changed``: same decision (and rendering), another reason code;
- ``moved``: included in both alike, but its order among the records both include changed;
- ``unchanged``.

**Safety** is the one definition of ``replay/safety.py``, applied to both sides when the
caller passes the request's ``SafetyContext``: ``Diff.safety`` holds the ``regressions``
(findings B has and A has not), the ``fixes`` (A has, B has not) and ``in_recording`` (the
findings of a side that is the recording: leaks in what was actually sent), each entry
``record_id``, ``record_kind``, ``finding``. A reviewer sees them first.

``Diff.budget_a`` / ``budget_b`` are the token budgets each side was assembled under
(``replay.policy.effective_budget``), when the caller knows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ingest.text import natural_key

if TYPE_CHECKING:  # pragma: no cover
    from .policy import EffectiveBudget
    from .safety import SafetyContext

__all__ = ["CHANGE_CLASSES", "Diff", "SafetyDelta", "budgets_json", "diff_records",
           "over_context_window"]

CHANGE_CLASSES = ("newly_included", "newly_omitted", "rendering_changed", "reason_changed",
                  "moved", "unchanged")
_SIDE_FIELDS = ("decision", "rendering", "reason_code", "position", "tokens", "detail",
                "policy_family")
_CLASS_RANK = {c: i for i, c in enumerate(CHANGE_CLASSES)}
SAFETY_GROUPS = ("regressions", "fixes", "in_recording")


def _entry(f: dict[str, Any]) -> dict[str, Any]:
    return {"record_id": f["record_id"], "record_kind": f["record_kind"], "finding": f["finding"],
            "detail": f["detail"]}


def _key(f: dict[str, Any]) -> tuple[str, str, str]:
    return (f["record_kind"], f["record_id"], f["finding"])


@dataclass(frozen=True)
class SafetyDelta:
    """The safety findings of a diff: regressions, fixes and findings in a recording.

    ``len()`` is the number of regressions (what a replay newly exposes)."""

    regressions: list[dict[str, Any]] = field(default_factory=list)
    fixes: list[dict[str, Any]] = field(default_factory=list)
    in_recording: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.regressions)

    @property
    def empty(self) -> bool:
        return not (self.regressions or self.fixes or self.in_recording)

    @classmethod
    def between(cls, a: list[dict[str, Any]], b: list[dict[str, Any]], a_recorded: bool = False,
                b_recorded: bool = False) -> "SafetyDelta":
        """The delta of side A's findings ``a`` and side B's ``b``."""
        ka, kb = {_key(f) for f in a}, {_key(f) for f in b}
        recorded = (a if a_recorded else []) + (b if b_recorded else [])
        seen: set[tuple[str, str, str]] = set()
        in_rec = []
        for f in sorted(recorded, key=_key):
            if _key(f) not in seen:
                seen.add(_key(f))
                in_rec.append(_entry(f))
        return cls(
            regressions=[_entry(f) for f in sorted(b, key=_key) if _key(f) not in ka],
            fixes=[_entry(f) for f in sorted(a, key=_key) if _key(f) not in kb],
            in_recording=in_rec,
        )

    def to_json(self) -> dict[str, Any]:
        return {g: [dict(e) for e in getattr(self, g)] for g in SAFETY_GROUPS}


@dataclass(frozen=True)
class Diff:
    a_label: str
    b_label: str
    summary: dict[str, Any]
    changes: list[dict[str, Any]]
    safety: SafetyDelta = field(default_factory=SafetyDelta)
    # each side's effective token budget (replay.policy.effective_budget); None: unknown
    # (a recording whose policy version is not in the registry, or not given)
    budget_a: "EffectiveBudget | None" = None
    budget_b: "EffectiveBudget | None" = None

    @property
    def changed(self) -> list[dict[str, Any]]:
        """The changes without the unchanged pairs."""
        return [c for c in self.changes if c["change"] != "unchanged"]

    def to_json(self) -> dict[str, Any]:
        return {
            "a_label": self.a_label,
            "b_label": self.b_label,
            "summary": self.summary,
            "changes": self.changes,
            "safety": self.safety.to_json(),
            "budget": budgets_json(self.budget_a, self.budget_b),
        }


def budgets_json(a: "EffectiveBudget | None", b: "EffectiveBudget | None") -> dict[str, Any]:
    """Both sides' effective budgets as JSON: ``{"a": ..., "b": ...}`` (null: unknown)."""
    return {"a": a.to_json() if a is not None else None,
            "b": b.to_json() if b is not None else None}


def _side(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    pos, tok = row.get("position"), row.get("tokens")
    return {"decision": row.get("decision"), "rendering": row.get("rendering"),
            "reason_code": row.get("reason_code"),
            "position": int(pos) if pos is not None else None,
            "tokens": int(tok) if tok is not None else None,
            "detail": row.get("detail"), "policy_family": row.get("policy_family")}


def _included(row: dict[str, Any] | None) -> bool:
    return row is not None and row["decision"] == "included"


def _common_ranks(a: dict[tuple[str, str], dict[str, Any]],
                  b: dict[tuple[str, str], dict[str, Any]]) -> tuple[dict, dict]:
    both = [k for k in a if _included(a[k]) and _included(b.get(k))]
    rank_a = {k: i for i, k in enumerate(sorted(both, key=lambda k: (a[k]["position"], k)))}
    rank_b = {k: i for i, k in enumerate(sorted(both, key=lambda k: (b[k]["position"], k)))}
    return rank_a, rank_b


def _classify(ra: dict[str, Any] | None, rb: dict[str, Any] | None, moved: bool) -> str:
    ia, ib = _included(ra), _included(rb)
    if ib and not ia:
        return "newly_included"
    if ia and not ib:
        return "newly_omitted"
    if ia and ib:
        if ra["rendering"] != rb["rendering"]:  # type: ignore[index]
            return "rendering_changed"
        if ra["reason_code"] != rb["reason_code"]:  # type: ignore[index]
            return "reason_changed"
        return "moved" if moved else "unchanged"
    # omitted (or absent) on both sides
    if ra is None or rb is None or ra["reason_code"] != rb["reason_code"]:
        return "reason_changed"
    return "unchanged"


def diff_records(a_records: list[dict[str, Any]], b_records: list[dict[str, Any]],
                 a_label: str = "A", b_label: str = "B", *,
                 context: "SafetyContext | None" = None, a_recorded: bool = False,
                 b_recorded: bool = False, outside_records: int = 0,
                 budgets: "tuple[EffectiveBudget | None, EffectiveBudget | None]" = (None, None),
                 ) -> Diff:
    """Pair two assemblies' records by (kind, id) and classify every pair.

    With ``context`` (the request's SafetyContext) both sides' safety findings are computed
    and compared; ``a_recorded`` / ``b_recorded`` say which side is the recording.
    ``outside_records``: the tokens the request sends whatever its records (a transcript's
    system prompt and tool definitions, ``ingest.tags.UNATTRIBUTED_TOKENS``); the summary's
    tokens count them on both sides, as the request list and replay do, and
    ``record_tokens_a`` / ``_b`` are what the records alone add up to. ``budgets``: each
    side's effective token budget (``replay.policy.effective_budget``), carried to the
    result for the views that explain it."""
    a = {(r["record_kind"], r["record_id"]): r for r in a_records}
    b = {(r["record_kind"], r["record_id"]): r for r in b_records}
    rank_a, rank_b = _common_ranks(a, b)
    safety = SafetyDelta()
    if context is not None:
        safety = SafetyDelta.between(context.findings(a_records), context.findings(b_records),
                                     a_recorded, b_recorded)
    regressed = {(f["record_kind"], f["record_id"]) for f in safety.regressions}
    changes: list[dict[str, Any]] = []
    counts = {c: 0 for c in CHANGE_CLASSES}
    keys = set(a)
    keys.update(b)
    for key in sorted(keys):
        ra, rb = a.get(key), b.get(key)
        change = _classify(ra, rb, key in rank_a and rank_a[key] != rank_b[key])
        counts[change] += 1
        changes.append({"record_kind": key[0], "record_id": key[1], "change": change,
                        "a": _side(ra), "b": _side(rb), "safety": key in regressed})
    rank = _CLASS_RANK
    # ids in natural order (m2 before m10): the order a reader counts them in
    changes.sort(key=lambda c: (not c["safety"], rank[c["change"]], c["record_kind"],
                                natural_key(c["record_id"])))
    inc_a = [r for r in a_records if r["decision"] == "included"]
    inc_b = [r for r in b_records if r["decision"] == "included"]
    record_tokens = (sum(int(r["tokens"]) for r in inc_a), sum(int(r["tokens"]) for r in inc_b))
    summary = {
        "counts": counts,
        "tokens_a": record_tokens[0] + outside_records,
        "tokens_b": record_tokens[1] + outside_records,
        "record_tokens_a": record_tokens[0],
        "record_tokens_b": record_tokens[1],
        "included_a": len(inc_a),
        "included_b": len(inc_b),
        "safety": len(safety.regressions),
        # B (a replay) sends more than the model's context window: the request would have
        # failed (B's budget names the window: the request's context_limit)
        "over_context_window": over_context_window(record_tokens[1] + outside_records,
                                                   budgets[1], b_recorded),
    }
    return Diff(a_label, b_label, summary, changes, safety, *budgets)


def over_context_window(tokens: int, budget: "EffectiveBudget | None", recorded: bool = False) -> bool:
    """True when a replay's request of ``tokens`` is past the model's context window (the
    request's ``context_limit``, on its effective budget): the provider would have refused
    it. A recording is never marked: it was sent."""
    limit = budget.context_limit if budget is not None else None
    return not recorded and limit is not None and tokens > limit
