"""Arrow-backed tables: textual-fastdatatable with markup off and untrusted text escaped.

``ArrowDataTable`` draws a plain body cell (a one-line string, a number, a null) itself:
textual-fastdatatable renders every cell through Rich (markup parsing, ``Padding``,
``Styled``), which was about half of the frame that shows an assembly's records. The line
it draws is the one Rich draws (one style over the padded text), which
``tests/unit/test_arrow_table_cells.py`` checks against the library's own rendering on
generated values; anything else (multi-line values, tabs, control characters, booleans,
dates, fixed or header cells) still goes through the library."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.coordinate import Coordinate
from textual_fastdatatable import ArrowBackend, DataTable
from textual_fastdatatable.column import CELL_X_PADDING
from textual_fastdatatable.format import display_text

from .safe import safe_table

# what Rich would not draw as it is: line breaks, tabs and other control characters
_NOT_PLAIN = re.compile(r"[\x00-\x1f\x7f]")


def _plain_cell(datum: Any, is_id: bool, width: int) -> str | None:
    """The ``width`` cells a plain value shows as, or None when Rich must draw it."""
    if datum is None:
        return " " * width  # the null_rep "" centred
    if isinstance(datum, str):
        if _NOT_PLAIN.search(datum):
            return None
        used = cell_len(datum)
        if used > width:  # Rich's ellipsis overflow
            text = Text(datum)
            text.truncate(width, overflow="ellipsis")
            datum = text.plain
            used = cell_len(datum)
        return datum + " " * (width - used)
    if isinstance(datum, (int, float, Decimal)) and not isinstance(datum, bool):
        shown = display_text(datum) if not is_id else str(datum)
        used = cell_len(shown)
        return None if used > width else " " * (width - used) + shown  # right-aligned
    return None


class ArrowDataTable(DataTable):
    """textual-fastdatatable's table, drawing plain body cells without Rich (see above)."""

    def _render_cell(self, row_index: int, column_index: int, base_style: Style,
                     width: int, cursor: bool = False, hover: bool = False,
                     in_range: bool = False) -> list[list[Segment]]:
        cache_key = (row_index, column_index, base_style, cursor, hover, in_range,
                     self._show_hover_cursor, self._update_count, self._pseudo_class_state)
        cached = self._cell_render_cache.get(cache_key)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        plain = None
        if (row_index >= self.fixed_rows and column_index >= self.fixed_columns
                and not self.render_markup and self.max_column_content_width is not None
                and width > CELL_X_PADDING):
            column = self.ordered_columns[column_index]
            datum = self.get_cell_at(Coordinate(row=row_index, column=column_index))
            plain = _plain_cell(datum, isinstance(datum, int) and column.is_id,
                                width - CELL_X_PADDING)
        if plain is None:
            return super()._render_cell(row_index, column_index, base_style, width,
                                        cursor, hover, in_range)
        component_style, post_style = self._get_styles_to_render_cell(
            False, False, False, hover, cursor, in_range, self.show_cursor,
            self._show_hover_cursor, self.cursor_type == "range",
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        style = base_style + Style.from_meta({"row": row_index, "column": column_index})
        style = style + component_style + post_style
        lines = [[Segment(f" {plain} ", style)]]
        self._cell_render_cache[cache_key] = lines
        return lines

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
    table_class: type[ArrowDataTable] = ArrowDataTable,
) -> DataTable:
    """A DataTable over ``data``: every string escaped, markup never rendered."""
    backend = ArrowBackend(safe_table(data))
    return table_class(
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


def refill(table: DataTable, data: pa.Table, *, column_widths: list[int | None] | None = None,
           keep_view: bool = False) -> None:
    """Show ``data`` in ``table`` in place, cursor and scroll at the top (``keep_view``:
    where they were, the cursor kept within the new rows); ``column_widths`` when the
    columns change with the data.

    textual-fastdatatable has no public way to replace a table's rows; removing the table
    and mounting a new one moves the focus away and back and restyles, lays out and
    repaints the screen around it, which costs more than the rows, and a click that lands
    while the old table is gone meets a widget with no parent. So the backend is swapped
    and the table's derived state (column widths, render caches, virtual size) dropped, as
    its own ``sort`` does for a reordering."""
    cursor, scroll = table.cursor_coordinate, table.scroll_offset
    backend = ArrowBackend(safe_table(data))
    backend.render_markup = False
    table.backend = backend
    if column_widths is not None:
        table._column_widths = list(column_widths)  # noqa: SLF001 - read by ordered_columns
    table._ordered_columns = None  # noqa: SLF001 - column widths come from the backend
    table._clear_caches()  # noqa: SLF001
    table._update_count += 1  # noqa: SLF001 - invalidates cached line renders
    table._update_dimensions([])  # noqa: SLF001 - the virtual size, now rather than on idle
    if keep_view:
        if not table.is_valid_coordinate(cursor):  # (moved only when it must be)
            table.move_cursor(row=min(cursor.row, max(data.num_rows - 1, 0)),
                              column=min(cursor.column, max(data.num_columns - 1, 0)),
                              animate=False)
        table.scroll_to(scroll.x, scroll.y, animate=False, immediate=True)
    else:
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
