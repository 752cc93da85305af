"""The why-sentence: one plain sentence saying why a record was in or out of a prompt.

``explain`` reads what the store recorded (the record's final decision, its decision
trace, the record itself and its provenance chain): the cause it names is the step that
decided the final row. What a policy change would do is said only from a replay that did
it (``Prover``: ``candidate_changes`` by the deciding step, each replayed once per
request; a change that flips the record names its policy key, one that only moves it to
another reason says where it ends up); nothing else in a sentence says "would".
tests/unit/test_why_proof.py replays every named change of the sample's sentences under
every policy version and of generated graphs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .policy import is_runtime_version, runtime_rule
from .rules import policy_keys

if TYPE_CHECKING:  # pragma: no cover
    from .policy import EffectiveBudget, Policy
    from .snapshot import Request, Snapshot

KIND_NAMES = {
    "message": "Message",
    "tool_call": "ToolCall",
    "tool_artifact": "ToolArtifact",
    "tool_memory": "ToolMemory",
    "skill_state": "SkillState",
    "checkpoint": "Checkpoint",
}

RENDERING_PHRASES = {
    "verbatim": "verbatim",
    "compact_memory": "compact memory",
    "stale_marker": "a stale marker (not presented as current)",
    "reference": "a reference to the raw artifact",
    "rehydrated_raw": "rehydrated raw evidence",
    "summary": "a safe summary",
    "revalidation_hint": "a revalidation hint",
    "cleared": "a placeholder (the runtime cleared its content)",
}

INCLUDED_PHRASES = {
    "in_window": "it is within the recent-message window",
    "lineage": "it lies on the active branch's lineage",
    "conversation_shared": "it is shared across the conversation",
    "compact_memory": "its compact memory stands in for the raw output",
    "stale_marker": "it is past its freshness window, so it is marked stale",
    "conflict_both_sides": "it contradicts another memory and the policy shows both sides",
    "recovery_protected": "it is recovery state (pending, failed, deferred or retry-critical) that the policy protects",
    "rehydrated_exact": "the request asked for this exact evidence and it fit the byte budget",
    "promoted_child_output": "it is a subagent's output that was promoted to the parent",
    "checkpoint_restore": "it restores a continuation checkpoint",
    "skill_active": "it carries the active skill state",
    "speaker_context": "it attributes what another participant said",
    "elided": "the runtime cleared this old tool output in place and sent a placeholder "
              "instead",
}

# A reason whose cause depends on the step that decided it (its family)
INCLUDED_BY_STEP = {
    ("contradiction", "stale_marker"): "a newer memory replaces it that this request may not see, "
                                       "so it is not presented as current fact",
}

OMITTED_PHRASES = {
    "outside_window": "it fell outside the recent-message window",
    "sibling_branch": "it belongs to a sibling branch, not this request's lineage",
    "participant_private": "it is private to another participant",
    "owner_unknown": "it is private and its owner cannot be resolved, so no participant sees it",
    "audit_only": "it is kept for audit only and never sent to a model",
    "child_not_promoted": "it is a subagent's output that was not promoted to the parent",
    "privacy_restricted": "its privacy class is blocked as raw data by the policy",
    "provider_restricted": "the policy blocks its privacy class for this provider",
    "stale": "it is past its freshness window and the policy omits stale records",
    "superseded": "a newer memory supersedes it",
    "over_budget": "the token budget ran out",
    "byte_budget_exceeded": "the rehydration byte budget ran out",
    "raw_replaced_by_memory": "a compact memory replaced the raw output",
    "not_yet_created": "it did not exist yet when the request was assembled",
    "retention_removed": "its retention class removed it",
    "broken_provenance": "its provenance is broken (a source it names is missing)",
    "redundant": "it repeats content already in the prompt",
    "compacted": "the runtime compacted the conversation before this request",
    "evicted": "the runtime's own record shows it outside the context it sent",
}


# The policy key that decides each reason: where to look (or what to change) in the policy;
# each family declares its own (replay.rules).
POLICY_KEYS = policy_keys()


OBSERVED = "observed"  # the policy_version of a runtime's recorded request (transcripts)

# What each observed runtime does with the history, by the transcript format recorded in
# assembler_version ("<format>-adapter/<n>"): said instead of a policy that does not exist.
RUNTIME_RULES = {
    "claude-code": "Claude Code sends the whole history since the last compaction",
    "openai-chat": "an OpenAI chat client resends the whole conversation with every request",
    "anthropic-messages": "the logged Messages API request carried these messages",
    "gemini-cli": "Gemini CLI sends the whole session history with every request",
}
RAW_RENDERINGS = ("verbatim", "rehydrated_raw")


def policy_key(assembly: dict[str, Any], rec: dict[str, Any], record: dict[str, Any] | None) -> str | None:
    """The dotted policy key of the family that decided ``rec``'s outcome, unreplayed (what
    to look at in the policy; ``Prover`` says whether changing it flips the record); None
    when no single key is that family's, or when the request was observed (no policy)."""
    if assembly.get("policy_version") == OBSERVED or is_runtime_version(str(assembly.get("policy_version"))):
        return None  # a runtime's own rule (its keys are said in the sentence)
    reason = rec.get("reason_code") or ""
    record = record or {}
    if reason == "raw_replaced_by_memory":
        # only a request for this exact evidence would bring the raw body back
        exact = assembly.get("exact_evidence_ids") or []
        return "rehydration.trigger" if rec.get("record_id") in exact else None
    if reason in ("stale", "stale_marker", "compact_memory") and record.get("freshness_class"):
        if reason == "stale_marker" and "broken provenance" in (rec.get("detail") or ""):
            return "freshness.broken_provenance"
        return f"freshness.{record['freshness_class']}"
    if reason == "provider_restricted":
        return f"privacy.providers.{assembly.get('provider')}.blocked_classes"
    if reason == "redundant" and rec.get("policy_family") == "contradiction":
        return "contradiction.show_both_sides"
    return POLICY_KEYS.get(reason)


