"""Tags on a recorded request (``context_assemblies.tags``): the one home of their meaning.

A tag is ``name`` or ``name:value``. contextlens gives meaning to these:

- ``scenario:<name>``: the story a sample request tells (filter ``scenario:``);
- ``tokens:recorded``: ``assembled_tokens`` is the input token count the runtime recorded
  (a transcript's usage), not an estimate;
- ``unattributed_tokens:<n>``: of the request's tokens, what the included records do not
  explain: the system prompt and tool schemas (estimated, on a request whose count is
  estimated) and, on a recorded one, the estimator's error too; a recorded one's is split into
  ``fixed_overhead_tokens:<n>`` (the fewest tokens any request of its chain left unexplained: sent
  with every request) and ``estimator_residual_tokens:<n>`` (the rest);
- ``times:unrecorded``: the log records no times for this request; its times are made up
  from 2000-01-01 on, in the log's order (order is all they say);
- ``tokens:calibrated:x<factor>/<n>pairs``: the transcript's estimates were scaled by the
  factor fitted on n pairs of consecutive requests (``ingest/adapters/calibration.py``);
  ``tokens:uncalibrated``: too little recorded growth to fit one; ``tokens:exact:<encoding>``:
  counted with the model's own tokenizer (OpenAI models).

Other tags are the producer's own and are shown as they are.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "CALIBRATION",
    "ESTIMATOR_RESIDUAL_TOKENS",
    "FIXED_OVERHEAD_TOKENS",
    "SCENARIO",
    "TOKENS_EXACT",
    "TIMES_UNRECORDED",
    "TOKENS_UNCALIBRATED",
    "calibration",
    "int_tag",
    "int_tag_column",
    "TOKENS_RECORDED",
    "UNATTRIBUTED_TOKENS",
    "recorded_tokens",
    "tag",
    "tag_value",
    "unattributed_tokens",
]

SCENARIO = "scenario"
CALIBRATION = "tokens:calibrated"
TOKENS_UNCALIBRATED = "tokens:uncalibrated"
TOKENS_EXACT = "tokens:exact"
FIXED_OVERHEAD_TOKENS = "fixed_overhead_tokens"
ESTIMATOR_RESIDUAL_TOKENS = "estimator_residual_tokens"
TOKENS_RECORDED = "tokens:recorded"
TIMES_UNRECORDED = "times:unrecorded"
UNATTRIBUTED_TOKENS = "unattributed_tokens"


def tag(name: str, value: Any) -> str:
    """``name:value``."""
    return f"{name}:{value}"


def tag_value(tags: Iterable[Any] | None, name: str) -> str | None:
    """The value of the first ``name:<value>`` tag, None when there is none."""
    prefix = name + ":"
    for t in tags or ():
        if isinstance(t, str) and t.startswith(prefix):
            return t[len(prefix):]
    return None


def times_unrecorded(tags: Iterable[Any] | None) -> bool:
    """True when the request's times were made up (its log records none)."""
    return TIMES_UNRECORDED in list(tags or ())


def recorded_tokens(tags: Iterable[Any] | None) -> bool:
    """True when the request's token count was recorded by its runtime."""
    return TOKENS_RECORDED in list(tags or ())


# an integer tag's value: digits only (no spaces or underscores, which int() would take),
# few enough to fit 64 bits, so the row-wise and the columnar reading agree
_INTEGER = r"-?[0-9]{1,18}"
_INTEGER_RE = re.compile(_INTEGER)


def int_tag(tags: Iterable[Any] | None, name: str) -> int | None:
    """The integer value of the first ``name:<value>`` tag, None when absent or its value
    is not an integer."""
    value = tag_value(tags, name)
    if value is None or not _INTEGER_RE.fullmatch(value):
        return None
    return int(value)


def int_tag_column(tags: pa.Array | pa.ChunkedArray, name: str, default: int = 0) -> pa.Array:
    """``int_tag`` of every row of a list<string> column, ``default`` where it is None, as
    int64: for the engine, which reads many requests at once."""
    if isinstance(tags, pa.ChunkedArray):
        tags = tags.combine_chunks() if tags.num_chunks else pa.array([], tags.type)
    out = np.full(len(tags), default, dtype=np.int64)
    flat = pc.list_flatten(tags)
    if len(flat):
        rows = np.asarray(pc.list_parent_indices(tags))
        prefix = name + ":"
        named = np.asarray(pc.fill_null(pc.starts_with(flat, prefix), False))
        rows, values = rows[named], flat.filter(pa.array(named))
        # the first such tag of a row decides, as tag_value reads it
        rows, first = np.unique(rows, return_index=True)
        values = pc.utf8_slice_codeunits(values.take(pa.array(first)), len(prefix))
        valid = np.asarray(pc.match_substring_regex(values, f"^{_INTEGER}$"))
        out[rows[valid]] = np.asarray(pc.cast(values.filter(pa.array(valid)), pa.int64()))
    return pa.array(out, pa.int64())


def unattributed_tokens(tags: Iterable[Any] | None) -> int | None:
    """The ``unattributed_tokens:<n>`` value, None when absent or not an integer."""
    return int_tag(tags, UNATTRIBUTED_TOKENS)


def calibration(tags: Iterable[Any] | None) -> str | None:
    """How the estimates were made: ``x1.87 fitted on 150 request pairs``, ``not
    calibrated`` (too little recorded growth), or None (no such tag)."""
    value = tag_value(tags, CALIBRATION)
    if value is not None:
        factor, _, pairs = value.partition("/")
        return f"{factor} fitted on {pairs.removesuffix('pairs')} request pairs"
    exact = tag_value(tags, TOKENS_EXACT)
    if exact is not None:
        return f"counted with {exact}, the model's tokenizer"
    return "not calibrated" if TOKENS_UNCALIBRATED in list(tags or ()) else None
