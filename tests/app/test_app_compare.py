"""Pilot tests of the compare screen: C on the request list -> choose B and A -> the
compare runs in a worker, safety regressions first, Enter on a most-changed request opens
its diff, Escape stops a running compare."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from support.pilot import run_async, screen_text, settle

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
    picker.query_one("#against").value = a
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
    that ``settle`` does not wait for), 20 s at most."""
    for _ in range(200):
        if screen.result is not None:
            return
        await pilot.pause(0.1)


@run_async
async def test_v4_v5_shows_the_incident_regression_first(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with app.run_test(size=(140, 40)) as pilot:
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
    async with app.run_test(size=(140, 40)) as pilot:
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
    async with app.run_test(size=(140, 40)) as pilot:
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
    async with app.run_test(size=(140, 40)) as pilot:
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
        for _ in range(100):  # not started.wait(): progress() needs this loop to run
            if started.is_set():
                break
            await pilot.pause(0.1)
        assert started.is_set()
        await pilot.pause()  # not settle(): it waits for the workers, this one to its end
        await pilot.press("escape")
        await settle(pilot)
        assert stopped.is_set() and app.screen is screen and not screen.running
        assert "Compare stopped after 10 of 50 requests." in str(screen.query_one("#compare-safety").render())
        assert "█" not in str(plot.render())
        bar = screen.query_one("#compare-progress")
        assert (bar.total, bar.progress) == (50, 10)


def test_the_histogram_names_only_bins_that_hold_requests() -> None:
    # five requests spread over twenty bins (four of them hold some): each name stands under
    # a bar, and requests are counted in whole numbers, not 0.33 of one
    from inspector.screens.compare import histogram_ticks

    counts = [1] + [0] * 8 + [1] + [0] * 5 + [1] + [0] * 3 + [2]
    histogram = [{"lo": -300 + 15 * i, "hi": -285 + 15 * i, "count": c} for i, c in enumerate(counts)]
    named, labels, yticks = histogram_ticks(histogram)
    assert named == [0, 9, 15, 19]
    assert labels == ["-300…-286", "-165…-151", "-75…-61", "-15…-1"]
    assert yticks == [0, 1, 2]
    many = [{"lo": i, "hi": i + 1, "count": 40 + i} for i in range(20)]
    named, labels, yticks = histogram_ticks(many)
    assert len(named) <= 5 and all(many[i]["count"] for i in named)
    assert all(isinstance(y, int) for y in yticks) and yticks[-1] >= 59
    # 51 requests in one bin on a plot of 8 rows: round ticks, each on a row of its own
    # (0, 11, 22, 33, 44, 55 put two on one row and showed 55 33 22 11 0)
    named, labels, yticks = histogram_ticks([{"lo": 0, "hi": 1, "count": 51}], rows=8)
    assert yticks == [0, 20, 40, 60]
    for rows in range(2, 30):
        _n, _l, yticks = histogram_ticks([{"lo": 0, "hi": 1, "count": 51}], rows=rows)
        assert yticks[-1] >= 51 and rows * (yticks[1] - yticks[0]) / yticks[-1] >= 1.5, rows


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
    started: list[int] = []
    real = engine.in_processes

    def counted(*args: Any, **kwargs: Any) -> Any:
        started.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr("replay.compare.in_processes", counted)
    app = ContextLensApp(db_path=sample_db)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        screen = await _compare(pilot, "v5", "v4")
        await _finished(pilot, screen)
        assert started == [2]
        result = screen.result
        assert result is not None and result.requests == 52
        safety = str(screen.query_one("#compare-safety").render())
        for memory in CALENDAR:
            assert memory in safety
