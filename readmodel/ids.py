"""Ids as every screen shows them: without the ``:``-separated segments every id of the
store shares, and sorted in natural order.

A transcript's ids carry its session (``22582fdc81:r3:asm``, records ``22582fdc81:m0``):
the request list, the assembly screen, the diff and the conversation show ``r3`` and ``m0``
alike, and say once what was dropped. The rule (``id_affixes``): the longest prefix
ending with ``:`` that every id starts with, and the longest suffix starting with ``:``
that every id ends with; an id that is not longer than both keeps them. Record, run and
participant ids drop the prefix only (the suffix is the assembly ids' ``:asm``).
Natural order (``natural_key``): r25 before r100, m2 before m10.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.text import natural_key

if TYPE_CHECKING:
    from .model import ReadModel

__all__ = ["NO_AFFIXES", "id_affixes", "natural_key", "short_id", "short_ids", "short_text",
           "sorted_naturally", "store_id_affixes"]

NO_AFFIXES: tuple[str, str] = ("", "")


def _common_prefix(low: str, high: str) -> str:
    """The ``:``-ended prefix ``low`` and ``high`` share (of every string between them,
    too: the common prefix of a set is that of its least and greatest)."""
    n = 0
    while n < min(len(low), len(high)) and low[n] == high[n]:
        n += 1
    cut = low[:n].rfind(":")
    return low[: cut + 1] if cut >= 0 else ""


def affixes_of_bounds(low: str, high: str, low_reversed: str, high_reversed: str
                      ) -> tuple[str, str]:
    """The affixes of a set of ids from its least and greatest id and the least and
    greatest of the ids read backwards; none for a set of one id (nothing to tell
    apart: it is shown whole)."""
    if low == high:
        return NO_AFFIXES
    return _common_prefix(low, high), _common_prefix(low_reversed, high_reversed)[::-1]


def id_affixes(ids: Any) -> tuple[str, str]:
    """The ``:``-separated segments every id of ``ids`` (an Arrow array or a list) starts
    and ends with (a transcript's ``22582fdc81:`` and ``:asm``). Columnar."""
    ids = ids if isinstance(ids, (pa.Array, pa.ChunkedArray)) else pa.array(ids, pa.string())
    if len(ids) < 2:
        return NO_AFFIXES
    bounds = pc.min_max(ids)
    reverse = pc.min_max(pc.utf8_reverse(ids))
    return affixes_of_bounds(bounds["min"].as_py() or "", bounds["max"].as_py() or "",
                             reverse["min"].as_py() or "", reverse["max"].as_py() or "")


# (store file, requests in it) -> its affixes: the aggregate reads every id (0.2 s at
# 1,000,000 requests) and each opened request asks; a store that grows (follow) is asked
# again, its count having changed
_STORE_AFFIXES: dict[tuple[str, int], tuple[str, str]] = {}
_STORE_AFFIXES_LOCK = threading.Lock()


def store_id_affixes(answers: ReadModel) -> tuple[str, str]:
    """The affixes of every assembly id of the store (``id_affixes`` over the store, by
    one aggregate query, remembered while the store holds as many requests)."""
    store = answers.store
    key = (str(getattr(store, "path", "")), store.count_assemblies(None))
    with _STORE_AFFIXES_LOCK:
        known = _STORE_AFFIXES.get(key)
    if known is not None:
        return known
    affixes = affixes_of_bounds(*store.assembly_id_bounds())
    with _STORE_AFFIXES_LOCK:
        if len(_STORE_AFFIXES) > 64:
            _STORE_AFFIXES.clear()
        _STORE_AFFIXES[key] = affixes
    return affixes


def short_ids(ids: Any, prefix: str, suffix: str = "") -> Any:
    """``ids`` without ``prefix`` and ``suffix`` where they have both and something is
    left between them (columnar)."""
    if not (prefix or suffix) or len(ids) == 0:
        return ids
    both = pc.and_(pc.starts_with(ids, prefix), pc.ends_with(ids, suffix))
    both = pc.and_(both, pc.greater(pc.utf8_length(ids), len(prefix) + len(suffix)))
    core = pc.utf8_slice_codeunits(ids, len(prefix))
    if suffix:
        core = pc.utf8_slice_codeunits(core, 0, -len(suffix))
    return pc.if_else(pc.fill_null(both, False), core, ids)


def short_id(value: Any, affixes: tuple[str, str] = NO_AFFIXES, *,
             prefix_only: bool = False) -> str:
    """One id as ``short_ids`` shows it: ``22582fdc81:r3:asm`` -> ``r3`` under the affixes
    ``("22582fdc81:", ":asm")``; ``prefix_only`` for a record, run or participant id
    (``22582fdc81:m0`` -> ``m0``)."""
    text = "" if value is None else str(value)
    prefix, suffix = affixes[0], "" if prefix_only else affixes[1]
    if ((prefix or suffix) and text.startswith(prefix) and text.endswith(suffix)
            and len(text) > len(prefix) + len(suffix)):
        return text[len(prefix): len(text) - len(suffix)]
    return text


def sorted_naturally(values: Any, key: Any = None) -> list[Any]:
    """``values`` sorted by ``natural_key`` of each (or of ``key(value)``)."""
    get = key or (lambda v: v)
    return sorted(values, key=lambda v: natural_key(str(get(v) or "")))


def short_text(text: str, affixes: tuple[str, str] = NO_AFFIXES) -> str:
    """Log-free prose that names ids (a why-sentence, a trace detail) with each id as
    ``short_id`` shows it: an assembly id loses both affixes, any other id the prefix.
    Only with a prefix (a suffix alone, ``:asm``, is not told apart from prose)."""
    prefix, suffix = affixes
    if not prefix or not text:
        return text
    import re

    if suffix:
        text = re.sub(rf"(?<![\w:]){re.escape(prefix)}([^\s:]+){re.escape(suffix)}(?![\w-])",
                      r"\1", text)
    return re.sub(rf"(?<![\w:]){re.escape(prefix)}(?=[^\s])", "", text)
