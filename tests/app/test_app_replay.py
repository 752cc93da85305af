"""Pilot tests of replay, diff and verify in the inspector, on the committed sample.

Every test drives the app by keys and waits for its workers (never sleeps).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.pilot import (diff_rows, driven, first_assembly,
                           replay_under, run_async, screen_text, settle)
from support.policies import PERMISSIVE

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.diff import DiffScreen
from inspector.screens.help import HelpScreen, help_text
from inspector.screens.replay import PolicyPicker
from inspector.screens.requests import RequestsScreen
from inspector.screens.verify import VerifyScreen

INCIDENT_MEMORY = "mem-020"
DRIFTED = ["asm-013", "asm-014", "asm-015"]

# ---------------------------------------------------------------------- the picker


@run_async
async def test_picker_lists_every_version_with_description_and_changes(sample_db: Path) -> None:
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, PolicyPicker)
        assert [p.version for p in picker.policies] == ["v1", "v2", "v3", "v4", "v5", "v6"]
        assert picker.highlighted_version() == "v5"  # the recorded version, marked
        options = picker.query_one("#policy-versions")
        prompts = {
            p.version: str(options.get_option(f"policy-{p.version}").prompt) for p in picker.policies
        }
        assert "● recorded" in prompts["v5"] and "recorded" not in prompts["v4"]
        assert "Base policy" in prompts["v1"] and "root policy" in prompts["v1"]
        assert "Widens the freshness windows" in prompts["v5"]
        assert "freshness.volatile 6 → 168" in prompts["v5"]  # the change from v4
        assert "budget.token_budget 4000 → 6000" in prompts["v4"]
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)


# ---------------------------------------------------------------------- the incident story


@run_async
async def test_incident_story_in_a_few_keys(sample_db: Path) -> None:
    """List -> filter the v5 incident requests -> open one -> r -> v4: the calendar memory
    that v5 presented as current is a stale marker under v4."""
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"tag:incident policy:v5", "enter")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AssemblyScreen)
        assert screen.assembly is not None and screen.assembly["policy_version"] == "v5"
        diff = await replay_under(pilot, "v4")
        assert diff.diff.a_label.startswith("recorded") and "v4" in diff.diff.b_label
        change = next(c for c in diff.diff.changes if c["record_id"] == INCIDENT_MEMORY)
        assert change["change"] == "rendering_changed"
        assert change["a"]["rendering"] == "compact_memory"
        assert change["b"]["rendering"] == "stale_marker"
        rows = diff_rows(diff)
        assert ("rendering_changed", "tool_memory", INCIDENT_MEMORY) in rows
        text = screen_text(app)
        assert "A = recorded v5" in text.replace("  ", " ") or "recorded v5" in text
        assert "stale_marker" in text and "compact_memory" in text
        # the panel explains both sides of the highlighted change
        await pilot.press(*["down"] * [r[2] for r in rows].index(INCIDENT_MEMORY))
        await pilot.press("enter")
        await settle(pilot)
        a_side = str(diff.query_one("#change-a").render())
        b_side = str(diff.query_one("#change-b").render())
        assert "compact memory" in a_side and "policy v5" in a_side
        assert "stale marker" in b_side and "policy v4" in b_side
        # enter opened the why: side B's box has the focus, to scroll; esc comes back to
        # the records, a second esc leaves the diff
        assert app.focused is diff.query_one("#change-b-box")
        await pilot.press("escape")
        assert app.screen is diff and app.focused is diff.query_one("#diff-table")
        await pilot.press("escape")
        assert isinstance(app.screen, AssemblyScreen)


@run_async
async def test_f_toggles_the_unchanged_records(sample_db: Path) -> None:
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        diff = await replay_under(pilot, "v4")
        changes = diff.diff.changes
        changed = [c for c in changes if c["change"] != "unchanged"]
        assert changed and len(changed) < len(changes)
        assert len(diff_rows(diff)) == len(changed)
        assert all(row[0].lstrip("⚠ ") != "unchanged" for row in diff_rows(diff))
        await pilot.press("f")
        await settle(pilot)
        rows = diff_rows(diff)
        assert len(rows) == len(changes)
        assert [r[0] for r in rows].count("unchanged") == len(changes) - len(changed)
        assert f"all {len(changes)} records" in str(diff.query_one("#diff-status").render())
        await pilot.press("f")
        await settle(pilot)
        assert len(diff_rows(diff)) == len(changed)


@run_async
async def test_a_diff_where_nothing_changed_goes_back_on_escape(sample_db: Path) -> None:
    # replaying under the recorded version (the picker's first choice): nothing changed,
    # no records table; escape used to end the app with a traceback
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        diff = await replay_under(pilot, "v5")
        assert "No record changed" in screen_text(app)
        await pilot.press("escape")
        await settle(pilot)
        assert app.is_running and isinstance(app.screen, AssemblyScreen)
        assert app.screen is not diff


@run_async
async def test_side_a_list_opens_inside_the_picker_on_a_small_terminal(sample_db: Path) -> None:
    """At 100x30 the open side-A list stays within the dialog: it neither hides the
    footer nor runs off the screen, and every choice is on screen."""
    from textual.widgets._select import SelectOverlay

    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        await pilot.press("a", "enter")
        await settle(pilot)
        overlay = app.screen.query_one(SelectOverlay)
        dialog = app.screen.query_one("#replay-dialog").region
        assert overlay.display and overlay.region.height >= 7  # recorded + v1..v6
        assert dialog.contains_region(overlay.region)
        assert overlay.region.bottom <= app.screen.query_one("#replay-hint").region.y


@run_async
async def test_replay_against_another_version(sample_db: Path) -> None:
    """Side A can be a replay too: v4 against v5 on a v5 request."""
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, PolicyPicker)
        picker.query_one("#against").value = "v5"
        await settle(pilot)
        await pilot.press("up", "enter")  # v4
        await settle(pilot)
        diff = app.screen
        assert isinstance(diff, DiffScreen) and diff.against == "v5" and diff.version == "v4"
        assert "v5" in diff.diff.a_label and "replay" in diff.diff.a_label
        change = next(c for c in diff.diff.changes if c["record_id"] == INCIDENT_MEMORY)
        assert (change["a"]["rendering"], change["b"]["rendering"]) == ("compact_memory", "stale_marker")


# ---------------------------------------------------------------------- safety first


@pytest.fixture(scope="module")
def permissive_policies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from replay.policy import bundled_policies_dir

    folder = tmp_path_factory.mktemp("policies")
    for path in bundled_policies_dir().glob("*.toml"):
        shutil.copy(path, folder / path.name)
    (folder / "v7.toml").write_text(PERMISSIVE, encoding="utf-8")
    return folder


@run_async
async def test_safety_findings_first_under_a_permissive_policy(
    sample_db: Path, permissive_policies: Path
) -> None:
    """The participant-visibility story replayed under a policy without isolation: another
    participant's private records reach the prompt, and the diff says so first."""
    assembly = first_assembly(sample_db, "scenario:participant_visibility")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly,
                         policies_dir=permissive_policies)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        diff = await replay_under(pilot, "v7")
        safety = diff.diff.safety.regressions
        assert safety, "a policy without participant isolation must raise safety findings"
        assert diff.has_class("-has-safety")
        block = diff.query_one("#diff-safety")
        assert block.has_class("-safety") and block.display
        shown = str(block.render())
        assert "safety regressions" in shown and "foreign_private" in shown
        assert {s["finding"] for s in safety} == {"foreign_private"}
        keys = {(s["record_kind"], s["record_id"]) for s in safety}
        rows = diff_rows(diff)
        head = rows[: len(keys)]
        assert {(r[1], r[2]) for r in head} == keys  # safety rows lead the table
        assert all(r[0].startswith("⚠") for r in head)
        assert not any(r[0].startswith("⚠") for r in rows[len(keys):])


