"""Pilot tests of the incident bundle from the assembly screen (e), on the sample's v5
incident: the footer offers it, the dialog asks for the folder, the bundle is written
masked (or revealed when this session's reveal is on), and a taken folder is refused."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from support.pilot import driven, run_async, screen_text, settle

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.bundle import BundleScreen
from textual.widgets import Input, Static

INCIDENT = "asm-033"


async def _dialog(pilot, folder: Path, policy: str = "") -> BundleScreen:
    await settle(pilot)
    assert isinstance(pilot.app.screen, AssemblyScreen)
    await pilot.press("u")
    await settle(pilot)
    dialog = pilot.app.screen
    assert isinstance(dialog, BundleScreen)
    dialog.query_one("#bundle-folder", Input).value = str(folder)
    dialog.query_one("#bundle-policy", Input).value = policy
    return dialog


def _shown(dialog: BundleScreen, widget_id: str) -> str:
    """A line of the dialog as the user reads it."""
    return str(dialog.query_one(widget_id, Static).render()).replace("\n", " ")


@run_async
async def test_e_writes_a_masked_bundle_with_the_replay_in_its_report(
        sample_db: Path, tmp_path: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    out = tmp_path / "incident"
    async with driven(app, size=(100, 30)) as pilot:
        dialog = await _dialog(pilot, out, "v6")
        default = Path.cwd() / f"bundle-{INCIDENT}"
        assert "Masked: restricted content" in _shown(dialog, "#bundle-privacy")
        await pilot.press("enter")
        await settle(pilot)
        assert dialog.error is None and dialog.result is not None
        assert f"Wrote the bundle to {out} report: {out / 'report.md'}" in _shown(
            dialog, "#bundle-status")
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
    assert not default.exists()
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Replay under v6" in report
    memories = {m["memory_id"]: m["summary"]
                for m in pq.read_table(out / "tool_memories.parquet").to_pylist()}
    assert memories["mem-014"] == "[masked: oauth_derived content; reveal to show]"


@run_async
async def test_a_revealed_session_writes_a_revealed_bundle_and_a_taken_folder_is_refused(
        sample_db: Path, tmp_path: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT, reveal=True)
    out = tmp_path / "incident"
    async with driven(app, size=(160, 45)) as pilot:
        dialog = await _dialog(pilot, out)
        assert "REVEALED: restricted content and secrets go into the bundle" in _shown(
            dialog, "#bundle-privacy")
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        # again, to the same folder: refused, the first bundle kept
        dialog = await _dialog(pilot, out)
        await pilot.press("enter")
        await settle(pilot)
        assert dialog.result is None
        assert dialog.error == f"{out} exists and is not empty (--force replaces it)"
        assert "Cannot write the bundle" in _shown(dialog, "#bundle-status")
    memories = {m["memory_id"]: m["summary"]
                for m in pq.read_table(out / "tool_memories.parquet").to_pylist()}
    assert "masked" not in memories["mem-014"]


@run_async
async def test_the_footer_and_help_offer_the_bundle_key(sample_db: Path) -> None:
    from inspector.screens.help import help_text

    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        assert "u Bundle…" in screen_text(app)
    assert "Incident bundle (assembly screen, u)" in help_text().plain
    assembly = help_text().plain.split("\nAssembly\n", 1)[1].split("\n\n", 1)[0]
    assert "Bundle…" in assembly
