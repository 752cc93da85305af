"""The confirmation asked before restricted content is shown on screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from ingest.contract import RESTRICTED_PRIVACY


class ConfirmReveal(ModalScreen[bool]):
    """Ask before revealing oauth-, google-derived and secret-adjacent content."""

    BINDINGS = [
        Binding("y", "answer(True)", "Reveal"),
        Binding("n,escape", "answer(False)", "Keep masked"),
    ]

    def compose(self) -> ComposeResult:
        classes = ", ".join(sorted(RESTRICTED_PRIVACY))
        with Vertical(id="reveal-dialog"):
            yield Static("Reveal restricted content?", classes="dialog-title", markup=False)
            yield Static(
                f"Records of class {classes} are masked. Reveal them on screen for this "
                "session only? Nothing is saved; restart to mask again, or press v.",
                markup=False,
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Reveal (y)", id="reveal-yes", variant="warning")
                yield Button("Keep masked (n)", id="reveal-no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#reveal-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "reveal-yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