# --------------------------------------------------------------------------- proven counterfactuals
# A why-sentence names a policy change only with the replay that shows what it does: the
# change is applied to the policy, the request re-assembled, and the record's row read
# back. ``Prover`` does this for the records of one request under one policy, one replay
# per distinct change (a sentence asks about one record; a panel walking the records of
# an assembly reuses the replays).


@dataclass(frozen=True)
class Counterfactual:
    """One replayed policy change and what it did to one record."""

    key: str  # the dotted policy key changed
    value: Any  # its value in the replay
    was: Any  # its value under the policy explained
    decision: str  # the record's row in the replay
    rendering: str | None
    reason_code: str
    flips: bool  # the decision or the rendering differs from the explained row

    def clause(self) -> str:
        """The sentence that says it: parseable, so a test can replay it on its own."""
        return (f"With {self.key} set to {_json(self.value)} (instead of {_json(self.was)}), "
                f"a replay {'' if self.flips else 'still '}{outcome_phrase(self.decision, self.rendering, self.reason_code)}.")


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def outcome_phrase(decision: str, rendering: str | None, reason_code: str) -> str:
    """What a replay did with a record, in a few words."""
    if decision == "included":
        return f"includes it as {RENDERING_PHRASES.get(rendering or '', rendering)}"
    return f"omits it, because {OMITTED_PHRASES.get(reason_code, reason_code.replace('_', ' '))}"


def policy_value(policy: "Policy", key: str) -> Any:
    """The value of a dotted policy key (``privacy.providers.<p>.blocked_classes``: the
    provider's list, [] when the policy has no rule for it)."""
    family, _, rest = key.partition(".")
    section = getattr(policy, family)
    if family == "privacy" and rest.startswith("providers."):
        _, provider, field = rest.split(".")
        rule = section.providers.get(provider)
        return list(getattr(rule, field)) if rule is not None else []
    if family == "freshness" and rest in _FRESH_CLASSES:
        return section.window(rest)
    value = getattr(section, rest)
    return list(value) if isinstance(value, (list, tuple)) else value


