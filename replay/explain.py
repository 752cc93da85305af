"""The why-sentence: one plain sentence saying why a record was in or out of a prompt.

``explain`` reads only what the store recorded (the record's final decision, its decision
trace, the record itself and its provenance chain); it never guesses a cause that was not
recorded. For an omission it adds what would have changed the outcome when the record says
so (tokens short, stale since, superseded by, the deciding policy family).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .policy import is_runtime_version, runtime_rule

if TYPE_CHECKING:  # pragma: no cover
    from .policy import Policy
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


# The policy key that decides each reason: where to look (or what to change) in the policy.
POLICY_KEYS = {
    "outside_window": "window.max_messages",
    "in_window": "window.max_messages",
    "sibling_branch": "branch.lineage_only",
    "conversation_shared": "branch.shared_fill",
    "participant_private": "ownership.participant_isolation",
    "child_not_promoted": "ownership.child_promotion",
    "promoted_child_output": "ownership.child_promotion",
    "audit_only": "visibility.audit_only_excluded",
    "privacy_restricted": "privacy.raw_blocked_classes",
    "superseded": "contradiction.supersession",
    "conflict_both_sides": "contradiction.show_both_sides",
    "broken_provenance": "freshness.broken_provenance",
    "over_budget": "budget.token_budget",
    "byte_budget_exceeded": "rehydration.byte_budget",
    "rehydrated_exact": "rehydration.trigger",
    "raw_replaced_by_memory": "rehydration.trigger",
    "retention_removed": "retention.removed_classes",
    "recovery_protected": "recovery.protected_states",
}


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
    """The dotted policy key that decided ``rec``'s outcome, where changing that one key
    flips it (tests/unit/test_counterfactual.py holds this true on the sample); None when no
    single key does, or when the request was observed (no policy)."""
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


_HUGE = 10**9
_UNSET: Any = object()


def _policy_value(policy: "Policy", key: str) -> Any:
    family, _, rest = key.partition(".")
    section = getattr(policy, family)
    if family == "privacy" and rest.startswith("providers."):
        _, provider, field = rest.split(".")
        rule = section.providers.get(provider)
        return getattr(rule, field) if rule is not None else None
    return getattr(section, rest)


def _with_value(policy: "Policy", key: str, value: Any) -> "Policy":
    family, _, rest = key.partition(".")
    section = getattr(policy, family)
    if family == "privacy" and rest.startswith("providers."):
        _, provider, field = rest.split(".")
        rule = section.providers[provider].model_copy(update={field: value})
        section = section.model_copy(update={"providers": {**section.providers, provider: rule}})
    else:
        section = section.model_copy(update={rest: value})
    return policy.model_copy(update={family: section})


def counterfactual_policy(policy: "Policy", key: str, rec: dict[str, Any],
                          record: dict[str, Any] | None) -> "Policy | None":
    """``policy`` with ``key`` changed in the direction that would flip ``rec``: a switch is
    turned over, a window or budget opened (or, for what it let in, closed), a class or state
    taken off a list, a mode swapped. None when the key has no such change."""
    record = record or {}
    try:
        now = _policy_value(policy, key)
    except AttributeError:
        return None
    included = rec.get("decision") == "included"
    if isinstance(now, bool):
        value: Any = not now
    elif key == "window.max_messages":
        value = 0 if included else _HUGE
    elif key in ("budget.token_budget", "rehydration.byte_budget"):
        value = _HUGE
    elif key == "freshness.broken_provenance":
        value = "omit" if now == "mark" else "mark"
    elif key.startswith("freshness."):
        value = 0 if rec.get("rendering") == "compact_memory" else None
    elif key == "contradiction.supersession":
        value = "keep_both" if now == "omit_obsolete" else "omit_obsolete"
    elif key == "ownership.child_promotion":
        value = "never" if included else "auto"
    elif key == "rehydration.trigger":
        value = "never" if now == "exact_evidence" else "exact_evidence"
    elif key.endswith("blocked_classes") and isinstance(now, list):
        value = [c for c in now if c != record.get("privacy_class")]
    elif key == "retention.removed_classes":
        value = [c for c in now if c != record.get("retention_class")]
    elif key == "recovery.protected_states":
        value = []
    else:
        return None
    return _with_value(policy, key, value)


def deciding_key(snapshot: "Snapshot", request: "Request", policy: "Policy", rec: dict[str, Any],
                 record: dict[str, Any] | None, assembler: Any = None) -> str | None:
    """``policy_key`` of ``rec``, kept only when changing that key alone flips the record
    (its decision or rendering) on a replay of the request: a record that several keys
    decide (unblocked, it would still be replaced, trimmed or deduplicated) names none."""
    context = {**request.__dict__, "policy_version": policy.version}
    key = policy_key(context, rec, record)
    if key is None:
        return None
    changed = counterfactual_policy(policy, key, rec, record)
    if changed is None:
        return None
    from .assembler import get_assembler

    plugin = assembler if assembler is not None else get_assembler("reference")
    out = plugin.assemble(snapshot, request, changed)
    after = next((r for r in out.records if r["record_kind"] == rec["record_kind"]
                  and r["record_id"] == rec["record_id"]), None)
    if after is None or (after["decision"], after["rendering"]) != (rec.get("decision"), rec.get("rendering")):
        return key
    return None


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


def _counterfactual(rec: dict[str, Any], record: dict[str, Any] | None, policy: str,
                    assembly: dict[str, Any], others: list[dict[str, Any]] | None) -> str:
    reason = rec.get("reason_code")
    detail = (rec.get("detail") or "").strip()
    record = record or {}
    if reason == "over_budget":
        return f"It needed {rec.get('tokens', 0)} tokens" + (f" ({detail})" if detail else "") + "; a larger token budget or a smaller prompt would have let it in."
    if reason == "stale":
        # the policy window's date, as the freshness stage wrote it ("stale since T (class, Nh window)")
        tools = ", ".join(record.get("revalidation_tools") or [])
        s = f"It has been {detail}" if detail.startswith("stale since") else "It is stale"
        return s + (f"; revalidating with {tools} would refresh it." if tools else "; a fresh observation would refresh it.")
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
        return (f"Its class {cls} is blocked as raw under policy {policy}" if cls else f"Blocked as raw under policy {policy}") + "; only an explicit policy change would send it raw."
    if reason == "provider_restricted":
        cls = record.get("privacy_class")
        provider = assembly.get("provider") or "this provider"
        what = f"{cls} data" if cls else "its privacy class"
        return (f"Policy {policy} sends no {what} to {provider}, raw or summarised; only an explicit "
                "policy change would send it.")
    if reason == "raw_replaced_by_memory":
        mid = detail.split()[-1] if detail.startswith("replaced by compact memory") else None
        if mid:
            return f"Compact memory {mid}, derived from it, is in the prompt in its place."
        return _sentence(detail)
    if reason == "byte_budget_exceeded":
        return f"It has {record.get('byte_size', '?')} bytes; a larger rehydration byte budget would have let it in."
    if reason == "broken_provenance":
        return "Repairing its provenance (restoring the missing source) would make it eligible again."
    if reason == "child_not_promoted":
        return "Promoting the child's output would make it visible to the parent."
    if reason == "outside_window":
        return "A wider window would have kept it."
    return _sentence(detail)


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
    key: str | None = _UNSET,
) -> str:
    """One sentence (two for omissions) on why ``rec`` was included or omitted.

    ``others`` are the final rows of every record of the same assembly (same side): what a
    sentence about another record (a memory's raw source, a replacement) needs to be true.
    Without them, nothing is said about other records' decisions. ``key`` is the deciding
    policy key when the caller checked it (``deciding_key``); by default ``policy_key``."""
    if key is _UNSET:
        key = policy_key(assembly, rec, record)
    kind = rec["record_kind"]
    rid = rec["record_id"]
    name = f"{KIND_NAMES.get(kind, kind)} {rid}"
    policy = assembly.get("policy_version", "?")
    if policy == OBSERVED or is_runtime_version(str(policy)):
        return _observed(assembly, rec, name)
    reason = rec.get("reason_code") or ""
    family = rec.get("policy_family") or ""
    broken_sources = [
        p["id"] for p in provenance
        if p.get("broken") and p.get("kind") == "tool_artifact" and p.get("depth", 1) == 1
    ]
    if rec.get("decision") == "included":
        rendering = RENDERING_PHRASES.get(rec.get("rendering") or "", rec.get("rendering") or "")
        why = INCLUDED_PHRASES.get(reason, reason.replace("_", " "))
        if broken_sources and rec.get("rendering") in ("stale_marker", "revalidation_hint"):
            why = "its source evidence is missing (broken provenance), so it is not presented as current fact"
        sentence = (
            f"Included {name} as {rendering}{_provenance_clause(kind, provenance)}"
            f"{_scope_clause(assembly, record)}, because {why}, under policy {policy}"
        )
        if kind == "tool_memory" and rec.get("rendering") == "compact_memory" and others is not None:
            sources = list((record or {}).get("source_artifact_ids") or [])
            raw = [(a, o["rendering"]) for a in sources
                   if (o := _included_in(others, "tool_artifact", a)) is not None
                   and o.get("rendering") in RAW_RENDERINGS]
            if raw:
                sentence += "; " + ", ".join(
                    f"its source artifact {a} is also in the prompt as {RENDERING_PHRASES[r]}"
                    for a, r in raw)
            else:
                sentence += "; raw not rehydrated because the memory sufficed"
        detail = (rec.get("detail") or "").strip()
        if detail and reason in ("compact_memory", "stale_marker", "recovery_protected", "rehydrated_exact"):
            sentence += f" ({detail})"
        return sentence + "." + (f" Decided by policy key {key}." if key else "")
    why = OMITTED_PHRASES.get(reason, reason.replace("_", " "))
    sentence = (
        f"Omitted {name}{_provenance_clause(kind, provenance)}{_scope_clause(assembly, record)},"
        f" because {why} ({family} stage, policy {policy})."
    )
    after = _counterfactual(rec, record, policy, assembly, others)
    if not after and decisions:
        last = decisions[-1]
        after = _sentence(last.get("detail") or "")
    if key:
        after = f"{after} Decided by policy key {key}.".strip()
    return f"{sentence} {after}".strip()
