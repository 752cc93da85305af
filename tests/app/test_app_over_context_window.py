"""The diff and compare screens mark a what-if that pushes a request past the model's
context window (replay.diff.over_context_window): undoing a compaction of a session whose
requests carried 120k-180k sends more than Claude's 200,000."""

from __future__ import annotations

from pathlib import Path

from support.claude_sessions import session
from support.pilot import driven, run_async, screen_text, settle, until

from ingest.adapters import adapt
from ingest.store import ingest
from inspector.app import ContextLensApp
from inspector.screens.compare import CompareScreen
from inspector.screens.diff import DiffScreen

def _db(tmp_path: Path) -> Path:
    path = session(tmp_path / "s.jsonl", 6, 3, mid_session=True)
    db = tmp_path / "store.duckdb"
    ingest(adapt(path, tmp_path / "export").export_dir, db)
    return db


@run_async
async def test_the_screens_mark_requests_past_the_window(tmp_path: Path) -> None:
    db = _db(tmp_path)
    app = ContextLensApp(db_path=db)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        screen = CompareScreen("recorded", "claude-code:compaction=false")
        await app.push_screen(screen)
        # the compare's worker reports from a thread, which settle does not wait for
        await until(pilot, lambda: screen.result is not None, "the compare's result")
        await settle(pilot)
        assert screen.result is not None and screen.result.over_context_window["requests"] > 0
        assert "over_context_window:" in screen_text(app)
        last = screen.result.over_context_window["examples"][0]["assembly_id"]
        await app.push_screen(DiffScreen(last, "claude-code:compaction=false"))
        await settle(pilot)
        assert "over_context_window: B sends" in screen_text(app)
