"""Untrusted text made safe to show: the one home of the unsafe-character rule.

Log content is data. A terminal must never obey it (ESC, C0/C1 controls, DEL) and it must
never reorder what the reader sees (bidirectional overrides and marks). ``visible_text``
replaces every such character with a visible escape (``\\x1b``, ``\\u202e``); ``one_line``
does that and folds the text onto one line, cut with … at a limit. ``UNSAFE_RE2`` is the
same class for pyarrow.compute (RE2 syntax), for columnar escaping.

Newline and tab are kept by ``visible_text`` (multi-line bodies stay multi-line).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "ELLIPSIS",
    "UNSAFE_CODEPOINTS",
    "UNSAFE_RE",
    "UNSAFE_RE2",
    "clip",
    "escape_char",
    "natural_key",
    "one_line",
    "visible_text",
]

ELLIPSIS = "…"

# The characters a terminal may obey or that reorder text on screen.
UNSAFE_CODEPOINTS: tuple[int, ...] = (
    *range(0x00, 0x09),
    *range(0x0B, 0x20),
    *range(0x7F, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
)
UNSAFE_RE = re.compile("[" + "".join(re.escape(chr(cp)) for cp in UNSAFE_CODEPOINTS) + "]")
UNSAFE_RE2 = "[" + "".join(f"\\x{{{cp:04x}}}" for cp in UNSAFE_CODEPOINTS) + "]"
# What json.dumps(ensure_ascii=False) leaves raw: it escapes C0 itself, not DEL, C1 or bidi.
JSON_UNSAFE_RE = re.compile(
    "[" + "".join(re.escape(chr(cp)) for cp in UNSAFE_CODEPOINTS if cp >= 0x7F) + "]"
)


def escape_char(ch: str) -> str:
    """The visible escape of one unsafe character: ``\\x1b``, ``\\u202e``."""
    cp = ord(ch)
    return "\\x%02x" % cp if cp < 0x100 else "\\u%04x" % cp


def _escape(m: re.Match[str]) -> str:
    return escape_char(m.group())


def visible_text(value: Any) -> str:
    """``value`` as text with every unsafe character shown as a visible escape."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return UNSAFE_RE.sub(_escape, text)


def clip(text: str, limit: int | None) -> str:
    """``text`` cut to at most ``limit`` characters, ending with … when cut."""
    if limit is not None and len(text) > limit:
        return text[: max(limit - 1, 0)] + ELLIPSIS
    return text


def one_line(value: Any, limit: int | None = None) -> str:
    """``visible_text`` on one line (newlines shown as ⏎, tabs as spaces), cut at ``limit``."""
    text = visible_text(value).replace("\r", " ").replace("\n", " ⏎ ").replace("\t", " ")
    return clip(text, limit)


def json_safe(text: str) -> str:
    """JSON text with DEL, C1 and bidi characters written as ``\\uXXXX`` escapes."""
    return JSON_UNSAFE_RE.sub(lambda m: "\\u%04x" % ord(m.group()), text)


def natural_key(text: str) -> list[Any]:
    """A sort key that orders the numbers inside ids and versions by value: m2 before m10,
    v9 before v10 (code-point order puts m10 between m1 and m2)."""
    # odd parts are the runs of digits (ASCII only: "²" is a digit to isdigit, not to int)
    return [int(p) if i % 2 else p for i, p in enumerate(re.split(r"([0-9]+)", text))]
