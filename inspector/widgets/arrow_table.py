"""Arrow-backed tables: textual-fastdatatable with markup off and untrusted text escaped."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from textual_fastdatatable import ArrowBackend, DataTable

from .safe import safe_table

BAR_WIDTH = 8
_EIGHTHS = " ▏▎▍▌▋▊▉"


def _bar(level: int) -> str:
    """A bar of ``BAR_WIDTH`` cells filled to ``level`` eighths of a cell."""
    full, part = divmod(level, 8)
    bar = "█" * full + (_EIGHTHS[part] if part else "")
    return bar + "░" * (BAR_WIDTH - len(bar))


# every bar there is, indexed by fill level; rows pick theirs with one take()
_BARS = pa.array([_bar(level) for level in range(BAR_WIDTH * 8 + 1)])


def arrow_table(
    data: pa.Table,
    *,
    id: str | None = None,  # noqa: A002
    classes: str | None = None,
    cursor_type: str = "row",
    max_column_content_width: int | None = 60,
    column_widths: list[int | None] | None = None,
) -> DataTable:
    """A DataTable over ``data``: every string escaped, markup never rendered."""
    backend = ArrowBackend(safe_table(data))
    return DataTable(
        backend=backend,
        id=id,
        classes=classes,
        cursor_type=cursor_type,  # type: ignore[arg-type]
        max_column_content_width=max_column_content_width,
        column_widths=column_widths,
        show_row_labels=False,
        zebra_stripes=True,
        render_markup=False,
        null_rep="",
    )


def refill(table: DataTable, data: pa.Table) -> None:
    """Show ``data`` (same columns) in ``table`` in place, cursor and scroll at the top.

    textual-fastdatatable has no public way to replace a table's rows; removing the table
    and mounting a new one moves the focus away and back and restyles, lays out and
    repaints the screen around it, which costs more than the rows. So the backend is
    swapped and the table's derived state (column widths, render caches, virtual size)
    dropped, as its own ``sort`` does for a reordering."""
    backend = ArrowBackend(safe_table(data))
    backend.render_markup = False
    table.backend = backend
    table._ordered_columns = None  # noqa: SLF001 - column widths come from the backend
    table._clear_caches()  # noqa: SLF001
    table._update_count += 1  # noqa: SLF001 - invalidates cached line renders
    table._update_dimensions([])  # noqa: SLF001 - the virtual size, now rather than on idle
    table.move_cursor(row=0, column=0, animate=False)
    table.scroll_to(0, 0, animate=False, immediate=True)
    table.refresh(layout=True)


def token_bar(used: Any, budget: Any) -> pa.Array:
    """``████▉░░░ 62%``: tokens used against the budget, one bar per row (columnar)."""
    if len(used) == 0:
        return pa.array([], pa.string())
    ratio = pc.divide(
        pc.cast(used, pa.float64()),
        pc.cast(pc.max_element_wise(budget, 1), pa.float64()),
    )
    clamped = pc.min_element_wise(pc.max_element_wise(ratio, 0.0), 1.0)
    level = pc.cast(pc.ceil(pc.multiply(clamped, float(BAR_WIDTH * 8))), pa.int64())
    bars = pc.take(_BARS, level)
    percent = pc.cast(pc.cast(pc.round(pc.multiply(ratio, 100.0)), pa.int64()), pa.string())
    return pc.binary_join_element_wise(bars, pc.binary_join_element_wise(percent, "%", ""), " ")
