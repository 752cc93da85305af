"""SVG snapshots of the inspector on the committed sample, at a fixed terminal size.

The app is built exactly as the command line builds it (``ContextLensApp(db_path=...)``);
every snapshot waits for the workers to finish, so what is captured is the settled screen.
Regenerate with ``pytest tests/snapshots/test_snapshots.py --snapshot-update`` and look at the
SVGs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.pilot import first_assembly, keys_then_settle

from inspector.app import ContextLensApp

SIZE = (140, 40)


def test_request_list(snap_compare: Any, sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle())


def test_assembly_context_broken_provenance(snap_compare: Any, sample_db: Path) -> None:
    """The broken-provenance story: the cursor on the memory whose source is missing."""
    from ingest.store import Store

    assembly = first_assembly(sample_db, "scenario:broken_provenance")
    with Store.open(sample_db) as store:
        included = store.assembly_records(assembly, "included").to_pylist()
        broken = next(
            row["position"]
            for row in included
            if any(link["broken"] for link in store.provenance(row["record_kind"], row["record_id"]))
        )
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    rows = [row["position"] for row in included].index(broken)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle(*["down"] * rows))


def test_assembly_omitted_by_reason(snap_compare: Any, sample_db: Path) -> None:
    assembly = first_assembly(sample_db, "scenario:broken_provenance")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("2"))


def test_conversation_branches_outline(snap_compare: Any, sample_db: Path) -> None:
    """Forked branches under their parent, runs folded with x."""
    assembly = first_assembly(sample_db, "scenario:branch_isolation")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("c", "x"))


def test_conversation_subagent_runs(snap_compare: Any, sample_db: Path) -> None:
    """Subagent child runs nested under their parent run, with their assemblies."""
    assembly = first_assembly(sample_db, "scenario:subagent_continuation")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("c"))


def test_prompt_masked(snap_compare: Any, sample_db: Path) -> None:
    assembly = first_assembly(sample_db, "scenario:google_derived_privacy")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("4"))
