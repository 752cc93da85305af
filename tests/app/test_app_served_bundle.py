"""A session served to a browser (``contextlens serve`` sets CONTEXTLENS_SERVED in each
tab's app) writes no bundle: the page would choose where files land on the server's disk.
``u`` and the palette's "Bundle" say so and open no dialog (issue 27)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.pilot import driven, run_async, settle

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.served import SERVED_ENV

INCIDENT = "asm-033"


@run_async
async def test_a_served_session_opens_no_bundle_dialog(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SERVED_ENV, "1")
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=(100, 30), notifications=True) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        await pilot.press("u")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)  # no dialog asks for a folder
        app.open_bundle(INCIDENT)  # the palette's "Bundle ..." command, the same way
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        notes = [str(n.message) for n in app._notifications]
    assert notes and all("not written from the browser" in n for n in notes), notes
