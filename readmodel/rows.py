"""Arrow tables as Python rows, without importing pandas.

pyarrow imports pandas (a third of a second, more on a loaded machine) the first time it
turns a time-zoned timestamp into a ``datetime`` (``TimestampScalar.as_py`` asks whether
pandas is there), so ``table.to_pylist()`` of a request list pays for pandas. ``pylist``
gives the same rows: it converts such columns itself, as pyarrow does for units coarser
than nanoseconds (a naive datetime of the UTC instant, then moved to the column's zone).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

__all__ = ["pylist"]


def pylist(table: pa.Table) -> list[dict[str, Any]]:
    """``table.to_pylist()``: the same rows and values."""
    zoned: list[tuple[str, Any]] = []
    naive = table
    for i, field in enumerate(table.schema):
        kind = field.type
        # nanoseconds are left to pyarrow: it makes pandas Timestamps of them when it can
        if pa.types.is_timestamp(kind) and kind.tz is not None and kind.unit != "ns":
            naive = naive.set_column(i, field.name, table.column(i).cast(pa.timestamp(kind.unit)))
            zoned.append((field.name, pa.lib.string_to_tzinfo(kind.tz)))
    rows = naive.to_pylist()
    for name, tzinfo in zoned:
        for row in rows:
            value = row[name]
            if value is not None:
                row[name] = value.replace(tzinfo=dt.timezone.utc).astimezone(tzinfo)
    return rows
