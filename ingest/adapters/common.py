"""Small shared helpers of the transcript adapters: ids, time parsing, content blocks,
context windows. The export builder is ``builder.py``; bounded JSON reading ``jsonread.py``.

Nothing here imports ``replay/`` nor any UI library.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any, Callable, Iterable

import pyarrow as pa

UTC = dt.timezone.utc
# Transcripts without timestamps get synthetic times from here, one second per record.
EPOCH = dt.datetime(2000, 1, 1, tzinfo=UTC)
DEFAULT_CONTEXT_WINDOW = 200_000
PREVIEW_CHARS = 400

# Known context windows by model-name prefix (longest prefix wins). Unknown -> 200,000.
CONTEXT_WINDOWS: dict[str, int] = {
    "claude": 200_000,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-4.1": 1_047_576,
    "gpt-4.5": 128_000,
    "gpt-5": 400_000,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4": 200_000,
    "gemini": 1_048_576,
}


def context_window(model: str | None) -> int | None:
    if not model:
        return None
    m = model.lower().rsplit("/", 1)[-1]
    best = None
    for prefix, size in CONTEXT_WINDOWS.items():
        if m.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, size)
    return best[1] if best else None


def canonical_json(obj: Any) -> str:
    """The canonical JSON of docs/export-format.md."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def parse_ts(value: Any) -> dt.datetime | None:
    """ISO 8601 (``Z`` allowed) or epoch seconds / milliseconds -> aware UTC datetime."""
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            v = float(value)
            if v > 1e11:  # milliseconds
                v /= 1000.0
            return dt.datetime.fromtimestamp(v, tz=UTC)
        if isinstance(value, str) and value.strip():
            s = value.strip()
            if s.endswith("Z") or s.endswith("z"):
                s = s[:-1] + "+00:00"
            t = dt.datetime.fromisoformat(s)
            if t.tzinfo is None:
                t = t.replace(tzinfo=UTC)
            return t.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return None


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def as_text(value: Any) -> str:
    """Any JSON value as display text: strings as is, everything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def parts_text(content: Any, part: Callable[[Any, dict[str, Any]], str | None]) -> str:
    """A message's ``content`` as the text shown, for any format whose content is a string or
    a list of typed parts: a string as it is, a list joined by lines (a string part as it
    is, a dict part as ``part(its type, the part)`` says, None or "" leaving it out, any
    other value as ``as_text``), anything else as ``as_text``. Each format says only what
    its part types read as."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return as_text(content)
    parts: list[str] = []
    for c in content:
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, dict):
            parts.append(part(c.get("type"), c) or "")
        else:
            parts.append(as_text(c))
    return "\n".join(p for p in parts if p)


def _block_text(kind: Any, block: dict[str, Any]) -> str | None:
    if isinstance(block.get("text"), str):
        return block["text"]
    if kind in ("image", "image_url", "input_image", "document", "file"):
        return f"[{kind}]"
    if kind == "tool_result":
        return blocks_text(block.get("content"))
    if kind in ("thinking", "redacted_thinking"):
        return None
    return as_text(block)


def blocks_text(content: Any) -> str:
    """Text of a message ``content``: a string, or a list of content blocks / parts
    (Anthropic ``{"type": "text", "text"}``, OpenAI ``{"type": "text", "text"}``; images and
    other blocks become a short bracketed marker, nested tool_result content is flattened)."""
    return parts_text([content] if isinstance(content, dict) else content, _block_text)


def after(t: dt.datetime, at: dt.datetime) -> dt.datetime:
    """``t``, or just after ``at`` when ``t`` is not later: what a request produced is
    created strictly after the request was assembled."""
    return t if t > at else at + dt.timedelta(microseconds=1)


def first_lines(text: str, n: int = 3, width: int = 200) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()][:n]
    out = " | ".join(lines)
    return out if len(out) <= width else out[: width - 1] + "…"


def short_hash(data: bytes, n: int = 10) -> str:
    return hashlib.sha256(data).hexdigest()[:n]


# Extra tool_artifacts columns (not in the contract; ingest keeps them): where the result
# was placed in the transcript, for the lint rule results_split_or_after_text.
#   result_message_key  the transcript message that carried the result (results of one
#                       response carried by two keys were split across messages)
#   result_block_index  the result's position among the blocks of that message
#   result_after_text   text came before the result in that message
PLACEMENT_COLUMNS: dict[str, pa.DataType] = {
    "result_message_key": pa.string(),
    "result_block_index": pa.int64(),
    "result_after_text": pa.bool_(),
}


def token_count(value: Any) -> int | None:
    """A recorded token count: a whole number from 0 below 10^12 (7266.0 is one; "7266",
    true, -5 and 7266.5 are not), else None."""
    if (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e12
            and float(value).is_integer()):
        return int(value)
    return None


def unreadable_counts(usage: Any, keys: Iterable[str]) -> str | None:
    """``input_tokens is "7266"``: the first of ``keys`` a usage object holds with a value
    that is not a token count (null counts as absent), for a warning; None when all read.
    A recorded count dropped without a word would turn a request's figure into an
    estimate unseen."""
    if not isinstance(usage, dict):
        return None
    for key in keys:
        value = usage.get(key)
        if value is not None and token_count(value) is None:
            text = json.dumps(value)
            return f"{key} is {text if len(text) <= 40 else text[:39] + '…'}"
    return None
