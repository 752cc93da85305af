"""Tags on a recorded request (``context_assemblies.tags``): the one home of their meaning.

A tag is ``name`` or ``name:value``. contextlens gives meaning to these:

- ``scenario:<name>``: the story a sample request tells (filter ``scenario:``);
- ``tokens:recorded``: ``assembled_tokens`` is the input token count the runtime recorded
  (a transcript's usage), not an estimate;
- ``unattributed_tokens:<n>``: of those recorded tokens, what the included records do not
  explain (system prompt, tool schemas, estimator error).

Other tags are the producer's own and are shown as they are.
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = [
    "SCENARIO",
    "TOKENS_RECORDED",
    "UNATTRIBUTED_TOKENS",
    "recorded_tokens",
    "tag",
    "tag_value",
    "unattributed_tokens",
]

SCENARIO = "scenario"
TOKENS_RECORDED = "tokens:recorded"
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


def recorded_tokens(tags: Iterable[Any] | None) -> bool:
    """True when the request's token count was recorded by its runtime."""
    return TOKENS_RECORDED in list(tags or ())


def unattributed_tokens(tags: Iterable[Any] | None) -> int | None:
    """The ``unattributed_tokens:<n>`` value, None when absent or not an integer."""
    value = tag_value(tags, UNATTRIBUTED_TOKENS)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None
