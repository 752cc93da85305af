"""Stage 6, contradiction and supersession.

A memory superseded by a live candidate is omitted (contradiction.supersession
omit_obsolete); the link counts in either direction: the old memory's ``superseded_by`` or
the new one's ``supersedes``. Conflicting memories: both shown (show_both_sides) or the
lower-confidence one omitted as redundant. A memory whose replacement exists but is hidden
from this request (stages 4-5) is not current: a stale marker (freshness.stale_action mark)
or omitted as superseded."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._kit import groups, mask
from ._kit import column
from .family import Family
from .visibility import HIDING_STEPS

if TYPE_CHECKING:  # pragma: no cover
    from ..policy import Policy
    from ..assembler import _Cand, _Run
    from ..columnar import Rows

FAMILY = Family("contradiction", ("contradiction",),
                ("superseded", "conflict_both_sides", "redundant", "stale_marker"),
                {"superseded": "contradiction.supersession",
                 "conflict_both_sides": "contradiction.show_both_sides"})


def reference(run: "_Run") -> None:
    live_mems = {c.rid: c for c in run.live() if c.kind == "tool_memory"}
    con = run.policy.contradiction
    if con.supersession == "omit_obsolete":
        for c in sorted(live_mems.values(), key=lambda c: c.rid):
            m = c.row
            if run.invert_supersession:
                # the drift build read `supersedes` as if it pointed at the replacement
                targets = [s for s in (m["supersedes"] or []) if s in live_mems]
                if targets:
                    c.add(6, "contradiction", "deny", "superseded", f"superseded by {targets[0]}")
                continue
            newer = [n for n in run.ix.replaced_by.get(c.rid, []) if n in live_mems and n != c.rid]
            if newer:
                c.add(6, "contradiction", "deny", "superseded", f"superseded by {newer[0]}")
    for c in sorted(live_mems.values(), key=lambda c: c.rid):
        if not c.alive:
            continue
        peers = [p for p in (c.row["conflicts_with"] or [])
                 if p in live_mems and live_mems[p].alive and p != c.rid]
        if not peers:
            continue
        if con.show_both_sides:
            c.add(6, "contradiction", "allow", "conflict_both_sides",
                  f"conflicts with {', '.join(peers)}; both sides shown")
        else:
            best = max([c] + [live_mems[p] for p in peers],
                       key=lambda x: (x.row["confidence"], x.rid))
            if best is not c:
                c.add(6, "contradiction", "deny", "redundant",
                      f"conflicts with {best.rid} (confidence {best.row['confidence']:.2f}"
                      f" over {c.row['confidence']:.2f})")
    if not run.invert_supersession:  # the drift build has no notion of a replacement's direction
        _hidden_supersession(live_mems, run)


def _hidden_supersession(live_mems: "dict[str, _Cand]", run: "_Run") -> None:
    """A live memory whose replacement exists but is hidden from this request (private,
    audit-only, owner unknown, blocked for the provider) is not shown as a current fact:
    it becomes a stale marker (stale_action mark) or is omitted as superseded."""
    for c in sorted(live_mems.values(), key=lambda c: c.rid):
        if not c.alive:
            continue
        hidden = []
        for n in run.ix.replaced_by.get(c.rid, []):
            other = run.mem_cands.get(n)
            if n == c.rid or other is None or other.alive or not other.decisions:
                continue
            step, _fam, _out, reason, _detail = other.decisions[-1]
            if step in HIDING_STEPS:
                hidden.append((n, reason))
        if not hidden:
            continue
        n, reason = hidden[0]
        why = f"superseded by {n}, which this request may not see ({reason})"
        if run.policy.freshness.stale_action == "mark":
            tools = ", ".join(c.row["revalidation_tools"] or []) or "its source tool"
            c.add(6, "contradiction", "mark", "stale_marker", f"{why}; revalidate with {tools}")
            c.rendering = "stale_marker"
        else:
            c.add(6, "contradiction", "deny", "superseded", why)


def columnar(s: "Rows") -> None:
    alive, P, pol, n = s.alive, s.P, s.pol, s.n
    hidden45 = ~alive & np.isin(s.step, HIDING_STEPS)  # hidden, not absent
    (sup_src, sup_dst), _derived, (con_src, con_dst) = s.edges
    live_mem = alive & s.is_mem
    superseded = s.any_edge(sup_src, live_mem[sup_src] & live_mem[sup_dst])
    s.add(superseded & P["omit_obsolete"][pol], 6, "contradiction", "superseded", True)
    conflict = con_src[alive[con_src] & alive[con_dst]]
    both = P["both_sides"][pol[conflict]]
    s.add(mask(n, conflict[both]), 6, "contradiction", "conflict_both_sides", False)
    weigh = np.unique(conflict[~both])
    if len(weigh):
        s.add(mask(n, _outweighed(weigh, con_src, con_dst, s.a, alive, s.cand["confidence_rank"])),
              6, "contradiction", "redundant", True)
    hidden = alive & s.is_mem & s.any_edge(sup_src, hidden45[sup_dst])
    mark = hidden & P["stale_mark"][pol]
    s.add(mark, 6, "contradiction", "stale_marker", False)
    s.render(mark, "stale_marker")
    s.add(hidden & ~mark, 6, "contradiction", "superseded", True)


def _outweighed(rows: np.ndarray, src: np.ndarray, dst: np.ndarray, a: np.ndarray,
                alive: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Conflicting memories without show_both_sides: in id order within each assembly, a
    still-live memory is dropped when a still-live peer it conflicts with outweighs it
    (higher confidence, then higher id). One drop changes the next comparison, so this
    walks the k-th such memory of every assembly at once. ``rows``: the memories with a
    live peer (sorted); ``alive`` is updated. Returns the rows dropped."""
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    first = np.searchsorted(src, rows, side="left")
    count = np.searchsorted(src, rows, side="right") - first
    rank, _ = groups(a, rows, int(a.max()) + 1 if len(a) else 0)
    dropped: list[np.ndarray] = []
    for k in range(int(rank.max()) + 1):
        now = np.flatnonzero((rank == k) & alive[rows])
        if not len(now):
            continue
        c, n_edges = rows[now], count[now]
        rep = np.repeat(np.arange(len(c)), n_edges)
        peer = dst[np.repeat(first[now], n_edges) + np.arange(int(n_edges.sum()))
                   - np.repeat(np.cumsum(n_edges) - n_edges, n_edges)]
        best = np.full(len(c), -1, dtype=np.int64)
        live = alive[peer]
        np.maximum.at(best, rep[live], key[peer[live]])
        out = c[best > key[c]]
        alive[out] = False
        dropped.append(out)
    return np.concatenate(dropped) if dropped else np.zeros(0, dtype=np.int64)


def settings(policies: list["Policy"]) -> dict[str, np.ndarray]:
    return {"omit_obsolete": column(policies, lambda p: p.contradiction.supersession == "omit_obsolete"),
            "both_sides": column(policies, lambda p: p.contradiction.show_both_sides)}