def with_value(policy: "Policy", key: str, value: Any) -> "Policy":
    """``policy`` with the dotted ``key`` set to ``value``."""
    family, _, rest = key.partition(".")
    section = getattr(policy, family)
    if family == "privacy" and rest.startswith("providers."):
        _, provider, field = rest.split(".")
        rule = section.providers[provider].model_copy(update={field: value})
        section = section.model_copy(update={"providers": {**section.providers, provider: rule}})
    else:
        section = section.model_copy(update={rest: value})
    return policy.model_copy(update={family: section})


_FRESH_CLASSES = ("volatile", "session", "bounded", "durable", "permanent")
_HIDING_KEYS = {"participant_private": "ownership.participant_isolation",
                "audit_only": "visibility.audit_only_excluded"}


def _provider_key(policy: "Policy", provider: str | None) -> str | None:
    name = (provider or "").lower()
    return name if name in policy.privacy.providers else None


def candidate_changes(policy: "Policy", request: "Request", rec: dict[str, Any],
                      record: dict[str, Any] | None, records: list[dict[str, Any]],
                      graph: "Snapshot | None" = None) -> list[tuple[str, Any]]:
    """The policy changes that could flip ``rec`` (its final row under ``policy``), most
    direct first, each (dotted key, value); decided by the step that decided the row
    (its reason and family). ``records``: every final row of the same assembly (the sizes
    a budget or a window must reach). Replays say which of them do flip it."""
    from .policy import effective_budget

    record = record or {}
    reason = rec.get("reason_code") or ""
    family = rec.get("policy_family") or ""
    included = rec.get("decision") == "included"
    cls = record.get("privacy_class")
    out: list[tuple[str, Any]] = []

    def minus(key: str, item: Any) -> None:
        now = policy_value(policy, key)
        if isinstance(now, list) and item in now:
            out.append((key, [c for c in now if c != item]))

    def flip(key: str, value: Any) -> None:
        if policy_value(policy, key) != value:
            out.append((key, value))

    detail = rec.get("detail") or ""
    if not included:
        if reason == "over_budget":
            budget = effective_budget(policy, request.context_limit)
            if budget.capped_by != "context_limit":
                flip("budget.token_budget",
                     policy.budget.token_budget + sum(int(r.get("tokens") or 0) for r in records))
            flip("budget.reserve_tokens", 0)
        elif reason == "outside_window":
            flip("window.max_messages", sum(r["record_kind"] == "message" for r in records))
        elif reason == "sibling_branch":
            flip("branch.lineage_only", False)
        elif reason == "participant_private":
            flip("ownership.participant_isolation", False)
        elif reason == "audit_only":
            flip("visibility.audit_only_excluded", False)
        elif reason == "child_not_promoted":
            flip("ownership.child_promotion", "auto")
        elif reason == "privacy_restricted":
            minus("privacy.raw_blocked_classes", cls)
        elif reason == "provider_restricted" and (p := _provider_key(policy, request.provider)):
            minus(f"privacy.providers.{p}.blocked_classes", cls)
        elif reason == "retention_removed":
            minus("retention.removed_classes", record.get("retention_class"))
        elif reason == "stale" and record.get("freshness_class"):
            flip(f"freshness.{record['freshness_class']}", None)
            flip("freshness.stale_action", "mark")
        elif reason == "superseded" and "may not see" in detail:
            flip("freshness.stale_action", "mark")
        elif reason == "superseded":
            flip("contradiction.supersession", "keep_both")
        elif reason == "redundant" and family == "contradiction":
            flip("contradiction.show_both_sides", True)
        elif reason == "broken_provenance":
            flip("freshness.broken_provenance", "mark")
        elif reason == "byte_budget_exceeded":
            arts = {a["artifact_id"]: a for a in (graph.tables.get("tool_artifacts", []) if graph else [])}
            need = sum(int(arts[a]["byte_size"]) for a in request.exact_evidence_ids if a in arts)
            flip("rehydration.byte_budget", policy.rehydration.byte_budget + max(need, int(record.get("byte_size") or 0)))
        elif reason == "raw_replaced_by_memory" and rec.get("record_id") in request.exact_evidence_ids:
            flip("rehydration.trigger", "exact_evidence")
        return out
    if reason in ("in_window", "speaker_context") or (reason == "lineage" and family == "window"):
        flip("window.max_messages", 0)
    elif reason == "compact_memory" and record.get("freshness_class"):
        flip(f"freshness.{record['freshness_class']}", 0)
    elif reason == "stale_marker" and family == "contradiction":
        # a hidden replacement: shown, it supersedes this memory; or the stale action omits it
        m = re.search(r"superseded by (\S+), which this request may not see \((\w+)\)", detail)
        if m and graph is not None:
            newer = next((n for n in graph.tables.get("tool_memories", []) if n["memory_id"] == m.group(1)), None)
            hiding = m.group(2)
            if hiding == "provider_restricted" and newer and (p := _provider_key(policy, request.provider)):
                minus(f"privacy.providers.{p}.blocked_classes", newer["privacy_class"])
            elif hiding in _HIDING_KEYS:
                flip(_HIDING_KEYS[hiding], False)
        flip("freshness.stale_action", "omit")
    elif reason == "stale_marker" and rec.get("rendering") == "revalidation_hint":
        flip("freshness.broken_provenance", "omit")
    elif reason == "stale_marker" and record.get("freshness_class"):
        flip(f"freshness.{record['freshness_class']}", None)
        flip("freshness.stale_action", "omit")
    elif reason == "conflict_both_sides":
        flip("contradiction.show_both_sides", False)
    elif reason == "conversation_shared":
        flip("branch.shared_fill", False)
    elif reason == "promoted_child_output":
        flip("ownership.child_promotion", "never")
    elif reason == "rehydrated_exact":
        flip("rehydration.trigger", "never")
    elif reason == "recovery_protected":
        flip("recovery.protected_states", [])
    return out


