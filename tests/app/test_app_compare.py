"""Pilot tests of the compare screen: C on the request list -> choose B and A -> the
compare runs in a worker, safety regressions first, Enter on a most-changed request opens
its diff, Escape stops a running compare."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from support.pilot import driven, run_async, screen_text, settle, until

from inspector.app import ContextLensApp
from inspector.screens.compare import ComparePicker, CompareScreen
from inspector.screens.diff import DiffScreen
from inspector.screens.help import help_text
from inspector.screens.requests import RequestsScreen
from readmodel import CompareCancelled, ReadModel

CALENDAR = ("mem-014", "mem-015", "mem-016", "mem-020")


async def _compare(pilot: Any, b: str, a: str) -> CompareScreen:
    await pilot.press("C")
    await settle(pilot)
    picker = pilot.app.screen
    assert isinstance(picker, ComparePicker)
    picker.query_one("#side-a").value = a
    await settle(pilot)
    versions = [p.version for p in picker.policies]
    picker.query_one("#policy-versions").highlighted = (
        picker.query_one("#policy-versions").get_option_index(f"policy-{b}"))
    assert picker.highlighted_version() == b and versions
    await pilot.press("enter")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, CompareScreen)
    return screen


async def _finished(pilot: Any, screen: CompareScreen) -> None:
    """Until the compare's result is on screen (its worker processes report to a thread
    that ``settle`` does not wait for)."""
    await until(pilot, lambda: screen.result is not None, "the compare's result")


@run_async
async def test_v4_v5_shows_the_incident_regression_first(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        screen = await _compare(pilot, "v5", "v4")
        assert (screen.a, screen.b) == ("v4", "v5")
        result = screen.result
        assert result is not None and result.requests == 52
        safety = str(screen.query_one("#compare-safety").render())
        assert safety.startswith("safety\nregressions (B has, A has not): ")
        assert "stale_as_current" in safety
        for memory in CALENDAR:
            assert memory in safety
        assert screen.has_class("-regressed")
        text = screen_text(app)
        assert text.index("regressions") < text.index("requests compared")
        assert "re-rendered: 74" in text
        # Enter on the first most-changed request opens its diff, v4 against v5
        await pilot.press("enter")
        await settle(pilot)
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        assert (diff.against, diff.version) == ("v4", "v5")
        assert diff.assembly_id == result.most_changed_keys[0]
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is screen
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RequestsScreen)


@run_async
async def test_the_list_filter_applies(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"scenario:incident_calendar_freshness", "enter")
        await settle(pilot)
        screen = await _compare(pilot, "v6", "recorded")
        assert screen.result is not None and 0 < screen.result.requests < 52
        assert "matching scenario:incident_calendar_freshness" in str(
            screen.query_one("#compare-title").render())
        safety = str(screen.query_one("#compare-safety").render())
        assert "fixes (A has, B has not)" in safety and "in the recording (sent)" in safety
        assert "regressions" not in safety


@run_async
async def test_escape_stops_a_running_compare(sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = threading.Event()
    stopped = threading.Event()

    def slow_compare(self: ReadModel, a: str, b: str, flt: Any = None, progress: Any = None,
                     cancelled: Any = None, **_: Any) -> Any:
        started.set()
        while not cancelled():
            stopped.wait(0.01)
        stopped.set()
        raise CompareCancelled

    monkeypatch.setattr(ReadModel, "compare", slow_compare)
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        app.open_compare("v4", "v5")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        assert started.wait(10) and screen.running
        await pilot.press("escape")
        await settle(pilot)
        assert stopped.is_set() and app.screen is screen and not screen.running
        assert "Compare stopped." in str(screen.query_one("#compare-safety").render())
        await pilot.press("escape")
        assert isinstance(app.screen, RequestsScreen)


@run_async
async def test_a_rerun_stopped_half_way_shows_nothing_of_the_last_run(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R runs the compare again: stopped at once, the screen says where it stopped, the
    last run's histogram is gone and the progress bar stands still (it has a total)."""
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        screen = await _compare(pilot, "v5", "v4")
        await _finished(pilot, screen)
        plot = screen.query_one("#compare-histogram")
        assert "█" in str(plot.render())  # the finished run's bars

        started, stopped = threading.Event(), threading.Event()

        def slow_compare(self: ReadModel, a: str, b: str, flt: Any = None, progress: Any = None,
                         cancelled: Any = None, **_: Any) -> Any:
            progress(0, 50)
            progress(10, 50)
            started.set()
            for _ in range(3000):  # 30 s at most: a failed assertion must not hang the test
                if cancelled():
                    stopped.set()
                    break
                threading.Event().wait(0.01)
            raise CompareCancelled

        monkeypatch.setattr(ReadModel, "compare", slow_compare)
        await pilot.press("R")
        # progress() returns once the app has shown the report (call_from_thread): wait in
        # a thread so that this loop goes on running the app
        assert await asyncio.to_thread(started.wait, 30)
        await pilot.pause()  # not settle(): it waits for the workers, this one to its end
        await pilot.press("escape")
        await settle(pilot)
        assert stopped.is_set() and app.screen is screen and not screen.running
        assert "Compare stopped after 10 of 50 requests." in str(screen.query_one("#compare-safety").render())
        assert "█" not in str(plot.render())
        bar = screen.query_one("#compare-progress")
        assert (bar.total, bar.progress) == (50, 10)


