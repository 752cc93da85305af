"""Safety: one definition, applied to any assembly, recorded or replayed (DESIGN.md section 6).

``SafetyContext(snapshot, request, registry).findings(records)`` returns one finding per record
**in the prompt** (decision ``included``) that is

- ``sibling_branch``: on a branch off the request's lineage, or on an ancestor branch but
  created after the fork the request's branch was left by (conversation-scoped memories are
  exempt: a conversation-wide fact may fill in from another branch);
- ``foreign_private``: ``participant_private`` to another participant who did not share it
  with the requester (a promotable memory of the requester's own subagent child run is
  exempt), or private with no owner that resolves to a participant;
- ``audit_only``: audit-only;
- ``restricted_raw``: an artifact of a restricted privacy class
  (``ingest.contract.RESTRICTED_PRIVACY``) rendered ``verbatim`` or ``rehydrated_raw``, or an
  artifact or memory whose class the request's **standard policy** blocks for the request's
  provider;
- ``superseded``: a memory whose replacement (its ``superseded_by``, or a memory whose
  ``supersedes`` names it) existed at assembly time and was visible to the request; or a
  memory rendered ``compact_memory`` (a current fact) whose replacement existed but was
  hidden from the request. Visible and hidden are the assembler's own stages 3-5
  (``replay.visibility``) under the rules that fail closed (lineage, audit-only, participant
  isolation) with the standard policy's class blocks: a replacement of a class the
  standard policy blocks for the provider is hidden, and the stale marker the assembler
  shows in its place is no finding;
- ``stale_as_current``: a memory rendered ``compact_memory`` (a current fact) after it went
  stale: after its own ``stale_after`` when the producer set one, else after ``observed_at``
  plus the window of its freshness class under the request's standard policy.

The **standard policy** of a request is the policy version it was recorded under (when the
registry has it; an observed runtime has none, and then only the producer's ``stale_after``
and the fixed rules count). Safety does not depend on the policy a side was replayed under:
a replay under v5, whose widened windows call a days-old calendar memory fresh, still shows
that memory as ``stale_as_current`` (the memory's own ``stale_after`` has passed), so a diff
of v5 against v4 lists it as a regression.

Each finding is ``{"record_id", "record_kind", "finding", "detail"}``; the rules yield facts
(``record_facts``) and ``replay/findings_text.py``, the one writer of a finding's words,
turns them into ``detail`` (as it does for the lint's and compare's SQL facts). The lint's rule names
for the same findings are ``LINT_RULES`` (the lint keeps the names it always had).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ingest.contract import RESTRICTED_PRIVACY
from ingest.sql import registered
from ingest.store.lint import safety_query, safety_views

# The assembler's per-conversation index is the graph as the assembler sees it (lineage,
# owners, supersession links); safety reads the same facts so the two cannot disagree.
from .assembler import _index
from .findings_text import details, facts_table
from .snapshot import Request, Snapshot, load_snapshot, request_from_row
from .visibility import RequestView, VisibilityRules, owner_of

_OWNED_KINDS = frozenset({"message", "tool_artifact", "tool_memory", "tool_call"})

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

    from ingest.store import Store

    from .policy import Policy, PolicyRegistry

__all__ = ["FINDINGS", "FINDING_OF_RULE", "LINT_RULES", "SafetyContext", "graph_findings",
           "load_context", "safety_findings", "standard_blocked", "standard_policy", "standard_windows"]

FINDINGS: tuple[str, ...] = ("sibling_branch", "foreign_private", "audit_only", "restricted_raw",
                             "superseded", "stale_as_current")
# finding -> the lint rule that reports it
LINT_RULES: dict[str, str] = {
    "sibling_branch": "sibling_branch",
    "foreign_private": "foreign_private",
    "audit_only": "audit_only_included",
    "restricted_raw": "restricted_raw_sent",
    "superseded": "superseded_included",
    "stale_as_current": "stale_as_current",
}
_RAW = ("verbatim", "rehydrated_raw")
# the finding each lint rule reports (the lint and the SQL form name findings by rule)
FINDING_OF_RULE = {rule: finding for finding, rule in LINT_RULES.items()}


def standard_policy(registry: "PolicyRegistry | None", version: str | None) -> "Policy | None":
    """The policy a request is judged against: its recorded version, when the registry has it."""
    if registry is None or not version or version not in registry.versions():
        return None
    return registry.get(version)


def standard_windows(registry: "PolicyRegistry | None") -> dict[str, dict[str, int]]:
    """Policy version -> freshness class -> window (hours), for every policy of the registry
    (what the lint's SQL needs to apply each request's standard policy)."""
    out: dict[str, dict[str, int]] = {}
    for v in registry.versions() if registry is not None else []:
        fresh = registry.get(v).freshness  # type: ignore[union-attr]
        out[v] = {c: w for c in _FRESH_CLASSES if (w := fresh.window(c)) is not None}
    return out


def standard_blocked(registry: "PolicyRegistry | None") -> dict[str, dict[str, list[str]]]:
    """Policy version -> provider (lower case) -> privacy classes it blocks for that provider."""
    out: dict[str, dict[str, list[str]]] = {}
    for v in registry.versions() if registry is not None else []:
        providers = registry.get(v).privacy.providers  # type: ignore[union-attr]
        out[v] = {p: sorted(rule.blocked_classes) for p, rule in providers.items()}
    return out


_FRESH_CLASSES = ("volatile", "session", "bounded", "durable", "permanent")


class SafetyContext:
    """The facts safety needs about one request: its graph as the assembler sees it, and
    its standard policy (freshness windows, provider rules)."""

    def __init__(self, snapshot: Snapshot, request: Request,
                 registry: "PolicyRegistry | None" = None) -> None:
        self.request = request
        self.ix = _index(snapshot, request.conversation_id)
        self.lineage = self.ix.lineage(request.branch_id)
        standard = standard_policy(registry, request.policy_version)
        # what the request may see: the assembler's own stages 3-5, under the rules that
        # fail closed whatever a policy says, with the standard policy's class blocks
        self.view = RequestView(self.ix, request.branch_id, request.participant_id, request.provider,
                                VisibilityRules.fail_closed(standard, request.provider))
        self.windows: dict[str, int] = {}
        self.blocked: frozenset[str] = frozenset()
        if standard is not None:
            self.windows = {c: w for c in _FRESH_CLASSES
                            if (w := standard.freshness.window(c)) is not None}
            rule = standard.privacy.rule_for(request.provider)
            self.blocked = frozenset(rule.blocked_classes) if rule is not None else frozenset()

    # ---- graph facts
    def _row(self, kind: str, rid: str) -> dict[str, Any] | None:
        ix = self.ix
        table = {"message": ix.msgs, "tool_call": ix.calls, "tool_artifact": ix.arts,
                 "tool_memory": ix.mems}.get(kind)
        return table.get(rid) if table is not None else None

    def _placed(self, kind: str, row: dict[str, Any]) -> tuple[str | None, dt.datetime]:
        """(branch, creation time) of a graph row."""
        if kind == "tool_call":
            run = self.ix.runs.get(row["model_run_id"]) or {}
            return run.get("branch_id"), row["requested_at"]
        return row.get("branch_id"), row["created_at"]

    def on_lineage(self, branch: str | None, created: dt.datetime) -> bool:
        if branch is None:
            return True
        if branch not in self.lineage:
            return False
        cut = self.lineage[branch]
        return cut is None or created <= cut[0]

    def _owner(self, kind: str, row: dict[str, Any]) -> tuple[str | None, str | None, str | None, list[str]]:
        """(owner participant, owner run, scope, shared_with) by the assembler's rule
        (``replay.visibility.owner_of``); a checkpoint or skill state has no owner here."""
        if kind not in _OWNED_KINDS:
            return None, None, None, []
        return owner_of(self.ix, kind, row)

    def _promoted_child(self, row: dict[str, Any], run_id: str | None) -> bool:
        """A promotable memory of a subagent child run of the requester."""
        promotable = row.get("promotion_policy") == "auto" or (
            row.get("promotion_policy") == "explicit" and bool(row.get("promoted")))
        run = self.ix.runs.get(run_id or "")
        if not promotable or run is None or run["runtime_kind"] != "subagent_child":
            return False
        parent = self.ix.runs.get(run["parent_model_run_id"] or "")
        return parent is not None and parent["participant_id"] == self.request.participant_id

    def visible(self, kind: str, row: dict[str, Any]) -> bool:
        """Whether the request may see ``row``: no stage 3-5 decision of the assembler denies
        it under the fail-closed rules (``replay.visibility``)."""
        return self.sight(kind, row)[0] == "visible"

    def sight(self, kind: str, row: dict[str, Any]) -> tuple[str, str | None]:
        """("visible" | "hidden" | "absent", the deciding reason) of a graph row
        (``RequestView.sight``)."""
        branch, created = self._placed(kind, row)
        return self.view.sight(kind, row, branch, created)

    def stale_since(self, mem: dict[str, Any]) -> dt.datetime | None:
        """When a memory goes stale: its own ``stale_after``, else observed_at plus its
        class's window under the standard policy; None when it never does."""
        if mem.get("stale_after") is not None:
            return mem["stale_after"]
        w = self.windows.get(mem.get("freshness_class") or "")
        if w is None or mem.get("observed_at") is None:
            return None
        return mem["observed_at"] + dt.timedelta(hours=w)

    # ---- the findings
    def record_facts(self, kind: str, rid: str, rendering: str | None) -> list[dict[str, Any]]:
        """The findings of one included record as facts (``replay.findings_text.FACTS``
        rows, worded by ``findings_text.details``)."""
        row = self._row(kind, rid)
        if row is None:
            return []
        req = self.request
        at = req.assembled_at
        me = req.participant_id
        base = {"asm_branch": req.branch_id, "requester": me, "assembled_at": at,
                "rendering": rendering, "provider": req.provider,
                "policy_version": req.policy_version}
        out: list[dict[str, Any]] = []
        branch, created = self._placed(kind, row)
        if not (kind == "tool_memory" and row["visibility_scope"] == "conversation") \
                and not self.on_lineage(branch, created):
            cut = self.lineage.get(branch or "")
            out.append({**base, "finding": "sibling_branch", "record_branch": branch,
                        "record_at": created, "cutoff": cut[0] if cut is not None else None})
        owner, run, scope, shared = self._owner(kind, row)
        if scope == "participant_private" and owner != me and me not in shared:
            if not (kind == "tool_memory" and self._promoted_child(row, run)):
                out.append({**base, "finding": "foreign_private", "owner": owner,
                            "shared_with": list(shared)})
        if scope == "audit_only":
            out.append({**base, "finding": "audit_only"})
        cls = row.get("privacy_class")
        if kind == "tool_artifact" and cls in RESTRICTED_PRIVACY and rendering in _RAW:
            out.append({**base, "finding": "restricted_raw", "privacy_class": cls, "raw": True})
        elif kind in ("tool_artifact", "tool_memory") and cls in self.blocked:
            out.append({**base, "finding": "restricted_raw", "privacy_class": cls, "raw": False})
        if kind == "tool_memory":
            # superseded: by a replacement the request may see (it should have been shown
            # instead), or, shown as a current fact, by one it may not see (DESIGN.md section
            # 5: such a memory is a stale marker or omitted); in memory id order, the first
            for newer in self.ix.replaced_by.get(rid, []):
                n = self.ix.mems.get(newer)
                if newer == rid or n is None or n["created_at"] > at:
                    continue
                seen, why = self.sight("tool_memory", n)
                if seen == "visible" or (seen == "hidden" and rendering == "compact_memory"):
                    out.append({**base, "finding": "superseded", "newer": newer,
                                "newer_at": n["created_at"], "newer_seen": seen,
                                "hidden_why": why})
                    break
            since = self.stale_since(row)
            if rendering == "compact_memory" and since is not None and since < at:
                out.append({**base, "finding": "stale_as_current", "stale_since": since})
        return out

    def record_findings(self, kind: str, rid: str, rendering: str | None) -> list[tuple[str, str]]:
        """(finding, detail) pairs of one included record."""
        facts = self.record_facts(kind, rid, rendering)
        return list(zip([f["finding"] for f in facts], details(facts_table(facts)).to_pylist()))

    def findings(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The findings of one assembly's records, sorted by record then finding."""
        out = []
        for r in records:
            if r.get("decision") != "included":
                continue
            for fact in self.record_facts(r["record_kind"], r["record_id"], r.get("rendering")):
                out.append({"record_id": r["record_id"], "record_kind": r["record_kind"], **fact})
        # one columnar wording of all the assembly's findings (replay.findings_text)
        out = [{"record_id": f["record_id"], "record_kind": f["record_kind"], "finding": f["finding"],
                "detail": detail} for f, detail in zip(out, details(facts_table(out)).to_pylist())]
        out.sort(key=lambda f: (f["record_kind"], f["record_id"], FINDINGS.index(f["finding"])))
        return out


def load_context(store: "Store", assembly_id: str,
                 registry: "PolicyRegistry | None" = None) -> SafetyContext:
    """The SafetyContext of a recorded request."""
    row = store.assembly(assembly_id)
    snapshot = load_snapshot(store, row["conversation_id"], row["export_id"])
    return SafetyContext(snapshot, request_from_row(row), registry)


def safety_findings(snapshot: Snapshot, request: Request, records: list[dict[str, Any]],
                    registry: "PolicyRegistry | None" = None) -> list[dict[str, Any]]:
    """The safety findings of one assembly's records (recorded or replayed rows)."""
    return SafetyContext(snapshot, request, registry).findings(records)


# each side's assembly ids in graph_findings' one query: "0|as1", "1|as1"
_SIDE_TAG = "{}|"


def graph_findings(con: "duckdb.DuckDBPyConnection", graphs: dict[str, pa.Table],
                   export_id: str, requests: pa.Table, sides: Sequence[pa.Table],
                   registry: "PolicyRegistry | None") -> list[pa.Table]:
    """The findings of many assemblies of one chunk of conversations at once, in SQL.

    The same rules as ``SafetyContext.findings`` in their SQL form (the lint's,
    ``ingest.store.lint.safety_query``; tests hold the two equal), run on ``con`` over
    ``graphs`` (``Store.conversation_graphs`` of the chunk), ``requests``
    (context_assemblies rows with export_id) and each of ``sides`` (assembly_id,
    record_kind, record_id, decision, rendering rows of those requests: recorded or
    replayed). Compare judges whole chunks this way instead of building each request's
    Python context, both sides in one query (each side's requests under ids of its own).
    Returns, per side, (assembly_id, record_kind, record_id, finding, detail): one row per
    finding, ``detail`` in the words of ``replay.findings_text`` (as ``findings`` words it)."""
    if not 0 < len(sides) <= 10:  # one-digit tags
        raise ValueError("graph_findings judges one to ten sides")
    sql, params = safety_query("TRUE", standard_windows(registry), standard_blocked(registry))

    def tagged(table: pa.Table, side: int) -> pa.Table:
        """``table`` with each assembly id prefixed by the side's tag."""
        ids = pc.binary_join_element_wise(_SIDE_TAG.format(side), table["assembly_id"], "")
        return table.set_column(table.schema.get_field_index("assembly_id"), "assembly_id", ids)

    views = safety_views(
        graphs, export_id, pa.concat_tables([tagged(requests, i) for i in range(len(sides))]),
        pa.concat_tables([
            tagged(side.select(["assembly_id", "record_kind", "record_id", "decision", "rendering"]), i)
            for i, side in enumerate(sides)]))
    with registered(con, **views):
        # a row reachable from two conversations of the chunk is in its graph twice
        found = con.sql(f"SELECT DISTINCT * EXCLUDE (export_id) FROM ({sql})",
                        params=params).to_arrow_table()
    finding = pc.fill_null(pa.array([FINDING_OF_RULE.get(r, r) for r in
                                     found.column("invariant").to_pylist()], pa.string()), "")
    found = found.drop_columns(["invariant"]).append_column("finding", finding)
    # the words of replay.findings_text, as lint, diff and why word the same findings
    found = found.select(["assembly_id", "record_kind", "record_id", "finding"]).append_column(
        "detail", details(found))
    ids = found["assembly_id"]
    tag_length = len(_SIDE_TAG.format(0))
    found = found.set_column(0, "assembly_id", pc.utf8_slice_codeunits(ids, tag_length))
    side_of = pc.utf8_slice_codeunits(ids, 0, tag_length)
    return [found.filter(pc.equal(side_of, _SIDE_TAG.format(i))) for i in range(len(sides))]
