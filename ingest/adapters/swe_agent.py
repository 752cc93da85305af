"""SWE-agent trajectories (``*.traj``): what each request was sent after its history
processors ran (the runtime's rule, read from the trajectory's own configuration).

A trajectory's ``history`` is read as OpenAI chat messages (``openai_chat.py``); each entry
has a ``message_type`` (``system_prompt``, ``observation``, ``action``, ...) and may have
``is_demo`` and ``tags``. ``replay_config.agent.history_processors`` lists the processors
SWE-agent applied, in order, to the history before every request. This module reproduces
the ones that change what is sent (as in ``sweagent/agent/history_processors.py``):

- ``last_n_observations`` (``n``, ``polling`` = 1, ``always_remove_output_for_tags`` =
  {remove_output}, ``always_keep_output_for_tags`` = {keep_output}): of the non-demo
  observations, all but the first (the instance template) up to
  ``(count // polling) * polling - n`` are replaced by ``Old environment output: (<lines>
  lines omitted)``; a kept tag keeps one, a removed tag elides one wherever it is;
- ``tag_tool_call_observations`` (``tags`` = {keep_output}, ``function_names``): adds the tags
  to the actions calling those functions (so a later ``last_n_observations`` sees them);
- ``default`` and ``cache_control`` change nothing that is counted.

Other processors (``closed_window``, ``remove_regex``, ``image_parsing``) rewrite text in
ways not modelled here: the adapter warns and records the history as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .jsonread import json_error

__all__ = ["HistoryProcessors", "agent_config", "elided_text", "history_entry", "is_legacy",
           "is_swe_agent", "step_inputs", "unlogged_steps"]

_UNCHANGED = {"default", "cache_control"}


def agent_config(holder: Any) -> dict[str, Any]:
    """``replay_config.agent`` of a SWE-agent trajectory (it is stored as JSON text), {}
    when there is none."""
    if not isinstance(holder, dict):
        return {}
    replay = holder.get("replay_config")
    if isinstance(replay, str):
        try:
            replay = json.loads(replay)
        except ValueError:
            return {}
    agent = replay.get("agent") if isinstance(replay, dict) else None
    return agent if isinstance(agent, dict) else {}


def is_swe_agent(holder: Any) -> bool:
    """A SWE-agent trajectory: it has its run's configuration (even one that does not
    parse) or its steps."""
    return isinstance(holder, dict) and ("replay_config" in holder or bool(agent_config(holder))
                                         or isinstance(holder.get("trajectory"), list))


def step_inputs(holder: Any) -> list[list[Any] | None]:
    """Per trajectory step, the exact messages SWE-agent sent for it (``query``, or
    ``messages`` in some versions: the history after the step, so the next step's input),
    None where the step did not record them."""
    steps = holder.get("trajectory") if isinstance(holder, dict) else None
    out: list[list[Any] | None] = []
    after_step = False
    for step in steps if isinstance(steps, list) else []:
        sent = None
        if isinstance(step, dict):
            if isinstance(step.get("query"), list):
                sent = step["query"]  # the input, taken before the model call
            elif isinstance(step.get("messages"), list):
                sent = step["messages"]
                after_step = after_step or _holds_own_response(step)
        out.append(sent)
    if after_step:
        # versions that write ``messages`` write them after the step was added to the
        # history (``add_step_to_trajectory`` reads ``self.messages`` after
        # ``add_step_to_history``): step k's list, processed then, is exactly what the next
        # request was sent; the first request's input is not recorded
        out = [None, *out[:-1]]
    return out


def _holds_own_response(step: dict[str, Any]) -> bool:
    """A step's ``messages`` end with the step's own model turn (the history after it)."""
    response = step.get("response")
    if not isinstance(response, str) or not response:
        return False
    return any(isinstance(m, dict) and m.get("role") == "assistant" and _text(m.get("content")) == response
               for m in step["messages"][-3:])


# the settings of the modelled processors, as SWE-agent's own configuration types them:
# key -> (whole number at least this, or None for a list of strings; required)
_SETTINGS: dict[str, dict[str, tuple[int | None, bool]]] = {
    "last_n_observations": {"n": (0, True), "polling": (1, False),
                            "always_remove_output_for_tags": (None, False),
                            "always_keep_output_for_tags": (None, False)},
    "tag_tool_call_observations": {"tags": (None, False), "function_names": (None, False)},
}
_KEY = "replay_config.agent.history_processors"


def _setting_problem(p: dict[str, Any], i: int) -> str | None:
    """Why processor ``i`` cannot be the one SWE-agent ran (a setting its configuration
    would have refused), or None."""
    for key, (least, required) in _SETTINGS[p["type"]].items():
        if key not in p or p[key] is None:
            if required:
                return f"{_KEY}[{i}] ({p['type']}) has no {key}"
            continue
        v = p[key]
        if least is None:
            if not (isinstance(v, list) and all(isinstance(s, str) for s in v)):
                return f"{_KEY}[{i}].{key} is {_shown(v)}, not a list of strings"
        elif isinstance(v, bool) or not isinstance(v, int) or v < least:
            return f"{_KEY}[{i}].{key} is {_shown(v)}, not a whole number of at least {least}"
    return None


def _shown(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, float) or v == v and abs(v) != float("inf") else str(v)
    return text if len(text) <= 40 else text[:39] + "…"


def unlogged_steps(holder: Any, history: list[Any]) -> list[dict[str, Any]]:
    """The trajectory steps after the one that made the history's last model turn, as the
    assistant entries they would be: SWE-agent 1.x does not write the step that ends a
    run (its ``submit``) to ``history``, so that model call, sent the whole history, is only
    in ``trajectory``. The steps are lined up by the last turn's text, not counted: a step
    SWE-agent re-asked after a format error is in ``trajectory`` and never in ``history``.
    None when no step made that turn (the two do not line up: nothing is guessed)."""
    steps = holder.get("trajectory") if isinstance(holder, dict) else None
    if not isinstance(steps, list):
        return []
    turns = [m for m in history if isinstance(m, dict) and m.get("role") == "assistant"
             and not m.get("is_demo")]
    first = 0
    if turns:
        last = _text(turns[-1].get("content"))
        made = [j for j, s in enumerate(steps) if isinstance(s, dict) and s.get("response") == last]
        if not made:
            return []
        first = made[-1] + 1
    legacy = is_legacy(history)
    return [{"role": "assistant", "content": s["response"], "thought": s.get("thought"),
             "action": s.get("action"), **({} if legacy else {"message_type": "action"})}
            for s in steps[first:] if isinstance(s, dict) and isinstance(s.get("response"), str)]


def _text(content: Any) -> str:
    """A history entry's text: a string, or the text parts of a list (cache_control)."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict)
                       and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


@dataclass
class HistoryProcessors:
    """The processors of one trajectory, applied to a request's history. ``unmodelled``
    says why they cannot be replayed, if they cannot (a processor not modelled here, or a
    configuration SWE-agent would not have run): its requests are then recorded as
    observed."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, holder: Any) -> "HistoryProcessors":
        out = cls()
        replay = holder.get("replay_config") if isinstance(holder, dict) else None
        if isinstance(replay, str):
            try:
                json.loads(replay)
            except ValueError as err:
                out.unmodelled.append(f"replay_config is not JSON ({json_error(err)}): "
                                      "its history processors are unknown")
                return out
        listed = agent_config(holder).get("history_processors")
        if listed is not None and not isinstance(listed, list):
            out.unmodelled.append(f"{_KEY} is {_shown(listed)}, not a list: the processors are unknown")
            return out
        for i, p in enumerate(listed or []):
            kind = p.get("type") if isinstance(p, dict) else None
            if not isinstance(p, dict):
                out.unmodelled.append(f"{_KEY}[{i}] is {_shown(p)}, not a processor")
            elif kind in _SETTINGS:
                problem = _setting_problem(p, i)
                if problem is None:
                    out.steps.append(p)
                else:
                    out.unmodelled.append(problem)
            elif kind not in _UNCHANGED:
                out.unmodelled.append(f"history processor {kind!r} is not modelled")
        return out

    def elided(self, history: list[Any]) -> dict[int, tuple[str, str]]:
        """For the request made after ``history`` (the messages before it): index of each
        elided entry -> (what was sent instead, why)."""
        tags = [set(m.get("tags") or []) if isinstance(m, dict) else set() for m in history]
        out: dict[int, tuple[str, str]] = {}
        for p in self.steps:
            if p["type"] == "tag_tool_call_observations":
                names = set(p.get("function_names") or [])
                for i, m in enumerate(history):
                    calls = m.get("tool_calls") if isinstance(m, dict) else None
                    if m.get("message_type") == "action" and calls and names & {
                            (c.get("function") or {}).get("name") for c in calls if isinstance(c, dict)}:
                        tags[i] |= set(p.get("tags") or {"keep_output"})
                continue
            n = int(p.get("n") or 0)
            polling = max(int(p.get("polling") or 1), 1)
            remove = set(p.get("always_remove_output_for_tags") or {"remove_output"})
            keep = set(p.get("always_keep_output_for_tags") or {"keep_output"})
            legacy = is_legacy(history)
            observations = [i for i, m in enumerate(history) if isinstance(m, dict)
                            and not m.get("is_demo")
                            and (m.get("role") == "user" if legacy
                                 else m.get("message_type") == "observation")]
            last = max(0, (len(observations) // polling) * polling - n)
            older = set(observations[1:last])  # the first observation is the instance template
            for i in observations:
                if (i in older and not tags[i] & keep) or tags[i] & remove:
                    lines = _lines_of(history[i])
                    why = (f"elided by SWE-agent's last_n_observations (n={n}): one of the "
                           f"observations before the last {n}" if i in older
                           else "elided by SWE-agent: tagged to have its output removed")
                    out[i] = (elided_text(lines, legacy), why)
        return out


def elided_text(lines: int, legacy: bool = False) -> str:
    """What SWE-agent sends for an elided observation of ``lines`` lines (0.x: ``legacy``)."""
    return f"Old output omitted ({lines} lines)" if legacy else f"Old environment output: ({lines} lines omitted)"


def is_legacy(history: list[Any]) -> bool:
    """A SWE-agent 0.x history: its entries have no ``message_type``, and its
    ``last_n_history`` counts the non-demo ``user`` messages as the observations (the
    first, the instance, always kept) and sends ``Old output omitted (<lines> lines)``."""
    entries = [m for m in history if isinstance(m, dict)]
    return bool(entries) and all(m.get("message_type") is None for m in entries) \
        and any(m.get("role") is not None for m in entries)


def history_entry(m: dict[str, Any]) -> dict[str, Any]:
    """What ``HistoryProcessors.elided`` reads of one history entry, as plain data (kept in
    the transcript facts, so a replay can run the processors without the trajectory)."""
    calls = m.get("tool_calls") if isinstance(m.get("tool_calls"), list) else []
    return {
        "role": m.get("role"),
        "message_type": m.get("message_type"),
        "is_demo": bool(m.get("is_demo")),
        "tags": [str(t) for t in m.get("tags") or []],
        "tool_calls": [{"function": {"name": (c.get("function") or {}).get("name")}}
                       for c in calls if isinstance(c, dict)],
        "lines": _lines(m.get("content")),
    }


def _lines_of(m: dict[str, Any]) -> int:
    return int(m["lines"]) if isinstance(m.get("lines"), int) else _lines(m.get("content"))


def _lines(content: Any) -> int:
    if isinstance(content, str):
        return len(content.splitlines())
    if isinstance(content, list):
        return sum(len(str(c.get("text") or "").splitlines()) for c in content
                   if isinstance(c, dict) and c.get("type") == "text")
    return 0
