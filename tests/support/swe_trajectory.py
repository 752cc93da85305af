"""A SWE-agent trajectory written to SWE-agent's documented format (``*.traj``), with each
step's exact input in ``trajectory[k].messages`` (the development set has none).

The inputs are written the way SWE-agent's ``LastNObservations`` history processor writes
them (``sweagent/agent/history_processors.py``): of the non-demo observations, the first
(the instance template) and the last ``n`` are kept; every other one is sent as
``Old environment output: (<lines> lines omitted)``. This module spells that out on its own
small history, independently of contextlens' code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

N = 2  # last_n_observations.n in the trajectory's configuration
STEPS = 6


def _observation(k: int) -> str:
    return "\n".join(f"obs{k} line {i}: " + "x" * 40 for i in range(k + 3))


def build() -> dict[str, Any]:
    """The trajectory (history, per-step inputs, replay_config) as a JSON-ready dict."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a software engineer.", "message_type": "system_prompt",
         "agent": "main"},
        {"role": "user", "content": "<issue>the tests fail</issue>\nSolve it.", "message_type": "observation",
         "agent": "main"},
    ]
    steps: list[dict[str, Any]] = []
    for k in range(STEPS):
        # what SWE-agent sent for step k: the history so far after LastNObservations(n=N)
        obs_idx = [i for i, m in enumerate(history) if m["message_type"] == "observation"]
        older = set(obs_idx[1:max(0, len(obs_idx) - N)])
        sent = []
        for i, m in enumerate(history):
            if i in older:
                lines = len(m["content"].splitlines())
                sent.append({**m, "content": f"Old environment output: ({lines} lines omitted)"})
            else:
                sent.append(dict(m))
        call_id = f"call_{k}"
        action = {"role": "assistant", "content": f"Step {k}: run the tests.",
                  "message_type": "action", "agent": "main",
                  "tool_calls": [{"id": call_id, "type": "function",
                                  "function": {"name": "bash", "arguments": json.dumps({"command": f"pytest -k t{k}"})}}]}
        observation = {"role": "tool", "content": _observation(k), "tool_call_ids": [call_id],
                       "message_type": "observation", "agent": "main"}
        steps.append({"action": f"pytest -k t{k}", "observation": observation["content"],
                      "response": action["content"], "thought": action["content"],
                      "execution_time": 0.5, "state": {}, "messages": sent})
        history += [action, observation]
    return {
        "trajectory": steps,
        "history": history,
        "info": {"exit_status": "submitted"},
        "replay_config": json.dumps({"agent": {
            "history_processors": [{"type": "last_n_observations", "n": N}],
            "model": {"name": "gpt-4o"}}}),
    }


def expected_elided_last_step() -> list[int]:
    """Which step outputs (k) the last step's input sent elided: every one but the last N
    (the instance template is never one of them)."""
    return list(range(0, STEPS - 1 - N))


def write(path: Path, trajectory: dict[str, Any] | None = None) -> Path:
    path.write_text(json.dumps(trajectory or build()), encoding="utf-8")
    return path


def request_r5(db: Path) -> tuple[str, str]:
    """The trajectory's request r5 in the store ``db`` (its last) and the session prefix
    every id of the store starts with."""
    from support.pilot import first_assembly

    first = first_assembly(db, "")
    prefix = first.split(":", 1)[0] + ":"
    return first.replace(":r0:", ":r5:"), prefix
