"""Stage 7, freshness and provenance.

A memory whose source artifact ids name a missing artifact: omitted (broken_provenance) or
marked (freshness.broken_provenance mark: stale_marker, rendered as revalidation_hint). A
memory older than the window of its freshness class (freshness.<class>, hours; a class
without a window never goes stale) is marked (stale_marker) or omitted (stale), by
freshness.stale_action; else compact_memory. The policy window decides, not the producer's
``stale_after``."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import numpy as np

from ingest.timefmt import sentence_time

from ingest.contract import ENUMS

from ._kit import column
from .family import Family

if TYPE_CHECKING:  # pragma: no cover
    from ..policy import Policy
    from ..assembler import _Run
    from ..columnar import Rows

FAMILY = Family("freshness", ("freshness",),
                ("stale_marker", "broken_provenance", "stale", "compact_memory"),
                {"broken_provenance": "freshness.broken_provenance"})


def fmt_age(delta: dt.timedelta) -> str:
    hours = int(delta.total_seconds() // 3600)
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if days else f"{hours}h"


def reference(run: "_Run") -> None:
    fresh = run.policy.freshness
    at = run.at
    for c in run.live():
        if c.kind != "tool_memory":
            continue
        m = c.row
        missing = [a for a in (m["source_artifact_ids"] or []) if a not in run.ix.arts]
        tools = ", ".join(m["revalidation_tools"] or []) or "its source tool"
        if missing:
            if fresh.broken_provenance == "mark":
                c.add(7, "freshness", "mark", "stale_marker",
                      f"source {', '.join(missing)} is missing (broken provenance); "
                      f"revalidate with {tools}")
                c.rendering = "revalidation_hint"
            else:
                c.add(7, "freshness", "deny", "broken_provenance",
                      f"source {', '.join(missing)} is missing")
            continue
        window = fresh.window(m["freshness_class"])
        age = at - m["observed_at"]
        if window is not None and age > dt.timedelta(hours=window):
            since = m["observed_at"] + dt.timedelta(hours=window)
            what = f"stale since {sentence_time(since)} ({m['freshness_class']}, {window}h window)"
            if fresh.stale_action == "mark":
                c.add(7, "freshness", "mark", "stale_marker", f"{what}; revalidate with {tools}")
                c.rendering = "stale_marker"
            else:
                c.add(7, "freshness", "deny", "stale", what)
        elif not c.decisions:
            span = (f"within the {window}h {m['freshness_class']} window" if window is not None
                    else f"{m['freshness_class']}: does not go stale")
            c.add(7, "freshness", "allow", "compact_memory", f"observed {fmt_age(age)} ago, {span}")


def columnar(s: "Rows") -> None:
    P, pol, cand = s.P, s.pol, s.cand
    m7 = s.alive & s.is_mem
    broken = m7 & cand["missing"]
    bmark = broken & P["broken_mark"][pol]
    s.add(bmark, 7, "freshness", "stale_marker", False)
    s.render(bmark, "revalidation_hint")
    s.add(broken & ~bmark, 7, "freshness", "broken_provenance", True)
    m7 &= ~broken
    window = P["windows"][pol, cand["fclass"].astype("int64")]
    stale = m7 & (window >= 0) & (cand["age_us"] > window)
    smark = stale & P["stale_mark"][pol]
    s.add(smark, 7, "freshness", "stale_marker", False)
    s.render(smark, "stale_marker")
    s.add(stale & ~smark, 7, "freshness", "stale", True)
    s.add(m7 & ~stale & (s.step == 0), 7, "freshness", "compact_memory", False)


_US_PER_HOUR = 3_600_000_000


def settings(policies: list["Policy"]) -> dict[str, np.ndarray]:
    """``windows``: [policy, freshness class] in microseconds (-1: never stale)."""
    fresh = ENUMS["freshness_class"]
    windows = np.full((len(policies), len(fresh) + 1), -1, dtype=np.int64)
    for i, p in enumerate(policies):
        for j, cls in enumerate(fresh):
            w = p.freshness.window(cls)
            windows[i, j] = -1 if w is None else w * _US_PER_HOUR
    return {"windows": windows,
            "stale_mark": column(policies, lambda p: p.freshness.stale_action == "mark"),
            "broken_mark": column(policies, lambda p: p.freshness.broken_provenance == "mark")}
