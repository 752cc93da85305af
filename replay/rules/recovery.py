"""Stage 9, recovery: unresolved calls and their artifacts in recovery.protected_states are
protected (kept even over budget). A call's state at T: pending or deferred until
completed_at; failed until a later identical call succeeded (``_Index.call_state``; the
columnar ``state`` column). Resolved pending/failed artifacts are redundant. Skill states
(skill_active) and checkpoints (checkpoint_restore) enter as summaries."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._kit import STATES, flags
from .family import Family

if TYPE_CHECKING:  # pragma: no cover
    from ..policy import Policy
    from ..assembler import _Run
    from ..columnar import Rows

FAMILY = Family("recovery", ("recovery",),
                ("skill_active", "checkpoint_restore", "recovery_protected", "redundant"),
                {"recovery_protected": "recovery.protected_states"})


def reference(run: "_Run") -> None:
    protected_states = set(run.policy.recovery.protected_states)
    ix, at = run.ix, run.at
    for c in run.live():
        if c.kind == "skill_state":
            c.add(9, "recovery", "allow", "skill_active",
                  "skills: " + ", ".join(c.row["loaded_skills"] or []))
            c.rendering = "summary"
        elif c.kind == "checkpoint":
            c.add(9, "recovery", "allow", "checkpoint_restore", f"{c.row['kind']} checkpoint restored")
            c.rendering = "summary"
        elif c.kind in ("tool_call", "tool_artifact"):
            if c.kind == "tool_call":
                state, tool, retryable = ix.call_state(c.row, at), c.row["tool_name"], bool(c.row["retryable"])
            else:
                state, tool, retryable = ix.artifact_call_state(c.row, at)
            if state in protected_states:
                extra = ", retryable" if retryable else ""
                c.add(9, "recovery", "protect", "recovery_protected",
                      f"unresolved {tool} call ({state}{extra})")
                c.rendering = "verbatim"
                c.protected = True
            elif c.kind == "tool_call" or c.row["status"] != "succeeded":
                c.add(9, "recovery", "deny", "redundant", f"{tool} call {state}; nothing left to recover")


def columnar(s: "Rows") -> None:
    m9 = s.alive.copy()
    s.add(m9 & s.is_skill, 9, "recovery", "skill_active", False)
    s.add(m9 & s.is_ckpt, 9, "recovery", "checkpoint_restore", False)
    s.render(m9 & (s.is_skill | s.is_ckpt), "summary")
    work = m9 & (s.is_call | s.is_art)
    s.protected = work & s.P["protected"][s.pol, s.cand["state"]]
    s.add(s.protected, 9, "recovery", "recovery_protected", False)
    s.render(s.protected, "verbatim")
    s.add(work & ~s.protected & (s.is_call | ~s.cand["settled"]), 9, "recovery", "redundant", True)


def settings(policies: list["Policy"]) -> dict[str, np.ndarray]:
    return {"protected": flags(policies, STATES, lambda p: p.recovery.protected_states)}
