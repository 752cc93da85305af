"""OpenAI chat messages -> export.

Accepted shapes (JSON, or JSON lines with one of these per line):

- a list of messages ``[{"role": ..., "content": ...}, ...]`` (one conversation);
- an object holding them: ``{"messages": [...]}`` (also ``history``, as in SWE-agent
  ``.traj`` files, or ``traj``), optionally with ``model`` and ``tools``;
- a list of such objects, one conversation each (tau-bench: ``{task_id, reward, info,
  traj, trial}``); in JSON lines, either one message per line or one conversation per line.

Each ``assistant`` message is one model request whose context is every message before it
in its conversation (all included, verbatim, in order). ``tool_calls`` become tool calls
(``function.name`` / ``function.arguments``; legacy ``function_call`` too), answered by
``tool`` messages with the same ``tool_call_id`` (legacy ``function`` messages by name),
each answer becoming a tool artifact. A call never answered stays ``pending``; an answer
whose content starts with ``Error`` (or carries ``is_error: true``) marks the call failed,
since the format has no error flag. ``system`` / ``developer`` messages are records of role
system. Token counts are estimated, unless an assistant message carries
``usage.prompt_tokens``: its own, or (mini-swe-agent trajectories, ``trajectory_format``
``mini-swe-agent-*``) the provider response it kept in ``extra.response``, whose ``model``
and ``created`` also give the request's model and time.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from ..contract import sent_as
from .builder import AdaptResult, Builder, Placement, Rec, Shown
from .common import EPOCH, as_text, blocks_text, parse_ts, token_count, unreadable_counts
from .jsonread import iter_jsonl, loads_document
from .files import Sample, read_source
from .swe_agent import (
    HistoryProcessors, agent_config, elided_text, history_entry, is_legacy, is_swe_agent,
    step_inputs, unlogged_steps,
)
from .tokens import DEFAULT_ESTIMATOR, TokenEstimator, exact_estimator

FORMAT = "openai-chat"
HOLDERS = ("messages", "traj", "history", "conversation")
ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


def _is_message(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("role"), str) and d["role"] in ROLES


# marks an assistant message that a logged request was sent as history (a key no JSON holds)
EARLIER = object()


def _logged_exchange(d: Any) -> Any:
    """A request log's entry ``{request: {model, messages, tools?}, response?: {model,
    choices: [{message}], usage}}`` (a gateway's or proxy's log of one chat completions
    call) as a conversation: the request's messages, then the answer, which carries the
    response's usage and model. Anything else is returned as it is."""
    if not isinstance(d, dict) or not isinstance(d.get("request"), dict):
        return d
    request = d["request"]
    if isinstance(request.get("body"), dict) and not isinstance(request.get("messages"), list):
        request = request["body"]
    messages = request.get("messages")
    if not isinstance(messages, list) or not any(_is_message(m) for m in messages):
        return d
    response = d.get("response")
    if isinstance(response, dict) and isinstance(response.get("body"), dict):
        response = response["body"]
    answer = None
    if isinstance(response, dict) and isinstance(response.get("choices"), list):
        first = response["choices"][0] if response["choices"] else None
        message = first.get("message") if isinstance(first, dict) else None
        if isinstance(message, dict):
            answer = {"role": "assistant", **message,
                      **{k: response[k] for k in ("usage", "model", "created") if k in response}}
    # the answers before this call are its history: sent to it, made by earlier calls that
    # other entries log (not requests of this one)
    earlier = [{**m, EARLIER: True} if _is_message(m) and m["role"] == "assistant" else m
               for m in messages]
    return {**{k: v for k, v in d.items() if k not in ("request", "response")}, **request,
            "messages": [*earlier, *([answer] if answer is not None else [])]}


def _messages_of(d: Any) -> list[Any] | None:
    d = _logged_exchange(d)
    if isinstance(d, dict):
        for k in HOLDERS:
            v = d.get(k)
            if isinstance(v, list) and any(_is_message(m) for m in v):
                return v
    return None


