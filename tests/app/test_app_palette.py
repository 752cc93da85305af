"""The command palette (ctrl+p) offers contextlens's commands, and each does what its key
does; the help lists every key; one key has one meaning across screens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.palette import choose, palette
from support.pilot import driven, run_async, screen_text, settle, status
from support.reveal import dialog_shown

from inspector.app import ContextLensApp, key_owners
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.conversation import ConversationScreen
from inspector.screens.diff import DiffScreen
from inspector.screens.help import HelpScreen, help_text
from inspector.screens.lint import LintScreen
from inspector.screens.replay import PolicyPicker
from inspector.screens.requests import RequestsScreen
from inspector.screens.verify import VerifyScreen
from inspector.widgets.reveal import ConfirmReveal

INCIDENT = "asm-035"  # recorded under v5, tagged incident
SIZE = (140, 40)


@run_async
async def test_typing_verify_offers_verify_first_and_runs_it(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        offered = await palette(pilot, "verify", "Verify")
        assert offered[0].startswith("Verify: replay every request")
        assert "Verify" in screen_text(app)
        await choose(pilot, offered, "Verify")
        assert isinstance(app.screen, VerifyScreen)
        assert "drifted" in screen_text(app).lower()


@run_async
async def test_part_of_an_id_opens_that_assembly_or_its_conversation(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        offered = await palette(pilot, "asm-035", "Open assembly asm-035")
        assert [o for o in offered if o.startswith("Open assembly")] == [
            "Open assembly asm-035"]
        await choose(pilot, offered, "Open assembly asm-035")
        assert isinstance(app.screen, AssemblyScreen)
        assert app.screen.assembly_id == INCIDENT
        assert f"assembly {INCIDENT}" in screen_text(app)

        offered = await palette(pilot, "open c-ops", "Go to conversation c-ops")
        await choose(pilot, offered, "Go to conversation c-ops")
        assert isinstance(app.screen, ConversationScreen)


@run_async
async def test_incidents_preset_filters_the_list_from_any_screen(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        offered = await palette(pilot, "incidents", "Filter: incidents")
        await choose(pilot, offered, "Filter: incidents")
        assert isinstance(app.screen, RequestsScreen)
        assert "10 of 52 requests" in status(app)
        assert "filter: tag:incident" in status(app)
        assert "tag:incident" in screen_text(app)  # in the filter box too

        offered = await palette(pilot, "clear", "Filter: clear")
        await choose(pilot, offered, "Filter: clear")
        assert "52 of 52 requests" in status(app)


@run_async
async def test_replay_and_diff_act_on_the_open_assembly_like_r(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        offered = await palette(pilot, "replay v4", f"Replay {INCIDENT} under v4")
        # v4 is a version here, not part of an id: no request is offered for it
        assert not any(o.startswith("Open assembly") for o in offered)
        await choose(pilot, offered, f"Replay {INCIDENT} under v4")
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        assert (diff.assembly_id, diff.version, diff.against) == (INCIDENT, "v4", "recorded")
        assert "stale" in screen_text(app)  # v4 marks the calendar memory stale

        await pilot.press("escape")
        await settle(pilot)
        offered = await palette(pilot, "diff against v4", f"Diff {INCIDENT} against v4")
        await choose(pilot, offered, f"Diff {INCIDENT} against v4")
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        assert (diff.version, diff.against) == ("v5", "v4")

        await pilot.press("escape")
        await settle(pilot)
        offered = await palette(pilot, "replay", f"Replay {INCIDENT} under a version")
        await choose(pilot, offered, f"Replay {INCIDENT} under a version")
        assert isinstance(app.screen, PolicyPicker)  # the picker r opens


@run_async
async def test_commands_about_a_request_use_the_highlighted_row(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        highlighted = app.screen.highlighted_assembly()
        assert highlighted
        offered = await palette(pilot, "conversation of", "Go to the conversation of")
        assert offered[0] == f"Go to the conversation of {highlighted}"
        await choose(pilot, offered, "Go to the conversation of")
        assert isinstance(app.screen, ConversationScreen)


@run_async
async def test_reveal_from_the_palette_asks_first(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        offered = await palette(pilot, "reveal", "Reveal restricted content")
        await choose(pilot, offered, "Reveal restricted content")
        assert isinstance(app.screen, ConfirmReveal)
        assert not app.reveal
        await dialog_shown(pilot)
        await pilot.press("ctrl+y")
        await settle(pilot)
        assert app.reveal
        offered = await palette(pilot, "mask", "Mask restricted content")
        await choose(pilot, offered, "Mask restricted content")
        assert not app.reveal


@run_async
async def test_reveal_and_mask_both_find_the_toggle_whichever_way_it_goes(
        sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        for query in ("reveal", "mask"):
            offered = await palette(pilot, query, "Reveal restricted content")
            await pilot.press("escape")
            await settle(pilot)
        await choose(pilot, await palette(pilot, "mask", "Reveal restricted content"),
                     "Reveal restricted content")
        await dialog_shown(pilot)
        await pilot.press("ctrl+y")
        await settle(pilot)
        assert app.reveal
        for query in ("mask", "reveal"):
            offered = await palette(pilot, query, "Mask restricted content")
            assert not any(o.startswith("Reveal restricted") for o in offered)
            await pilot.press("escape")
            await settle(pilot)
        await choose(pilot, await palette(pilot, "reveal", "Mask restricted content"),
                     "Mask restricted content")
        assert not app.reveal


TEXTUAL_COMMANDS = {"Theme", "Quit", "Keys", "Screenshot", "Maximize", "Minimize"}


@run_async
async def test_our_commands_are_listed_before_textuals_own(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        offered = await palette(pilot, "", "Quit")  # nothing typed: every command
        textual = [i for i, o in enumerate(offered) if o in TEXTUAL_COMMANDS]
        ours = [i for i, o in enumerate(offered) if o not in TEXTUAL_COMMANDS]
        assert {"Theme", "Quit", "Keys"} <= {offered[i] for i in textual}
        assert offered[0].startswith("Verify") and max(ours) < min(textual), offered
        await pilot.press("escape")
        await settle(pilot)
        # typed: a command of ours that matches comes before one of Textual's
        offered = await palette(pilot, "t", "Theme")
        assert max(i for i, o in enumerate(offered) if o not in TEXTUAL_COMMANDS) < min(
            i for i, o in enumerate(offered) if o in TEXTUAL_COMMANDS), offered


@run_async
async def test_safety_findings_preset_lists_only_safety_findings(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        offered = await palette(pilot, "safety", "Filter: safety findings")
        await choose(pilot, offered, "Filter: safety findings")
        screen = app.screen
        assert isinstance(screen, LintScreen)
        rules = {f["rule"] for f in screen.findings}
        assert "stale_as_current" in rules
        assert rules <= {"sibling_branch", "foreign_private", "audit_only_included",
                         "superseded_included", "stale_as_current", "restricted_raw_sent"}
        text = screen_text(app)
        assert "Safety findings" in text and "stale_as_current" in text
        first = screen.findings[0]["assembly_id"]
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen) and app.screen.assembly_id == first


@run_async
async def test_lint_lists_every_rule_the_cli_reports(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        offered = await palette(pilot, "lint", "Lint")
        await choose(pilot, offered, "Lint")
        screen = app.screen
        assert isinstance(screen, LintScreen)
        assert len(screen.findings) == len(app.answers().lint())
        assert f"{len(screen.findings):,} findings" in screen_text(app)
        # the table cuts a long detail; the highlighted finding's is shown whole below it
        await pilot.press("down")
        await settle(pilot)
        detail = screen.findings[1]["detail"]
        assert len(detail) > 60 and detail in str(screen.query_one("#lint-detail").render())


# ---------------------------------------------------------------------- keys


def test_help_lists_the_palette_paging_and_every_binding() -> None:
    text = help_text().plain
    assert "ctrl+p" in text and "Command palette" in text
    assert "pageup" in text and "pagedown" in text
    for _title, owner in key_owners():
        for binding in owner.BINDINGS:
            meaning = binding.tooltip or binding.description
            assert meaning in text, f"help misses {binding.key} ({meaning})"


def test_one_letter_key_has_one_meaning_across_screens() -> None:
    """Every letter key does the same thing on every screen that binds it; q, which closes
    a dialog when one is open, is the one exception (the help says so)."""
    from textual.binding import Binding

    actions: dict[str, set[str]] = {}
    for _title, owner in [*key_owners(), ("Help", HelpScreen)]:
        for binding in Binding.make_bindings(owner.BINDINGS):
            if len(binding.key) == 1 and binding.key.isalpha() and binding.key != "q":
                actions.setdefault(binding.key, set()).add(binding.action)
    assert actions["r"] == {"replay"}
    assert {k: a for k, a in actions.items() if len(a) > 1 and k not in "Rv"} == {}
    assert actions["v"] == {"reveal", "mask"}  # one toggle, its footer label says which way
    assert actions["R"] == {"reload", "rerun"}  # run again: the list, verify, compare
    assert "Only q differs" in help_text().plain


@run_async
async def test_help_screen_shows_the_conventions(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        assert "One key, one meaning: r replays" in screen_text(app)


@run_async
async def test_hostile_ids_in_the_palette_are_plain_text(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """An id full of markup and escape sequences is offered as text: no markup read, no
    sequence sent to the terminal, and choosing it opens that very assembly."""
    from support.hostile import AS1, MARKUP, build_hostile_db

    from inspector.widgets.safe import one_line

    app = ContextLensApp(db_path=build_hostile_db(tmp_path_factory.mktemp("hostile")))
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        wanted = f"Open assembly {one_line(AS1, 80)}"
        offered = await palette(pilot, "as1", wanted)
        assert MARKUP in wanted and any(o == wanted for o in offered)
        text = screen_text(app)
        assert "\x1b" not in text and "\u202e" not in text
        await choose(pilot, offered, wanted)
        assert isinstance(app.screen, AssemblyScreen) and app.screen.assembly_id == AS1


@run_async
async def test_bundle_from_the_palette_opens_the_bundle_dialog(sample_db: Path) -> None:
    from inspector.screens.bundle import BundleScreen

    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        offered = await palette(pilot, "bundle", f"Bundle {INCIDENT}")
        await choose(pilot, offered, f"Bundle {INCIDENT}")
        assert isinstance(app.screen, BundleScreen)
        assert app.screen.assembly_id == INCIDENT
