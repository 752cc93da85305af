"""Every screen masks secret-shaped ids (``support.planted_ids``: an assembly, conversation
and record id, the model, a tool, a skill and tags shaped like keys and tokens) unless
revealed: the record panel and its provenance, the Omitted and Trace tabs, the diff, the
conversation, compare, the bisect, replay and bundle dialogs, lint, verify and the
command palette. What the terminal shows is read (``screen_text``); the screens still open
requests and records by their real ids. Revealed, the real ids are shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.pilot import run_async, screen_text, settle
from support.planted_ids import ASM, CONV, REC, build_planted_db, leaked

from inspector.app import ContextLensApp
from inspector.commands import ContextLensCommands
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.bisect import BisectScreen
from inspector.screens.bundle import BundleScreen
from inspector.screens.compare import CompareScreen
from inspector.screens.conversation import ConversationScreen
from inspector.screens.diff import DiffScreen
from inspector.screens.lint import LintScreen
from inspector.screens.replay import PolicyPicker
from inspector.screens.verify import VerifyScreen
from inspector.widgets.record_panel import RecordPanel

SIZE = (160, 45)


@pytest.fixture(scope="module")
def planted_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_planted_db(tmp_path_factory.mktemp("planted-screens"))


def shows_none(app: ContextLensApp, where: str) -> str:
    """The screen's text, asserting it shows no planted secret."""
    text = screen_text(app)
    assert leaked(text) == [], f"{where}: {leaked(text)}\n{text}"
    return text


async def palette_names(app: ContextLensApp, query: str) -> list[str]:
    """The names the command palette offers for ``query`` on the current screen."""
    provider = ContextLensCommands(app.screen)
    await provider.startup()
    return [str(hit.text) async for hit in provider.search(query)]


async def each_row(pilot: Any, table_id: str, where: str) -> None:
    """The cursor on each row of a table in turn (the panel follows), nothing leaked."""
    table = pilot.app.screen.query_one(table_id)
    for row in range(table.row_count):
        table.move_cursor(row=row, animate=False)
        await settle(pilot)
        shows_none(pilot.app, f"{where} row {row}")


@run_async
async def test_the_record_panel_and_every_tab_mask_secret_shaped_ids(planted_db: Path) -> None:
    app = ContextLensApp(db_path=planted_db, initial_assembly=ASM)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AssemblyScreen)
        panel = screen.query_one(RecordPanel)
        # the first record is the planted message: the panel keeps its real id
        assert panel.detail is not None and panel.detail.record_id == REC
        title = str(screen.query_one("#record-title").render())
        assert "[masked secret (aws key)]" in title
        await each_row(pilot, "#context-table", "context")
        for tab in ("2", "3"):
            await pilot.press(tab)
            await settle(pilot)
            shows_none(app, f"tab {tab}")
            await pilot.press("down")
            await settle(pilot)
            shows_none(app, f"tab {tab}, the next record")
        await pilot.press("1")
        await settle(pilot)
        # walking the provenance to the planted message opens it by its real id
        table = screen.query_one("#context-table")
        table.move_cursor(row=1, animate=False)  # a memory, made from the message's turn
        await settle(pilot)
        links = panel._links  # noqa: SLF001 - the links as walked
        target = next(i for i, link in enumerate(links) if link.get("id") == REC)
        await pilot.press("p")
        panel.provenance_list.highlighted = target
        await pilot.press("enter")
        await settle(pilot)
        assert panel.detail is not None and panel.detail.record_id == REC
        shows_none(app, "walked to the message")


@run_async
async def test_the_diff_masks_its_header_records_and_why(planted_db: Path) -> None:
    app = ContextLensApp(db_path=planted_db, initial_assembly=ASM)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_diff(ASM, "v5")
        await settle(pilot)
        diff = app.screen
        assert isinstance(diff, DiffScreen) and diff.assembly_id == ASM
        header = str(diff.query_one("#diff-header").render())
        assert header.startswith("diff [masked secret (github token)]")
        await pilot.press("f")  # every record, the planted message among them
        await settle(pilot)
        table = diff.query_one("#diff-table")
        records = [str(table.get_row_at(i)[2]) for i in range(table.row_count)]
        assert "[masked secret (aws key)]" in records
        await each_row(pilot, "#diff-table", "diff")


