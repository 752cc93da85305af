"""SVG snapshots of replay and diff on the committed sample, at a fixed terminal size.

The app is built as the command line builds it; every snapshot waits for the workers, so
the settled screen is captured. Regenerate with
``pytest tests/snapshots/test_snapshots_replay.py --snapshot-update`` and look at the SVGs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.pilot import first_assembly, keys_then_settle
from support.policies import PERMISSIVE

from inspector.app import ContextLensApp

SIZE = (140, 40)


def test_policy_picker(snap_compare: Any, sample_db: Path) -> None:
    """r on a v5 incident request: every version, the recorded one marked and highlighted."""
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("r"))


def test_diff_incident_under_v4(snap_compare: Any, sample_db: Path) -> None:
    """The incident: recorded v5 against a replay under v4 (the calendar memory turns into
    a stale marker), changes only, the calendar memory (the last change) explained on both
    sides."""
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(
        app, terminal_size=SIZE, run_before=keys_then_settle("r", "up", "enter", "end")
    )


def test_diff_all_records(snap_compare: Any, sample_db: Path) -> None:
    """The same diff with the unchanged records shown (f)."""
    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(
        app, terminal_size=SIZE, run_before=keys_then_settle("r", "up", "enter", "f")
    )


def test_diff_safety_first(snap_compare: Any, sample_db: Path, tmp_path: Path) -> None:
    """The participant-visibility story under a test policy without isolation: the safety
    block leads, and the safety rows lead the table."""
    import shutil

    from replay.policy import bundled_policies_dir

    for path in bundled_policies_dir().glob("*.toml"):
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "v7.toml").write_text(PERMISSIVE, encoding="utf-8")
    assembly = first_assembly(sample_db, "scenario:participant_visibility")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly, policies_dir=tmp_path)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("r", "end", "enter"))