@run_async
async def test_restricted_labels_stay_masked_in_the_diff(
    sample_db: Path, permissive_policies: Path
) -> None:
    """Google- and oauth-derived artifacts appear in the diff by id and a mask, never by
    content, until revealed."""
    assembly = first_assembly(sample_db, "scenario:google_derived_privacy")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly,
                         policies_dir=permissive_policies)
    async with driven(app, size=(220, 40)) as pilot:
        await settle(pilot)
        diff = await replay_under(pilot, "v7")
        rows = diff_rows(diff)
        assert ("reason_changed", "tool_artifact", "art-015") in rows  # oauth_derived
        text = screen_text(app)
        assert "[masked: oauth_derived content" in text
        assert "design freeze agreed" not in text


# ---------------------------------------------------------------------- verify


@run_async
async def test_verify_lists_exactly_the_drifted_assemblies(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, RequestsScreen)
        await pilot.press("V")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, VerifyScreen)
        assert [d.assembly_id for d in screen.listed] == DRIFTED
        assert {d.verdict for d in screen.listed} == {"drifted"}
        total = screen.checked
        assert total == 52 and screen.faithful == total - len(DRIFTED)
        bar = screen.query_one("#verify-progress")
        assert bar.total == total and bar.progress == total
        summary = str(screen.query_one("#verify-summary").render())
        assert f"checked {total}" in summary and "drifted 3" in summary
        assert "inconsistent 0" in summary and "not replayable 0" in summary
        table = screen.query_one("#verify-table")
        assert [table.get_row_at(i)[0] for i in range(table.row_count)] == DRIFTED
        assert [table.get_row_at(i)[1] for i in range(table.row_count)] == ["drifted"] * 3
        await pilot.press("down", "enter")
        await settle(pilot)
        diff = app.screen
        assert isinstance(diff, DiffScreen) and diff.assembly_id == DRIFTED[1]
        assert diff.diff.a_label.startswith("recorded")
        assert any(c["change"] != "unchanged" for c in diff.diff.changes)
        assert diff_rows(diff)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, VerifyScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, RequestsScreen)


# ---------------------------------------------------------------------- help


@run_async
async def test_verify_from_a_filtered_list_verifies_what_it_shows(sample_db: Path) -> None:
    # as compare does: V on a list filtered to the drift story checks those requests only
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"asm-01", "enter")
        await settle(pilot)
        shown = app.screen.query_one("#requests-table").row_count
        assert 0 < shown < 52
        await pilot.press("V")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, VerifyScreen)
        assert screen.checked == shown
        assert [d.assembly_id for d in screen.listed] == DRIFTED
        assert "the requests matching asm-01" in str(screen.query_one("#verify-title").render())


@run_async
async def test_help_lists_the_replay_keys(sample_db: Path) -> None:
    text = help_text().plain
    for phrase in ("Replay…", "Verify", "Changes only / all", "Diff against…"):
        assert phrase in text
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
