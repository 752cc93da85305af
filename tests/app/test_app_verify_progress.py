"""Verify's progress in the app says what compare's does (``readmodel.progress``): how many
requests of how many, the rate so far and the time left, the count shown as soon as the run
starts. The run's clock is the test's and the verify a stand-in that reports per chunk, so
nothing waits on time."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from support.pilot import driven, run_async, settle

from inspector.app import ContextLensApp
from inspector.screens.requests import RequestsScreen
from inspector.screens.verify import VerifyScreen
from readmodel import ReadModel


@run_async
async def test_the_verify_progress_says_count_rate_and_time_left(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first report at once (0 of 10,000, no rate yet), then per chunk: 2,500 requests
    in 5 s is 500 a second, 15 s left."""
    import readmodel.progress

    now = [1000.0]
    monkeypatch.setattr(readmodel.progress, "monotonic", lambda: now[0])
    started, go_on, chunked = threading.Event(), threading.Event(), threading.Event()

    def chunked_verify(self: ReadModel, flt: Any = None, progress: Any = None,
                       **_: Any) -> Any:
        progress(0, 10_000)
        started.set()
        go_on.wait(30)
        now[0] += 5
        progress(2_500, 10_000)
        chunked.set()
        for _ in range(3000):  # 30 s at most: a failed assertion must not hang the test
            progress(2_500, 10_000)  # raises once the screen has stopped the run
            threading.Event().wait(0.01)
        raise AssertionError("verify was never stopped")

    monkeypatch.setattr(ReadModel, "verify", chunked_verify)
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        app.open_verify()
        # progress() returns once the app has shown the report (call_from_thread): wait in
        # a thread so that this loop goes on running the app
        try:
            assert await asyncio.to_thread(started.wait, 30)
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, VerifyScreen)
            summary = str(screen.query_one("#verify-summary").render())
            assert summary == "Replaying… 0 of 10,000 requests · measuring the rate"
        finally:
            go_on.set()
        assert await asyncio.to_thread(chunked.wait, 30)
        await pilot.pause()
        summary = str(screen.query_one("#verify-summary").render())
        assert summary == "Replaying… 2,500 of 10,000 requests · 500 requests/s · about 15 s left"
        bar = screen.query_one("#verify-progress")
        assert (bar.progress, bar.total) == (2_500, 10_000)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RequestsScreen)
