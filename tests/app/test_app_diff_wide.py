"""The diff's records table keeps a column per field (A, A reason, A #, B, B reason, B #)
wherever it fits: the label gives way first, then the renderings and reasons are cut to a
readable width; only a terminal too narrow for that (80 or 100 columns) gets one column
per side. Every record shown (f) on 140 columns: the full table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from support.pilot import first_assembly, run_async, settle

from inspector.app import ContextLensApp
from inspector.screens.diff import DiffScreen, table_layout

FULL = ["change", "kind", "record", "A", "A reason", "A #", "B", "B reason", "B #", "tokens"]


def _columns(diff: DiffScreen) -> list[str]:
    table = diff.query_one("#diff-table")
    return [column.label.plain for column in table.ordered_columns]


@run_async
async def test_every_record_on_140_columns_keeps_a_column_per_field(sample_db: Path) -> None:
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        app.open_diff(assembly, "v4")
        await settle(pilot)
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        await pilot.press("f")  # the unchanged records too: their reasons are the widest
        await settle(pilot)
        assert _columns(diff)[:len(FULL)] == FULL
        widths = [column.width for column in diff.query_one("#diff-table").ordered_columns]
        assert sum(w + 2 for w in widths) <= 140  # within the screen, no sideways scroll


def _full(reason: str, record: str = "mem-014") -> pa.Table:
    row = {"change": "rendering_changed", "kind": "tool_memory", "record": record,
           "A": "compact_memory", "A reason": reason, "A #": 0, "B": "stale_marker",
           "B reason": reason, "B #": 0, "tokens": "23 → 58",
           "label": "March expenses total 19.75 (two rows)"}
    types = {"A #": pa.int64(), "B #": pa.int64()}
    return pa.table({k: pa.array([v], types.get(k, pa.string())) for k, v in row.items()})


def test_the_stacked_form_stays_where_the_fields_do_not_fit() -> None:
    full = _full("raw_replaced_by_memory")
    for width in (80, 100):
        shown, _ = table_layout(full, width)
        assert "A reason" not in shown.column_names and "A" in shown.column_names, width


def test_the_full_form_where_it_fits_once_the_label_and_reasons_give_way() -> None:
    # a masked record id widens the record column: the full form still fits 160 columns
    full = _full("raw_replaced_by_memory", record="[masked secret (aws key)]")
    shown, widths = table_layout(full, 160)
    assert shown.column_names[:len(FULL)] == FULL
    assert widths is None or sum(w + 2 for w in widths if w is not None) <= 158
    shown, widths = table_layout(full, 140)
    assert shown.column_names[:len(FULL)] == FULL and widths is not None
    # ids and numbers whole; reasons cut no further than the floor
    assert widths[2] == len("[masked secret (aws key)]")
    assert min(widths[4], widths[7]) >= 12  # a reason still reads
