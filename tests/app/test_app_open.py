"""Pilot tests of opening requests in the reused assembly screen (Enter from the list)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pytest
from support.pilot import driven, run_async, settle, until
from support.stores import make_export

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen


@pytest.fixture(scope="module")
def app_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ingest.store import ingest

    root = tmp_path_factory.mktemp("open")
    db = root / "app.duckdb"
    ingest(make_export(root / "export"), db)
    return db


@run_async
async def test_enter_on_one_request_then_another_shows_each_ones_records(app_db: Path) -> None:
    """The assembly screen is reused: opening another request (loaded ahead while the
    cursor rested, or opened at once) shows its own records and panel, never the last one's."""
    from ingest.store import Store
    from readmodel import ReadModel

    with Store.open(app_db) as store:
        model = ReadModel(store)
        expected = {}
        for aid in ("as1", "as2"):
            view = model.assembly(aid)
            included = view.records.filter(pc.equal(view.records["decision"], "included"))
            included = included.sort_by("position")
            expected[aid] = (included["record_id"].to_pylist(), view.request["policy_version"])
    assert expected["as1"][0] != expected["as2"][0]
    app = ContextLensApp(db_path=app_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        for key, aid, rest in (("home", "as1", True), ("end", "as2", True),
                               ("home", "as1", False), ("end", "as2", False)):
            await pilot.press(key)
            if rest:
                # the cursor rests: the list loads it ahead (masked, as the app starts)
                await until(pilot, lambda: app.contents.peek((aid, False)) is not None,
                            f"{aid} loaded ahead")
            await pilot.press("enter")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, AssemblyScreen) and screen.assembly_id == aid
            table = screen.query_one("#context-table")
            ids = [table.get_row_at(r)[2] for r in range(table.row_count)]
            ids_expected, policy = expected[aid]
            assert ids == ids_expected
            assert table.cursor_row == 0
            assert f"policy {policy}" in str(screen.query_one("#assembly-header").render())
            assert ids_expected[0] in str(screen.query_one("#record-title").render())
            await pilot.press("escape")