class Prover:
    """Replays one request under changes of one policy (each distinct change once) and
    proves or refutes the counterfactuals of its records."""

    def __init__(self, snapshot: "Snapshot", request: "Request", policy: "Policy",
                 records: list[dict[str, Any]] | None = None, assembler: Any = None) -> None:
        from .assembler import get_assembler

        self.snapshot = snapshot
        self.request = request
        self.policy = policy
        self.plugin = assembler if assembler is not None else get_assembler("reference")
        self.records = records if records is not None else self.plugin.assemble(snapshot, request, policy).records
        self._replays: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}

    def replay(self, key: str, value: Any) -> dict[tuple[str, str], dict[str, Any]]:
        """The final rows of the request replayed with ``key`` set to ``value``."""
        memo = (key, _json(value))
        if memo not in self._replays:
            out = self.plugin.assemble(self.snapshot, self.request, with_value(self.policy, key, value))
            self._replays[memo] = {(r["record_kind"], r["record_id"]): r for r in out.records}
        return self._replays[memo]

    def counterfactuals(self, rec: dict[str, Any], record: dict[str, Any] | None) -> list[Counterfactual]:
        """The replayed candidate changes of ``rec``: those that flip it, and the first one
        that does not but moves it to another reason (what a wider window then runs into)."""
        out: list[Counterfactual] = []
        moved = None
        base = next((r for r in self.records if r["record_kind"] == rec["record_kind"]
                     and r["record_id"] == rec["record_id"]), None)
        if base is None or (base["decision"], base["rendering"], base["reason_code"]) != (
                rec.get("decision"), rec.get("rendering"), rec.get("reason_code")):
            return []  # a row the replay does not reproduce (drift): no replay explains it
        for key, value in candidate_changes(self.policy, self.request, rec, record, self.records,
                                            self.snapshot):
            after = self.replay(key, value).get((rec["record_kind"], rec["record_id"]))
            if after is None:
                continue
            flips = (after["decision"], after["rendering"]) != (rec.get("decision"), rec.get("rendering"))
            cf = Counterfactual(key, value, policy_value(self.policy, key), after["decision"],
                                after["rendering"], after["reason_code"], flips)
            if flips:
                out.append(cf)
                break  # the most direct change that flips it is the one named
            if moved is None and after["reason_code"] != rec.get("reason_code"):
                moved = cf
        return ([moved] if moved is not None else []) + out

    def key(self, rec: dict[str, Any], record: dict[str, Any] | None) -> str | None:
        """The policy key whose change alone flips ``rec`` (replayed), or None."""
        return next((c.key for c in self.counterfactuals(rec, record) if c.flips), None)


