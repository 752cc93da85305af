"""Keys as a terminal delivers a fast typist's (or a paste's) input: all at once.

``pilot.press`` waits for the app to go idle after each key, so every key meets the focus
the one before it left; a terminal hands the app a burst of keys read in one go, each queued
before the first is handled. ``burst`` queues them the same way (the driver's own
``send_message``, as ``App._press_keys`` does, without its wait between keys)."""

from __future__ import annotations

import unicodedata
from typing import Any

from textual import events
from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key


def key_event(key: str) -> events.Key:
    """The Key event a terminal sends for ``key`` (a key name or one character)."""
    if len(key) == 1 and not key.isalnum():
        key = _character_to_key(key)
    original = REPLACED_KEYS.get(key, key)
    try:
        char: str | None = unicodedata.lookup(_get_unicode_name_from_key(original))
    except KeyError:
        char = key if len(key) == 1 else None
    return events.Key(key, char)


async def burst(pilot: Any, *keys: str) -> None:
    """Queue every key at once, then let the app handle them all."""
    app = pilot.app
    driver = app._driver
    for key in keys:
        event = key_event(key)
        event.set_sender(app)
        driver.send_message(event)
    await pilot.pause()
    await pilot.pause()


# From the request list, v4 against v5 by keys: C opens the picker (side B focused, on v1;
# side A on the recording); shift+tab: side A, four down to v4; tab: side B, four down to v5;
# enter compares A -> B
COMPARE_V4_V5 = ("C", "shift+tab", "down", "down", "down", "down", "tab",
                 "down", "down", "down", "down", "enter")
