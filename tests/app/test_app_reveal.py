"""A reveal is confirmed only by a deliberate action (issue 26: keys typed for the list
filter went to the list, and its `v` and `y` revealed restricted content): keys typed in
the same burst as `v`, even the confirming one, never reveal; once the question is on
screen only ctrl+y (or the Reveal button, clicked) reveals, any other key keeps the
content masked; while revealed, the title of every screen says so."""

from __future__ import annotations

from pathlib import Path

from support.pilot import driven, run_async, screen_text, settle
from support.keys import burst
from support.reveal import dialog_shown, reveal_deliberately

from inspector.app import REVEALED_MARK, ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.widgets.reveal import ConfirmReveal

INCIDENT = "asm-035"  # its context holds restricted (masked) records
SIZE = (140, 40)


async def _opened(pilot) -> None:
    await settle(pilot)
    assert isinstance(pilot.app.screen, AssemblyScreen)
    assert "masked" in screen_text(pilot.app)


async def _still_masked(pilot) -> None:
    """Nothing revealed; an open dialog (a burst's keys left it waiting) is closed."""
    app = pilot.app
    await settle(pilot)
    assert not app.reveal
    assert REVEALED_MARK not in app.title
    if isinstance(app.screen, ConfirmReveal):
        await pilot.press("escape")
        await settle(pilot)
    assert not app.reveal and isinstance(app.screen, AssemblyScreen)
    assert "masked" in screen_text(app)


@run_async
async def test_keys_in_the_same_burst_as_v_never_reveal(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=SIZE) as pilot:
        await _opened(pilot)
        for keys in (("v", "y"), ("v", "enter"), ("v", "ctrl+y"), ("v", "tab", "enter"),
                     ("v", "y", "y", "enter", "ctrl+y")):
            await burst(pilot, *keys)
            await _still_masked(pilot)


@run_async
async def test_v_then_y_or_enter_at_zero_delay_never_reveal(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=SIZE) as pilot:
        await _opened(pilot)
        for keys in (("v", "y"), ("v", "enter"), ("v", "space"), ("v", "tab", "enter")):
            await pilot.press(*keys)
            await _still_masked(pilot)


@run_async
async def test_once_shown_any_key_but_ctrl_y_keeps_it_masked_a_click_reveals(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=SIZE) as pilot:
        await _opened(pilot)
        for key in ("y", "enter", "escape", "n", "tab", "space", "v"):
            await pilot.press("v")
            dialog = await dialog_shown(pilot)
            assert app.focused is dialog.query_one("#reveal-no")  # the default: keep masked
            await pilot.press(key)
            await settle(pilot)
            assert not isinstance(app.screen, ConfirmReveal), key  # the key answered
            assert not app.reveal, key
            assert "masked" in screen_text(app)
        await pilot.press("v")  # the mouse is deliberate too
        await dialog_shown(pilot)
        await pilot.click("#reveal-yes")
        await settle(pilot)
        assert app.reveal


@run_async
async def test_a_deliberate_reveal_shows_it_in_the_title_and_v_masks_again(
        sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db, initial_assembly=INCIDENT)
    async with driven(app, size=SIZE) as pilot:
        await _opened(pilot)
        assert REVEALED_MARK not in screen_text(app)
        await reveal_deliberately(pilot)
        assert app.reveal and isinstance(app.screen, AssemblyScreen)
        assert REVEALED_MARK in app.title and REVEALED_MARK in screen_text(app)
        await pilot.press("escape")  # back to the request list
        await settle(pilot)
        assert not isinstance(app.screen, AssemblyScreen)
        assert REVEALED_MARK in screen_text(app)  # on every screen
        await pilot.press("v")  # masking again asks nothing
        await settle(pilot)
        assert not app.reveal and not isinstance(app.screen, ConfirmReveal)
        assert REVEALED_MARK not in screen_text(app) and REVEALED_MARK not in app.title


@run_async
async def test_the_title_says_revealed_at_80_columns_whatever_the_source_name(
        sample_db: Path, tmp_path: Path) -> None:
    """The header cuts what does not fit from its end (the source's name): the mark is in
    the title, before it."""
    import shutil

    db = tmp_path / ("a-store-named-at-length-by-a-script-" * 3 + ".duckdb")
    shutil.copy(sample_db, db)
    app = ContextLensApp(db_path=db, reveal=True)
    async with driven(app, size=(80, 24)) as pilot:
        await settle(pilot)
        assert REVEALED_MARK in screen_text(app)
