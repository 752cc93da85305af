"""SVG snapshots of the four main screens at the two terminal sizes people use: 100x30 (a
laptop split) and 160x45. What they pin: at 100x30 the list keeps time, request, model,
policy, incl, omit and tokens and the footer fits; the assembly header's stacked token bar;
the diff sized to its rows with the text each side sends; compare's safety first.

Regenerate with ``pytest tests/snapshots/test_snapshots_layout.py --snapshot-update`` and
look at the SVGs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.keys import COMPARE_V4_V5
from support.pilot import first_assembly, keys_then_settle, settle

from inspector.app import ContextLensApp
from inspector.screens.compare import CompareScreen

SIZES = [pytest.param((100, 30), id="100x30"), pytest.param((160, 45), id="160x45")]


@pytest.mark.parametrize("size", SIZES)
def test_list(snap_compare: Any, sample_db: Path, size: tuple[int, int]) -> None:
    app = ContextLensApp(db_path=sample_db)
    assert snap_compare(app, terminal_size=size, run_before=keys_then_settle())


@pytest.mark.parametrize("size", SIZES)
def test_assembly(snap_compare: Any, sample_db: Path, size: tuple[int, int]) -> None:
    """A v5 incident request: the prompt's tokens by kind, omitted beside them."""
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(app, terminal_size=size, run_before=keys_then_settle())


@pytest.mark.parametrize("size", SIZES)
def test_diff(snap_compare: Any, sample_db: Path, size: tuple[int, int]) -> None:
    """The incident under v4, the last change (a calendar memory) explained on both sides:
    the stale marker v4 would have sent."""
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(app, terminal_size=size,
                        run_before=keys_then_settle("r", "up", "enter", "end"))


async def _v4_against_v5(pilot: Any) -> None:
    await settle(pilot)
    for key in COMPARE_V4_V5:
        await pilot.press(key)
        await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, CompareScreen) and (screen.a, screen.b) == ("v4", "v5")


@pytest.mark.parametrize("size", SIZES)
def test_compare(snap_compare: Any, sample_db: Path, size: tuple[int, int]) -> None:
    app = ContextLensApp(db_path=sample_db)
    assert snap_compare(app, terminal_size=size, run_before=_v4_against_v5)
