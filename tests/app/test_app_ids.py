"""Ids shortened the same way on every screen (``readmodel.ids``): a transcript's request
``<session>:r5:asm`` is ``r5`` in the list, the assembly screen, the diff and the
conversation, its records ``m0`` rather than ``<session>:m0``; what is left out is said
once. Ids sorted for display go in natural order (r25 before r100). And the diff at 80x24
shows both sides of every change, nothing cut."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from support.swe_trajectory import request_r5
from support.pilot import diff_rows, driven, first_assembly, run_async, screen_text, settle

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.compare import CompareScreen
from inspector.screens.conversation import ConversationScreen, _ordered
from inspector.screens.diff import DiffScreen
from readmodel.ids import id_affixes, short_id, short_ids, short_text




def test_one_rule_for_every_id() -> None:
    ids = pa.array(["22582fdc81:r3:asm", "22582fdc81:r100:asm", "22582fdc81:r25:asm"])
    affixes = id_affixes(ids)
    assert affixes == ("22582fdc81:", ":asm")
    assert short_ids(ids, *affixes).to_pylist() == ["r3", "r100", "r25"]
    assert [short_id(i, affixes) for i in ids.to_pylist()] == ["r3", "r100", "r25"]
    assert short_id("22582fdc81:m0", affixes, prefix_only=True) == "m0"
    assert short_text("Included Message 22582fdc81:m0 in 22582fdc81:r3:asm.", affixes) == (
        "Included Message m0 in r3.")
    # ids without a shared ``:`` segment, or one id alone, are shown whole
    assert id_affixes(["asm-001", "asm-002"]) == ("", "")
    assert id_affixes(["a:b:c"]) == ("", "")
    assert short_id("other:r1:asm", affixes) == "other:r1:asm"


def test_ids_sorted_for_display_go_in_natural_order() -> None:
    rows = [{"t": "2026-01-01", "id": i} for i in ("s:r100:asm", "s:r25:asm", "s:r3:asm")]
    assert [r["id"] for r in _ordered(rows, "t", "id")] == ["s:r3:asm", "s:r25:asm", "s:r100:asm"]


@run_async
async def test_the_assembly_screen_shows_ids_as_the_list_does(swe_db: Path) -> None:
    last, prefix = request_r5(swe_db)
    app = ContextLensApp(db_path=swe_db, initial_assembly=last)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AssemblyScreen)
        header = str(screen.query_one("#assembly-header").render())
        assert header.startswith("assembly r5  ·  ") and last not in header
        assert f"ids short for {prefix}…:asm" in header  # said once, so it can be typed
        table = screen.query_one("#context-table")
        ids = [str(table.get_row_at(i)[2]) for i in range(table.row_count)]
        assert ids[:3] == ["m0", "m1", "m2"] and not any(i.startswith(prefix) for i in ids)
        title = str(screen.query_one("#record-title").render())
        assert title.startswith("message m0  ·  ") and prefix not in title
        assert prefix not in str(screen.query_one("#record-why").render())
        await pilot.press("3")
        await settle(pilot)
        trace = screen.query_one("#trace-table")
        assert not any(str(trace.get_row_at(i)[5]).startswith(prefix)
                       for i in range(trace.row_count))
        # the whole ids stay what the screen selects by
        assert screen._selected is not None and screen._selected[1].startswith(prefix)


@run_async
async def test_the_diff_and_the_conversation_show_ids_as_the_list_does(swe_db: Path) -> None:
    last, prefix = request_r5(swe_db)
    app = ContextLensApp(db_path=swe_db, initial_assembly=last)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        app.open_diff(last, "swe-agent:last_n_observations.n=1")
        await settle(pilot)
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        assert str(diff.query_one("#diff-header").render()).startswith("diff r5   A = ")
        rows = diff_rows(diff)
        assert rows and not any(str(r[2]).startswith(prefix) for r in rows)
        assert prefix not in str(diff.query_one("#change-title").render())
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        assert isinstance(app.screen, ConversationScreen)
        text = screen_text(app)
        assert "◆ assembly r5 " in text and "r5:asm" not in text


@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
def test_the_diff_shows_both_sides_whole_in_a_small_terminal(
        sample_db: Path, size: tuple[int, int]) -> None:
    @run_async
    async def run() -> None:
        assembly = first_assembly(sample_db, "tag:incident policy:v5")
        app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
        async with driven(app, size=size) as pilot:
            await settle(pilot)
            app.open_diff(assembly, "v4")
            await settle(pilot)
            diff = app.screen
            assert isinstance(diff, DiffScreen)
            table = diff.query_one("#diff-table")
            columns = [str(c.label) for c in table.ordered_columns]
            assert "A" in columns and "B" in columns
            # every column in the terminal (a scrollbar's 2 cells aside): none cut off
            assert sum(c.render_width for c in table.ordered_columns) <= size[0] - 2
            b = columns.index("B")
            cells = [str(table.get_row_at(i)[b]) for i in range(table.row_count)]
            assert cells and all(c == "stale_marker" for c in cells), cells
            # the counts line whole: every change class with its count
            header = str(diff.query_one("#diff-header").render())
            assert "rendering_changed 4" in header and "unchanged 37" in header

    run()


@run_async
async def test_compare_names_the_most_changed_requests_as_the_list_does(swe_db: Path) -> None:
    _, prefix = request_r5(swe_db)
    app = ContextLensApp(db_path=swe_db)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        app.open_compare("recorded", "swe-agent:last_n_observations.n=1")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen) and screen.result is not None
        assert screen.result.most_changed, "the what-if changes some request"
        table = screen.query_one("#compare-table")
        shown = [table.get_row_at(i)[0] for i in range(table.row_count)]
        assert shown and all(not str(i).startswith(prefix) and ":asm" not in str(i) for i in shown)
        assert set(shown) <= {f"r{n}" for n in range(6)}
