"""The request list under real hands: clicks, scrolls and keys while it loads never meet a
table that is being replaced (the list is built once and updated in place), keys typed right
after ``/`` land in the filter however fast they come, and Home/End go to the list's real
first and last request (keyset pages from the read model), not the loaded rows' ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
from textual.widgets import Input
from textual.worker import WorkerState

from inspector.app import ContextLensApp
from inspector.screens.requests import RequestsScreen
from support.big_store import scale_store
from support.keys import burst
from support.pilot import driven, run_async, settle, status

SCALE = 2500  # five pages of the list; its load (rows, then each page's lint) takes seconds
ROUNDS = 400  # a bound for a load that never ends to fail, not a timing


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scale_store(tmp_path_factory.mktemp("list-hands"), SCALE)


def _list_loading(app: ContextLensApp, screen: RequestsScreen) -> bool:
    """Whether the list still reads rows or their lint (its workers, not a timer)."""
    if screen._display is None:
        return True
    return any(w.group.startswith("requests") and
               (w.is_running or w.state is WorkerState.PENDING) for w in app.workers)


def _tables(screen: RequestsScreen) -> list[Any]:
    return list(screen.query("#requests-table"))


def _order(db: Path, where: str = "TRUE", order: str = "assembled_at, assembly_id, export_id"
           ) -> list[str]:
    """The list's order by a DuckDB query of the store (what the read model must page)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return [r[0] for r in con.sql(
            f"SELECT assembly_id FROM assembly_summary WHERE {where} ORDER BY {order}").fetchall()]
    finally:
        con.close()


# ---------------------------------------------------------------------- hands while loading


@run_async
async def test_clicks_scrolls_and_keys_during_the_whole_load_meet_one_table(big_db: Path) -> None:
    """Each round clicks a row, scrolls (wheel, PageDown, End, Home), types in the filter and
    leaves it, sorts; rounds go on until the list's workers say the load (rows and lint, a
    sort's reload too) is over. The table is the one widget from first to last, and what it
    shows is what the screen loaded."""
    from textual import events

    app = ContextLensApp(db_path=big_db)
    async with driven(app, size=(120, 30)) as pilot:
        screen = app.screen
        assert isinstance(screen, RequestsScreen)
        seen: set[int] = set()
        rounds = 0
        while rounds < 2 or _list_loading(app, screen):
            rounds += 1
            assert rounds < ROUNDS, "the list never finished loading"
            await pilot.click("#requests-holder", offset=(12, 2 + rounds % 2))
            if app.screen is not screen:  # a click on the highlighted row opened it
                await pilot.press("escape")
            holder = screen.query_one("#requests-holder")
            x, y = holder.region.offset
            app.post_message(events.MouseScrollDown(
                None, x + 5, y + 3, 0, 1, 0, False, False, False, screen_x=x + 5,
                screen_y=y + 3))
            await pilot.press(("pagedown", "end", "home", "down")[rounds % 4])
            await burst(pilot, "/", "x", "backspace", "escape")
            if rounds in (1, 2):
                await pilot.press("s")  # a sort reloads the list under the hands
            seen.update(id(t) for t in _tables(screen))
            assert app.is_running
        await settle(pilot)
        assert app.screen is screen
        tables = _tables(screen)
        seen.update(id(t) for t in tables)
        assert len(tables) == 1 and len(seen) == 1, "the request table was replaced"
        table = tables[0]
        assert table.parent is screen.query_one("#requests-holder")
        # consistent: the table shows the loaded rows, in the shown columns
        assert table.row_count == screen._display.num_rows == screen._keys.num_rows
        assert table.backend.data.equals(screen._shown_rows())
        assert f"of {SCALE:,} requests" in status(app)
        assert screen.highlighted_assembly() == screen._keys["assembly_id"][table.cursor_row].as_py()


# ---------------------------------------------------------------------- / then keys at once


