"""Untrusted text made safe to show: no markup, no terminal control, no bidi reordering.

Everything a log export holds is data. ``safe_text`` turns control characters (C0 except
newline and tab, DEL, C1) and bidirectional overrides into visible escapes such as
``\\x1b``, so a terminal prints them instead of obeying them. ``plain`` wraps the result in a
``rich.text.Text``, which is never parsed as markup. ``safe_column`` does the same to an
Arrow string column in a few columnar passes (and none when the column is clean).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.text import Text

from ingest.text import UNSAFE_CODEPOINTS, UNSAFE_RE2, escape_char, one_line, visible_text

__all__ = ["one_line", "plain", "safe_column", "safe_table", "safe_text"]

# the rule itself lives in ingest.text (one home for the CLI, the core and the app)
safe_text = visible_text


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
