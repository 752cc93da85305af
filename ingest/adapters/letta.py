"""Letta agent files (``.af``) -> export.

An agent file is a Letta server's own record of an agent: its system prompt, core memory
blocks, tools, every message it keeps, and which of those messages are in its context
window. Two layouts:

- v1 (one agent, letta <= 0.6): the agent object itself, with ``messages`` (each with
  ``in_context``), ``core_memory`` (blocks), ``tools``, ``llm_config``;
- v2 (``agents[]``, with ``blocks``, ``tools``, ``groups`` at the top): each agent has
  ``messages``, ``in_context_message_ids`` (in context order) and ``block_ids``.

Each agent is one conversation. Its messages, in time order: ``user`` (Letta's JSON
packets: user messages, heartbeats, logins, system alerts), ``assistant`` (one past LLM step
each: a model run, its ``tool_calls`` -> tool calls; the file does not record what each
past step was sent, so these runs have no assembly), ``tool`` (the result of the call its
``tool_call_id`` names; failed when a ``tool_returns`` status is ``error`` or the packet's
``status`` is ``Failed``), ``system`` (the system prompt, recompiled each time core memory
changes; system alerts).

The agent's **current context** is one more request (status ``running``: the next step)
whose assembly is the runtime's own record: the in-context messages in their context order
(the system prompt first), each core memory block right after the system prompt (counted
there, since Letta compiles the blocks into it), included; every other message omitted,
``evicted`` (summarised into the system alert Letta leaves in context), or ``superseded``
for an older version of the system prompt. It is tagged ``input:exact``; its tokens are
estimated (the file records no usage), its budget is ``llm_config.context_window``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from ..errors import ContextlensError
from .builder import AdaptResult, Builder, Rec, Shown
from .common import EPOCH, as_text, parse_ts, parts_text
from .files import Sample, read_source
from .jsonread import loads_document, read_document
from .tokens import DEFAULT_ESTIMATOR, TokenEstimator, exact_estimator

FORMAT = "letta"
EXACT_TAG = "input:exact"


def unwrapped(doc: Any, path: Path | None = None) -> Any:
    """The agent file itself when ``doc`` is a JSON string holding it: some published
    agent files (letta-ai/agent-file's workflow_agent) are the JSON text encoded once more.
    With ``path``, the inner text is read with the bounds of any document (nesting too
    deep, a lone surrogate: one error naming the file); without, it is only sniffed."""
    if not (isinstance(doc, str) and doc.lstrip()[:1] == "{"):
        return doc
    if path is not None:
        inner = loads_document(path, doc.encode("utf-8", "surrogatepass"))
    else:
        try:
            inner = json.loads(doc)
        except (ValueError, RecursionError):
            return doc
    return inner if isinstance(inner, dict) else doc


def sniff_document(doc: Any) -> str | None:
    doc = unwrapped(doc)
    if not isinstance(doc, dict):
        return "not a JSON object"
    if isinstance(doc.get("agents"), list) and ("blocks" in doc or "tools" in doc):
        return None
    if isinstance(doc.get("messages"), list) and ("core_memory" in doc or "llm_config" in doc) \
            and ("agent_type" in doc or "system" in doc):
        return None
    return ('no "agents" list with "blocks" or "tools" (v2), nor "messages" with "core_memory" / '
            '"llm_config" (v1)')


_REASONING = {"redacted_reasoning": "[reasoning: redacted]",
              "omitted_reasoning": "[reasoning: omitted]"}


def _part_text(kind: Any, c: dict[str, Any]) -> str:
    if kind == "text":
        return as_text(c.get("text"))
    if kind == "reasoning":
        return "[reasoning] " + as_text(c.get("reasoning"))
    if kind in _REASONING:
        return _REASONING[kind]
    if kind == "summarized_reasoning":
        return "[reasoning summary] " + as_text(c.get("summary"))
    if kind == "image":
        return "[image]"
    return f"[{kind}] " + as_text({k: v for k, v in c.items() if k != "type"})


def content_text(msg: dict[str, Any]) -> str:
    """A Letta message's text: its ``content`` parts (or the ``text`` of older files)."""
    content = msg.get("content")
    if content is None:
        return as_text(msg.get("text"))
    return parts_text(content, _part_text)


def _packet(text: str) -> dict[str, Any] | None:
    """Letta's JSON packets (user_message, heartbeat, login, system_alert, tool status)."""
    s = text.strip()
    if not s.startswith("{"):
        return None
    try:
        v = json.loads(s)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


def _failed(msg: dict[str, Any], text: str) -> bool:
    returns = msg.get("tool_returns") if isinstance(msg.get("tool_returns"), list) else []
    if any(isinstance(r, dict) and str(r.get("status")).lower() == "error" for r in returns):
        return True
    packet = _packet(text)
    return bool(packet) and str(packet.get("status")).lower() in ("failed", "error")


def _agents(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each agent as {agent, messages, in_context (ordered ids or None), blocks, version}."""
    if isinstance(doc.get("agents"), list):
        blocks = {b.get("id"): b for b in doc.get("blocks") or [] if isinstance(b, dict)}
        out = []
        for a in doc["agents"]:
            if not isinstance(a, dict):
                continue
            own = [blocks[i] for i in a.get("block_ids") or [] if i in blocks]
            own += [b for b in a.get("memory_blocks") or [] if isinstance(b, dict)]
            ids = a.get("in_context_message_ids")
            out.append({"agent": a, "messages": a.get("messages") or [], "blocks": own, "version": 2,
                        "in_context": list(ids) if isinstance(ids, list) else None})
        return out
    memory = doc.get("core_memory")
    if not isinstance(memory, list) and isinstance(doc.get("memory"), dict):
        memory = doc["memory"].get("blocks")
    msgs = doc.get("messages") or []
    order = doc.get("in_context_message_indices")
    in_context = None
    if isinstance(order, list):
        in_context = [i for i in order if isinstance(i, int) and 0 <= i < len(msgs)]
    return [{"agent": doc, "messages": msgs, "blocks": [b for b in memory or [] if isinstance(b, dict)],
             "version": 1, "in_context": in_context, "by_index": in_context is not None}]


def _model(agent: dict[str, Any]) -> str:
    cfg = agent.get("llm_config") if isinstance(agent.get("llm_config"), dict) else {}
    return str(cfg.get("model") or agent.get("model") or "unknown")


def adapt_letta(path: Path, out_dir: Path, estimator: TokenEstimator | None = None) -> AdaptResult:
    data = read_source(path)
    doc = unwrapped(read_document(path, data, "a Letta agent file", sniff_document), path)
    b = Builder(FORMAT, path, data, estimator)
    # an agent with neither messages nor memory blocks has no context to show
    agents = [a for a in _agents(doc) if a["messages"] or a["blocks"]]
    if not agents:
        raise ContextlensError(f"{path}: no Letta agent with messages or memory blocks")
    if estimator is None or estimator is DEFAULT_ESTIMATOR:
        b.use_exact(exact_estimator([_model(a["agent"]) for a in agents]))
    for n, a in enumerate(agents):
        _agent(b, path, doc, a, n)
    return b.write(out_dir)


def _agent(b: Builder, path: Path, doc: dict[str, Any], entry: dict[str, Any], n: int) -> None:
    agent = entry["agent"]
    where = f"{path.name} agent {n}"
    model = _model(agent)
    cfg = agent.get("llm_config") if isinstance(agent.get("llm_config"), dict) else {}
    provider = str(cfg.get("model_endpoint_type") or cfg.get("provider_name") or "letta")
    raw = [m for m in entry["messages"] if isinstance(m, dict)]
    if len(raw) != len(entry["messages"]):
        b.warn(f"{where}: {len(entry['messages']) - len(raw)} messages are not objects, skipped")
    # time order; the file's order breaks ties
    order = sorted(range(len(raw)), key=lambda i: (parse_ts(raw[i].get("created_at")) or EPOCH, i))
    # the agent's own times (the file's top-level created_at is when it was exported)
    times = [parse_ts(x.get("created_at")) for x in [agent, *raw, *entry["blocks"]]]
    start = min((x for x in times if x is not None), default=None) or parse_ts(doc.get("created_at")) or EPOCH
    name = as_text(agent.get("name")) or f"agent {n}"
    desc = as_text(agent.get("description"))
    cid = b.conversation(f"Letta agent {name}" + (f": {desc}" if desc else ""), start)
    pid = b.participant(cid, f"agent:{agent.get('id') or n}", name, "model", provider, model)
    user = b.user_of[cid]
    recs: dict[int, list[Rec]] = {}  # message index -> its records (message, or calls / result)
    calls: dict[str, str] = {}  # tool call id -> our tool_call_id
    last_user: str | None = None
    last_t = start
    for i in order:
        m = raw[i]
        t = parse_ts(m.get("created_at")) or last_t + dt.timedelta(milliseconds=1)
        last_t = max(last_t, t)
        text = content_text(m)
        role = m.get("role")
        if role == "assistant":
            rid = b.run(cid, pid, provider, str(m.get("model") or model), t, ended_at=t,
                        trigger_message_id=last_user)
            out = [b.message(cid, "assistant", text, t, participant_id=pid, model_run_id=rid,
                             speaker_label=str(m.get("model") or model), parent_message_id=last_user)]
            made = []
            for c in m.get("tool_calls") or []:
                if not isinstance(c, dict):
                    continue
                fn = c.get("function") if isinstance(c.get("function"), dict) else {}
                call = b.tool_call(rid, str(fn.get("name") or c.get("name") or "unknown"),
                                   fn.get("arguments", c.get("arguments", {})), t)
                if isinstance(c.get("id"), str):
                    calls[c["id"]] = call.id
                out.append(call)
                made.append(call.id)
            if len(made) >= 2:
                for tid in made:
                    b.call_row(tid)["parallel_group"] = f"{rid}:parallel"
                b.bump("parallel_groups")
            recs[i] = out
        elif role == "tool":
            tid = calls.get(m.get("tool_call_id")) if isinstance(m.get("tool_call_id"), str) else None
            if tid is not None and b.call_row(tid)["status"] == "pending":
                recs[i] = [b.tool_result(tid, text, _failed(m, text), t)]
            else:
                recs[i] = [b.message(cid, "tool", text, t, speaker_label=str(m.get("name") or "tool"))]
        elif role == "system":
            packet = _packet(text)
            label = str(packet.get("type")) if packet and packet.get("type") else "system prompt"
            recs[i] = [b.message(cid, "system", text, t, speaker_label=label)]
        else:
            if role != "user":
                b.warn(f"{where} message {i}: role {role!r} read as user")
            packet = _packet(text)
            kind = str(packet.get("type")) if packet and packet.get("type") else "user_message"
            rec = b.message(cid, "user", text, t, participant_id=user if kind == "user_message" else None,
                            speaker_label=None if kind == "user_message" else kind)
            recs[i] = [rec]
            if kind == "user_message":
                last_user = rec.id
    _current(b, where, entry, raw, recs, order, cid, pid, provider, model, cfg, last_t, last_user)


def _current(b: Builder, where: str, entry: dict[str, Any], raw: list[dict[str, Any]],
             recs: dict[int, list[Rec]], order: list[int], cid: str, pid: str, provider: str,
             model: str, cfg: dict[str, Any], last_t: dt.datetime, last_user: str | None) -> None:
    """The agent's next request: what its context window holds now, as Letta recorded it."""
    ids = entry["in_context"]
    if entry.get("by_index"):
        context = list(ids)
        how = "in_context_message_indices"
    elif ids is not None:
        at = {m.get("id"): i for i, m in enumerate(raw)}
        missing = [x for x in ids if x not in at]
        if missing:
            b.warn(f"{where}: {len(missing)} in_context_message_ids name no message of the agent")
        context = [at[x] for x in ids if x in at]
        how = "in_context_message_ids"
    else:
        flagged = [i for i in order if raw[i].get("in_context") is True]
        # Letta keeps the system prompt first in the context window
        prompts = [i for i in flagged if raw[i].get("role") == "system" and _packet(content_text(raw[i])) is None]
        first = prompts[-1:] or [i for i in flagged if raw[i].get("role") == "system"][:1]
        context = first + [i for i in flagged if i not in first]
        how = "in_context"
    t = last_t + dt.timedelta(milliseconds=1)
    rid = b.run(cid, pid, provider, model, t, trigger_message_id=last_user, status="running")
    included: list[Rec] = []
    shown: dict[str, Shown] = {}
    prompt_text = ""
    for pos, i in enumerate(context):
        included.extend(recs.get(i, []))
        if pos == 0 and raw[i].get("role") == "system":
            prompt_text = content_text(raw[i])
            included.extend(_blocks(b, cid, entry["blocks"], prompt_text, t, shown))
    if not context or raw[context[0]].get("role") != "system":
        included = _blocks(b, cid, entry["blocks"], "", t, shown) + included
    in_context = set(context)
    omitted = []
    for i in order:
        if i in in_context:
            continue
        m = raw[i]
        prompt = m.get("role") == "system" and _packet(content_text(m)) is None
        for r in recs.get(i, []):
            if prompt:
                omitted.append((r, "superseded", "window",
                                "an earlier system prompt, recompiled since (Letta rebuilds it when core memory changes)"))
            else:
                omitted.append((r, "evicted", "window",
                                f"evicted from the agent's context window (not in its {how})"))
    window = cfg.get("context_window") if isinstance(cfg.get("context_window"), int) else None
    agent = entry["agent"]
    tags = [EXACT_TAG, "letta:current_context", f"letta_agent:{agent.get('id') or agent.get('name') or where}",
            f"core_memory_blocks:{len(entry['blocks'])}"]
    b.assembly(rid, included, omitted, None, extra_tags=tags, context_window_tokens=window or None,
               shown_as=shown)
    b.bump("evicted", sum(1 for _, reason, _, _ in omitted if reason == "evicted"))


def _blocks(b: Builder, cid: str, blocks: list[dict[str, Any]], prompt: str, t: dt.datetime,
            shown: dict[str, Shown]) -> list[Rec]:
    """One system record per core memory block. Letta compiles the blocks into the system
    prompt (``<label>…</label>``): a block found there is counted there, not twice."""
    out = []
    for blk in blocks:
        label = as_text(blk.get("label")) or "block"
        when = parse_ts(blk.get("updated_at")) or parse_ts(blk.get("created_at")) or t
        rec = b.message(cid, "system", as_text(blk.get("value")), min(when, t),
                        speaker_label=f"core memory: {label}")
        if prompt and f"<{label}" in prompt:
            shown[rec.id] = Shown("verbatim", "in_window",
                                  f"core memory block '{label}', compiled into the system prompt "
                                  "(its tokens are counted there)", 0)
        b.bump("memory_blocks")
        out.append(rec)
    return out


class LettaAdapter:
    """The ``letta`` adapter (entry point of ``contextlens.adapters``)."""

    name = FORMAT
    description = "Letta agent file (.af): messages, in-context set, core memory blocks (v1 and v2)"

    def sniff(self, sample: Sample) -> str | None:
        if sample.document is not None:
            return sniff_document(sample.document)
        if not sample.complete and sample.head.lstrip()[:1] == b"{" and (
                b'"in_context_message_ids"' in sample.head
                or (b'"core_memory"' in sample.head and b'"in_context"' in sample.head)):
            return None  # a file over the sniff limit, decided on the keys of its head
        return sample.not_json_reason() if not sample.is_json else "not a JSON object"

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        return adapt_letta(path, out_dir, estimator)
