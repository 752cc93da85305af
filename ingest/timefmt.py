"""Time as contextlens shows it: the one home of time formatting.

Every time in the store is UTC. Two styles, and only these:

- **table** ``2026-10-29 09:00:02``: in table cells, lists and headers, where the column or
  header says "UTC" once (``table_time``; ``table_time_column`` for an Arrow column);
- **sentence** ``2026-10-29 09:00 UTC``: inside why-sentences, prompt markers and messages,
  where the zone must be said (``sentence_time``).

JSON output keeps full ISO 8601 (``isoformat``), which is for programs, not people.

A time the log does not record (its requests' times were made up at ingest, tag
``times:unrecorded``) is never shown: JSON has ``null``, text ``not recorded``
(``NOT_RECORDED``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

__all__ = ["NOT_RECORDED", "TABLE_WIDTH", "UNKNOWN_TIME", "sentence_time", "sentence_time_column",
           "table_time", "table_time_column", "utc"]

TABLE_FORMAT = "%Y-%m-%d %H:%M:%S"
SENTENCE_FORMAT = "%Y-%m-%d %H:%M UTC"
TABLE_WIDTH = 19  # characters of a table time
NOT_RECORDED = "not recorded"  # shown for a time the log does not record
UNKNOWN_TIME = "an unknown time"  # a sentence's time that is missing


def utc(value: dt.datetime) -> dt.datetime:
    """An aware UTC datetime (a naive one is taken to be UTC already)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


def table_time(value: Any) -> str:
    """``2026-10-29 09:00:02`` (UTC), or ``-`` for no time."""
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return utc(value).strftime(TABLE_FORMAT)
    return str(value)


def sentence_time(value: Any) -> str:
    """``2026-10-29 09:00 UTC``, or ``an unknown time``."""
    if value is None:
        return UNKNOWN_TIME
    if isinstance(value, dt.datetime):
        return utc(value).strftime(SENTENCE_FORMAT)
    return str(value)


def table_time_column(column: Any, missing: str | None = None) -> Any:
    """An Arrow timestamp column as ``table_time`` text (columnar); a null is ``missing``
    (e.g. ``NOT_RECORDED``), else stays null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(column) == 0:
        return pa.array([], pa.string())
    # %S of a sub-second timestamp carries the fraction: keep the first 19 characters
    text = pc.utf8_slice_codeunits(pc.strftime(column, format=TABLE_FORMAT), 0, TABLE_WIDTH)
    return text if missing is None else pc.fill_null(text, missing)


def sentence_time_column(column: Any) -> Any:
    """An Arrow timestamp column as ``sentence_time`` text (columnar twin of ``sentence_time``,
    which a test holds equal to it): ``2026-10-29 09:00 UTC``; a null is ``UNKNOWN_TIME``.
    A naive timestamp is taken to be UTC, as ``utc`` takes a naive datetime."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(column) == 0:
        return pa.array([], pa.string())
    unit = column.type.unit
    # formatted in UTC whatever zone the column carries (strftime writes a zoned column's
    # local time)
    as_utc = pc.cast(pc.cast(column, pa.int64()), pa.timestamp(unit, tz="UTC"))
    return pc.fill_null(pc.strftime(as_utc, format=SENTENCE_FORMAT), UNKNOWN_TIME)
