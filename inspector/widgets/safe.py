"""Untrusted text made safe to show: no markup, no terminal control, no bidi reordering.

Everything a log export holds is data. ``safe_text`` turns control characters (C0 except
newline and tab, DEL, C1) and bidirectional overrides into visible escapes such as
``\\x1b``, so a terminal prints them instead of obeying them. ``plain`` wraps the result in a
``rich.text.Text``, which is never parsed as markup. ``safe_column`` does the same to an
Arrow string column in a few columnar passes (and none when the column is clean).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.text import Text

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
_UNSAFE_RE = re.compile("[" + "".join(re.escape(chr(cp)) for cp in UNSAFE_CODEPOINTS) + "]")
# The same class in RE2 syntax, for pyarrow.compute.
UNSAFE_RE2 = "[" + "".join(
    f"\\x{{{cp:04x}}}" for cp in UNSAFE_CODEPOINTS
) + "]"


def escape_char(ch: str) -> str:
    """The visible escape of one unsafe character: ``\\x1b``, ``\\u202e``."""
    cp = ord(ch)
    return "\\x%02x" % cp if cp < 0x100 else "\\u%04x" % cp


def safe_text(value: Any) -> str:
    """``value`` as a string with every unsafe character replaced by a visible escape."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE_RE.sub(lambda m: escape_char(m.group()), text)


def one_line(value: Any, limit: int | None = None) -> str:
    """``safe_text`` on one line: newlines and tabs shown as spaces, cut at ``limit``."""
    text = safe_text(value).replace("\r", " ").replace("\n", " ⏎ ").replace("\t", " ")
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 1, 0)] + "…"
    return text


def plain(value: Any, style: str = "") -> Text:
    """A ``Text`` of ``safe_text(value)``: literal, never markup."""
    return Text(safe_text(value), style=style)


def safe_column(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """An Arrow string column with unsafe characters escaped, columnar.

    A clean column (the common case) costs one regex scan and is returned as is.
    """
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return column
    if len(column) == 0:
        return column
    dirty = pc.any(pc.match_substring_regex(column, UNSAFE_RE2)).as_py()
    if not dirty:
        return column
    out = column
    for cp in UNSAFE_CODEPOINTS:
        ch = chr(cp)
        out = pc.replace_substring(out, ch, escape_char(ch))
    return out


def safe_table(table: pa.Table) -> pa.Table:
    """Every string column of ``table`` through ``safe_column``."""
    columns = [safe_column(col) for col in table.columns]
    return pa.Table.from_arrays(columns, names=table.column_names)
