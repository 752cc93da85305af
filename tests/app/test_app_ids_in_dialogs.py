"""The dialogs and the palette name a request as the request list does (``readmodel.ids``):
on a transcript's store, ``<session>:r5:asm`` is ``r5`` in the replay picker, the bisect
and bundle dialogs and the palette's commands, its record ``m0`` and its conversation
``c0``; the whole ids stay what they act on."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.swe_trajectory import request_r5
from support.pilot import driven, first_assembly, run_async, screen_text, settle

from inspector.app import ContextLensApp
from inspector.commands import ContextLensCommands
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.bisect import BisectScreen
from inspector.screens.bundle import BundleScreen
from inspector.screens.replay import PolicyPicker




def _title(app: ContextLensApp) -> str:
    return str(app.screen.query_one(".dialog-title").render())


@run_async
async def test_the_replay_bisect_and_bundle_dialogs_name_the_request_short(
        swe_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the bundle dialog's default folder, never written here
    last, prefix = request_r5(swe_db)
    app = ContextLensApp(db_path=swe_db, initial_assembly=last)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)

        await pilot.press("r")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, PolicyPicker) and picker.assembly_id == last
        assert _title(app).startswith("Replay r5  (recorded under ")
        assert prefix not in screen_text(app)
        await pilot.press("escape")
        await settle(pilot)

        app.open_bisect(last, "message", f"{prefix}m0")
        await settle(pilot)
        assert isinstance(app.screen, BisectScreen)
        assert _title(app) == "Bisect message m0 of r5"
        assert prefix not in screen_text(app)
        await pilot.press("escape")
        await settle(pilot)

        await pilot.press("u")
        await settle(pilot)
        bundle = app.screen
        assert isinstance(bundle, BundleScreen) and bundle.assembly_id == last
        assert _title(app) == "Incident bundle of r5"
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)


@run_async
async def test_the_palette_names_the_request_short(swe_db: Path) -> None:
    last, prefix = request_r5(swe_db)
    app = ContextLensApp(db_path=swe_db, initial_assembly=last)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        commands = ContextLensCommands(app.screen)
        await commands.startup()
        names = [c.name for c in commands.commands()]
        helps = [c.help for c in commands.commands()]
        assert "Replay r5 under a version…" in names
        assert "Bundle r5 for a colleague…" in names
        assert "Go to the conversation of r5" in names and "c0" in helps
        assert any(n.startswith("Replay r5 under swe-agent") for n in names)
        assert not any(prefix in n for n in names) and not any(prefix in h for h in helps)
        # a request or conversation found by its id, named short too
        hits = [hit.text async for hit in commands._ids("r5", commands.matcher("r5"))]
        assert "Open assembly r5" in hits and not any(prefix in h for h in hits)
        hits = [hit.text async for hit in commands._ids("c0", commands.matcher("c0"))]
        assert hits == ["Go to conversation c0"]


def test_verify_lists_a_transcripts_requests_and_records_short() -> None:
    from inspector.screens.verify import listed_rows
    from replay.verify import AssemblyVerdict, FieldDifference, RecordDifference

    moved = RecordDifference("message", "52f3b29b79:m3", (FieldDifference("position", 3, 4),))
    drifted = AssemblyVerdict("52f3b29b79:r25:asm", "drifted", "swe-agent", "swe-agent",
                              (moved,), "h", "h", "g")
    rows = listed_rows([drifted], ("52f3b29b79:", ":asm")).to_pylist()
    assert rows[0]["assembly"] == "r25" and rows[0]["first differences"] == "m3 position"
    assert listed_rows([drifted]).to_pylist()[0]["assembly"] == "52f3b29b79:r25:asm"
