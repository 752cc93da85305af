"""Pilot tests of the inspector: every screen's main keys, on a small export of our own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.pilot import driven, open_as1, run_async, screen_text, settle, status
from support.reveal import dialog_shown, reveal_deliberately
from support.stores import make_export, ts

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.conversation import ConversationScreen
from inspector.screens.help import HelpScreen
from inspector.screens.requests import RequestsScreen
from inspector.widgets.record_panel import RecordPanel
from inspector.widgets.reveal import ConfirmReveal

MARKUP = "[bold red]not markup[/]"
SECRET = "SECRET CALENDAR lunch with Dana"


def _edit(rows: dict[str, list[dict[str, Any]]]) -> None:
    """Our additions to the store's base export: hostile text, a google-derived memory,
    a subagent child run with its own assembly."""
    rows["messages"][0]["content"] = f"Total my expenses {MARKUP} \x1b[31mred\u202e"
    memory = dict(rows["tool_memories"][1])
    memory.update(
        memory_id="m4", summary=SECRET, privacy_class="google_derived", supersedes=[],
        superseded_by=None, source_artifact_ids=["a1"],
    )
    rows["tool_memories"].append(memory)
    rows["assembly_records"].append(
        {"assembly_id": "as1", "record_kind": "tool_memory", "record_id": "m4",
         "decision": "included", "rendering": "compact_memory", "position": 6,
         "policy_family": "privacy", "reason_code": "compact_memory",
         "detail": "calendar summary", "tokens": 11}
    )
    run2 = dict(rows["model_runs"][0])
    run2.update(model_run_id="run2", runtime_kind="subagent_child", parent_model_run_id="run1",
                started_at=ts(3), ended_at=ts(4), trigger_message_id=None)
    rows["model_runs"].append(run2)
    assembly = dict(rows["context_assemblies"][0])
    assembly.update(assembly_id="as3", model_run_id="run2", assembled_at=ts(3),
                    runtime_kind="subagent_child", policy_version="v6",
                    tags=["scenario:child_subagent_artifacts", MARKUP])
    rows["context_assemblies"].append(assembly)
    rows["assembly_records"].append(
        {"assembly_id": "as3", "record_kind": "message", "record_id": "msg1",
         "decision": "included", "rendering": "verbatim", "position": 0,
         "policy_family": "window", "reason_code": "in_window", "detail": "", "tokens": 12}
    )


@pytest.fixture(scope="module")
def app_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ingest.store import ingest

    root = tmp_path_factory.mktemp("app")
    export = make_export(root / "export", edit=_edit)
    db = root / "app.duckdb"
    ingest(export, db)
    return db


BULK = 1203


@pytest.fixture(scope="module")
def bulk_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """More requests than one page of the list holds."""
    from ingest.store import ingest

    def edit(rows: dict[str, list[dict[str, Any]]]) -> None:
        template = rows["context_assemblies"][0]
        rows["context_assemblies"] = [
            {**template, "assembly_id": f"bulk-{i:04d}", "assembled_at": ts(i),
             "tags": [f"scenario:s{i % 7}"]}
            for i in range(BULK)
        ]
        rows["assembly_records"] = []
        rows["policy_decisions"] = []

    root = tmp_path_factory.mktemp("bulk")
    db = root / "bulk.duckdb"
    ingest(make_export(root / "export", edit=edit), db)
    return db


# ---------------------------------------------------------------------- request list


def column(table: Any, label: str) -> list[Any]:
    """The values shown under the header ``label``."""
    return list(table.backend.get_column_at(list(table.backend.columns).index(label)))


@run_async
async def test_list_shows_n_of_m(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, RequestsScreen)
        assert "3 of 3 requests" in status(app)
        table = app.screen.query_one("#requests-table")
        assert table.row_count == 3
        # oldest first by default, as `contextlens list` prints them
        assert column(table, "request") == ["as1", "as3", "as2"]
        assert "sorted by time (UTC) ↑" in status(app)


@run_async
async def test_filter_narrows_rows(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        await pilot.press(*"policy:v4")
        await pilot.press("enter")
        await settle(pilot)
        assert "1 of 3 requests" in status(app)
        assert app.screen.query_one("#requests-table").row_count == 1
        assert "filter: policy:v4" in status(app)


@run_async
async def test_typing_a_filter_runs_one_query_when_typing_pauses(
    app_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a pause long enough that a loaded test machine types 30 keys well within it
    monkeypatch.setattr("inspector.screens.requests.FILTER_PAUSE", 2.0)
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        before = screen.queries_run
        await pilot.press("slash")
        await pilot.press(*"participant:p-model policy:v4")  # 30 keys, no pause between them
        assert screen.filter_pending and screen.queries_run == before
        await settle(pilot)  # the pause passes: the filter runs once
        assert screen.queries_run == before + 1
        assert "1 of 3 requests" in status(app)
        assert "filter: participant:p-model policy:v4" in status(app)


@run_async
async def test_bad_filter_shows_error_inline(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        await pilot.press(*"bogus:1")
        await settle(pilot)
        assert app.screen.has_class("-bad-filter")
        error = str(app.screen.query_one("#filter-error").render())
        assert "unknown key 'bogus'" in error
        assert "of 3 requests" in status(app)  # the list keeps the last valid filter
        for _ in range(7):
            await pilot.press("backspace")
        await settle(pilot)
        assert not app.screen.has_class("-bad-filter")


@run_async
async def test_a_key_being_typed_is_not_an_error_until_entered(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        await pilot.press(*"policy", "colon")
        await settle(pilot)
        assert not app.screen.has_class("-bad-filter")  # its value comes next
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen.has_class("-bad-filter")
        assert "'policy:' needs a value" in str(app.screen.query_one("#filter-error").render())
        await pilot.press(*"v4")
        await settle(pilot)
        assert not app.screen.has_class("-bad-filter")


@run_async
async def test_sort_by_current_column_and_reverse(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#requests-table")
        for _ in range(list(table.backend.columns).index("request")):
            await pilot.press("right")
        await pilot.press("s")
        await settle(pilot)
        table = app.screen.query_one("#requests-table")
        # the arrow is on the sorted column, named as shown
        assert "sorted by request ↑" in status(app) and "request ↑" in table.backend.columns
        assert column(table, "request ↑") == ["as1", "as2", "as3"]
        await pilot.press("s")
        await settle(pilot)
        table = app.screen.query_one("#requests-table")
        assert "sorted by request ↓" in status(app)
        assert column(table, "request ↓") == ["as3", "as2", "as1"]
        assert "time (UTC)" in table.backend.columns  # no arrow where the list is not sorted


@run_async
async def test_list_pages_with_sql_as_the_cursor_nears_the_end(bulk_db: Path) -> None:
    app = ContextLensApp(db_path=bulk_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        assert "1,203 of 1,203 requests" in status(app) and "500 loaded" in status(app)
        table = app.screen.query_one("#requests-table")
        table.move_cursor(row=499)  # the last row loaded (End goes to the list's last row)
        await settle(pilot)
        assert table.row_count == 1000 and "1,000 loaded" in status(app)
        assert table.cursor_row == 499  # the cursor stays where the user put it
        ids = column(table, "request")
        assert ids[0] == "bulk-0000" and ids[999] == "bulk-0999"
        table.move_cursor(row=999)
        await settle(pilot)
        assert table.row_count == BULK and "loaded" not in status(app)
        assert column(table, "request")[BULK - 1] == "bulk-1202"
        await pilot.press("slash", *"scenario:s3", "enter")
        await settle(pilot)
        assert "172 of 1,203 requests" in status(app)


@run_async
async def test_markup_and_control_characters_shown_literally(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(220, 40)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert MARKUP in text  # a tag of as3, in the list
        await open_as1(pilot)
        text = screen_text(app)
        assert MARKUP in text  # msg1's label in the context table and the panel
        # the colour sequence is removed for reading; the bidi override stays visible
        assert f"{MARKUP} red\\u202e" in text and "\\x1b[31m" not in text
        assert "\x1b" not in text and "\u202e" not in text
        await pilot.press("e")  # the escaped form
        await settle(pilot)
        text = screen_text(app)
        assert "\\x1b[31mred\\u202e" in text
        assert "\x1b" not in text and "\u202e" not in text


# ---------------------------------------------------------------------- assembly screen


@run_async
async def test_enter_opens_assembly(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("home")  # oldest request: as1
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        assert app.screen.assembly_id == "as1"
        header = str(app.screen.query_one("#assembly-header").render())
        assert "policy v4" in header and "tokens 80 of 4,000 budget" in header
        assert app.screen.query_one("#context-table").row_count == 7
        await pilot.press("escape")
        assert isinstance(app.screen, RequestsScreen)


@run_async
async def test_tabs_switch_with_number_keys(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        screen = await open_as1(pilot)
        tabs = screen.query_one("#tabs")
        for key, name in (("2", "omitted"), ("3", "trace"), ("4", "prompt"), ("1", "context")):
            await pilot.press(key)
            await settle(pilot)
            assert tabs.active == f"tab-{name}"
        await pilot.press("4")
        await settle(pilot)
        log = screen.query_one("#prompt-log")
        assert log.line_count > 5
        assert any("Total my expenses" in line for line in log.lines)
        assert "7 parts" in str(screen.query_one("#prompt-status").render())


@run_async
async def test_omitted_grouped_by_reason(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        screen = await open_as1(pilot)
        await pilot.press("2")
        await settle(pilot)
        tree = screen.query_one("#omitted-tree")
        groups = {n.data["reason"]: n for n in tree.root.children}
        assert list(groups) == ["over_budget", "stale", "superseded"]
        assert [c.data["id"] for c in groups["stale"].children] == ["m3"]
        assert "1 record" in groups["superseded"].label.plain


@run_async
async def test_provenance_walk_reaches_broken_link(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        screen = await open_as1(pilot)
        panel = screen.query_one(RecordPanel)
        # context row 1 is memory m2 (compact memory of artifact a1)
        await pilot.press("down")
        await settle(pilot)
        assert screen._selected == ("tool_memory", "m2")
        why = str(panel.query_one("#record-why").render())
        assert why.startswith("Included ToolMemory m2 as compact memory")
        await pilot.press("p")
        plist = panel.provenance_list
        assert plist.has_focus
        prompts = [plist.get_option_at_index(i).prompt.plain for i in range(plist.option_count)]
        a1 = next(i for i, p in enumerate(prompts) if "artifact a1" in p)
        assert "[included]" in prompts[a1]
        plist.highlighted = a1
        await pilot.press("enter")
        await settle(pilot)
        assert screen._selected == ("tool_artifact", "a1")
        assert "artifact a1" in str(panel.query_one("#record-title").render())
        await pilot.press("backspace")
        await settle(pilot)
        assert screen._selected == ("tool_memory", "m2")
        # the stale memory m3 names a missing artifact
        await pilot.press("escape")  # back from the provenance list to the table
        assert isinstance(app.screen, AssemblyScreen)
        await pilot.press("2")
        await settle(pilot)
        tree = screen.query_one("#omitted-tree")
        stale = next(n for n in tree.root.children if n.data["reason"] == "stale")
        tree.move_cursor(stale.children[0])
        await settle(pilot)
        assert screen._selected == ("tool_memory", "m3")
        prompts = [plist.get_option_at_index(i).prompt.plain for i in range(plist.option_count)]
        assert any("✗ missing a-404" in p and "broken provenance" in p for p in prompts)
        assert "✗ missing a-404" in screen_text(app)


@run_async
async def test_masked_until_reveal_confirmed(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(160, 40)) as pilot:
        await settle(pilot)
        await open_as1(pilot)
        await pilot.press("4")
        await settle(pilot)
        log_text = "\n".join(app.screen.query_one("#prompt-log").lines)
        assert SECRET not in log_text and "[masked: google_derived" in log_text
        await pilot.press("1")
        await settle(pilot)
        assert SECRET not in screen_text(app)
        assert "[masked: google_derived" in screen_text(app)
        await pilot.press("v")
        await dialog_shown(pilot)
        assert isinstance(app.screen, ConfirmReveal)
        await pilot.press("n")
        await settle(pilot)
        assert not app.reveal and SECRET not in screen_text(app)
        await reveal_deliberately(pilot)  # v, the question shown, ctrl+y
        assert app.reveal
        assert SECRET in screen_text(app)
        await pilot.press("4")
        await settle(pilot)
        assert SECRET in "\n".join(app.screen.query_one("#prompt-log").lines)
        # the footer says what v does now
        assert "v Mask" in screen_text(app) and "v Reveal" not in screen_text(app)
        await pilot.press("v")  # masking again needs no confirmation
        await settle(pilot)
        assert not app.reveal
        assert "v Reveal" in screen_text(app) and "v Mask" not in screen_text(app)


@run_async
async def test_reveal_from_the_command_line(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db, reveal=True, initial_assembly="as1")
    async with driven(app, size=(160, 40)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        assert SECRET in screen_text(app)


@run_async
async def test_unknown_initial_assembly_is_an_error_not_a_crash(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db, initial_assembly="nope")
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        assert app.screen.has_class("-failed")
        assert "unknown assembly 'nope'" in screen_text(app)


# ---------------------------------------------------------------------- conversation, help


@run_async
async def test_conversation_tree_shows_branches_and_runs(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("end")  # the newest request: as2
        await pilot.press("c")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ConversationScreen)
        tree = screen.query_one("#conversation-tree")
        branches = tree.root.children
        assert [b.data["id"] for b in branches] == ["b1"]
        b1 = branches[0]
        run1 = next(n for n in b1.children if n.data["type"] == "run")
        assert run1.data["id"] == "run1"
        b2 = next(n for n in b1.children if n.data["type"] == "branch")
        assert b2.data["id"] == "b2" and "forked from b1 at msg1" in b2.label.plain
        child = next(n for n in run1.children if n.data["type"] == "run")
        assert child.data["id"] == "run2" and "subagent_child" in child.label.plain
        assert [n.data["id"] for n in child.children] == ["as3"]
        assemblies = [n.data["id"] for n in run1.children if n.data["type"] == "assembly"]
        assert assemblies == ["as1", "as2"]
        # the highlighted request's assembly has the cursor; Enter opens it
        assert tree.cursor_node.data["id"] == "as2"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen) and app.screen.assembly_id == "as2"
        await pilot.press("c")
        await settle(pilot)
        assert isinstance(app.screen, ConversationScreen)


@run_async
async def test_help_lists_every_screens_keys(app_db: Path) -> None:
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = app.screen.query_one("#help-keys").render().plain
        for screen_cls in (RequestsScreen, AssemblyScreen, ConversationScreen):
            for binding in screen_cls.BINDINGS:
                assert binding.description in text
        assert "Back in walk" in text and "Reveal" in text and "?, f1" in text
        await pilot.press("escape")
        assert isinstance(app.screen, RequestsScreen)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
