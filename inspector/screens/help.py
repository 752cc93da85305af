"""Every key of every screen, read from the screens' own BINDINGS so it never goes stale."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def _key_label(binding: Binding) -> str:
    if binding.key_display:
        return binding.key_display
    names = {"question_mark": "?", "slash": "/", "escape": "esc", "backspace": "backspace"}
    return names.get(binding.key, binding.key)


def _sections() -> list[tuple[str, list[tuple[str, str]]]]:
    """(section title, [(keys, description)]) for the app, each screen and our widgets."""
    from textual_fastdatatable import DataTable

    from ..app import ContextLensApp as app_class
    from ..app import key_owners

    owners = key_owners() + [("Help", HelpScreen)]
    sections: list[tuple[str, list[tuple[str, str]]]] = []
    for title, owner in owners:
        rows: dict[str, list[str]] = {}
        for binding in Binding.make_bindings(owner.BINDINGS):
            # the tooltip, where a binding has one, is the longer wording of its footer label
            meaning = binding.tooltip or binding.description or binding.action
            keys = rows.setdefault(meaning, [])
            if _key_label(binding) not in keys:  # v: one key, its label says which way
                keys.append(_key_label(binding))
        listed = [(", ".join(keys), desc) for desc, keys in rows.items()]
        if owner is app_class:
            listed.append((app_class.COMMAND_PALETTE_BINDING,
                           "Command palette: every command by name, a request or "
                           "conversation by part of its id"))
        sections.append((title, listed))
    # the tables' own movement keys, from the widget's bindings
    moves = {"cursor_up", "cursor_down", "cursor_left", "cursor_right", "page_up",
             "page_down", "scroll_home", "scroll_end"}
    nav: dict[str, list[str]] = {}
    for binding in Binding.make_bindings(DataTable.BINDINGS):
        if binding.action in moves:
            nav.setdefault(binding.description, []).append(_key_label(binding))
    sections.append(("Tables and trees", [(", ".join(k), d) for d, k in nav.items()]))
    return sections


# what a key means does not change between screens
CONVENTIONS = (
    "One key, one meaning: r replays (pick a policy version), R runs again (reloads the "
    "list, verifies or compares again), enter opens what is highlighted, esc goes back, "
    "c opens the conversation, a picks side A. Only q differs: it closes a dialog when one "
    "is open, else quits."
)
# what the list's lint column says (the markers are defined with the list)
LIST_MARKERS = (
    "The list's lint column: ⚠ the request broke a safety invariant (stale or superseded "
    "memory shown as current, another branch's or participant's data, a restricted raw "
    "body), ✗ a lint error, ! a warning, i a note; the number counts its findings "
    "(`contextlens lint --filter id:ID` lists them)."
)


def help_text() -> Text:
    text = Text(CONVENTIONS + "\n\n" + LIST_MARKERS + "\n\n", style="italic")
    for index, (title, rows) in enumerate(_sections()):
        if index:
            text.append("\n")
        text.append(title + "\n", style="bold underline")
        for keys, description in rows:
            text.append(f"  {keys:<22}", style="bold cyan")
            text.append(f"{description}\n")
    return text


class HelpScreen(ModalScreen[None]):
    """The key reference."""

    BINDINGS = [
        Binding("escape,q,question_mark,f1", "dismiss", "Close help"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-dialog"):
            yield Static("contextlens keys", classes="dialog-title", markup=False)
            yield Static(help_text(), id="help-keys")
