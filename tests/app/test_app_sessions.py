"""The Sessions screen (contextlens --sessions, palette "sessions"): the agent sessions on
this machine, newest first, masked; escape goes back; enter opens one and its requests
show in the request list."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.command import CommandPalette

from inspector.app import ContextLensApp
from inspector.screens.requests import RequestsScreen
from inspector.screens.sessions import SessionsScreen
from support.palette import palette
from support.pilot import driven, run_async, screen_text, settle
from support.sessions import SECRET, fake_home, newest_first, use_home


def test_enter_on_a_session_opens_its_requests(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample_db: Path) -> None:
    home = tmp_path / "home"
    expected = fake_home(home, ("gemini-cli",), secret=True)
    use_home(monkeypatch, home)
    app = ContextLensApp(db_path=sample_db, open_sessions=True)  # contextlens --sessions

    @run_async
    async def check() -> None:
        async with driven(app, size=(160, 40)) as pilot:
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, SessionsScreen)
            assert [(r.runtime, r.path, r.requests) for r in screen.rows] == [
                (e.runtime, str(e.path), e.requests) for e in newest_first(expected)]
            shown = screen_text(app)
            assert "deploy with token" in shown and SECRET[:10] not in shown
            # the cursor stays on its session when the rows come again (R, or a reveal)
            await pilot.press("down")
            second = screen.rows[1].path
            await pilot.press("R")
            await settle(pilot)
            table = screen.query_one("#sessions-table")
            assert screen.rows[table.cursor_row].path == second
            await pilot.press("home")

            await pilot.press("escape")  # back to the request list it was opened over
            await settle(pilot)
            assert isinstance(app.screen, RequestsScreen)
            sample_requests = app.screen._matched

            # the palette's "sessions" brings it back
            offered = await palette(pilot, "sessions", "Sessions")
            assert offered[0].startswith("Sessions"), offered
            assert isinstance(app.screen, CommandPalette)
            await pilot.press("enter")
            await settle(pilot)
            assert isinstance(app.screen, SessionsScreen)

            gemini = expected["gemini-cli"]  # the newest: under the cursor
            await pilot.press("enter")
            await settle(pilot)
            lst = app.screen
            assert isinstance(lst, RequestsScreen)
            assert lst._matched == gemini.requests != sample_requests
            assert gemini.path.name in app.sub_title

    check()
