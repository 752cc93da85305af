"""Driving the command palette (ctrl+p) as a user does: type, wait for the offer, choose.
The app must run under ``support.pilot.driven`` (the wait is on the app's messages)."""

from __future__ import annotations

from typing import Any

from textual.command import CommandList, CommandPalette

from support.pilot import settle, until


def searching(app: Any) -> bool:
    """Whether the command palette is still gathering commands for what was typed."""
    return any(w.group == CommandPalette._GATHER_COMMANDS_GROUP and not w.is_finished
               for w in app.workers)


def offered_now(app: Any) -> list[str]:
    """The first line of each command the open palette offers, in its order."""
    commands = app.screen.query_one(CommandList)
    return [str(commands.get_option_at_index(i).prompt).split("\n")[0]
            for i in range(commands.option_count)]


async def palette(pilot: Any, query: str, wanted: str) -> list[str]:
    """ctrl+p, type ``query``; the offered commands once one starting with ``wanted`` is
    among them and the palette's search has finished (a hit that arrives later reorders
    the list, and the index ``choose`` picks would name another command)."""
    await pilot.press("ctrl+p")
    await pilot.pause()
    assert isinstance(pilot.app.screen, CommandPalette)
    await pilot.press(*query)
    await until(pilot, lambda: any(o.startswith(wanted) for o in offered_now(pilot.app))
                and not searching(pilot.app),
                f"the palette offering {wanted!r} for {query!r}")
    return offered_now(pilot.app)


async def choose(pilot: Any, offered: list[str], wanted: str) -> None:
    """Move the palette's highlight to the first command starting with ``wanted``, enter."""
    commands = pilot.app.screen.query_one(CommandList)
    commands.highlighted = next(i for i, o in enumerate(offered) if o.startswith(wanted))
    await pilot.press("enter")
    await settle(pilot)
