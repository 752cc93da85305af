"""Hostile input in the inspector: every screen shows untrusted text as data.

One export holds, in ids, labels, content, details, tags, speaker labels, tool names,
conversation titles and branch names: Rich markup, Textual content markup, ANSI CSI
(colour, screen clearing, cursor movement), an OSC 8 hyperlink, other C0/C1 controls,
bidi overrides and a 100,000-character line. Every screen must show it literally or as a
visible escape (``\\x1b``), never obey it, and never crash or hang on it. Every filter box
is also fed SQL: it is parsed by our grammar, never run.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.hostile import (
    AS1, CLEAR, CSI, HOSTILE, LONG_ID, MARKUP, OSC8, RAW, RENAMED, VISIBLE, build_hostile_db,
)
from support.pilot import driven, run_async, screen_text, settle_quickly, terminal_output

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.conversation import ConversationScreen
from inspector.screens.requests import RequestsScreen
from inspector.widgets.record_panel import RecordPanel
from inspector.widgets.safe import readable, safe_text


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_hostile_db(tmp_path_factory.mktemp("hostile"))


# ---------------------------------------------------------------------- helpers


def assert_nothing_obeyed(app: ContextLensApp) -> str:
    """The screen shows no raw control or bidi character, no link and no click action
    from content; returns the screen's plain text."""
    output, segments = terminal_output(app)
    for seq in (CSI, CLEAR, OSC8, "\x1b]8;;http://evil", "\x07", "\x9b", "\x85", "\u202e",
                "\u2066", "\u2067", "\u2068", "\u2069"):
        assert seq not in output, f"{seq!r} reached the terminal"
    for seg in segments:
        style = seg.style
        if style is None:
            continue
        assert not style.link, f"a link on {seg.text!r}"
        meta = style.meta or {}
        assert "evil" not in str(meta) and "app.quit" not in str(meta), meta
    text = screen_text(app)
    for raw in RAW:
        assert raw not in text
    return text


def assert_visible(text: str, *needles: str) -> None:
    for needle in needles:
        assert needle in text, f"{needle!r} is not on screen"


def store_fingerprint(db: Path) -> tuple[str, int]:
    from ingest.store import Store

    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    with Store.open(db) as store:
        return digest, store.count_assemblies()


# ---------------------------------------------------------------------- request list and header


