"""Bisect one record: at which policy version it first takes the state it has under the
recorded version, and which policy key(s) changed to do it (``ReadModel.bisect``).

Opened from the record panel (b). A worker asks the read model (``BisectDone`` or
``BisectFailed``); the dialog only formats the answer. Ids and values are data: shown as
``Text`` through ``safe_text``, never as markup, and short as the request list shows them
(``readmodel.ids``: the worker reads the store's id affixes first, ``IdsKnown``).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from ingest.errors import ContextlensError
from readmodel import BisectNeedsStart, BisectResult
from readmodel.ids import NO_AFFIXES, store_id_affixes

from ..lens_app import lens_app
from ..widgets.id_text import IdText
from ..widgets.safe import one_line, safe_text
from .replay import IdsKnown


class BisectDone(Message):
    def __init__(self, result: BisectResult) -> None:
        super().__init__()
        self.result = result


class BisectFailed(Message):
    def __init__(self, error: str, family: str | None = None) -> None:
        super().__init__()
        self.error = error
        self.family = family  # a runtime policy's family: the dialog asks where to start


def state_words(state: Mapping[str, Any] | None) -> str:
    """A record's state in a few words: ``included as stale_marker (stale_marker)``."""
    if state is None:
        return "not a candidate"
    if state.get("decision") == "included":
        return f"included as {safe_text(state.get('rendering'))} ({safe_text(state.get('reason_code'))})"
    return f"{safe_text(state.get('decision'))} ({safe_text(state.get('reason_code'))})"


def value_words(value: Any) -> str:
    """A policy value as a short literal ("absent" when the key is not set on that side)."""
    if value is None:
        return "absent"
    if isinstance(value, str):
        return one_line(value, 40)
    return one_line(json.dumps(value, default=str, separators=(", ", ": ")), 60)


def result_text(result: BisectResult) -> Text:
    """The answer: the first bad version, the keys with before/after values, every version
    tried with the record's state."""
    text = Text()
    text.append("first bad version ", style="bold")
    text.append(safe_text(result.version), style="bold red")
    text.append(f"  (after {safe_text(result.previous)})\n", style="dim")
    text.append(f"{state_words(result.good_state)} under {safe_text(result.good)}  →  "
                f"{state_words(result.bad_state)} under {safe_text(result.bad)}\n")
    if result.first_seen != result.version:
        text.append(f"It flips back and forth; chosen: {safe_text(result.rule)}.\n", style="yellow")
    text.append("\n")
    text.append("flipped by " + ("each key alone" if result.alone else "these keys together")
                + "\n", style="bold")
    for key in result.keys:
        text.append(f"  {safe_text(key['key'])}", style="cyan")
        text.append(f"  {value_words(key['before'])} → ")
        text.append(value_words(key["after"]), style="bold")
        text.append("\n")
    chosen = {k["key"] for k in result.keys}
    others = [c for c in result.changed if c["key"] not in chosen]
    if others:
        text.append("also changed, not flipping it alone\n", style="dim")
        for change in others:
            text.append(f"  {safe_text(change['key'])}  {value_words(change['before'])} → "
                        f"{value_words(change['after'])}\n", style="dim")
    text.append("\nversions tried (registry order)\n", style="bold")
    for step in result.tried:
        text.append(f"  {safe_text(step['version']):<6} ")
        text.append(state_words(step["state"]),
                    style="red" if step["state"] == result.bad_state else "")
        if step["version"] == result.version:
            text.append("  ← first bad", style="bold red")
        text.append("\n")
    return text


class BisectScreen(ModalScreen[None]):
    """The bisect of one record of one assembly, from the first version to the recorded one."""

    DEFAULT_CSS = """
    BisectScreen {
        align: center middle;
    }
    #bisect-dialog {
        width: 100;
        height: 80%;
        border: thick $accent;
        background: $surface;
        padding: 0 1;
    }
    BisectScreen.-failed #bisect-dialog {
        border: thick $error;
    }
    """

    BINDINGS = [
        Binding("escape,q", "dismiss", "Close bisect"),
    ]

    def __init__(self, assembly_id: str, record_kind: str, record_id: str) -> None:
        super().__init__()
        self.assembly_id = assembly_id
        self.record_kind = record_kind
        self.record_id = record_id
        self.result: BisectResult | None = None
        self.error: str | None = None
        self.good: str | None = None  # where to start (typed, for a runtime policy)
        self.affixes: tuple[str, str] = NO_AFFIXES  # the store's (IdsKnown)

    def title_text(self) -> Text:
        """``Bisect message m0 of r5``: the ids as the assembly screen shows them."""
        ids = self.ids()
        title = Text("Bisect ", style="bold")
        title.append(f"{safe_text(self.record_kind)} {ids(self.record_id, 80)}", style="bold")
        title.append(f" of {ids(self.assembly_id, 80, assembly=True)}", style="bold")
        return title

    def ids(self) -> IdText:
        """Ids as the assembly screen shows them: masked unless the app reveals."""
        return IdText(bool(lens_app(self).reveal), self.affixes)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="bisect-dialog"):
            yield Static(self.title_text(), classes="dialog-title", id="bisect-title")
            yield Static(Text("Replaying the request under every policy version, from the "
                              "first to the recorded one…", style="dim"), id="bisect-body")
            yield Static(Text("esc: close", style="dim"), id="bisect-hint")

    def on_mount(self) -> None:
        self.run_bisect()

    @work(thread=True, exclusive=True, group="bisect")
    def run_bisect(self) -> None:
        try:
            answers = lens_app(self).answers()
            if self.affixes == NO_AFFIXES:  # (one aggregate, remembered: before the replays)
                self.post_message(IdsKnown(store_id_affixes(answers)))
            result = answers.bisect(
                self.assembly_id, self.record_id, good=self.good, record_kind=self.record_kind)
        except BisectNeedsStart as err:
            self.post_message(BisectFailed(str(err), err.family))
            return
        except ContextlensError as err:
            self.post_message(BisectFailed(str(err)))
            return
        self.post_message(BisectDone(result))

    def on_ids_known(self, message: IdsKnown) -> None:
        self.affixes = message.affixes
        self.query_one("#bisect-title", Static).update(self.title_text())

    def on_bisect_done(self, message: BisectDone) -> None:
        self.result, self.error = message.result, None
        self.remove_class("-failed")
        self.query_one("#bisect-body", Static).update(result_text(message.result))

    def on_bisect_failed(self, message: BisectFailed) -> None:
        self.error = message.error
        self.add_class("-failed")
        if message.family is not None:
            # a transcript's request: its runtime has no earlier versions, so the user says
            # which setting to start from (the command line's --good)
            self.query_one("#bisect-body", Static).update(Text(
                f"This request runs under the runtime policy {safe_text(message.family)}, which "
                "has no earlier versions: type the setting to bisect from, for example "
                f"{safe_text(message.family)}:<key>=<value>, and press enter.", style="bold"))
            if not self.query("#bisect-good"):
                self.query_one("#bisect-dialog").mount(
                    Input(placeholder=f"{message.family}:key=value  (enter bisects)",
                          id="bisect-good"),
                    before=self.query_one("#bisect-hint"))
            self.query_one("#bisect-good", Input).focus()
            return
        # the ids it names as the title names them (IdsKnown came first)
        self.query_one("#bisect-body", Static).update(
            Text(f"Cannot bisect: {self.ids().prose(message.error)}",
                 style="bold red"))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.value.strip():
            self.good = event.value.strip()
            self.query_one("#bisect-body", Static).update(
                Text(f"Bisecting from {safe_text(self.good)}…", style="dim"))
            self.run_bisect()
