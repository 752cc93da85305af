"""Untrusted text made safe to show: no markup, no terminal control, no bidi reordering.

Everything a log export holds is data. ``safe_text`` turns control characters (C0 except
newline and tab, DEL, C1) and bidirectional overrides into visible escapes such as
``\\x1b``, so a terminal prints them instead of obeying them. ``plain`` wraps the result in a
``rich.text.Text``, which is never parsed as markup. ``safe_column`` does the same to an
Arrow string column in a few columnar passes (and none when the column is clean).

Text bodies (a message, a tool's output, a label quoting them) are shown readable:
``readable`` first removes whole terminal escape sequences (colours, cursor moves, OSC
hyperlinks), so ``\\x1b[1mdeploy\\x1b[0m`` reads ``deploy``; what is left is escaped as
above. Nothing is ever interpreted. ``set_escapes_shown(True)`` (the app's ``e`` key) shows
the escaped form instead. Identifiers are always shown exact (``safe_text``): removing a
sequence from an id could make two ids look alike.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.text import Text

from ingest.text import UNSAFE_CODEPOINTS, UNSAFE_RE2, escape_char, one_line, visible_text

from ..escapes import (
    CUT_SEQUENCE_RE2,
    READABLE_COLUMNS,
    SEQUENCES_RE2,
    escapes_shown,
    set_escapes_shown,
    strip_sequences,
)

__all__ = ["READABLE_COLUMNS", "escapes_shown", "one_line", "plain", "readable",
           "readable_line", "safe_column", "safe_table", "safe_text", "set_escapes_shown",
           "strip_sequences"]

# the rule itself lives in ingest.text (one home for the CLI, the core and the app)
safe_text = visible_text


def readable(value: Any) -> str:
    """A text body to show: escape sequences removed (unless shown), then ``safe_text``."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return visible_text(text if escapes_shown() else strip_sequences(text))


def readable_line(value: Any, limit: int | None = None) -> str:
    """``readable`` on one line, cut with … at ``limit`` (``one_line`` of a body)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return one_line(text if escapes_shown() else strip_sequences(text), limit)


def plain(value: Any, style: str = "") -> Text:
    """A ``Text`` of ``safe_text(value)``: literal, never markup."""
    return Text(safe_text(value), style=style)


def safe_column(column: pa.Array | pa.ChunkedArray,
                body: bool = False) -> pa.Array | pa.ChunkedArray:
    """An Arrow string column with unsafe characters escaped, columnar; for a ``body``
    column (log text) escape sequences are first removed, as ``readable`` does.

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
    if body and not escapes_shown():
        out = pc.replace_substring_regex(out, SEQUENCES_RE2, "")
        out = pc.replace_substring_regex(out, CUT_SEQUENCE_RE2, r"\1\2")
        out = pc.replace_substring(out, "\r\n", "\n")
    for cp in UNSAFE_CODEPOINTS:
        ch = chr(cp)
        out = pc.replace_substring(out, ch, escape_char(ch))
    return out


def safe_table(table: pa.Table) -> pa.Table:
    """Every string column of ``table`` through ``safe_column`` (the ``READABLE_COLUMNS``
    as bodies)."""
    columns = [safe_column(col, name in READABLE_COLUMNS)
               for name, col in zip(table.column_names, table.columns)]
    return pa.Table.from_arrays(columns, names=table.column_names)
