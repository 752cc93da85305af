"""The window family: stage 1 (a record created after the assembly is not yet a candidate's
to show) and stage 10 (the newest ``window.max_messages`` live messages enter: in_window on
the active branch, lineage on an ancestor, speaker_context for another speaker in an
autonomous discussion; older ones are outside_window)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ingest.timefmt import sentence_time

from ._kit import groups, mask
from ._kit import column
from .family import Family

if TYPE_CHECKING:  # pragma: no cover
    from ..policy import Policy
    from ..assembler import _Run
    from ..columnar import Rows

FAMILY = Family("window", ("window",),
                ("not_yet_created", "outside_window", "speaker_context", "in_window", "lineage"),
                {"outside_window": "window.max_messages", "in_window": "window.max_messages"})


# --------------------------------------------------------------------------- stage 1

def reference_created(run: "_Run") -> None:
    at = run.at
    for c in run.cands:
        if c.created > at:
            c.add(1, "window", "deny", "not_yet_created",
                  f"created {sentence_time(c.created)}, after the assembly at {sentence_time(at)}")


def columnar_created(s: "Rows") -> None:
    s.add(s.created > s.A["at"][s.a], 1, "window", "not_yet_created", True)


# --------------------------------------------------------------------------- stage 10

def reference(run: "_Run") -> None:
    msgs = sorted((c for c in run.live() if c.kind == "message"),
                  key=lambda c: (c.created, c.rid), reverse=True)
    limit = run.policy.window.max_messages
    for i, c in enumerate(msgs):
        if i >= limit:
            c.add(10, "window", "deny", "outside_window", f"older than the last {limit} messages")
            continue
        m = c.row
        if (run.req.runtime_kind == "autonomous_discussion" and m["role"] == "assistant"
                and m["participant_id"] != run.me):
            c.add(10, "window", "allow", "speaker_context",
                  f"said by {m['speaker_label'] or m['participant_id']}")
        elif c.branch == run.branch:
            c.add(10, "window", "allow", "in_window", f"message {i + 1} of the last {limit}")
        else:
            c.add(10, "window", "allow", "lineage", f"inherited from {c.branch}")
        c.rendering = "verbatim"


def columnar(s: "Rows") -> None:
    cand, a, n = s.cand, s.a, s.n
    msg_rows = np.flatnonzero(s.alive & s.is_msg)
    if not len(msg_rows):
        return
    n_src = int(cand["n_src"])
    order = msg_rows[np.argsort(a[msg_rows] * n_src + cand["newest_first"][msg_rows], kind="stable")]
    rank, _ = groups(a, order, s.n_a)
    outside = rank >= s.P["max_messages"][s.pol[order]]
    s.add(mask(n, order[outside]), 10, "window", "outside_window", True)
    inside = order[~outside]
    speaker = s.A["autonomous"][a[inside]] & cand["assistant"][inside] & ~cand["said_by_me"][inside]
    same = cand["same_branch"][inside]
    s.add(mask(n, inside[speaker]), 10, "window", "speaker_context", False)
    s.add(mask(n, inside[~speaker & same]), 10, "window", "in_window", False)
    s.add(mask(n, inside[~speaker & ~same]), 10, "window", "lineage", False)
    s.render(mask(n, inside), "verbatim")


def settings(policies: list["Policy"]) -> dict[str, np.ndarray]:
    return {"max_messages": column(policies, lambda p: p.window.max_messages, np.int64)}
