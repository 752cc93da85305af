"""Stage 3, branch lineage: a record must lie on the active branch lineage (the branch, then
each ancestor up to its fork message's time). A conversation-scoped memory elsewhere may
fill in (branch.shared_fill -> conversation_shared). The history-replay baseline (every
message, call and artifact on the lineage, raw) is counted here too.

The lineage itself is a graph fact: ``replay.assembler._Index.lineage`` (reference) and
``LINEAGE_SQL`` (columnar) state it; ``ingest/store/lint.py`` has a third form in its CTE."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._kit import S_CONV
from ._kit import column
from .family import Family

if TYPE_CHECKING:  # pragma: no cover
    from ..policy import Policy
    from ..assembler import _Run
    from ..columnar import Rows
    from ..visibility import Decision, RequestView

FAMILY = Family("branch", ("branch",), ("conversation_shared", "sibling_branch"),
                {"sibling_branch": "branch.lineage_only", "conversation_shared": "branch.shared_fill"})

# the lineage of each requesting branch: each branch with the cut-off after which its
# records are not inherited (null for the requesting branch itself)
LINEAGE_SQL = """
WITH RECURSIVE
br AS (SELECT graph_conversation_id AS cid, branch_id, parent_branch_id, fork_message_id,
              epoch_us(created_at) AS created_us FROM g_branches),
nbr AS (SELECT cid, count(*) AS n FROM br GROUP BY cid),
msgs AS (SELECT graph_conversation_id AS cid, message_id, epoch_us(created_at) AS created_us
         FROM g_messages),
walk(cid, start, branch, cutoff, d) AS (
    SELECT DISTINCT cid, branch, branch, NULL::BIGINT, 0 FROM req
    UNION ALL
    SELECT l.cid, l.start, b.parent_branch_id,
           CASE WHEN l.cutoff IS NULL OR coalesce(f.created_us, b.created_us) < l.cutoff
                THEN coalesce(f.created_us, b.created_us) ELSE l.cutoff END,
           l.d + 1
    FROM walk l
    JOIN br b ON b.cid = l.cid AND b.branch_id = l.branch
    JOIN br p ON p.cid = b.cid AND p.branch_id = b.parent_branch_id
    LEFT JOIN msgs f ON f.cid = b.cid AND f.message_id = b.fork_message_id
    JOIN nbr ON nbr.cid = l.cid
    WHERE l.d <= nbr.n)
SELECT cid, start, branch, cutoff FROM walk
QUALIFY row_number() OVER (PARTITION BY cid, start, branch ORDER BY d) = 1
"""


def decide(view: "RequestView", kind: str, row: dict[str, Any], branch: str | None,
           on: bool) -> "Decision | None":
    """A record's stage 3 decision under ``view`` (None: nothing to say, it is on the lineage
    or the policy does not hold to it)."""
    rules = view.rules
    if on or not rules.lineage_only:
        return None
    if kind == "tool_memory" and row["visibility_scope"] == "conversation" and rules.shared_fill:
        return (3, "branch", "allow", "conversation_shared",
                f"conversation-scoped memory from branch {branch}")
    cut = view.lineage.get(branch)  # type: ignore[arg-type]
    if cut is not None:
        return (3, "branch", "deny", "sibling_branch", f"on {branch} after the fork at {cut[1]}")
    return (3, "branch", "deny", "sibling_branch", f"sibling branch {branch}")


def reference(run: "_Run") -> None:
    view = run.view
    lineage = view.lineage
    for c in run.cands:
        cut = lineage.get(c.branch)
        on = c.branch in lineage and (cut is None or c.created <= cut[0])
        if on and c.created <= run.at and c.kind in ("message", "tool_call", "tool_artifact"):
            run.baseline_tokens += c.tokens
            run.baseline_messages += c.kind == "message"
        if not c.alive:
            continue
        d = decide(view, c.kind, c.row, c.branch, on)
        if d is not None:
            c.add(*d)


def columnar(s: "Rows") -> None:
    on = s.cand["on_lineage"]
    base = on & (s.created <= s.A["at"][s.a]) & (s.is_msg | s.is_call | s.is_art)
    s.baseline_tokens = np.bincount(s.a[base], weights=s.tokens[base],
                                    minlength=s.n_a).astype(np.int64)
    off = s.alive & ~on & s.P["lineage_only"][s.pol]
    fill = off & s.is_mem & (s.cand["scope"] == S_CONV) & s.P["shared_fill"][s.pol]
    s.add(fill, 3, "branch", "conversation_shared", False)
    s.add(off & ~fill, 3, "branch", "sibling_branch", True)


def settings(policies: list["Policy"]) -> dict[str, np.ndarray]:
    return {"lineage_only": column(policies, lambda p: p.branch.lineage_only),
            "shared_fill": column(policies, lambda p: p.branch.shared_fill)}
