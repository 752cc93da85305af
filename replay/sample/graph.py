"""A small in-memory builder for the sample's execution graph (rows as contract dicts)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

from replay.render import count_tokens
from replay.rules.budget import call_tokens  # the budget family's one rule (re-exported here)

UTC = dt.timezone.utc


def ts(text: str) -> dt.datetime:
    """'2026-10-20 09:00:05' -> aware UTC datetime."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def tokens_of(text: str) -> int:
    """The sample's token count of ``text``: the counter a replay counts a rendering's words
    with (``replay.render.count_tokens``), so a stale marker costs its memory plus its words."""
    return count_tokens(text)


@dataclass
class Request:
    """What the runtime knew when it asked for an assembly (becomes context_assemblies)."""

    assembly_id: str
    model_run_id: str
    assembled_at: dt.datetime
    policy_version: str
    assembler_version: str
    exact_evidence_ids: list[str]
    tags: list[str]
    context_limit: int | None = None  # None: the context window of the run's model


@dataclass
class Graph:
    rng: random.Random
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    by_id: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    _counters: dict[str, int] = field(default_factory=dict)
    _last_message: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ plumbing
    def _new_id(self, prefix: str) -> str:
        n = self._counters.get(prefix, 0) + 1
        self._counters[prefix] = n
        return f"{prefix}-{n:03d}"

    def _add(self, table: str, key: str, row: dict[str, Any]) -> dict[str, Any]:
        self.tables.setdefault(table, []).append(row)
        ids = self.by_id.setdefault(table, {})
        assert row[key] not in ids, (table, row[key])
        ids[row[key]] = row
        return row

    def get(self, table: str, key: str) -> dict[str, Any]:
        return self.by_id[table][key]

    # ------------------------------------------------------------------ nodes
    def conversation(self, cid: str, title: str, owner: str, at: str) -> str:
        self._add("conversations", "conversation_id",
                  {"conversation_id": cid, "title": title, "owner_id": owner, "created_at": ts(at)})
        return cid

    def branch(self, bid: str, conv: str, name: str, at: str, parent: str | None = None,
               fork: str | None = None) -> str:
        self._add("branches", "branch_id", {
            "branch_id": bid, "conversation_id": conv, "parent_branch_id": parent,
            "fork_message_id": fork, "name": name, "created_at": ts(at)})
        if fork is not None:
            self._last_message[bid] = fork
        return bid

    def participant(self, pid: str, conv: str, label: str, kind: str,
                    provider: str | None = None, model: str | None = None) -> str:
        self._add("participants", "participant_id", {
            "participant_id": pid, "conversation_id": conv, "label": label, "kind": kind,
            "provider": provider, "model": model})
        return pid

    def message(self, branch: str, role: str, content: str, at: str, participant: str | None = None,
                run: str | None = None, speaker: str | None = None, vis: str = "branch") -> str:
        b = self.get("branches", branch)
        mid = self._new_id("msg")
        self._add("messages", "message_id", {
            "message_id": mid, "conversation_id": b["conversation_id"], "branch_id": branch,
            "parent_message_id": self._last_message.get(branch), "role": role,
            "participant_id": participant, "model_run_id": run, "speaker_label": speaker,
            "content": content, "content_tokens": tokens_of(content), "visibility_scope": vis,
            "created_at": ts(at)})
        self._last_message[branch] = mid
        return mid

    def run(self, branch: str, participant: str, at: str, end: str | None,
            runtime: str = "chat", trigger: str | None = None, parent_run: str | None = None,
            batch: str | None = None, status: str = "succeeded") -> str:
        b = self.get("branches", branch)
        p = self.get("participants", participant)
        rid = self._new_id("run")
        self._add("model_runs", "model_run_id", {
            "model_run_id": rid, "conversation_id": b["conversation_id"], "branch_id": branch,
            "participant_id": participant, "trigger_message_id": trigger, "runtime_kind": runtime,
            "parent_model_run_id": parent_run, "subagent_batch_id": batch,
            "provider": p["provider"], "model": p["model"], "status": status,
            "started_at": ts(at), "ended_at": ts(end) if end else None})
        return rid

    def call(self, run: str, tool: str, args: dict[str, Any], at: str, completed: str | None,
             status: str = "succeeded", retryable: bool = False, group: str | None = None) -> str:
        cid = self._new_id("call")
        self._add("tool_calls", "tool_call_id", {
            "tool_call_id": cid, "model_run_id": run, "tool_name": tool,
            "arguments_json": json.dumps(args, sort_keys=True, ensure_ascii=False),
            "status": status, "retryable": retryable, "parallel_group": group,
            "requested_at": ts(at), "completed_at": ts(completed) if completed else None})
        return cid

    def artifact(self, call: str, body: str | bytes, at: str, *, status: str | None = None,
                 preview: str | None = None, error: str | None = None,
                 content_type: str = "application/json", privacy: str = "internal",
                 vis: str = "participant_private", shared_with: tuple[str, ...] = (),
                 retention: str = "keep", pad_tokens: int = 0, tokens: int | None = None) -> str:
        c = self.get("tool_calls", call)
        r = self.get("model_runs", c["model_run_id"])
        raw = body.encode() if isinstance(body, str) else body
        if pad_tokens:
            # raw tool output is bulky; the seed decides how bulky
            filler = " ".join(f"row{i}={self.rng.randint(1000, 9999)}"
                              for i in range(pad_tokens + self.rng.randint(0, pad_tokens // 2)))
            raw = raw + b"\n" + filler.encode()
        sha = hashlib.sha256(raw).hexdigest()
        stored = retention not in ("delete", "hash_only")
        if stored:
            self.blobs[sha] = raw
        text = raw.decode("utf-8", errors="replace")
        aid = self._new_id("art")
        self._add("tool_artifacts", "artifact_id", {
            "artifact_id": aid, "tool_call_id": call, "tool_name": c["tool_name"],
            "status": status or c["status"],
            "result_preview": preview if preview is not None else text[:160],
            "error": error, "byte_size": len(raw), "sha256": sha,
            "storage_ref": f"blobs/{sha}" if stored else None, "content_type": content_type,
            # ``tokens`` for a body that is not text (an image costs far fewer tokens than bytes)
            "content_tokens": tokens if tokens is not None else tokens_of(text),
            "privacy_class": privacy, "visibility_scope": vis,
            "owner_participant_id": r["participant_id"], "owner_model_run_id": r["model_run_id"],
            "shared_with": list(shared_with), "branch_id": r["branch_id"],
            "retention_class": retention, "created_at": ts(at)})
        return aid

    def memory(self, branch: str, sources: list[str], summary: str, at: str, *,
               observed: str | None = None, freshness: str = "durable",
               privacy: str = "internal", confidence: float = 0.9,
               trust: str = "tool_result", vis: str = "branch", owner_run: str | None = None,
               stale_after: str | None = None, revalidation: tuple[str, ...] = (),
               conflicts: tuple[str, ...] = (), supersedes: tuple[str, ...] = (),
               promotion: str = "auto", promoted: bool = False,
               structured: dict[str, Any] | None = None, ambiguity: str | None = None,
               tools: list[str] | None = None) -> str:
        b = self.get("branches", branch)
        arts = self.by_id.get("tool_artifacts", {})
        if tools is None:
            tools = sorted({arts[a]["tool_name"] for a in sources if a in arts})
        owner_participant = None
        if owner_run is not None:
            owner_participant = self.get("model_runs", owner_run)["participant_id"]
        mid = self._new_id("mem")
        self._add("tool_memories", "memory_id", {
            "memory_id": mid, "conversation_id": b["conversation_id"], "branch_id": branch,
            "source_artifact_ids": list(sources), "source_tool_names": tools,
            "summary": summary,
            "structured_json": json.dumps(structured, sort_keys=True) if structured else None,
            "content_tokens": tokens_of(summary) + 6, "confidence": confidence,
            "trust_source": trust, "ambiguity_notes": ambiguity, "privacy_class": privacy,
            "freshness_class": freshness, "observed_at": ts(observed or at),
            "stale_after": ts(stale_after) if stale_after else None,
            "revalidation_tools": list(revalidation),
            "provenance_locators": [f"{a}#result" for a in sources],
            "conflicts_with": list(conflicts), "supersedes": list(supersedes),
            "superseded_by": None, "promotion_policy": promotion, "promoted": promoted,
            "visibility_scope": vis, "owner_participant_id": owner_participant,
            "owner_model_run_id": owner_run, "created_at": ts(at)})
        # direction: the new memory lists what it replaces; the obsolete one points forward
        for old in supersedes:
            self.get("tool_memories", old)["superseded_by"] = mid
        for other in conflicts:
            peer = self.get("tool_memories", other)
            if mid not in peer["conflicts_with"]:
                peer["conflicts_with"].append(mid)
        return mid

    def skill(self, run: str, at: str, skills: list[str], profiles: list[str],
              tools: list[str]) -> str:
        sid = self._new_id("skill")
        text = " ".join(skills + profiles + tools)
        self._add("skill_states", "skill_state_id", {
            "skill_state_id": sid, "model_run_id": run, "loaded_skills": skills,
            "active_profiles": profiles, "direct_tools": tools,
            "content_tokens": 40 + tokens_of(text) * 3, "created_at": ts(at)})
        return sid

    def checkpoint(self, run: str, kind: str, state: dict[str, Any], at: str) -> str:
        cid = self._new_id("ckpt")
        text = json.dumps(state, sort_keys=True)
        self._add("checkpoints", "checkpoint_id", {
            "checkpoint_id": cid, "model_run_id": run, "kind": kind, "state_json": text,
            "content_tokens": tokens_of(text), "created_at": ts(at)})
        return cid

    def request(self, run: str, at: str, policy: str, scenario: str | None = None,
                tags: tuple[str, ...] = (), exact: tuple[str, ...] = (),
                assembler: str = "ref-1.0.0", context_limit: int | None = None) -> str:
        aid = self._new_id("asm")
        all_tags = ([f"scenario:{scenario}"] if scenario else []) + list(tags)
        self.requests.append(Request(aid, run, ts(at), policy, assembler, list(exact), all_tags,
                                     context_limit))
        return aid