def deciding_key(snapshot: "Snapshot", request: "Request", policy: "Policy", rec: dict[str, Any],
                 record: dict[str, Any] | None, assembler: Any = None) -> str | None:
    """The policy key whose change alone flips ``rec`` on a replay of the request, or None
    (one record: ``Prover`` keeps the replays for many)."""
    if policy_key({**request.__dict__, "policy_version": policy.version}, rec, record) is None \
            and not candidate_changes(policy, request, rec, record, [], snapshot):
        return None
    return Prover(snapshot, request, policy, assembler=assembler).key(rec, record)


def _provenance_clause(kind: str, provenance: list[dict[str, Any]]) -> str:
    if kind != "tool_memory":
        return ""
    sources = [p for p in provenance if p.get("kind") == "tool_artifact" and p.get("depth", 1) == 1]
    if not sources:
        return ""
    ok = [p["id"] for p in sources if not p.get("broken")]
    broken = [p["id"] for p in sources if p.get("broken")]
    parts = []
    if ok:
        parts.append("derived from artifact " + ", ".join(ok))
    if broken:
        parts.append("naming missing artifact " + ", ".join(broken))
    return ", " + " and ".join(parts)


def _scope_clause(assembly: dict[str, Any], record: dict[str, Any] | None) -> str:
    if not record:
        return ""
    clauses = []
    branch = record.get("branch_id")
    if branch:
        if branch == assembly.get("branch_id"):
            clauses.append("on the active branch")
        else:
            clauses.append(f"from branch {branch}")
    scope = record.get("visibility_scope")
    owner = record.get("owner_participant_id") or record.get("participant_id")
    if scope == "participant_private":
        if owner == assembly.get("participant_id"):
            clauses.append("private to this participant")
        else:
            clauses.append(f"private to participant {owner}")
    elif scope in ("branch", "conversation"):
        clauses.append("visible to this participant")
    elif scope == "audit_only":
        clauses.append("audit-only")
    return (", " + ", ".join(clauses)) if clauses else ""


def _cap(text: str) -> str:
    """A sentence starts with a capital letter."""
    return text[:1].upper() + text[1:] if text else text


def _sentence(text: str) -> str:
    text = _cap(text.strip())
    return text if not text or text.endswith(".") else text + "."


def _included_in(others: list[dict[str, Any]] | None, kind: str, rid: str) -> dict[str, Any] | None:
    for o in others or []:
        if o.get("record_kind") == kind and o.get("record_id") == rid and o.get("decision") == "included":
            return o
    return None


def _omission_facts(rec: dict[str, Any], record: dict[str, Any] | None, policy: str,
                    assembly: dict[str, Any], others: list[dict[str, Any]] | None,
                    budget: "EffectiveBudget | None") -> str:
    """What the trace and the record say about an omission: facts only. What a policy
    change would do is said by a replayed ``Counterfactual`` (``Prover``), never here."""
    reason = rec.get("reason_code")
    detail = (rec.get("detail") or "").strip()
    record = record or {}
    if reason == "over_budget":
        s = f"It needed {rec.get('tokens', 0)} tokens" + (f" ({detail})" if detail else "") + "."
        if budget is not None and budget.has_budget:
            cap = (f"the model's context limit, below policy {budget.policy_version}'s {budget.policy_budget:,}"
                   if budget.capped_by == "context_limit" else f"policy {budget.policy_version}'s")
            s += (f" The effective token budget is {budget.budget:,} ({cap}); reserve "
                  f"{budget.reserve_tokens:,}, {budget.available:,} available.")
        return s
    if reason == "stale":
        # the policy window's date, as the freshness stage wrote it ("stale since T (class, Nh window)")
        tools = ", ".join(record.get("revalidation_tools") or [])
        s = f"It has been {detail}" if detail.startswith("stale since") else "It is stale"
        return s + (f"; its revalidation tools: {tools}." if tools else ".")
    if reason == "superseded":
        if not detail.startswith("superseded by"):
            by = record.get("superseded_by")
            detail = f"superseded by {by}" if by else detail
        if not detail:
            return ""
        if "may not see" in detail:
            return _sentence(f"It is {detail}, so it is not shown as a current fact")
        by = detail.split()[2] if len(detail.split()) > 2 else None
        if others is not None and by and _included_in(others, "tool_memory", by) is None:
            return _sentence(f"It is {detail}, which is not in this prompt either")
        return _sentence(f"It is {detail}; the replacement is the current fact")
    if reason == "privacy_restricted":
        cls = record.get("privacy_class")
        return (f"Its class {cls} is blocked as raw under policy {policy}." if cls
                else f"Blocked as raw under policy {policy}.")
    if reason == "provider_restricted":
        cls = record.get("privacy_class")
        provider = assembly.get("provider") or "this provider"
        what = f"{cls} data" if cls else "its privacy class"
        return f"Policy {policy} sends no {what} to {provider}, raw or summarised."
    if reason == "raw_replaced_by_memory":
        mid = detail.split()[-1] if detail.startswith("replaced by compact memory") else None
        if mid:
            return f"Compact memory {mid}, derived from it, is in the prompt in its place."
        return _sentence(detail)
    if reason == "byte_budget_exceeded":
        return f"It has {record.get('byte_size', '?')} bytes ({detail})." if detail else \
            f"It has {record.get('byte_size', '?')} bytes."
    return _sentence(detail)


