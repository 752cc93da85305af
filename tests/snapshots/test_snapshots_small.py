"""SVG snapshots at 80x24, the smallest terminal people use: every screen usable there.
What they pin: the request list keeps time, request, policy, counts and tokens; the
assembly header names the model on its first line; the diff shows both sides (A and B)
of every changed record, narrowed rather than cut, with the why of each side below; a
transcript's ids shown short everywhere (``r3``, ``m0``), as the request list shows them.

Regenerate with ``pytest tests/snapshots/test_snapshots_small.py --snapshot-update`` and
look at the SVGs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.pilot import first_assembly, keys_then_settle

from inspector.app import ContextLensApp

SIZE = (80, 24)



def test_list(snap_compare: Any, sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle())


def test_assembly(snap_compare: Any, sample_db: Path) -> None:
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle())


def test_diff(snap_compare: Any, sample_db: Path) -> None:
    """The incident under v4: both sides of the four changed memories in 80 columns."""
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(app, terminal_size=SIZE,
                        run_before=keys_then_settle("r", "up", "enter", "end"))


def test_transcript_assembly(snap_compare: Any, swe_db: Path) -> None:
    """A trajectory's last request: ``r5``, its records ``m0``…, as the list shows ids."""
    assembly = first_assembly(swe_db, "")
    last = assembly.replace(":r0:", ":r5:")
    app = ContextLensApp(db_path=swe_db, initial_assembly=last)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle())
