"""The app the inspector's screens, widgets and palette commands run in, typed: they ask it
for answers (``answers()``), the reveal state and the screens to open (``open_diff`` ...),
which Textual's ``node.app`` (an ``App``) does not know of."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:  # pragma: no cover
    from textual.app import App

    from .app import ContextLensApp  # the app imports the screens: typing only

__all__ = ["lens_app"]


class _InAnApp(Protocol):
    """A Textual DOM node or command provider: anything with ``.app``."""

    @property
    def app(self) -> "App[Any]": ...


def lens_app(node: _InAnApp) -> "ContextLensApp":
    """``node.app`` as the ``ContextLensApp`` it is: every screen, widget and palette command
    of the inspector runs inside one (no runtime check: a test may host a widget in a bare
    app that has just the attributes the widget asks for)."""
    return cast("ContextLensApp", node.app)
