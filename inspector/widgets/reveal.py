"""The confirmation asked before restricted content is shown on screen.

A reveal must never be confirmed by keys typed for something else (issue 26: `/` then a
filter typed at once went to the list, and its `v` and `y` revealed). So:

- the confirming key is ctrl+y, which no typed or pasted text produces (a letter, Enter,
  Tab or space can all be part of text; Enter presses the focused button, which is Cancel);
- a key that arrived before the dialog was drawn is ignored, even ctrl+y: it was pressed
  before the question could be read (a key sent in the same burst as `v`);
- any other key after that keeps the content masked and closes the dialog;
- the mouse can press either button once the dialog is drawn.
"""

from __future__ import annotations

from textual import events
from textual._time import get_time
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from ingest.contract import RESTRICTED_PRIVACY

CONFIRM_KEY = "ctrl+y"


class ConfirmReveal(ModalScreen[bool]):
    """Ask before revealing oauth-, google-derived and secret-adjacent content."""

    # what the help lists; the keys themselves are read by ``on_key`` (every key is
    # an answer here, so none may reach a binding first)
    BINDINGS = [
        Binding(CONFIRM_KEY, "answer(True)", "Reveal (only once the dialog is shown)"),
        Binding("escape", "answer(False)", "Keep masked (so does any other key)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        # when the dialog was first drawn; keys that arrived before it are ignored
        self.shown_at: float | None = None

    def compose(self) -> ComposeResult:
        classes = ", ".join(sorted(RESTRICTED_PRIVACY))
        with Vertical(id="reveal-dialog"):
            yield Static("Reveal restricted content?", classes="dialog-title", markup=False)
            yield Static(
                f"Records of class {classes} are masked. Reveal them on screen for this "
                "session only? Nothing is saved; restart to mask again, or press v.\n"
                "ctrl+y reveals; any other key keeps them masked.",
                markup=False,
            )
            with Horizontal(classes="dialog-buttons"):
                # not focusable: Tab then Enter (both in ordinary text) cannot reach it
                reveal = Button("Reveal (ctrl+y)", id="reveal-yes", variant="warning")
                reveal.can_focus = False
                yield reveal
                yield Button("Keep masked (any key)", id="reveal-no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#reveal-no", Button).focus()  # the default answer: keep masked
        self.call_after_refresh(self._shown)

    def _shown(self) -> None:
        self.shown_at = get_time()

    @property
    def is_shown(self) -> bool:
        """Whether the dialog has been drawn (answers count only from then on)."""
        return self.shown_at is not None

    def on_key(self, event: events.Key) -> None:
        # every key is handled here: none goes on to a binding (the focused button's
        # Enter, the app's v) or to the screen below
        event.stop()
        event.prevent_default()
        if self.shown_at is None or event.time < self.shown_at:
            return  # pressed before the question was on screen: not an answer to it
        self.dismiss(event.key == CONFIRM_KEY)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if self.is_shown:
            self.dismiss(event.button.id == "reveal-yes")

    def action_answer(self, answer: bool) -> None:
        if self.is_shown:
            self.dismiss(answer)
