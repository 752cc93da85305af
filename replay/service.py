"""Replay orchestration over a store: the one API the CLI and the app call.

- ``recorded_assembly(store, id)``: the recorded assembly as an ``Assembly``;
- ``replay(store, id, version, registry)``: the request re-assembled under a policy version;
- ``diff(store, id, version, against="recorded"|"vX")``: recorded (or a replay under vX) vs
  a replay under ``version``;
- ``verify(store, registry)``: every recorded assembly replayed under its own recorded
  policy version and compared with its recorded rows (``replay.verify``);
- ``token_report(store)``: per scenario, history-replay (baseline) and assembled tokens.

No model is called, nothing is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ingest.tags import UNATTRIBUTED_TOKENS, int_tag

from .assembler import Assembly, AssemblerPlugin, get_assembler
from .diff import Diff, diff_records
from .policy import EffectiveBudget, PolicyRegistry, effective_budget, load_registry
from .safety import SafetyContext
from .snapshot import Request, Snapshot, load_snapshot, request_from_row
from .verify import VerifyResult, verify

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter
    from ingest.store import Store

__all__ = ["VerifyResult", "clean_records", "diff", "recorded_assembly", "recorded_records", "replay",
           "request_budget", "token_report", "verify"]

_RECORD_KEYS = ("assembly_id", "record_kind", "record_id", "decision", "rendering", "position",
                "policy_family", "reason_code", "detail", "tokens")


def _registry(registry: PolicyRegistry | None) -> PolicyRegistry:
    return registry if registry is not None else load_registry(None)


def clean_records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Record rows (recorded or replayed) reduced to the keys a diff compares."""
    out = []
    for r in rows:
        d = {k: r.get(k) for k in _RECORD_KEYS}
        if d["position"] is not None:
            d["position"] = int(d["position"])
        out.append(d)
    return out


def recorded_assembly(store: "Store", assembly_id: str, row: dict[str, Any] | None = None) -> Assembly:
    """The assembly as recorded in the store (records, decisions, recorded counts)."""
    row = row if row is not None else store.assembly(assembly_id)
    recs = recorded_records(store, assembly_id, row["export_id"])
    decisions = store.recorded_decisions(assembly_id).to_pylist()
    inc = [r for r in recs if r["decision"] == "included"]
    return Assembly(
        assembly_id=assembly_id,
        policy_version=row["policy_version"],
        assembler=f"recorded/{row['assembler_version']}",
        records=recs,
        decisions=decisions,
        selection_hash=row["selection_hash"],
        assembled_tokens=int(row["assembled_tokens"]),
        baseline_tokens=int(row["baseline_tokens"]),
        baseline_message_count=int(row["baseline_message_count"]),
        included_count=len(inc),
        omitted_count=len(recs) - len(inc),
    )


def recorded_records(store: "Store", assembly_id: str, export_id: str) -> list[dict[str, Any]]:
    return clean_records(store.recorded_records([assembly_id], export_id).to_pylist())


def _load(store: "Store", assembly_id: str) -> tuple[dict[str, Any], Request, Snapshot]:
    row = store.assembly(assembly_id)
    return row, request_from_row(row), load_snapshot(store, row["conversation_id"], row["export_id"])


def replay(store: "Store", assembly_id: str, policy_version: str,
           registry: PolicyRegistry | None = None,
           assembler: str | AssemblerPlugin = "reference") -> Assembly:
    """Re-assemble ``assembly_id``'s request under ``policy_version`` (no model call)."""
    reg = _registry(registry)
    policy = reg.get(policy_version)
    plugin = get_assembler(assembler)
    _row, request, snapshot = _load(store, assembly_id)
    return plugin.assemble(snapshot, request, policy)


def diff(store: "Store", assembly_id: str, policy_version: str, against: str = "recorded",
         registry: PolicyRegistry | None = None,
         assembler: str | AssemblerPlugin = "reference") -> Diff:
    """A = the recorded assembly (``against="recorded"``) or a replay under ``against``;
    B = a replay under ``policy_version``."""
    reg = _registry(registry)
    policy_b = reg.get(policy_version)
    plugin = get_assembler(assembler)
    row, request, snapshot = _load(store, assembly_id)
    b = plugin.assemble(snapshot, request, policy_b)
    if against == "recorded":
        # only the records are compared: no need for the recorded decisions
        a_records = recorded_records(store, assembly_id, row["export_id"])
        a_label = f"recorded {row['policy_version']}"
    else:
        a_records = plugin.assemble(snapshot, request, reg.get(against)).records
        a_label = f"replay {against}"
    a_version = row["policy_version"] if against == "recorded" else against
    return diff_records(a_records, b.records, a_label, f"replay {policy_version}",
                        context=SafetyContext(snapshot, request, reg),
                        a_recorded=against == "recorded",
                        outside_records=outside_records(row),
                        budgets=(request_budget(reg, a_version, row),
                                 request_budget(reg, policy_version, row)))


def request_budget(registry: PolicyRegistry, version: str,
                   row: Mapping[str, Any]) -> EffectiveBudget | None:
    """The effective token budget of a request (``row``: its context_assemblies row) under
    ``version`` (``replay.policy.effective_budget``); None when the registry has no such
    version (a recording made under a policy this registry lacks)."""
    if version not in registry and not str(version).endswith(".toml"):
        return None
    return effective_budget(registry.get(version), row.get("context_limit"))


def outside_records(row: Mapping[str, Any]) -> int:
    """The tokens a request sends whatever its records select (a transcript's system prompt
    and tool definitions: its ``unattributed_tokens`` tag), 0 when none are recorded. Every
    assembly of the request sends them: its replays' totals count them as the recording's
    does."""
    return int_tag(row.get("tags"), UNATTRIBUTED_TOKENS) or 0


def token_report(store: "Store", registry: PolicyRegistry | None = None,
                 flt: "AssemblyFilter | str | None" = None) -> list[dict[str, Any]]:
    """Per scenario (``"(untagged)"`` for requests without one): assemblies,
    baseline_tokens (history replay: the lineage replayed raw), assembled_tokens and
    reduction = 1 - assembled / baseline (0 when the baseline is 0). The last row,
    scenario ``"(all)"``, totals every request."""
    rows = store.token_totals(flt).to_pylist()
    out = []
    for r in rows:
        out.append(_token_row(r["scenario"] or "(untagged)", r["assemblies"],
                              r["baseline_tokens"], r["assembled_tokens"]))
    if out:
        out.append(_token_row("(all)", sum(r["assemblies"] for r in rows),
                              sum(r["baseline_tokens"] or 0 for r in rows),
                              sum(r["assembled_tokens"] or 0 for r in rows)))
    return out


def _token_row(scenario: str, n: int, baseline: int | None, assembled: int | None) -> dict[str, Any]:
    baseline = int(baseline or 0)
    assembled = int(assembled or 0)
    reduction = round(1 - assembled / baseline, 4) if baseline else 0.0
    return {"scenario": scenario, "assemblies": int(n), "baseline_tokens": baseline,
            "assembled_tokens": assembled, "reduction": reduction}
