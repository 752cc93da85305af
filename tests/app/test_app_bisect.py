"""Pilot tests of bisect from the record panel (b), on the sample's v5 incident."""

from __future__ import annotations

from pathlib import Path

from support.pilot import driven, run_async, screen_text, settle

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.bisect import BisectScreen
from inspector.screens.help import HelpScreen
from inspector.widgets.record_panel import RecordPanel

INCIDENT = "asm-035"  # recorded under v5
CALENDAR = "mem-020"  # shown as current under v5, a stale marker under v4


async def _panel_on(pilot, record_id: str) -> AssemblyScreen:
    """The incident request open, ``record_id`` highlighted in the context table and the
    record panel focused (p)."""
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, AssemblyScreen)
    ids = screen._included["id"].to_pylist()
    await pilot.press(*["down"] * ids.index(record_id))
    await settle(pilot)
    await pilot.press("p")
    await settle(pilot)
    panel = screen.query_one(RecordPanel)
    assert panel.detail is not None and panel.detail.record_id == record_id
    return screen


@run_async
async def test_b_bisects_the_record_in_the_panel(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=(140, 40)) as pilot:
        await _panel_on(pilot, CALENDAR)
        assert "Bisect record" in screen_text(app)  # the footer offers the key
        await pilot.press("b")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, BisectScreen)
        result = dialog.result
        assert result is not None
        assert (result.good, result.bad) == ("v1", "v5")  # the defaults
        assert result.version == "v5"
        assert [(k["key"], k["before"], k["after"]) for k in result.keys] == [
            ("freshness.volatile", 6, 168)]
        text = screen_text(app)
        assert f"Bisect tool_memory {CALENDAR} of {INCIDENT}" in text
        assert "first bad version v5" in text
        assert "freshness.volatile  6 → 168" in text
        assert "← first bad" in text
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)


@run_async
async def test_b_works_from_the_context_table_too(sample_db: Path) -> None:
    """No need to focus the panel first: b on the table bisects the highlighted record."""
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AssemblyScreen)
        ids = screen._included["id"].to_pylist()
        await pilot.press(*["down"] * ids.index(CALENDAR))
        await settle(pilot)
        assert not isinstance(app.focused, type(screen.query_one(RecordPanel).provenance_list))
        await pilot.press("b")
        await settle(pilot)
        assert isinstance(app.screen, BisectScreen)
        assert app.screen.result is not None and app.screen.result.version == "v5"
        assert f"Bisect tool_memory {CALENDAR} of {INCIDENT}" in screen_text(app)


@run_async
async def test_a_record_with_nothing_to_bisect_says_so(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=(140, 40)) as pilot:
        # the build-log memory: durable, a compact memory under every version
        await _panel_on(pilot, "mem-018")
        await pilot.press("b")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, BisectScreen)
        assert dialog.result is None
        assert dialog.error is not None and dialog.error.startswith("nothing to bisect:")
        assert "Cannot bisect: nothing to bisect" in screen_text(app)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)


@run_async
async def test_help_lists_the_bisect_key(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(140, 60)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        help_keys = str(app.screen.query_one("#help-keys").render())
        assert "Record panel (assembly screen, p)" in help_keys
        assert "Bisect record" in help_keys


@run_async
async def test_a_transcript_request_asks_where_to_start_and_bisects_from_it(tmp_path: Path) -> None:
    """A request recorded under a runtime policy (SWE-agent, last_n_observations n=2) has no
    earlier version: the dialog asks for the setting to start from (the command line's
    --good), and bisects from what is typed."""
    from support import swe_trajectory

    from ingest.adapters import adapt
    from ingest.store import Store, ingest

    res = adapt(swe_trajectory.write(tmp_path / "run.traj"), tmp_path / "export")
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    with Store.open(db) as store:
        last = store.list_assemblies(sort="assembled_at", descending=True, limit=1)["assembly_id"][0].as_py()
        cleared = next(r["record_id"] for r in store.assembly_records(last).to_pylist()
                       if r["rendering"] == "cleared")
    app = ContextLensApp(db_path=db, initial_assembly=last)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        app.push_screen(BisectScreen(last, "tool_artifact", cleared))
        await settle(pilot)
        dialog = app.screen
        assert "which has no earlier versions" in screen_text(app) and "--good" not in screen_text(app)
        assert app.focused is dialog.query_one("#bisect-good")
        await pilot.press(*"swe-agent", "colon", *"last_n_observations.n", "equals_sign", *"9")
        await pilot.press("enter")
        await settle(pilot)
        assert dialog.result is not None
        assert dialog.result.version == "swe-agent"
        assert [k["key"] for k in dialog.result.keys] == ["last_n_observations.n"]
        assert "first bad version swe-agent" in screen_text(app)