def _conversations(values: Any) -> list[tuple[Any, list[Any], str]]:
    """(holder object or None, messages, where) per conversation found."""
    if isinstance(values, dict):
        values = _logged_exchange(values)
        msgs = _messages_of(values)
        if msgs is None and isinstance(values.get("simulations"), list):
            # tau2-bench's results: {timestamp, info, tasks, simulations: [{messages, …}]};
            # each simulation is a conversation, its agent's model in info.agent_info.llm
            info = values.get("info") if isinstance(values.get("info"), dict) else {}
            return [({**sim, "info": info}, sim_msgs, f"simulations[{i}]")
                    for i, sim in enumerate(values["simulations"])
                    if (sim_msgs := _messages_of(sim)) is not None]
        return [(values, msgs, "document")] if msgs is not None else []
    if not isinstance(values, list):
        return []
    if values and sum(_is_message(v) for v in values) >= max(1, len(values) // 2):
        return [(None, values, "document")]
    out = []
    for i, v in enumerate(values):
        msgs = _messages_of(v)
        if msgs is not None:
            out.append((_logged_exchange(v), msgs, f"entry {i}"))
    return out


def sniff(values: Any) -> str | None:
    if _conversations(values):
        return None
    entries = values if isinstance(values, list) else [values]
    held = [e for e in entries if isinstance(e, dict)
            and any(isinstance(e.get(k), list) for k in HOLDERS)]
    if held and all(not any(e.get(k) for k in HOLDERS) for e in held):
        # tau-bench writes traj [] for a task that raised (its info.error says why)
        errors = [e["info"]["error"] for e in held if isinstance(e.get("info"), dict)
                  and isinstance(e["info"].get("error"), str)]
        return (f"every entry's {'/'.join(HOLDERS)} list is empty"
                + (f" (the first says: {errors[0][:80]})" if errors else ""))
    return (
        'no list of messages with "role", no object with "messages"/"traj"/"history", '
        "and no list of such objects"
    )


def _model_of(holder: Any) -> str | None:
    if not isinstance(holder, dict):
        return None
    info = holder.get("info") if isinstance(holder.get("info"), dict) else {}
    config = info.get("config") if isinstance(info.get("config"), dict) else {}
    agent = agent_config(holder)  # SWE-agent: replay_config.agent
    for src in (holder, info, holder.get("config"), holder.get("metadata"), config.get("model"),
                agent.get("model"), info.get("agent_info")):
        if isinstance(src, dict):
            for k in ("model", "model_name", "model_id", "name", "llm"):
                if isinstance(src.get(k), str) and src[k]:
                    return src[k]
    return None


def _models(convs: list[tuple[Any, list[Any], str]]) -> list[str | None]:
    """Every model a request of these conversations was made with (None: not named)."""
    out: list[str | None] = []
    for holder, msgs, _ in convs:
        default = _model_of(holder)
        for m in msgs:
            if _is_message(m) and m["role"] == "assistant":
                named = next((v for v in (m.get("model"), _response_of(m).get("model"))
                              if isinstance(v, str) and v), None)
                out.append(named or default)
    return out


def _response_of(m: dict[str, Any]) -> dict[str, Any]:
    """The provider response an assistant message kept (mini-swe-agent: ``extra.response``)."""
    extra = m.get("extra") if isinstance(m.get("extra"), dict) else {}
    response = extra.get("response")
    return response if isinstance(response, dict) else {}


def _title(holder: Any, msgs: list[Any], fallback: str) -> str:
    if isinstance(holder, dict):
        for k in ("title", "task_id", "instance_id", "id"):
            if holder.get(k) is not None and k != "id":
                if k == "title":
                    return as_text(holder[k])
                first = next(
                    (blocks_text(m.get("content")) for m in msgs if _is_message(m) and m.get("role") == "user"),
                    "",
                )
                return f"{k} {as_text(holder[k])}: {first}"
    for m in msgs:
        if _is_message(m) and m.get("role") == "user":
            return blocks_text(m.get("content"))
    return fallback


def _fixed_opener(m: dict[str, Any]) -> bool:
    """An assistant message that records a cost of exactly 0 and no usage, no tool call:
    a runtime's fixed text (tau2-bench's ``DEFAULT_FIRST_AGENT_MESSAGE``), not a model's.
    Only asked of a message that opens the conversation."""
    cost = m.get("cost")
    return (isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost == 0
            and not m.get("usage") and not _response_of(m) and not m.get("tool_calls"))


def _is_error(msg: dict[str, Any], text: str) -> bool:
    if msg.get("is_error") is True or msg.get("error"):
        return True
    return text.lstrip().lower().startswith("error")


def adapt_openai_chat(path: Path, out_dir: Path, estimator: TokenEstimator | None = None) -> AdaptResult:
    data = read_source(path)
    b = Builder(FORMAT, path, data, estimator)
    try:
        values: Any = loads_document(path, data)
        line_of = None
    except (ValueError, UnicodeDecodeError):
        parsed = list(iter_jsonl(path, data, b))
        values = [v for _, v in parsed]
        line_of = [n for n, _ in parsed]
    convs = _conversations(values)
    if isinstance(values, list) and convs and convs[0][2] != "document":
        # a list of conversations (tau-bench's results): say which entries hold none
        skipped = [i for i, v in enumerate(values) if _messages_of(v) is None]
        for i in skipped[:3]:
            where = f"line {line_of[i]}" if line_of is not None else f"entry {i}"
            b.warn(f"{path.name} {where}: no list of chat messages under "
                   f"{'/'.join(HOLDERS)}, skipped")
        if len(skipped) > 3:
            b.warn(f"{path.name}: {len(skipped) - 3} more entries without chat messages skipped")
    if isinstance(values, dict) and isinstance(values.get("simulations"), list):
        # tau2-bench: say which simulations hold no messages (as a list's entries, above)
        held = {w for _, _, w in convs}
        for i, _ in enumerate(values["simulations"]):
            if f"simulations[{i}]" not in held:
                b.warn(f"{path.name} simulations[{i}]: no list of chat messages, skipped")
    if line_of is not None and isinstance(values, list) and convs and convs[0][2] != "document":
        convs = [(h, m, f"line {line_of[int(w.split()[1])]}") for h, m, w in convs]
    if estimator is None or estimator is DEFAULT_ESTIMATOR:
        # an OpenAI model's own tokenizer counts exactly; others are calibrated on the recording
        b.use_exact(exact_estimator(_models(convs)))
    clock = [EPOCH]
    for holder, msgs, where in convs:
        _conversation(b, path, holder, msgs, where, clock)
    return b.write(out_dir)


def _conversation(
    b: Builder, path: Path, holder: Any, msgs: list[Any], where: str, clock: list[dt.datetime]
) -> None:
    model = _model_of(holder) or "unknown"
    start = parse_ts(holder.get("created_at") or holder.get("timestamp")) if isinstance(holder, dict) else None

    def ts(m: Any) -> dt.datetime:
        t = None
        if isinstance(m, dict):
            t = parse_ts(m.get("timestamp") or m.get("created_at") or m.get("created"))
            created = parse_ts(_response_of(m).get("created")) if t is None else None
            if created is not None:
                # a response's creation time (whole seconds): never before what it answered
                t = max(created, clock[0] + dt.timedelta(milliseconds=1))
        if t is None:
            t = clock[0] + dt.timedelta(seconds=1)
        clock[0] = max(clock[0], t)
        return t

    cid = b.conversation(_title(holder, msgs, path.stem), start or ts(None))
    tools_json = holder.get("tools") if isinstance(holder, dict) else None
    overhead = b.count(json.dumps(tools_json)) if tools_json else 0
    records: list[Rec] = []
    calls: dict[str, str] = {}  # tool_call_id -> our tool_call id
    by_name: dict[str, list[str]] = {}  # legacy function_call: name -> pending calls
    last_user: str | None = None
    # where results are placed: a run of consecutive tool messages is one "message" of
    # results; text (user/system) after the calling assistant message comes before them
    block_key: str | None = None
    block_index = 0
    text_since_call = False
    processors = HistoryProcessors.of(holder)
    for why in processors.unmodelled:
        b.warn(f"{path.name} {where}: SWE-agent {why}; "
               "its requests are recorded with the history as logged, not replayed")
    swe = is_swe_agent(holder)
    # the runtime policy its requests replay under (replay/runtimes.py)
    if swe and not processors.unmodelled:
        b.runtime, b.runtime_settings = "swe-agent", {"history_processors": processors.steps}
    elif swe:
        b.runtime, b.runtime_settings = "observed", {}
    else:
        b.runtime, b.runtime_settings = "chat-full-history", {}
    # SWE-agent steps that recorded their exact input, in the order of the model's turns
    inputs = step_inputs(holder) if swe else []
    legacy = swe and is_legacy(msgs)  # SWE-agent 0.x: its observations are its user messages
    if swe:
        msgs = [*msgs, *unlogged_steps(holder, msgs)]
    turn = 0
    record_of: dict[int, str] = {}  # message index -> the record it became (its last one)
    for i, m in enumerate(msgs):
        label = f"{path.name} {where} message {i}"
        if not _is_message(m):
            b.warn(f"{label}: not a chat message (no known role), skipped")
            continue
        placement = None
        if m["role"] in ("tool", "function"):
            if block_key is None:
                block_key, block_index = label, 0
            placement = Placement(block_key, block_index, text_since_call)
            block_index += 1
        else:
            block_key = None
            if m["role"] == "assistant":
                text_since_call = False
            elif blocks_text(m.get("content")).strip():
                text_since_call = True
        shown: dict[str, Shown] = {}
        tags: list[str] = []
        if m["role"] == "assistant" and not m.get("is_demo"):
            sent = inputs[turn] if turn < len(inputs) else None
            turn += 1
            exact = _exact_input(b, msgs[:i], sent, record_of, turn - 1, label) if sent is not None else None
            if exact is not None:
                shown, tags = exact, ["input:exact"]
        if not tags and processors.steps and m["role"] == "assistant":
            for j, (text, why) in processors.elided(msgs[:i]).items():
                if j in record_of:
                    shown[record_of[j]] = Shown("cleared", "elided", why + sent_as(text), b.count(text))
        before = len(records)
        try:
            last_user = _one(b, cid, m, label, records, calls, by_name, last_user, model, overhead, ts(m),
                             placement, shown, tags)
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            b.warn(f"{label}: skipped ({type(err).__name__}: {err})")
        if len(records) > before:
            record_of[i] = records[-1].id
            if swe:
                # what SWE-agent's history processors read of this entry, for replay
                entry = history_entry(m)
                entry["elided_tokens"] = b.count(elided_text(entry["lines"], legacy))
                b.fact(record_of[i], entry=entry)
    b.thread(cid, records)


def _exact_input(b: Builder, history: list[Any], sent: list[Any], record_of: dict[int, str],
                 step: int, label: str) -> dict[str, Shown] | None:
    """How each history entry was sent, read from the step's recorded input (SWE-agent's
    ``trajectory[k].messages``): entry j of the input is history entry j after the history
    processors; one whose text differs was sent as that text. None (with a warning) when the
    input does not line up with the history."""
    if len(sent) != len(history):
        b.warn(f"{label}: trajectory step {step} recorded {len(sent)} input messages for a "
               f"history of {len(history)}; its request is reconstructed instead")
        return None
    shown: dict[str, Shown] = {}
    for j, (h, s) in enumerate(zip(history, sent)):
        if not isinstance(s, dict) or not isinstance(h, dict):
            continue
        text = blocks_text(s.get("content"))
        if text != blocks_text(h.get("content")) and j in record_of:
            shown[record_of[j]] = Shown(
                "cleared", "elided", f"sent as recorded in trajectory step {step}" + sent_as(text),
                b.count(text))
    return shown


def _one(
    b: Builder,
    cid: str,
    m: dict[str, Any],
    label: str,
    records: list[Rec],
    calls: dict[str, str],
    by_name: dict[str, list[str]],
    last_user: str | None,
    model: str,
    overhead: int,
    t: dt.datetime,
    placement: Placement | None = None,
    shown: dict[str, Shown] | None = None,
    tags: list[str] | None = None,
) -> str | None:
    user = b.user_of[cid]
    role = m["role"]
    text = blocks_text(m.get("content"))
    if role in ("system", "developer"):
        records.append(b.message(cid, "system", text, t, speaker_label=role))
    elif role == "user":
        rec = b.message(cid, "user", text, t, participant_id=user)
        records.append(rec)
        last_user = rec.id
    elif role == "assistant":
        response = _response_of(m)
        mdl = next((v for v in (m.get("model"), response.get("model")) if isinstance(v, str) and v),
                   model)
        pid = b.participant(cid, f"model:{mdl}", mdl, "model", "openai", mdl)
        if last_user is None and all(r.kind == "message" for r in records) and _fixed_opener(m):
            # the runtime's fixed greeting (tau2: "Hi! How can I help you today?", cost 0):
            # said by the agent, made by no model call, so no request
            records.append(b.message(cid, "assistant", text, t, participant_id=pid,
                                     speaker_label=mdl))
            b.bump("fixed_openers")
            return last_user
        rid = b.run(cid, pid, "openai", mdl, t, ended_at=t, trigger_message_id=last_user)
        usage = next((u for u in (m.get("usage"), response.get("usage")) if isinstance(u, dict)), {})
        key = "prompt_tokens" if "prompt_tokens" in usage else "input_tokens"
        recorded = token_count(usage.get(key))
        problem = unreadable_counts(usage, (key,))
        if problem is not None:
            b.warn(f"{label}: usage {problem}, not a whole number of tokens; the request's "
                   "input is estimated")
        if not m.get(EARLIER):  # an earlier call's answer: its run made it, unlogged here
            b.assembly(rid, list(records), [], recorded, overhead_estimate=overhead,
                       shown_as=shown, extra_tags=tags or ())
        t = t + dt.timedelta(microseconds=1)  # produced after the request was assembled
        records.append(
            b.message(cid, "assistant", text, t, participant_id=pid, model_run_id=rid,
                      speaker_label=mdl, parent_message_id=last_user)
        )
        tcs = m.get("tool_calls") if isinstance(m.get("tool_calls"), list) else []
        fc = m.get("function_call")
        if isinstance(fc, dict):
            tcs = tcs + [{"id": None, "function": fc}]
        made = []
        for tc in tcs:
            if not isinstance(tc, dict):
                b.warn(f"{label}: tool call is not an object, skipped")
                continue
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
            name = str(fn.get("name") or tc.get("name") or "unknown")
            args = fn.get("arguments", tc.get("arguments", {}))
            if isinstance(args, str):
                try:
                    json.loads(args)
                except ValueError:
                    b.warn(f"{label}: arguments of {name} are not valid JSON; kept as a string")
            rec = b.tool_call(rid, name, args, t)
            records.append(rec)
            made.append(rec.id)
            if isinstance(tc.get("id"), str):
                calls[tc["id"]] = rec.id
            by_name.setdefault(name, []).append(rec.id)
        if len(made) >= 2:
            for tid in made:
                b.call_row(tid)["parallel_group"] = f"{rid}:parallel"
            b.bump("parallel_groups")
    else:  # tool / function
        ids = m.get("tool_call_ids") if isinstance(m.get("tool_call_ids"), list) else []
        key = m.get("tool_call_id")
        if isinstance(key, str):
            ids = [key, *ids]
        tid = next(
            (calls[k] for k in ids if isinstance(k, str) and k in calls
             and b.call_row(calls[k])["status"] == "pending"),
            None,
        )
        if tid is None and not ids:
            # legacy "function" messages or tool messages without ids: by name, else
            # the oldest call still unanswered (answers follow their calls in order)
            pend = [x for x in by_name.get(str(m.get("name")), []) if b.call_row(x)["status"] == "pending"]
            if not pend:
                pend = [x for x in calls.values() if b.call_row(x)["status"] == "pending"]
                pend += [x for xs in by_name.values() for x in xs if b.call_row(x)["status"] == "pending"]
            tid = pend[0] if pend else None
        if tid is None or b.call_row(tid)["status"] != "pending":
            b.warn(f"{label}: tool message answers no pending tool call ({ids or None!r}); kept as a tool message")
            records.append(b.message(cid, "tool", text, t, speaker_label=str(m.get("name") or "tool")))
            return last_user
        records.append(b.tool_result(tid, text, _is_error(m, text), t, placement=placement))
    return last_user


class OpenAIChatAdapter:
    """The ``openai-chat`` adapter (entry point of ``contextlens.adapters``)."""

    name = FORMAT
    description = "OpenAI chat messages with tool_calls (also tau-bench traj, SWE-agent history)"

    def sniff(self, sample: Sample) -> str | None:
        if sample.document is None and sample.lines is None:
            return sample.not_json_reason()
        return sniff(sample.document if sample.document is not None else sample.lines)

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        return adapt_openai_chat(path, out_dir, estimator)
