"""Arrow-backed tables: textual-fastdatatable with markup off and untrusted text escaped."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from textual_fastdatatable import ArrowBackend, DataTable

from .safe import safe_table

BAR_WIDTH = 8
_BARS = pa.array(["█" * i + "░" * (BAR_WIDTH - i) for i in range(BAR_WIDTH + 1)])


def arrow_table(
    data: pa.Table,
    *,
    id: str | None = None,  # noqa: A002
    classes: str | None = None,
    cursor_type: str = "row",
    max_column_content_width: int | None = 60,
) -> DataTable:
    """A DataTable over ``data``: every string escaped, markup never rendered."""
    backend = ArrowBackend(safe_table(data))
    return DataTable(
        backend=backend,
        id=id,
        classes=classes,
        cursor_type=cursor_type,  # type: ignore[arg-type]
        max_column_content_width=max_column_content_width,
        show_row_labels=False,
        zebra_stripes=True,
        render_markup=False,
        null_rep="",
    )


def timestamp_text(column: Any) -> pa.Array:
    """A timestamp column as ``YYYY-MM-DD HH:MM:SS`` UTC text (columnar)."""
    if len(column) == 0:
        return pa.array([], pa.string())
    # %S of a microsecond timestamp carries the fraction; the list shows whole seconds
    return pc.utf8_slice_codeunits(pc.strftime(column, format="%Y-%m-%d %H:%M:%S"), 0, 19)


def token_bar(used: Any, budget: Any) -> pa.Array:
    """``█████░░░ 62%``: tokens used against the budget, one bar per row (columnar)."""
    if len(used) == 0:
        return pa.array([], pa.string())
    ratio = pc.divide(
        pc.cast(used, pa.float64()),
        pc.cast(pc.max_element_wise(budget, 1), pa.float64()),
    )
    clamped = pc.min_element_wise(pc.max_element_wise(ratio, 0.0), 1.0)
    filled = pc.cast(pc.round(pc.multiply(clamped, float(BAR_WIDTH))), pa.int64())
    bars = pc.take(_BARS, filled)
    percent = pc.cast(pc.cast(pc.round(pc.multiply(ratio, 100.0)), pa.int64()), pa.string())
    return pc.binary_join_element_wise(bars, pc.binary_join_element_wise(percent, "%", ""), " ")
