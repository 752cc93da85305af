"""The app's tables draw plain cells themselves (inspector/widgets/arrow_table.py): every
cell must look exactly as textual-fastdatatable draws it through Rich, the cursor row,
hover and zebra stripes included. The library's own rendering is the oracle."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.segment import Segment
from rich.cells import cell_len
from textual.app import App, ComposeResult
from textual.coordinate import Coordinate
from textual_fastdatatable import DataTable

from inspector.widgets.arrow_table import ArrowDataTable, arrow_table
from support.pilot import driven, run_async

# values whose drawing is easy to get wrong: wide and zero-width characters, markup-like
# text, backslashes, text longer than its column, control characters, numbers, nulls
TRICKY = [
    "plain", "", " leading", "trailing ", "[bold]not markup[/]", "ends with \\",
    "日本語のテキスト", "e\u0301te\u0301", "emoji 🙂 here", ":smile:", "a" * 90,
    "日本" * 40, "tab\there", "two\nlines", "bell\x07", "x" * 57 + "日本",
    "🙂" * 31, "\u200bzero width",
]


def _lines(table: DataTable, row: int, column: int, width: int, **state: bool) -> Any:
    table._cell_render_cache.clear()  # noqa: SLF001 - each path draws afresh
    return [list(Segment.simplify(line)) for line in table._render_cell(  # noqa: SLF001
        row, column, table.rich_style, width, **state)]


def _library(table: DataTable, row: int, column: int, width: int, **state: bool) -> Any:
    table._cell_render_cache.clear()  # noqa: SLF001
    return [list(Segment.simplify(line)) for line in DataTable._render_cell(  # noqa: SLF001
        table, row, column, table.rich_style, width, **state)]


class _Tables(App[None]):
    def __init__(self, data: pa.Table) -> None:
        super().__init__()
        self.data = data

    def compose(self) -> ComposeResult:
        yield arrow_table(self.data, id="cells")


@run_async
async def _assert_drawn_as_the_library_draws(data: pa.Table) -> None:
    app = _Tables(data)
    async with driven(app, size=(160, 40)) as pilot:
        await pilot.pause()
        table = app.query_one("#cells", ArrowDataTable)
        widths = sorted({c.render_width for c in table.ordered_columns} | {3, 8, 12})
        for row in range(table.row_count):
            for column in range(len(table.ordered_columns)):
                datum = table.get_cell_at(Coordinate(row=row, column=column))
                for width in widths:
                    for state in ({}, {"cursor": True}, {"hover": True}):
                        ours = _lines(table, row, column, width, **state)
                        if isinstance(datum, str) and datum.endswith("\\"):
                            # the library doubles a trailing backslash (it escapes the
                            # value for markup, and Rich's escape adds one before an end
                            # that could precede a tag): we show the value as it is
                            shown = "".join(s.text for s in ours[0])
                            if cell_len(datum) <= width - 2:
                                assert shown.rstrip() == f" {datum}".rstrip(), shown
                            continue
                        theirs = _library(table, row, column, width, **state)
                        assert ours == theirs, (row, column, width, state)


def test_tricky_values_are_drawn_exactly_as_the_library_draws_them() -> None:
    n = len(TRICKY)
    _assert_drawn_as_the_library_draws(pa.table({
        "text": TRICKY,
        "label": [None if i % 5 == 0 else t for i, t in enumerate(reversed(TRICKY))],
        "tokens": [i * 1234 - 5000 for i in range(n)],
        "share": [i / 7 for i in range(n)],
        "record_id": list(range(10**6, 10**6 + n)),
        "ok": [i % 2 == 0 for i in range(n)],
    }))


_texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                 max_size=80)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.none() | _texts, st.none() | st.integers(-10**12, 10**12),
                          st.floats(allow_nan=True, allow_infinity=True)),
                min_size=1, max_size=12))
def test_generated_values_are_drawn_exactly_as_the_library_draws_them(rows: list) -> None:
    texts, ints, floats = zip(*rows)
    _assert_drawn_as_the_library_draws(pa.table({
        "text": pa.array(texts, pa.string()), "n": pa.array(ints, pa.int64()),
        "f": pa.array(floats, pa.float64()),
    }))
