"""The record panel shows the record under the active tab's cursor (or says there is none),
keeps it across a reveal, and its title and provenance pane always name the same record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.pilot import driven, run_async, screen_text, settle
from support.reveal import reveal_deliberately

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.widgets.record_panel import RecordPanel

INCIDENT = "asm-035"  # 23 records sent, 22 left out, restricted memories among them


def panel_title(screen: AssemblyScreen) -> str:
    return str(screen.query_one(RecordPanel).query_one("#record-title").render())


def provenance_self(screen: AssemblyScreen) -> str:
    plist = screen.query_one(RecordPanel).provenance_list
    return plist.get_option_at_index(0).prompt.plain if plist.option_count else ""


def context_id(screen: AssemblyScreen, row: int) -> str:
    assert screen._included is not None
    return screen._included["id"][row].as_py()


async def open_incident(pilot: Any) -> AssemblyScreen:
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, AssemblyScreen)
    return screen


@run_async
async def test_panel_follows_the_active_tab(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=(160, 45)) as pilot:
        screen = await open_incident(pilot)
        await pilot.press("down", "down", "down")
        await settle(pilot)
        on_context = context_id(screen, 3)
        assert f" {on_context}  ·  included #3" in panel_title(screen)

        await pilot.press("2")  # Omitted: its cursor starts on the first omitted record
        await settle(pilot)
        tree = screen.query_one("#omitted-tree")
        leaf = tree.cursor_node.data
        assert leaf["id"] in panel_title(screen) and "omitted:" in panel_title(screen)
        assert on_context not in panel_title(screen)

        tree.cursor_line = 0  # a reason's heading: no record
        await settle(pilot)
        assert "No omitted record highlighted" in panel_title(screen)
        assert "No omitted record highlighted" in screen_text(app)

        await pilot.press("4")  # Prompt: nothing to pick
        await settle(pilot)
        assert "The prompt shows no records to pick" in panel_title(screen)
        assert leaf["id"] not in panel_title(screen)

        await pilot.press("1")  # back on Context: its cursor's record again
        await settle(pilot)
        assert f" {on_context}  ·  included #3" in panel_title(screen)
        assert provenance_self(screen).startswith(f"● memory {on_context}")


@run_async
async def test_reveal_keeps_the_cursor_and_the_record(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=(160, 45)) as pilot:
        screen = await open_incident(pilot)
        await pilot.press("down", "down", "down", "down")
        await settle(pilot)
        table = screen.query_one("#context-table")
        chosen = context_id(screen, 4)
        assert table.cursor_row == 4
        assert "masked" in screen_text(app)
        await reveal_deliberately(pilot)
        assert app.reveal
        assert table.cursor_row == 4
        assert screen._selected == ("tool_memory", chosen)
        assert f" {chosen}  ·  included #4" in panel_title(screen)
        assert provenance_self(screen).startswith(f"● memory {chosen}")

        await pilot.press("2")
        await settle(pilot)
        tree = screen.query_one("#omitted-tree")
        tree.cursor_line = 3
        await settle(pilot)
        leaf = tree.cursor_node.data
        await pilot.press("v")  # masking again: no question
        await settle(pilot)
        assert not app.reveal
        assert tree.cursor_line == 3 and tree.cursor_node.data == leaf
        assert leaf["id"] in panel_title(screen)


@run_async
async def test_title_and_provenance_name_the_same_record_through_a_walk(
        sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=(160, 45)) as pilot:
        screen = await open_incident(pilot)
        panel = screen.query_one(RecordPanel)
        for _ in range(3):  # walk down the provenance chain, link by link
            plist = panel.provenance_list
            if plist.option_count < 2:
                break
            await pilot.press("p")
            plist.highlighted = 1
            await pilot.press("enter")
            await settle(pilot)
            kind, record_id = screen._selected
            assert f" {record_id}  ·  " in panel_title(screen)
            assert f" {record_id}" in provenance_self(screen).split("  ")[0]
        assert screen._walk  # it did walk


def test_a_provenance_link_says_in_or_out_before_the_field_it_follows() -> None:
    # a narrow panel cuts the end of the line: whether the source is in the prompt is worth
    # more than the name of the field that links it (it read "via source_artifact_ids [omit…")
    link = {"kind": "tool_artifact", "id": "art-015", "via": "source_artifact_ids", "depth": 1}
    membership = {("tool_artifact", "art-015"): {"decision": "omitted",
                                                 "reason_code": "privacy_restricted"}}
    line = RecordPanel._link_text(link, membership).plain
    assert line.index("[omitted: privacy_restricted]") < line.index("via source_artifact_ids")