@run_async
async def test_the_conversation_and_compare_mask_secret_shaped_ids(planted_db: Path) -> None:
    app = ContextLensApp(db_path=planted_db, initial_assembly=ASM)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        conversation = app.screen
        assert isinstance(conversation, ConversationScreen)
        assert conversation.conversation_id == CONV
        shows_none(app, "conversation")
        # enter on the focused request opens it by its real id
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen) and app.screen.assembly_id == ASM
        app.open_compare("recorded", "v5")
        await settle(pilot)
        compare = app.screen
        assert isinstance(compare, CompareScreen) and compare.result is not None
        assert compare.result.most_changed, "the planted requests change under v5"
        text = shows_none(app, "compare")
        assert "[masked secret (github token)]" in text
        await pilot.press("down")
        await settle(pilot)
        shows_none(app, "compare, the next request")


@run_async
async def test_dialogs_lint_and_the_palette_mask_secret_shaped_ids(planted_db: Path) -> None:
    app = ContextLensApp(db_path=planted_db, initial_assembly=ASM)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        names = await palette_names(app, "replay")
        assert any(n.startswith("Replay [masked secret (github token)]") for n in names), names
        names += await palette_names(app, "conversation")
        names += await palette_names(app, "ghp_aBc")  # part of the id, typed
        assert any(n.startswith("Open assembly [masked secret") for n in names), names
        assert leaked("\n".join(names)) == [], names
        app.pick_replay(ASM, "v4")
        await settle(pilot)
        assert isinstance(app.screen, PolicyPicker)
        shows_none(app, "replay picker")
        app.pop_screen()
        app.open_bisect(ASM, "message", REC)
        await settle(pilot)
        assert isinstance(app.screen, BisectScreen)
        shows_none(app, "bisect")
        app.pop_screen()
        app.open_bundle(ASM)
        await settle(pilot)
        bundle = app.screen
        assert isinstance(bundle, BundleScreen)
        shows_none(app, "bundle")
        # the folder it offers is named by a hash, not by the id (it lands on disk)
        assert leaked(bundle.query_one("#bundle-folder").value) == []
        app.pop_screen()
        app.open_lint()
        await settle(pilot)
        assert isinstance(app.screen, LintScreen)
        shows_none(app, "lint")
        app.pop_screen()
        app.open_verify()  # both planted requests are listed (inconsistent)
        await settle(pilot)
        assert isinstance(app.screen, VerifyScreen) and app.screen.listed
        shows_none(app, "verify")
        await pilot.press("enter")  # its diff, with verify's note on what differs
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen) and app.screen.note
        shows_none(app, "verify's diff")


@run_async
async def test_revealed_every_screen_shows_the_real_ids(planted_db: Path) -> None:
    app = ContextLensApp(db_path=planted_db, initial_assembly=ASM, reveal=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert REC in str(app.screen.query_one("#record-title").render())
        assert f"Replay {ASM}" in "\n".join(await palette_names(app, "replay"))
        app.open_diff(ASM, "v5")
        await settle(pilot)
        assert str(app.screen.query_one("#diff-header").render()).startswith(f"diff {ASM}")
        await pilot.press("f")
        await settle(pilot)
        table = app.screen.query_one("#diff-table")
        assert REC in [str(table.get_row_at(i)[2]) for i in range(table.row_count)]
        app.pop_screen()
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        text = screen_text(app)
        assert CONV in text and ASM in text
        app.pop_screen()
        app.open_compare("recorded", "v5")
        await settle(pilot)
        assert ASM in screen_text(app)
        # masked again (v): what compare shows is masked again, with no new run
        await pilot.press("v")
        await settle(pilot)
        assert leaked(screen_text(app)) == []
