"""A session served to a browser (``contextlens serve`` sets CONTEXTLENS_SERVED) writes no
bundle, so its command palette does not offer "Bundle" (the terminal's still does)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.pilot import run_async, settle

from inspector.app import ContextLensApp
from inspector.commands import ContextLensCommands
from inspector.screens.assembly import AssemblyScreen
from inspector.served import SERVED_ENV

INCIDENT = "asm-033"


async def offered(app: ContextLensApp, query: str) -> list[str]:
    """What the palette offers for ``query`` on the current screen (and before typing)."""
    provider = ContextLensCommands(app.screen)
    await provider.startup()
    return ([str(hit.text) async for hit in provider.search(query)]
            + [str(hit.text) async for hit in provider.discover()])


@pytest.mark.parametrize("served", [True, False])
@run_async
async def test_the_palette_offers_a_bundle_only_outside_a_served_session(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch, served: bool) -> None:
    if served:
        monkeypatch.setenv(SERVED_ENV, "1")
    else:
        monkeypatch.delenv(SERVED_ENV, raising=False)
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        names = await offered(app, "bundle")
        bundles = [n for n in names if n.startswith("Bundle")]
        assert bundles == ([] if served else [f"Bundle {INCIDENT} for a colleague…"] * 2), names
        assert any(n.startswith(f"Replay {INCIDENT}") for n in await offered(app, "replay"))
