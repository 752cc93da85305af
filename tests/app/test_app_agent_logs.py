"""The inspector on the development logs of inspect_ai, Letta and ESAA: each opens like an
export, lists one row per request, and a request opens on its assembly with the records the
runtime recorded (the count read here from the store the adapter wrote)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.pilot import run_async, settle
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
    async with app.run_test(size=(160, 45)) as pilot:
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