def _source_clause(record: dict[str, Any] | None, rid: str, others: list[dict[str, Any]]) -> str:
    """What became of a compact memory's raw sources in the same prompt, as the trace says:
    "the memory sufficed" only when every source was replaced by this memory."""
    sources = list((record or {}).get("source_artifact_ids") or [])
    if not sources:
        return ""
    rows = {o["record_id"]: o for o in others if o.get("record_kind") == "tool_artifact"}
    parts: list[str] = []
    replaced = True
    for a in sources:
        o = rows.get(a)
        if o is None:
            replaced = False
            parts.append(f"its source artifact {a} was not a candidate")
        elif o.get("decision") == "included":
            replaced = False
            parts.append(f"its source artifact {a} is also in the prompt as "
                         f"{RENDERING_PHRASES.get(o.get('rendering') or '', o.get('rendering'))}")
        elif o.get("reason_code") == "raw_replaced_by_memory" and (o.get("detail") or "").endswith(f" {rid}"):
            parts.append(f"it replaces its source artifact {a}")
        else:
            replaced = False
            why = OMITTED_PHRASES.get(o.get("reason_code") or "", (o.get("reason_code") or "").replace("_", " "))
            parts.append(f"its source artifact {a} is not sent raw because {why}")
    if replaced:
        return "; raw not rehydrated because the memory sufficed"
    return "; " + ", ".join(parts)


# the runtime key that decides a record's outcome under a runtime policy, by family and reason
_RUNTIME_KEYS = {("claude-code", "compacted"): "compaction", ("claude-code", "elided"): "microcompaction",
                 ("codex", "compacted"): "compaction", ("gemini-cli", "compacted"): "compaction",
                 ("swe-agent", "elided"): "last_n_observations.n",
                 ("esaa", "outside_window"): "last_n", ("esaa", "participant_private"): "shared"}


def _observed(assembly: dict[str, Any], rec: dict[str, Any], name: str) -> str:
    """A transcript's request: the runtime's own rule, never an invented policy key. Under
    a runtime policy (``claude-code``, ``swe-agent``...) the sentence names it and the
    runtime key that decided the record; an ``observed`` request has no policy at all."""
    version = str(assembly.get("policy_version") or "")
    family = version.split(":", 1)[0]
    if is_runtime_version(version):
        rule = runtime_rule(version)
        key = _RUNTIME_KEYS.get((family, rec.get("reason_code") or ""))
        told_policy = f" (runtime policy {version}" + (f"; its key {key}" if key else "") + ")"
        recorded = "sent" if rec.get("decision") == "included" else "not sent"
        place = f"{recorded} by the runtime"
    else:
        runtime = str(assembly.get("assembler_version") or "").split("-adapter/")[0]
        rule = RUNTIME_RULES.get(runtime)
        told_policy = " No policy to explain."
        place = ("sent" if rec.get("decision") == "included" else "not sent") + " in the recorded request"
    detail = _sentence(rec.get("detail") or "")
    reason = rec.get("reason_code") or ""
    if rec.get("decision") == "included":
        if reason == "elided":
            return (f"Included {name} as {RENDERING_PHRASES['cleared']}: "
                    f"{INCLUDED_PHRASES['elided']}. {detail}{told_policy if is_runtime_version(version) else ''}").rstrip()
        said = f"; {rule}" if rule else ""
        end = f"{told_policy}." if is_runtime_version(version) else told_policy
        return f"Included {name}: {place}{said}{end}"
    why = OMITTED_PHRASES.get(reason, reason.replace("_", " "))
    told = f" {detail}" if detail else ""
    end = f"{told_policy}." if is_runtime_version(version) else told_policy
    return f"Omitted {name}: {place}, because {why}.{told}{end}"


