"""A footer that rebuilds its keys only when the keys it shows change."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


class KeysFooter(Footer):
    """Textual's footer, minus the rebuilds that change nothing.

    Textual's footer removes and mounts all of its key widgets whenever the screen's
    bindings are refreshed (a screen shown again, focus moving between widgets), several
    times per screen switch, even when the keys it shows are the same. Each rebuild restyles,
    lays out and repaints the screen. Here a rebuild happens only when the shown keys
    (key, label, enabled) differ from the ones on screen, so showing a reused screen
    again costs nothing in its footer."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[Any, ...] | None = None

    def on_resize(self) -> None:
        # on a narrow terminal the keys lose their padding and the palette's hint goes
        # (ctrl+p still opens it; the help says so), so the last keys (Help, Reveal, Quit)
        # stay on screen
        self.compact = self.size.width < 110
        self.show_command_palette = self.size.width >= 90

    def _keys(self, screen: Screen[Any]) -> tuple[Any, ...]:
        return tuple(
            (binding.key, binding.action, binding.description, enabled, tooltip)
            for (_, binding, enabled, tooltip) in screen.active_bindings.values()
            if binding.show
        )

    def bindings_changed(self, screen: Screen[Any]) -> None:
        if self._bindings_ready and not screen.is_current:
            # a screen leaving the stack loses its focus: nothing to show until it is
            # back, when its bindings are published again
            return
        if self.is_attached and screen is self.screen and screen.app.app_focus:
            keys = self._keys(screen)
            if keys == self._shown:
                return
            self._shown = keys
        super().bindings_changed(screen)
