"""Stage 11, the token budget.

The budget is the policy's budget.token_budget, capped by the request's context_limit (the
model's context window), minus budget.reserve_tokens (the rule's one home:
``replay.policy.effective_budget``); the request's recorded token_budget is not used. Each
record costs its tokens as rendered (``shown``: replay.render; a tool call costs
``call_tokens``). Protected records count first, then the rest in ranking order
(ranking.order; messages newest first, memories by confidence): a record that does not fit
is over_budget, so the lowest-ranked go first. The history keeps no holes: once a message
does not fit, every older message is over_budget too. Then the raw artifacts waiting for
their memory (``rehydration.settle_reference``) are fitted in what is left.

The columnar form is ``replay.columnar``'s budget pass (it walks every assembly at once)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..policy import Policy, effective_budget
from ..render import WRAPPERS, rendering_tokens
from . import rehydration
import numpy as np

from ._kit import column
from .family import Family

if TYPE_CHECKING:  # pragma: no cover
    from ..assembler import _Cand, _Run

FAMILY = Family("budget", ("budget",), ("over_budget", "redundant"),
                {"over_budget": "budget.token_budget"})


def call_tokens(arguments_json: str) -> int:
    """Token cost of showing a tool call (tool_calls carry no content_tokens column)."""
    return 12 + len(arguments_json or "") // 4


def call_tokens_sql(column: str) -> str:
    """``call_tokens`` in SQL (DuckDB's length counts characters, as len does)."""
    return f"12 + coalesce(length({column}), 0) // 4"


def shown(c: "_Cand") -> int:
    """What the model receives of a candidate: the rendering's text, counted as
    replay.render defines (a marker's or reference's words, read off the decision that
    rendered it)."""
    if c.rendering not in WRAPPERS:
        return c.tokens
    row = c.row
    return rendering_tokens({
        "rendering": c.rendering, "record_id": c.rid, "detail": c.decisions[-1][4],
        "observed_at": row.get("observed_at"), "stale_after": row.get("stale_after"),
        "revalidation_tools": row.get("revalidation_tools"), "sha256": row.get("sha256"),
        "content": row.get("result_preview")}, c.tokens)


def reference(run: "_Run") -> None:
    policy = run.policy
    available = effective_budget(policy, run.req.context_limit).available
    rank = {k: i for i, k in enumerate(policy.ranking.order)}
    used = sum(shown(c) for c in run.live() if c.protected)
    if used > available:
        for c in run.live():
            if c.protected:
                step, fam, out, reason, detail = c.decisions[-1]
                c.decisions[-1] = (step, fam, out, reason,
                                   f"{detail}; kept although over budget by {used - available} tokens")

    def order(c: "_Cand") -> tuple[Any, ...]:
        key = "exact_evidence" if c.rendering == "rehydrated_raw" else c.kind
        conf = -float(c.row["confidence"]) if c.kind == "tool_memory" else 0.0
        return (rank.get(key, len(rank)), conf, -c.created.timestamp(), c.rid)

    cut: "_Cand | None" = None  # the newest message that did not fit: every older one goes too
    for c in sorted((c for c in run.live() if not c.protected), key=order):
        if c.rendering is None:
            c.rendering = "compact_memory" if c.kind == "tool_memory" else "verbatim"
        t = shown(c)
        if c.kind == "message" and cut is not None:
            c.add(11, "budget", "deny", "over_budget",
                  f"older than {cut.rid}, which did not fit; the history keeps no holes")
        elif used + t <= available:
            used += t
        else:
            c.add(11, "budget", "deny", "over_budget", f"over budget by {used + t - available} tokens")
            if c.kind == "message":
                cut = c

    # raw artifacts with a derived memory: replaced only by a memory that is in the prompt;
    # otherwise shown as a reference on their own, if they fit in what the budget has left
    for c, derived in run.replaceable:
        if not rehydration.settle_reference(run, c, derived):
            continue
        t = shown(c)
        if used + t <= available:
            used += t
        else:
            c.add(11, "budget", "deny", "over_budget", f"over budget by {used + t - available} tokens")


# the ranking's keys (ranking.order), by code; a rehydrated artifact ranks as exact_evidence
RANK_KEYS = ("checkpoint", "skill_state", "exact_evidence", "message", "tool_memory",
             "tool_artifact", "tool_call")


def settings(policies: list["Policy"]) -> dict[str, np.ndarray]:
    """``ranks``: [policy, rank key] each key's place in the policy's ranking.order."""
    ranks = np.zeros((len(policies), len(RANK_KEYS)), dtype=np.int64)
    for i, p in enumerate(policies):
        order = {k: n for n, k in enumerate(p.ranking.order)}
        ranks[i] = [order.get(k, len(order)) for k in RANK_KEYS]
    return {"ranks": ranks,
            "token_budget": column(policies, lambda p: p.budget.token_budget, np.int64),
            "reserve": column(policies, lambda p: p.budget.reserve_tokens, np.int64)}
