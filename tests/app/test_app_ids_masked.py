"""The assembly screen masks secret-shaped ids (``support.planted_ids``): its header (the
request, conversation and participant ids, the model, the tags) and its record and trace
tables show none of them unless revealed, while the screen still opens the request and
its records by their real ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.pilot import driven, run_async, settle
from support.planted_ids import ASM, CONV, MODEL, REC, build_planted_db, leaked

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen


@pytest.fixture(scope="module")
def planted_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_planted_db(tmp_path_factory.mktemp("planted-app"))


def _table_ids(screen: AssemblyScreen, table_id: str, column: int) -> list[str]:
    table = screen.query_one(table_id)
    return [str(table.get_row_at(i)[column]) for i in range(table.row_count)]


@run_async
async def test_the_assembly_header_and_records_mask_secret_shaped_ids(planted_db: Path) -> None:
    app = ContextLensApp(db_path=planted_db, initial_assembly=ASM)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AssemblyScreen) and screen.assembly_id == ASM
        header = str(screen.query_one("#assembly-header").render())
        assert header.startswith("assembly [masked secret (github token)]")
        assert leaked(header) == []
        ids = _table_ids(screen, "#context-table", 2)
        assert "[masked secret (aws key)]" in ids and REC not in ids
        await pilot.press("3")  # the Trace tab
        await settle(pilot)
        trace = _table_ids(screen, "#trace-table", 5)
        assert trace and leaked(" ".join(trace)) == []
        # the real ids still open the conversation (the request's row keeps them)
        assert screen.assembly is not None and screen.assembly["conversation_id"] == CONV


@run_async
async def test_revealed_the_header_shows_them(planted_db: Path) -> None:
    app = ContextLensApp(db_path=planted_db, initial_assembly=ASM, reveal=True)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        header = str(app.screen.query_one("#assembly-header").render())
        assert ASM in header and MODEL in header
        assert REC in _table_ids(app.screen, "#context-table", 2)
