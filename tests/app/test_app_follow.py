"""Following a session in the app (open --follow, F): lines of a real Claude Code session
appended to the followed file show in the open request list, the cursor, filter and sort
stay where the user put them, the status line says it is following, and the store then
equals a one-shot ingest (verify faithful)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from inspector.app import ContextLensApp
from inspector.screens.requests import RequestsScreen
from inspector.stores import resolve_store
from support.cli import run
from support.pilot import driven, run_async, settle, status, until
from support.sql import store_tables

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
SESSION = REALDATA / "claude-code-entire" / "198393f2-compact-midsession.jsonl"


def session_lines() -> list[bytes]:
    if not SESSION.is_file():
        pytest.skip(f"the development data is absent ({SESSION.name})")
    return SESSION.read_bytes().splitlines(keepends=True)


def test_appended_lines_show_in_the_open_list_where_the_user_left_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    lines = session_lines()
    followed = tmp_path / "session.jsonl"
    followed.write_bytes(b"".join(lines[:20]))
    db = resolve_store(followed)  # the file opened as a user opens it, then F
    app = ContextLensApp(db_path=db, source_path=followed)

    @run_async
    async def check() -> None:
        async with driven(app, size=(160, 40)) as pilot:
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, RequestsScreen)
            before = screen._matched
            await pilot.press("F")
            # following starts by reading the file as it is now
            await until(pilot, lambda: app.follow_updates >= 1, "the first look at the file")
            assert "following session.jsonl" in status(app)
            # the cursor's column (time) sorted the other way, newest first: new requests
            # come in above the cursor
            await pilot.press("s")
            await settle(pilot)
            await pilot.press("down", "down")
            await settle(pilot)
            chosen = screen.highlighted_assembly()
            order = screen.query_state
            assert order.descending and chosen is not None

            updates = app.follow_updates
            with open(followed, "ab") as f:
                f.writelines(lines[20:])
            await until(pilot, lambda: app.follow_updates > updates, "an update of the file")
            await settle(pilot)
            assert screen._matched > before  # the new requests are in the list
            assert screen.query_state == order  # sort and filter where the user put them
            assert screen.highlighted_assembly() == chosen  # so is the cursor
            assert "following session.jsonl · updated" in status(app)
            followed_store = app.db_path

            await pilot.press("F")  # F again: stops
            await until(pilot, lambda: not app.following, "following stopped")
            assert "following" not in status(app)

            # the followed store is a one-shot ingest of the final file, row for row
            assert store_tables(followed_store) == store_tables(resolve_store(followed))
            shutil.copyfile(followed_store, tmp_path / "followed.duckdb")

    check()
    # (the app removes its followed stores when it ends: a copy is verified)
    code, out, _ = run(capsys, "verify", "--db", str(tmp_path / "followed.duckdb"), "--json")
    verdict = json.loads(out)
    assert code == 0 and verdict["faithful"] == verdict["checked"] > 0
