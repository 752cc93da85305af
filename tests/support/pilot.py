"""Pilot helpers shared by the app and snapshot tests: run an async test, wait for the app's
workers, read what the terminal shows, drive the replay screens."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import html
import io
import re
import weakref
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.segment import Segment
from textual.worker import WorkerCancelled, WorkerError, WorkerState

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.diff import DiffScreen
from inspector.screens.replay import PolicyPicker


def run_async(test: Any) -> Any:
    """Run an async test on a fresh event loop (no async pytest plugin is a dependency)."""

    @functools.wraps(test)
    def runner(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return runner


async def settle(pilot: Any) -> None:
    """Wait until no worker runs and every message they posted has been handled.

    A worker replaced by a newer one of its exclusive group ends cancelled, and one created
    but not yet started cannot be awaited: both are fine here, the loop looks again."""
    app = pilot.app
    for _ in range(100):
        if _pending(app):
            # typed filter text (a request's lint) waits for its pause, a timer of the app's
            if app in _HANDLED:
                await until(pilot, lambda: not _pending(app), "the pause after typing")
            else:  # a snapshot's run: snap_compare starts the app without a message hook
                await pilot.pause(0.1)
            continue
        finite = _finite(app)
        try:
            if finite:  # (an empty list would mean every worker, the follow loop's too)
                await app.workers.wait_for_complete(finite)
        except (WorkerCancelled, WorkerError):
            pass
        await pilot.pause()
        if not any(w.is_running or w.state is WorkerState.PENDING for w in _finite(app)):
            await pilot.pause()
            if not any(w.is_running or w.state is WorkerState.PENDING for w in _finite(app)):
                return
    raise AssertionError("the app's workers never settled")


def _pending(app: Any) -> bool:
    return bool(getattr(app.screen, "filter_pending", False)
                or getattr(app.screen, "findings_pending", False))


# Each app run by ``driven``: the event its message hook sets whenever the app handles a
# message (a worker's report, a timer, a key, a refresh), which is what ``until`` waits on.
_HANDLED: "weakref.WeakKeyDictionary[Any, asyncio.Event]" = weakref.WeakKeyDictionary()

# How long ``until`` lets a condition stay false before the test fails: a bound for a
# failure to show, never a timing (the wait ends on the app's message that makes it true).
NEVER_S = 60.0


@contextlib.asynccontextmanager
async def driven(app: Any, **run_test: Any) -> Any:
    """``app.run_test(**run_test)`` for tests that wait with ``until``: every message the
    app handles wakes the waits (Textual's ``message_hook``)."""
    handled = asyncio.Event()
    async with app.run_test(message_hook=lambda _message: handled.set(), **run_test) as pilot:
        _HANDLED[app] = handled
        yield pilot


async def until(pilot: Any, condition: Any, what: str) -> None:
    """Let the app run until ``condition()`` holds, looking again each time the app has
    handled a message (the one that makes it true among them), never on a clock.

    For what ``settle`` cannot wait on: a result reported from a thread or a process, a
    palette's search, a timer's work. The app must run under ``driven``."""
    handled = _HANDLED.get(pilot.app)
    if handled is None:
        raise RuntimeError("until() waits on an app run with driven(app, ...)")

    async def woken_until_true() -> None:
        while not condition():
            handled.clear()
            await handled.wait()

    try:
        await asyncio.wait_for(woken_until_true(), NEVER_S)
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


def _finite(app: Any) -> list[Any]:
    """The app's workers that end: not the loop that follows a growing file."""
    return [w for w in app.workers if w.group != "follow"]


def screen_text(app: ContextLensApp) -> str:
    """What the terminal shows, as plain text (from the SVG screenshot)."""
    svg = app.export_screenshot()
    texts = re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)
    return html.unescape("".join(texts)).replace("\xa0", " ")


def status(app: ContextLensApp) -> str:
    return str(app.screen.query_one("#status").render())


async def open_as1(pilot: Any) -> AssemblyScreen:
    pilot.app.open_assembly("as1")
    await settle(pilot)
    assert isinstance(pilot.app.screen, AssemblyScreen)
    return pilot.app.screen


async def settle_quickly(pilot: Any, seconds: float = 30.0) -> None:
    """``settle`` with a time bound: a screen that hangs on the long line fails here."""
    await asyncio.wait_for(settle(pilot), timeout=seconds)


def keys_then_settle(*keys: str) -> Any:
    """A snap_compare run_before: settle, then each key followed by a settle."""

    async def run_before(pilot: Any) -> None:
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)

    return run_before


def first_assembly(db: Path, expr: str) -> str:
    from ingest.filters import parse_filter
    from ingest.store import Store

    with Store.open(db) as store:
        page = store.list_assemblies(parse_filter(expr), limit=1)
    assert page.num_rows, f"the sample has no assembly matching {expr!r}"
    return page["assembly_id"][0].as_py()


def diff_rows(screen: DiffScreen) -> list[tuple[str, str, str]]:
    """(change, kind, record) of each row the diff table shows."""
    table = screen.query_one("#diff-table")
    return [tuple(table.get_row_at(i)[:3]) for i in range(table.row_count)]  # type: ignore[misc]


async def replay_under(pilot: Any, version: str) -> DiffScreen:
    """From the assembly screen: r, move to ``version``, enter."""
    app = pilot.app
    await pilot.press("r")
    await settle(pilot)
    picker = app.screen
    assert isinstance(picker, PolicyPicker)
    names = [p.version for p in picker.policies]
    steps = names.index(version) - names.index(picker.highlighted_version())
    await pilot.press(*(["down"] * steps if steps > 0 else ["up"] * -steps))
    assert picker.highlighted_version() == version
    await pilot.press("enter")
    await settle(pilot)
    assert isinstance(app.screen, DiffScreen)
    return app.screen


def terminal_output(app: ContextLensApp) -> tuple[str, list[Segment]]:
    """What the app writes to the terminal for its current screen (a full repaint), and
    the text segments of it."""
    width, height = app.size
    console = Console(
        width=width, height=height, file=io.StringIO(), force_terminal=True,
        color_system="truecolor", legacy_windows=False, safe_box=False,
    )
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    segments = [s for s in console.render(update) if not s.control]
    console.print(update)
    return console.file.getvalue(), segments  # type: ignore[attr-defined]
