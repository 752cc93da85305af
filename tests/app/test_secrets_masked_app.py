"""Secrets in a transcript's tool arguments and results are on no screen of the app: the
request list, every record's row and panel on the Context tab, the Omitted and Trace tabs,
the Prompt tab and the conversation tree; a confirmed reveal shows them."""

from __future__ import annotations

from pathlib import Path

from support.pilot import driven, run_async, screen_text, settle
from support.secrets import SECRETS, leaked

from inspector.app import ContextLensApp



def _last_assembly(db: Path) -> str:
    from ingest.store import Store

    with Store.open(db) as store:
        return store.list_assemblies(None, sort="assembled_at", descending=True,
                                     limit=1).to_pylist()[0]["assembly_id"]


@run_async
async def test_no_screen_shows_a_secret(secret_db: Path) -> None:
    aid = _last_assembly(secret_db)
    app = ContextLensApp(db_path=secret_db)
    async with driven(app, size=(200, 60)) as pilot:
        await settle(pilot)
        seen = [screen_text(app)]
        app.open_assembly(aid)
        await settle(pilot)
        for _ in range(8):  # every record of the Context tab, with its panel
            seen.append(screen_text(app))
            await pilot.press("down")
            await settle(pilot)
        for tab in ("2", "3", "4"):
            await pilot.press(tab)
            await settle(pilot)
            seen.append(screen_text(app))
        await pilot.press("1", "c")
        await settle(pilot)
        seen.append(screen_text(app))
        shown = "\n".join(seen)
        assert leaked(shown) == []
        assert "masked" in shown


@run_async
async def test_a_confirmed_reveal_shows_them(secret_db: Path) -> None:
    aid = _last_assembly(secret_db)
    app = ContextLensApp(db_path=secret_db, reveal=True)
    async with driven(app, size=(200, 60)) as pilot:
        app.open_assembly(aid)
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)
        prompt = "\n".join(app.screen.query_one("#prompt-log").lines)
        assert [s for s in SECRETS if s in prompt] == list(SECRETS)
