"""SVG snapshot of the compare screen on the committed sample, at a fixed terminal size:
v4 against v5 over every request, chosen by keys from the request list. The v5 incident's
calendar memories lead as safety regressions (stale shown as current), then the
aggregates, the token-delta histogram and the most-changed requests.

Regenerate with ``pytest tests/snapshots/test_snapshots_compare.py --snapshot-update`` and
look at the SVG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.keys import COMPARE_V4_V5
from support.pilot import settle

from inspector.app import ContextLensApp
from inspector.screens.compare import CompareScreen

SIZE = (140, 40)
SMALL = (80, 24)  # the smallest terminal every screen is usable at


async def _v4_against_v5(pilot: Any) -> None:
    await settle(pilot)
    for key in COMPARE_V4_V5:
        await pilot.press(key)
        await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, CompareScreen) and (screen.a, screen.b) == ("v4", "v5")


def test_compare_v4_v5_safety_first(snap_compare: Any, sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    assert snap_compare(app, terminal_size=SIZE, run_before=_v4_against_v5)


def test_compare_v4_v5_at_80x24(snap_compare: Any, sample_db: Path) -> None:
    """At 80x24: the safety summary with the histogram sized to its rows beside it, the
    most-changed table below, every column of it on screen."""
    app = ContextLensApp(db_path=sample_db)
    assert snap_compare(app, terminal_size=SMALL, run_before=_v4_against_v5)
