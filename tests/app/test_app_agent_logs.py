"""The inspector on the development logs of inspect_ai, Letta and ESAA: each opens like an
export, lists one row per request, and a request opens on its assembly with the records the
runtime recorded (the count read here from the store the adapter wrote)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.pilot import driven, run_async, settle
from support.sql import sql

from ingest.adapters import adapt
from ingest.store import ingest
from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.requests import RequestsScreen

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
LOGS = [
    REALDATA / "inspect-ai" / "2025-05-12T20-27-36-04-00_browser.json",
    REALDATA / "letta-agent-file" / "memgpt_agent_with_convo.af",
    REALDATA / "conversation-esaa" / "activity.context.fixture.jsonl",
]


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.parent.name)
@run_async
async def test_each_log_opens_and_lists_its_requests(log: Path, tmp_path: Path) -> None:
    if not log.is_file():
        pytest.skip(f"the development data is absent ({log.name})")
    db = tmp_path / "s.duckdb"
    ingest(adapt(log, tmp_path / "export").export_dir, db)
    total = sql(db, "select count(*) from context_assemblies")[0][0]
    assert total > 0
    app = ContextLensApp(db_path=db)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, RequestsScreen)
        table = app.screen.query_one("#requests-table")
        assert table.row_count == total
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        first = app.screen.assembly_id  # the list shows ids without their shared segments
        header = " ".join(str(w.render()) for w in app.screen.query("Static"))
        included = sql(db, f"select count(*) from assembly_records where assembly_id = '{first}' "
                           "and decision = 'included'")[0][0]
        assert f"{included} included" in header


@run_async
async def test_a_log_without_times_is_not_shown_as_made_in_2000(tmp_path: Path) -> None:
    """A SWE-agent trajectory records no times: the list says its dates are made up, and a
    request's header says its time was not recorded instead of showing 2000-01-01."""
    from support import swe_trajectory

    db = tmp_path / "s.duckdb"
    ingest(adapt(swe_trajectory.write(tmp_path / "run.traj"), tmp_path / "export").export_dir, db)
    app = ContextLensApp(db_path=db)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        status = str(app.screen.query_one("#status").render())
        assert "times not recorded: the log's order kept" in status and "2000" not in status
        # no row shows the made-up date: each says its time was not recorded
        table = app.screen.query_one("#requests-table")
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert rows and all("not recorded" in r and not any("2000-01-01" in c for c in r)
                            for r in rows), rows
        await pilot.press("enter")
        await settle(pilot)
        header = str(app.screen.query_one("#assembly-header").render())
        assert "time not recorded" in header and "2000-01-01" not in header


@run_async
async def test_a_store_with_and_without_times_counts_the_made_up_ones(tmp_path: Path) -> None:
    from support import swe_trajectory

    db = tmp_path / "s.duckdb"
    ingest(adapt(swe_trajectory.write(tmp_path / "run.traj"), tmp_path / "untimed").export_dir, db)
    timed = Path(__file__).resolve().parents[1] / "adapter_fixtures" / "compaction.jsonl"
    ingest(adapt(timed, tmp_path / "timed").export_dir, db)
    made_up = sql(db, "select count(*) from context_assemblies "
                      "where list_contains(tags, 'times:unrecorded')")[0][0]
    total = sql(db, "select count(*) from context_assemblies")[0][0]
    app = ContextLensApp(db_path=db)
    async with driven(app, size=(200, 45)) as pilot:
        await settle(pilot)
        for _ in range(2):  # whichever end the sort puts them at
            status = str(app.screen.query_one("#status").render())
            assert (f"{made_up} of {total} loaded requests' times not recorded" in status), status
            await pilot.press("s")
            await settle(pilot)