@run_async
async def test_request_list_and_header_show_hostile_text_as_data(hostile_db: Path) -> None:
    app = ContextLensApp(db_path=hostile_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle_quickly(pilot)
        assert isinstance(app.screen, RequestsScreen)
        text = assert_nothing_obeyed(app)
        # the store's own (hostile) file name in the header, escaped
        assert_visible(text, "hostile[b]\\x1b[31m\\u202ename.duckdb")
        # ids cut to the request column, the whole id escaped in its cell (below)
        assert_visible(text, "as1[bold red]MARKUP[/][…", "as-long-IIII")
        assert "3 of 3 requests" in str(app.screen.query_one("#status").render())
        table = app.screen.query_one("#requests-table")
        cells = [str(v) for row in range(table.row_count) for v in table.get_row_at(row)]
        # a cell is escaped first, then cut to its column (the whole id is in the panel)
        as1 = next(v for v in cells if v.startswith("as1"))
        assert as1 == safe_text(AS1)[:23] + "…"
        assert all("\x1b" not in v and "\u202e" not in v for v in cells)
        # the cursor walks every row, including the 100k-character id, without trouble
        await pilot.press("down", "down", "right", "right", "right")
        await settle_quickly(pilot)
        assert_nothing_obeyed(app)


# ---------------------------------------------------------------------- assembly screen


@run_async
async def test_assembly_tabs_and_record_panel_show_hostile_text_as_data(hostile_db: Path) -> None:
    app = ContextLensApp(db_path=hostile_db, initial_assembly=AS1)
    async with driven(app, size=(140, 40)) as pilot:
        await settle_quickly(pilot)
        screen = app.screen
        assert isinstance(screen, AssemblyScreen)
        # context tab and header: the first record is the hostile message
        text = assert_nothing_obeyed(app)
        assert_visible(text, "assembly as1[bold red]MARKUP[/]", "msg1[bold red]MARKUP[/]",
                       *VISIBLE)
        panel = screen.query_one(RecordPanel)
        content = str(panel.query_one("#record-content").render())
        assert "content " + readable(HOSTILE) in content
        # the record panel's why-sentence names the hostile ids as text
        why = str(panel.query_one("#record-why").render())
        assert safe_text(RENAMED["msg1"]) in why
        # the tool call: hostile tool name and JSON arguments
        await pilot.press("end")
        await settle_quickly(pilot)
        content = str(panel.query_one("#record-content").render())
        assert "tool " + readable(HOSTILE) in content
        text = assert_nothing_obeyed(app)
        # omitted tab: groups and hostile labels
        await pilot.press("2")
        await settle_quickly(pilot)
        text = assert_nothing_obeyed(app)
        assert_visible(text, "over_budget", "stale", "superseded", "tool [bold red]MARKUP[/]")
        # trace tab: hostile decision details
        await pilot.press("3")
        await settle_quickly(pilot)
        text = assert_nothing_obeyed(app)
        assert_visible(text, "m3[bold red]MARKUP[/]")
        trace = screen.query_one("#trace-table")
        details = [str(v) for r in range(trace.row_count) for v in trace.get_row_at(r)]
        assert any(v.startswith("decision " + readable(HOSTILE)) for v in details)
        # prompt tab: speaker labels and the whole content, the long line wrapped
        await pilot.press("4")
        await settle_quickly(pilot)
        text = assert_nothing_obeyed(app)
        assert_visible(text, "speaker [bold red]MARKUP[/]", "content [bold red]MARKUP[/]",
                       "\\x1b[31mRED", "L" * 100)
        log = screen.query_one("#prompt-log")
        lines = list(log.lines)
        assert all("\x1b" not in line and "\u202e" not in line for line in lines)
        assert max(len(line) for line in lines) <= 120  # the 100k line is wrapped
        assert sum(line.count("L") for line in lines) >= 100_000


@run_async
async def test_provenance_walk_and_notification_show_hostile_text_as_data(hostile_db: Path) -> None:
    app = ContextLensApp(db_path=hostile_db, initial_assembly=AS1)
    async with driven(app, size=(140, 40), notifications=True) as pilot:
        await settle_quickly(pilot)
        screen = app.screen
        assert isinstance(screen, AssemblyScreen)
        # omitted tab: m3 (stale) names a missing artifact with a hostile id
        await pilot.press("2")
        await settle_quickly(pilot)
        tree = screen.query_one("#omitted-tree")
        leaf = next(n for g in tree.root.children for n in g.children
                    if (n.data or {}).get("id") == RENAMED["m3"])
        tree.move_cursor(leaf)
        await settle_quickly(pilot)
        await pilot.press("enter")  # to the provenance list
        await settle_quickly(pilot)
        plist = screen.query_one(RecordPanel).provenance_list
        assert app.focused is plist
        links = [str(plist.get_option_at_index(i).prompt) for i in range(plist.option_count)]
        assert any("✗ missing " + safe_text(RENAMED["a-404"])[:20] in l for l in links)
        text = assert_nothing_obeyed(app)
        assert_visible(text, "→ artifact a1[bold red]MARKUP[/]")
        # choose the broken link: a notification names it, escaped
        broken = next(i for i, l in enumerate(links) if "✗ missing" in l)
        plist.highlighted = broken
        await pilot.press("enter")
        await settle_quickly(pilot)
        notes = list(app._notifications)
        assert notes and "a-404[bold red]MARKUP[/]" in notes[-1].message
        assert "\x1b" not in notes[-1].message and "\u202e" not in notes[-1].message
        text = assert_nothing_obeyed(app)
        await pilot.pause()
        text = assert_nothing_obeyed(app)
        assert_visible(text, "is missing")
        # walk to a hostile artifact and back
        first_artifact = next(i for i, l in enumerate(links) if "artifact a1" in l)
        plist.highlighted = first_artifact
        await pilot.press("enter")
        await settle_quickly(pilot)
        content = str(screen.query_one(RecordPanel).query_one("#record-content").render())
        assert "preview " + readable(HOSTILE) in content
        assert_nothing_obeyed(app)
        await pilot.press("backspace")
        await settle_quickly(pilot)
        assert_nothing_obeyed(app)


@run_async
async def test_long_id_assembly_opens_and_stays_short_on_screen(hostile_db: Path) -> None:
    app = ContextLensApp(db_path=hostile_db, initial_assembly=LONG_ID)
    async with driven(app, size=(140, 40)) as pilot:
        await settle_quickly(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        text = assert_nothing_obeyed(app)
        assert_visible(text, "assembly as-long-IIII", "…")
        header = str(app.screen.query_one("#assembly-header").render())
        assert len(header) < 2_000
        for key in ("2", "3", "4", "1"):
            await pilot.press(key)
            await settle_quickly(pilot)
            assert_nothing_obeyed(app)


# ---------------------------------------------------------------------- conversation, diff, verify


@run_async
async def test_conversation_tree_shows_hostile_text_as_data(hostile_db: Path) -> None:
    app = ContextLensApp(db_path=hostile_db, initial_assembly=AS1)
    async with driven(app, size=(140, 40)) as pilot:
        await settle_quickly(pilot)
        await pilot.press("c")
        await settle_quickly(pilot)
        screen = app.screen
        assert isinstance(screen, ConversationScreen)
        text = assert_nothing_obeyed(app)
        assert_visible(text, "conversation c1[bold red]MARKUP[/]", "title [bold red]MARKUP[/]",
                       "branch b1[bold red]MARKUP[/]", "run run1[bold red]MARKUP[/]",
                       "assembly as1[bold red]MARKUP[/]", "\\x1b[31mRED")
        labels = []

        def walk(node: Any) -> None:
            labels.append(node.label.plain)
            for child in node.children:
                walk(child)

        walk(screen.query_one("#conversation-tree").root)
        assert all("\x1b" not in l and "\u202e" not in l and len(l) < 1_000 for l in labels)
        # the hostile compaction marker: only its number is read, nothing else of it
        marker = next(l for l in labels if l.startswith("⟂ compaction"))
        assert marker.startswith("⟂ compaction #7 ") and "MARKUP" not in marker
        # branch names
        assert any("“branch [bold red]MARKUP[/]" in l for l in labels)
        await pilot.press("x")
        await settle_quickly(pilot)
        assert_nothing_obeyed(app)


@run_async
async def test_diff_and_verify_show_hostile_text_as_data(hostile_db: Path) -> None:
    app = ContextLensApp(db_path=hostile_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle_quickly(pilot)
        app.open_diff(AS1, "v5")
        await settle_quickly(pilot)
        text = assert_nothing_obeyed(app)
        assert_visible(text, "diff as1[bold red]MARKUP[/]")
        table = app.screen.query_one("#diff-table")
        cells = [str(v) for r in range(table.row_count) for v in table.get_row_at(r)]
        assert cells and all("\x1b" not in v and "\u202e" not in v for v in cells)
        await pilot.press("down", "enter")
        await settle_quickly(pilot)
        text = assert_nothing_obeyed(app)
        await pilot.press("escape")
        await settle_quickly(pilot)
        await pilot.press("escape")
        await settle_quickly(pilot)
        assert isinstance(app.screen, RequestsScreen)
        await pilot.press("V")
        await settle_quickly(pilot, 60)
        text = assert_nothing_obeyed(app)
        assert_visible(text, "as1[bold red]MARKUP[/]", "as-long-IIII")


# ---------------------------------------------------------------------- SQL in every filter box

SQL_FILTERS = (
    "x' OR 1=1 --",
    '"; DROP TABLE assembly_summary; --',
    "scenario:' OR ''='",
    "id:as1' OR '1'='1",
    "tag:x'); DELETE FROM context_assemblies; --",
    "policy:v4' UNION SELECT * FROM exports --",
)


@run_async
async def test_sql_typed_into_the_request_filter_is_data(hostile_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "copy.duckdb"
    shutil.copyfile(hostile_db, db)
    before = store_fingerprint(db)
    app = ContextLensApp(db_path=db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle_quickly(pilot)
        screen = app.screen
        assert isinstance(screen, RequestsScreen)
        for expr in SQL_FILTERS:
            await pilot.press("slash")
            filter_box = screen.query_one("#filter")
            filter_box.value = ""
            await pilot.press(*expr)
            await pilot.press("enter")
            await settle_quickly(pilot)
            status = str(screen.query_one("#status").render())
            error = str(screen.query_one("#filter-error").render())
            if screen.has_class("-bad-filter"):
                assert error.startswith("filter:"), error  # our grammar's message
            else:
                # parsed as literal terms: nothing in this store holds that text
                assert status.startswith("0 of 3 requests"), (expr, status)
                assert screen.query_one("#requests-table").row_count == 0
            assert_nothing_obeyed(app)
        # a literal match still matches: the hostile text is searchable as text
        await pilot.press("slash")
        screen.query_one("#filter").value = ""
        await pilot.press(*"as-long-III")
        await pilot.press("enter")
        await settle_quickly(pilot)
        assert str(screen.query_one("#status").render()).startswith("1 of 3 requests")
        await pilot.press("slash")
        screen.query_one("#filter").value = ""
        await pilot.press(*"as1[bold")  # markup as a literal search term
        await pilot.press("enter")
        await settle_quickly(pilot)
        assert str(screen.query_one("#status").render()).startswith("1 of 3 requests")
        # and a follow-up valid filter works
        await pilot.press("slash")
        screen.query_one("#filter").value = ""
        await pilot.press(*"policy:v4")
        await pilot.press("enter")
        await settle_quickly(pilot)
        assert str(screen.query_one("#status").render()).startswith("2 of 3 requests")
        assert not screen.has_class("-bad-filter")
    assert store_fingerprint(db) == before


@run_async
async def test_sql_typed_into_the_command_palette_is_data(hostile_db: Path, tmp_path: Path) -> None:
    """The only other text box: Textual's command palette (it searches commands)."""
    db = tmp_path / "copy.duckdb"
    shutil.copyfile(hostile_db, db)
    before = store_fingerprint(db)
    app = ContextLensApp(db_path=db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle_quickly(pilot)
        for expr in SQL_FILTERS[:3] + (MARKUP,):
            await pilot.press("ctrl+p")
            await settle_quickly(pilot)
            await pilot.press(*expr)
            await settle_quickly(pilot)
            assert_nothing_obeyed(app)
            await pilot.press("escape")
            await settle_quickly(pilot)
        assert isinstance(app.screen, RequestsScreen)
    assert store_fingerprint(db) == before