def test_the_histogram_labels_every_bin_and_marks_zero() -> None:
    # the bins are the data's (replay.compare.histogram_bins): each one named on its row,
    # zero's own bin on the axis mark, every row as wide as the others (sized to content)
    from inspector.screens.compare import histogram_text

    histogram = [{"lo": -150, "hi": -100, "count": 7}, {"lo": -100, "hi": -50, "count": 18},
                 {"lo": -50, "hi": 0, "count": 1}, {"lo": 0, "hi": 1, "count": 26}]
    lines = histogram_text(histogram).plain.split("\n")
    assert lines[0] == "requests by token delta (B − A)"
    rows = lines[1:]
    assert [r.split()[0] for r in rows] == ["-150…-101", "-100…-51", "-50…-1", "0"]
    assert [r.split()[-1] for r in rows] == ["7", "18", "1", "26"]
    assert "┼" in rows[3] and all("┼" not in r for r in rows[:3])
    assert len({len(r) for r in rows}) == 1
    assert rows[3].count("█") == 16 and rows[2].count("█") == 1


def test_help_lists_the_compare_keys() -> None:
    text = help_text()
    assert "Compare versions" in text and "Compare again" in text


@run_async
async def test_the_compare_screen_compares_in_worker_processes(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store of more than one chunk is compared by one process per CPU from the app too
    (its stderr is Textual's capture, its terminal the app's): the same answer."""
    import replay.engine as engine

    monkeypatch.setattr(engine, "REQUESTS_PER_CHUNK", 10)  # the sample goes to the workers
    monkeypatch.setattr(engine, "available_cpus", lambda: 2)  # whatever this machine has
    monkeypatch.setattr(engine, "cpu_load", lambda: 0.0)  # however loaded it is
    started: list[int] = []
    real = engine.in_processes

    def counted(*args: Any, **kwargs: Any) -> Any:
        started.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr("replay.compare.in_processes", counted)
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        screen = await _compare(pilot, "v5", "v4")
        await _finished(pilot, screen)
        assert started == [2]
        result = screen.result
        assert result is not None and result.requests == 52
        safety = str(screen.query_one("#compare-safety").render())
        for memory in CALENDAR:
            assert memory in safety


# ---------------------------------------------------------------- issue 26: compare by keys

@run_async
async def test_compare_is_a_keyboard_flow_that_remembers_its_choice(sample_db: Path) -> None:
    """C, then keys at once (typed before the versions are even loaded): shift+tab to side
    A, four down (v4), tab to side B, four down from v1 (v5), enter: v4 → v5. Opened again,
    the picker has v4 and v5 chosen, says so, and enter runs them again."""
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("C", "shift+tab", *["down"] * 4, "tab", *["down"] * 4, "enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen) and (screen.a, screen.b) == ("v4", "v5")
        assert "Compare v4 → v5" in str(screen.query_one("#compare-title").render())
        await _finished(pilot, screen)
        assert screen.result is not None and screen.result.requests == 52
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("C")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, ComparePicker)
        assert (picker.side_a(), picker.highlighted_version()) == ("v4", "v5")
        assert "enter compares A v4 → B v5" in str(picker.query_one("#compare-choice").render())
        hint = str(picker.query_one("#replay-hint").render())
        assert hint == ("tab / shift+tab: side A ⇄ side B · ↑↓: choose · "
                        "enter: compare A → B · esc: cancel")
        # tab and shift+tab go between the two lists, and only there
        versions, side_a = picker.query_one("#policy-versions"), picker.query_one("#side-a")
        assert app.focused is versions
        await pilot.press("shift+tab")
        assert app.focused is side_a
        await pilot.press("up", "tab")
        assert app.focused is versions and picker.side_a() == "v3"
        await pilot.press("tab")
        assert app.focused is side_a
        await pilot.press("down", "enter")  # enter in side A compares too
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen) and (screen.a, screen.b) == ("v4", "v5")


@run_async
async def test_the_progress_says_count_rate_and_time_left(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per chunk: how many of how many, the rate so far and the time left at that rate (the
    run's clock is the test's: 2,500 requests in 5 s is 500 a second, 15 s left)."""
    import readmodel.progress

    now = [1000.0]
    monkeypatch.setattr(readmodel.progress, "monotonic", lambda: now[0])
    reported = threading.Event()

    def chunked_compare(self: ReadModel, a: str, b: str, flt: Any = None, progress: Any = None,
                        cancelled: Any = None, **_: Any) -> Any:
        progress(0, 10_000)
        now[0] += 5
        progress(2_500, 10_000)
        reported.set()
        for _ in range(3000):  # 30 s at most: a failed assertion must not hang the test
            if cancelled():
                break
            threading.Event().wait(0.01)
        raise CompareCancelled

    monkeypatch.setattr(ReadModel, "compare", chunked_compare)
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        app.open_compare("v4", "v5")
        # progress() returns once the app has shown the report (call_from_thread): wait in
        # a thread so that this loop goes on running the app
        assert await asyncio.to_thread(reported.wait, 30)
        await pilot.pause()
        safety = str(app.screen.query_one("#compare-safety").render())
        assert safety == "Replaying… 2,500 of 10,000 requests · 500 requests/s · about 15 s left"
        await pilot.press("escape")
        await settle(pilot)
