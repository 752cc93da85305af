"""SVG snapshots of the inspector on the hostile store of ``support.hostile``: Rich and
Textual markup, ANSI and OSC 8 sequences, C0/C1 controls, bidi overrides and 100,000-character
lines in every text field, all shown literally or as visible escapes (``\\x1b``, ``\\u202e``).

Regenerate with ``pytest tests/snapshots/test_snapshots_hostile.py --snapshot-update`` and look
at them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.hostile import AS1, build_hostile_db
from support.pilot import keys_then_settle

from inspector.app import ContextLensApp

SIZE = (140, 40)


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_hostile_db(tmp_path_factory.mktemp("hostile-snap"))


def test_hostile_request_list(snap_compare: Any, hostile_store: Path) -> None:
    app = ContextLensApp(db_path=hostile_store)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle())


def test_hostile_assembly_context(snap_compare: Any, hostile_store: Path) -> None:
    app = ContextLensApp(db_path=hostile_store, initial_assembly=AS1)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle())


def test_hostile_assembly_prompt(snap_compare: Any, hostile_store: Path) -> None:
    app = ContextLensApp(db_path=hostile_store, initial_assembly=AS1)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("4"))
