"""Driving the reveal confirmation (inspector.widgets.reveal) as a person does: v, read the
question, ctrl+y (keys in one burst, as typed text arrives: ``support.keys.burst``)."""

from __future__ import annotations

from typing import Any

from inspector.widgets.reveal import CONFIRM_KEY, ConfirmReveal

from .pilot import settle


async def dialog_shown(pilot: Any) -> ConfirmReveal:
    """The reveal dialog, once it has been drawn (from then on it takes an answer)."""
    dialog = pilot.app.screen
    assert isinstance(dialog, ConfirmReveal), f"no reveal dialog: {dialog!r}"
    for _ in range(100):
        if dialog.is_shown:
            return dialog
        await pilot.pause()
    raise AssertionError("the reveal dialog was never drawn")


async def reveal_deliberately(pilot: Any) -> None:
    """v, wait for the question to be on screen, then the confirming key."""
    await pilot.press("v")
    await dialog_shown(pilot)
    await pilot.press(CONFIRM_KEY)
    await settle(pilot)