def explain(
    assembly: dict[str, Any],
    rec: dict[str, Any],
    record: dict[str, Any] | None,
    decisions: list[dict[str, Any]],
    provenance: list[dict[str, Any]],
    others: list[dict[str, Any]] | None = None,
    key: str | None = None,
    counterfactuals: "list[Counterfactual] | None" = None,
    budget: "EffectiveBudget | None" = None,
) -> str:
    """One sentence (two or three for omissions) on why ``rec`` was included or omitted.

    The cause is the step that decided the record's final row (its reason, in its family).
    ``others`` are the final rows of every record of the same assembly (same side): what a
    sentence about another record (a memory's raw source, a replacement) needs to be true.
    Without them, nothing is said about other records' decisions. ``counterfactuals``
    (``Prover.counterfactuals``) are the policy changes replayed for this record: each is
    said with what the replay did, and the first that flips the record names the deciding
    policy key; no other change is named. ``key``: a deciding key checked by the caller
    (without counterfactuals). ``budget``: the request's effective budget (an omission for
    budget says it)."""
    said = list(counterfactuals or [])
    if counterfactuals is not None:
        key = next((c.key for c in said if c.flips), None)
    kind = rec["record_kind"]
    rid = rec["record_id"]
    name = f"{KIND_NAMES.get(kind, kind)} {rid}"
    policy = assembly.get("policy_version", "?")
    if policy == OBSERVED or is_runtime_version(str(policy)):
        return _observed(assembly, rec, name)
    reason = rec.get("reason_code") or ""
    family = rec.get("policy_family") or ""
    replayed = " ".join(c.clause() for c in said)
    if key:
        replayed = f"{replayed} Decided by policy key {key}.".strip()
    broken_sources = [
        p["id"] for p in provenance
        if p.get("broken") and p.get("kind") == "tool_artifact" and p.get("depth", 1) == 1
    ]
    if rec.get("decision") == "included":
        rendering = RENDERING_PHRASES.get(rec.get("rendering") or "", rec.get("rendering") or "")
        why = INCLUDED_BY_STEP.get((family, reason)) or INCLUDED_PHRASES.get(reason, reason.replace("_", " "))
        if broken_sources and rec.get("rendering") in ("stale_marker", "revalidation_hint") \
                and family == "freshness":
            why = "its source evidence is missing (broken provenance), so it is not presented as current fact"
        sentence = (
            f"Included {name} as {rendering}{_provenance_clause(kind, provenance)}"
            f"{_scope_clause(assembly, record)}, because {why}, under policy {policy}"
        )
        if kind == "tool_memory" and rec.get("rendering") == "compact_memory" and others is not None:
            sentence += _source_clause(record, rid, others)
        detail = (rec.get("detail") or "").strip()
        if detail and reason in ("compact_memory", "stale_marker", "recovery_protected", "rehydrated_exact"):
            sentence += f" ({detail})"
        return f"{sentence}. {replayed}".strip()
    why = OMITTED_PHRASES.get(reason, reason.replace("_", " "))
    sentence = (
        f"Omitted {name}{_provenance_clause(kind, provenance)}{_scope_clause(assembly, record)},"
        f" because {why} ({family} stage, policy {policy})."
    )
    after = _omission_facts(rec, record, policy, assembly, others, budget)
    if not after and decisions:
        last = decisions[-1]
        after = _sentence(last.get("detail") or "")
    return " ".join(p for p in (sentence, after, replayed) if p)