@run_async
async def test_keys_typed_right_after_slash_land_in_the_filter(sample_db: Path) -> None:
    """Zero delay between ``/`` and the text: every key reaches the filter, none the list (s
    would sort, enter or c open a screen, v ask to reveal)."""
    typed = "scenario:branch_send policy:v5"
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(120, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        await burst(pilot, "/", *typed)
        await settle(pilot)
        assert screen.query_one("#filter", Input).value == typed
        assert app.screen is screen and len(app.screen_stack) == 1
        assert screen.query_state.sort == "assembled_at"  # no s reached the list
        assert not app.reveal


@run_async
async def test_keys_typed_right_after_slash_while_the_list_loads(big_db: Path) -> None:
    typed = "scenario:branch_send policy:v5"
    app = ContextLensApp(db_path=big_db)
    async with driven(app, size=(120, 30)) as pilot:
        screen = app.screen
        await burst(pilot, "/", *typed)
        await settle(pilot)
        assert screen.query_one("#filter", Input).value == typed
        assert app.screen is screen and len(app.screen_stack) == 1
        assert screen.query_state.sort == "assembled_at"


@run_async
async def test_slash_typed_in_the_filter_is_text(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(120, 30)) as pilot:
        await settle(pilot)
        await burst(pilot, "/", *"a/b")
        await settle(pilot)
        assert app.screen.query_one("#filter", Input).value == "a/b"


# ---------------------------------------------------------------------- Home and End


def _highlighted(app: ContextLensApp) -> str | None:
    screen = app.screen
    assert isinstance(screen, RequestsScreen)
    return screen.highlighted_assembly()


def _loaded_ids(screen: RequestsScreen) -> list[str]:
    return screen._keys["assembly_id"].to_pylist()


@run_async
async def test_end_and_home_go_to_the_real_last_and_first_request(big_db: Path) -> None:
    truth = _order(big_db)
    assert len(truth) == SCALE
    app = ContextLensApp(db_path=big_db)
    async with driven(app, size=(120, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert _highlighted(app) == truth[0]
        await pilot.press("down", "down", "down")
        await pilot.press("end")
        await settle(pilot)
        assert _highlighted(app) == truth[-1]
        loaded = _loaded_ids(screen)
        # the list's last page, in order (and only it: the cursor went straight to its end)
        assert len(loaded) == 500 and loaded == truth[-500:]
        assert f"rows {SCALE - len(loaded) + 1:,}–{SCALE:,}" in status(app)
        # PageUp past the top of the rows loaded at the end loads the ones before them
        table = screen.query_one("#requests-table")
        presses = 0
        while _loaded_ids(screen)[0] == loaded[0]:
            presses += 1
            assert presses < ROUNDS
            await pilot.press("pageup")
            await settle(pilot)
        now = _loaded_ids(screen)
        first = truth.index(now[0])
        assert now == truth[first:first + len(now)] and first < SCALE - len(loaded)
        assert _highlighted(app) == now[table.cursor_row]
        await pilot.press("home")
        await settle(pilot)
        assert _highlighted(app) == truth[0]
        assert _loaded_ids(screen) == truth[:len(_loaded_ids(screen))]
        await pilot.press("end")
        await settle(pilot)
        assert _highlighted(app) == truth[-1]


@run_async
async def test_end_under_a_filter_and_a_sort_is_the_last_of_that_order(big_db: Path) -> None:
    """Sorted by tokens (largest first) under a filter: End shows the last request of that
    order, ties broken by the id as the read model breaks them."""
    truth = _order(big_db, "policy_version IS DISTINCT FROM 'v1'",
                   "assembled_tokens DESC NULLS LAST, assembly_id DESC, export_id")
    app = ContextLensApp(db_path=big_db)
    async with driven(app, size=(160, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        screen.query_one("#filter", Input).value = "-policy:v1"
        screen.apply_filter("-policy:v1")
        await settle(pilot)
        keys = [c.key for c, _ in screen._shown]
        table = screen.query_one("#requests-table")
        table.move_cursor(column=keys.index("tokens"))
        await pilot.press("s")
        await settle(pilot)
        assert screen.query_state.sort == "assembled_tokens" and screen.query_state.descending
        assert _highlighted(app) == truth[0]
        await pilot.press("end")
        await settle(pilot)
        assert _highlighted(app) == truth[-1]
        assert _loaded_ids(screen) == truth[-len(_loaded_ids(screen)):]
        await pilot.press("home")
        await settle(pilot)
        assert _highlighted(app) == truth[0]


@run_async
async def test_rows_reloaded_away_from_the_top_keep_the_cursor_on_its_request(
        big_db: Path) -> None:
    """A store that changed under the list (a followed file grew) while the rows loaded are
    the list's last: they are read again around the cursor's request, which stays under it."""
    truth = _order(big_db)
    app = ContextLensApp(db_path=big_db)
    async with driven(app, size=(120, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        await pilot.press("end")
        await settle(pilot)
        await pilot.press("up", "up", "up")
        before = _highlighted(app)
        assert before == truth[-4]
        screen.refresh_rows()
        await settle(pilot)
        assert _highlighted(app) == before
        loaded = _loaded_ids(screen)
        assert len(loaded) == 500 and loaded == truth[-500:]


def test_keyset_pages_are_the_list_order_sliced(big_db: Path) -> None:
    """``ReadModel.request_page`` against the store's whole list, in orders with nulls
    (scenario), ties (tokens) and under a filter: first, last, after, before and around a
    row are slices of it, with their place."""
    from ingest.store import Store
    from readmodel import ReadModel

    with Store.open(big_db) as store:
        answers = ReadModel(store)
        for sort, descending, flt in (("assembled_at", False, None),
                                      ("assembled_tokens", True, "-policy:v1"),
                                      ("scenario", False, None), ("model", True, None)):
            ids = store.list_assemblies(flt, sort=sort, descending=descending)[
                "assembly_id"].to_pylist()
            kw: dict[str, Any] = {"sort": sort, "descending": descending, "rows": 100}
            first = answers.request_page(flt, **kw)
            assert first.keys["assembly_id"].to_pylist() == ids[:100] and first.offset == 0
            last = answers.request_page(flt, last=True, **kw)
            assert last.keys["assembly_id"].to_pylist() == ids[-100:]
            assert last.offset == len(ids) - 100 and last.matched == len(ids)
            export = first.keys["export_id"][0].as_py()
            for at in (0, 1, 777, len(ids) - 2, len(ids) - 1):
                key = (ids[at], export)
                after = answers.request_page(flt, after=key, **kw)
                assert after.keys["assembly_id"].to_pylist() == ids[at + 1:at + 101]
                assert after.offset == at + 1
                before = answers.request_page(flt, before=key, **kw)
                assert before.keys["assembly_id"].to_pylist() == ids[max(at - 100, 0):at]
                assert before.offset == max(at - 100, 0)
                around = answers.request_page(flt, around=key, **kw)
                got = around.keys["assembly_id"].to_pylist()
                assert len(got) == 100 and got == ids[around.offset:around.offset + 100]
                assert ids[at] in got
