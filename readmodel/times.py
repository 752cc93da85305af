"""When a request was made, as contextlens shows it: the recorded time, or none.

A log that records no times (SWE-agent trajectories, tau-bench, OpenAI chat files) has its
requests' times made up at ingest, from 2000-01-01 on in the log's order (tag
``times:unrecorded``, ``ingest.tags``): the store keeps them so the log's order holds, and
every answer shows none instead (JSON ``null``, text "not recorded"). The request list's
query does the same, columnar (``ingest/store/requests.py``).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, Mapping

from ingest.tags import TIMES_UNRECORDED, times_unrecorded
from ingest.timefmt import NOT_RECORDED

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter

    from .model import ReadModel

__all__ = ["NOT_RECORDED", "NOT_RECORDED_SENTENCE", "recorded_time", "untimed_requests"]

NOT_RECORDED_SENTENCE = f"{NOT_RECORDED} (the log records no times; its order is kept)"


def recorded_time(request: Mapping[str, Any]) -> dt.datetime | None:
    """The request's ``assembled_at``, or None when its log records no time."""
    return None if times_unrecorded(request.get("tags")) else request.get("assembled_at")


def untimed_requests(model: "ReadModel", flt: "AssemblyFilter | str | None" = None) -> int:
    """How many requests matching ``flt`` have no recorded time."""
    from ingest.filters import AssemblyFilter, Term, parse_filter

    parsed = parse_filter(flt) if isinstance(flt, str) or flt is None else flt
    untimed = AssemblyFilter(parsed.terms + (Term("tag", TIMES_UNRECORDED),), parsed.text,
                             parsed.ids)
    return model.store.count_assemblies(untimed)
