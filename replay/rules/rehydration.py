"""Stage 8, rehydration (a subagent's records are promoted in ``visibility``).

Artifacts named in exact_evidence_ids are rehydrated raw within rehydration.byte_budget
(rehydration.trigger exact_evidence); another settled artifact with a derived memory is
raw_replaced_by_memory only if that memory ends up in the prompt (decided after the budget:
``settle_reference`` / ``columnar_replaced``); otherwise it is shown as a reference and
budgeted last. A settled tool call is redundant (its artifact carries the result)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._kit import ST_SUCCEEDED, greedy, mask
from ._kit import column
from .family import Family

if TYPE_CHECKING:  # pragma: no cover
    from ..policy import Policy
    from ..assembler import _Cand, _Run
    from ..columnar import Rows

FAMILY = Family("rehydration", ("rehydration",),
                ("rehydrated_exact", "byte_budget_exceeded", "raw_replaced_by_memory", "lineage",
                 "redundant"),
                {"rehydrated_exact": "rehydration.trigger",
                 "byte_budget_exceeded": "rehydration.byte_budget",
                 "raw_replaced_by_memory": "rehydration.trigger"})


def reference(run: "_Run") -> None:
    policy, ix, at = run.policy, run.ix, run.at
    bytes_left = policy.rehydration.byte_budget  # the request's recorded byte_budget is informational
    exact = set(run.req.exact_evidence_ids) if policy.rehydration.trigger == "exact_evidence" else set()
    for c in run.live():
        if c.child:  # promoted (or not) by the visibility family
            continue
        if c.kind == "tool_artifact":
            settled = c.row["status"] == "succeeded"
            if c.rid in exact and settled:
                if c.row["byte_size"] <= bytes_left:
                    bytes_left -= c.row["byte_size"]
                    c.add(8, "rehydration", "rehydrate", "rehydrated_exact",
                          f"exact evidence requested; {c.row['byte_size']} bytes raw")
                    c.rendering = "rehydrated_raw"
                else:
                    c.add(8, "rehydration", "deny", "byte_budget_exceeded",
                          f"needs {c.row['byte_size']} bytes, {bytes_left} left of the byte budget")
            elif settled:
                derived = [m for m in ix.mem_by_source.get(c.rid, []) if ix.mems[m]["created_at"] <= at]
                if derived:
                    # decided after the budget: replaced only by a memory that is in the prompt
                    run.replaceable.append((c, derived))
                    c.alive = False
                else:
                    c.add(8, "rehydration", "allow", "lineage",
                          "no compact memory derived; shown as a reference")
                    c.rendering = "reference"
        elif c.kind == "tool_call" and ix.call_state(c.row, at) == "succeeded":
            arts = ix.arts_by_call.get(c.rid, [])
            c.add(8, "rehydration", "deny", "redundant",
                  f"result carried by {', '.join(arts) or 'its artifact'}")


def settle_reference(run: "_Run", c: "_Cand", derived: list[str]) -> bool:
    """After the budget, a raw artifact with a derived memory: replaced when one of those
    memories is in the prompt (False), else shown as a reference that the budget still has
    to fit (True)."""
    mem_cands = run.mem_cands
    shown_mems = [m for m in derived if mem_cands.get(m) is not None and mem_cands[m].alive]
    if shown_mems:
        c.add(8, "rehydration", "replace", "raw_replaced_by_memory",
              f"replaced by compact memory {shown_mems[0]}")
        return False
    first = mem_cands.get(derived[0])
    why = first.decisions[-1][3] if first is not None and first.decisions else "not a candidate"
    c.alive = True
    c.add(8, "rehydration", "allow", "lineage",
          f"its compact memory {derived[0]} is not in the prompt ({why}); shown as a reference")
    c.rendering = "reference"
    return True


def columnar(s: "Rows") -> None:
    cand, P, a, n = s.cand, s.P, s.a, s.n
    live8 = s.alive & ~s.child
    art8 = live8 & s.is_art
    settled = cand["settled"]
    exact = art8 & settled & cand["exact"] & P["exact_trigger"][s.pol]
    ex_rows = np.flatnonzero(exact)  # in (assembly, id) order: the byte budget's order
    byte_used = np.zeros(s.n_a, dtype=np.int64)
    fit = greedy(a, ex_rows, cand["byte_size"].astype(np.int64), byte_used,
                 P["byte_budget"][s.A["pidx"]] if s.n_a else byte_used)
    rehydrated = np.zeros(n, dtype=bool)
    rehydrated[ex_rows[fit]] = True
    s.add(rehydrated, 8, "rehydration", "rehydrated_exact", False)
    s.render(rehydrated, "rehydrated_raw")
    s.add(exact & ~rehydrated, 8, "rehydration", "byte_budget_exceeded", True)
    der_src, _der_dst = s.edges[1]
    has_derived = s.any_edge(der_src, np.ones(len(der_src), dtype=bool))
    s.waiting = art8 & settled & ~exact & has_derived
    s.alive[s.waiting] = False
    reference = art8 & settled & ~exact & ~has_derived
    s.add(reference, 8, "rehydration", "lineage", False)
    s.render(reference, "reference")
    s.add(live8 & s.is_call & (cand["state"] == ST_SUCCEEDED), 8, "rehydration", "redundant", True)


def columnar_replaced(s: "Rows") -> np.ndarray:
    """After the budget (columnar form of ``settle_reference``): the waiting raw artifacts
    whose memory is in the prompt are replaced; the others become references, returned
    (rows) for the budget to fit."""
    der_src, der_dst = s.edges[1]
    replaced = s.waiting & s.any_edge(der_src, s.alive[der_dst])
    s.add(replaced, 8, "rehydration", "raw_replaced_by_memory", False)
    s.alive[replaced] = False
    late = np.flatnonzero(s.waiting & ~replaced)
    if len(late):
        s.alive[late] = True
        late_mask = mask(s.n, late)
        s.add(late_mask, 8, "rehydration", "lineage", False)
        s.render(late_mask, "reference")
    return late


def settings(policies: list["Policy"]) -> dict[str, np.ndarray]:
    return {"byte_budget": column(policies, lambda p: p.rehydration.byte_budget, np.int64),
            "exact_trigger": column(policies, lambda p: p.rehydration.trigger == "exact_evidence")}
