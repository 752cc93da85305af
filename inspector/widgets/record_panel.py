"""The record panel: why a record was in or out, its decision trace, and its provenance.

The panel only displays a ``RecordDetail`` built by a worker of the assembly screen; the
provenance chain is an ``OptionList`` the user walks with Enter (each link opens that
record's panel) and Backspace (one step back). ``b`` bisects the record shown across the
policy versions (the app's bisect dialog).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from readmodel.ids import NO_AFFIXES, short_text

from ..lens_app import lens_app
from .id_text import IdText, app_reveal
from .safe import readable, readable_line, safe_text

KIND_SHORT = {
    "message": "message",
    "tool_call": "tool call",
    "tool_artifact": "artifact",
    "tool_memory": "memory",
    "skill_state": "skills",
    "checkpoint": "checkpoint",
    "model_run": "model run",
}


@dataclass(frozen=True)
class RecordDetail:
    """Everything the panel shows about one record, in one assembly."""

    kind: str
    record_id: str
    exists: bool  # the record's own row is in the store
    decision: dict[str, Any] | None  # its assembly_records row, None if not in this assembly
    why: str
    content: str  # already masked when restricted
    privacy_class: str | None
    trace: list[dict[str, Any]] = field(default_factory=list)
    provenance: list[dict[str, Any]] = field(default_factory=list)


def decision_summary(decision: dict[str, Any] | None) -> tuple[str, str]:
    """A short phrase for a record's place in this assembly, and its CSS-ish style."""
    if decision is None:
        return "not in this assembly", "dim"
    if decision.get("decision") == "included":
        pos = decision.get("position")
        return (
            f"included #{pos} as {decision.get('rendering') or '?'} "
            f"({decision.get('reason_code')}, {decision.get('tokens', 0)} tok)",
            "green",
        )
    return (
        f"omitted: {decision.get('reason_code')} ({decision.get('policy_family')} stage)",
        "yellow",
    )


class ProvenanceList(OptionList):
    """The provenance chain of the record in the panel, one link per line."""

    BINDINGS = [
        Binding("backspace", "walk_back", "Back in walk"),
    ]

    class WalkedBack(Message):
        """The user asked to return to the previous record of the walk."""

    def action_walk_back(self) -> None:
        self.post_message(self.WalkedBack())


class RecordPanel(Horizontal):
    """Why-sentence, content and decision trace on the left; provenance on the right."""

    BINDINGS = [
        Binding("b", "bisect", "Bisect record"),
    ]

    class LinkChosen(Message):
        """Enter on a provenance link: open that record's panel."""

        def __init__(self, link: dict[str, Any]) -> None:
            super().__init__()
            self.link = link

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id)
        self._links: list[dict[str, Any]] = []
        self.detail: RecordDetail | None = None  # the record shown, None for a message
        self._affixes: tuple[str, str] = NO_AFFIXES  # ids shown without them (readmodel.ids)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="record-detail"):
            yield Static("Highlight a record to see why it is here.", id="record-title")
            yield Static("", id="record-why")
            yield Static("", id="record-content")
            yield Static("", id="record-trace")
        with Vertical(id="provenance-box"):
            yield Label("Provenance (enter: open link, backspace: back)", id="provenance-title")
            yield ProvenanceList(id="provenance", markup=False)

    @property
    def provenance_list(self) -> ProvenanceList:
        return self.query_one("#provenance", ProvenanceList)

    def show_message(self, text: str) -> None:
        # it may name ids (an error): shown as ids are
        self.query_one("#record-title", Static).update(
            Text(IdText(app_reveal(self), self._affixes).prose(text)))
        for name in ("#record-why", "#record-content", "#record-trace"):
            self.query_one(name, Static).update("")
        self._links = []
        self.detail = None
        self.provenance_list.clear_options()

    def show(self, detail: RecordDetail, membership: dict[tuple[str, str], dict[str, Any]],
             affixes: tuple[str, str] = NO_AFFIXES) -> None:
        """Display ``detail``; ``membership`` says which records are in this assembly;
        ids are shown without ``affixes`` (``readmodel.ids``), as the request list shows them,
        and masked where secret-shaped unless the app reveals (``IdText``): the panel keeps
        the real ids, to walk the provenance and bisect by.

        Everything is built first and then put on screen in one go, so the title, the
        why-sentence, the trace and the provenance pane always show the same record."""
        ids = IdText(app_reveal(self), affixes)
        place, place_style = decision_summary(detail.decision)
        title = Text()
        title.append(f"{KIND_SHORT.get(detail.kind, detail.kind)} ", style="bold")
        title.append(ids(detail.record_id, 200), style="bold")
        title.append("  ·  ")
        title.append(safe_text(place), style=place_style)
        if not detail.exists:
            title.append("  ✗ record missing from the export", style="bold red")
        if detail.privacy_class:
            title.append(f"  ·  {safe_text(detail.privacy_class)}", style="magenta")

        # it names ids: shown as ids are, without the prefix every id of the store shares
        why = Text(ids.prose(detail.why))
        content = Text("content  ", style="dim")
        content.append(readable(detail.content) if detail.content else "(none)")

        trace = Text("decision trace", style="dim")
        if not detail.trace:
            trace.append("\n  (no policy decisions recorded for it here)")
        for row in detail.trace:
            trace.append("\n")
            trace.append(f"  {row.get('step', ''):>3} ", style="dim")
            trace.append(f"{safe_text(row.get('policy_family', '')):<13} ")
            outcome = safe_text(row.get("outcome", ""))
            trace.append(f"{outcome:<9} ", style="red" if outcome == "deny" else "green")
            trace.append(f"{safe_text(row.get('reason_code', '')):<22} ")
            trace.append(readable_line(short_text(ids.masked(row.get("detail")), affixes), 80),
                         style="dim")
        self._affixes = affixes
        links = self._links_of(detail)
        options = [Option(self._link_text(link, membership, affixes, ids), id=f"link-{index}")
                   for index, link in enumerate(links)]

        self.detail = detail
        self._links = links
        self.set_class(detail.decision is None, "-outside")
        self.query_one("#record-title", Static).update(title)
        self.query_one("#record-why", Static).update(why)
        self.query_one("#record-content", Static).update(content)
        self.query_one("#record-trace", Static).update(trace)
        plist = self.provenance_list
        plist.set_options(options)
        if options:
            plist.highlighted = 0

    @staticmethod
    def _links_of(detail: RecordDetail) -> list[dict[str, Any]]:
        """The provenance links shown: the record itself first (the store's chain starts
        with it, at depth 0), then what it came from."""
        chain = list(detail.provenance)
        head = chain[0] if chain and int(chain[0].get("depth") or 0) == 0 else None
        if head is not None:
            chain.pop(0)
        if head is None or (str(head.get("kind")), str(head.get("id"))) != (
                detail.kind, detail.record_id):
            # the first line always names the record the title names
            head = {"kind": detail.kind, "id": detail.record_id, "label": "",
                    "broken": False, "depth": 0, "via": None}
        return [{**head, "self": True}, *chain]

    @staticmethod
    def _link_text(link: dict[str, Any], membership: dict[tuple[str, str], dict[str, Any]],
                   affixes: tuple[str, str] = NO_AFFIXES, ids: IdText | None = None) -> Text:
        """One provenance link; its id as ``ids`` shows it (masked when not given)."""
        ids = ids if ids is not None else IdText(False, affixes)
        depth = int(link.get("depth") or 0)
        text = Text("  " * max(depth - 1, 0))
        kind = str(link.get("kind") or "?")
        rid = ids(link.get("id"), 120)
        if link.get("broken"):
            text.append(f"✗ missing {rid} ", style="bold red")
            text.append(f"({KIND_SHORT.get(kind, kind)}, broken provenance)", style="red")
            return text
        text.append("● " if link.get("self") else "→ ", style="bold" if link.get("self") else "")
        text.append(f"{KIND_SHORT.get(kind, kind)} {rid}", style="bold")
        # in or out of the prompt before the link's field name: a narrow panel cuts the end
        place = membership.get((kind, str(link.get("id"))))
        if place is not None:
            phrase = "included" if place.get("decision") == "included" else (
                f"omitted: {safe_text(place.get('reason_code'))}"
            )
            text.append(f"  [{phrase}]", style="green" if phrase == "included" else "yellow")
        elif kind in KIND_SHORT and kind != "model_run" and not link.get("self"):
            text.append("  [not in this assembly]", style="dim")
        via = link.get("via")
        if via:
            text.append(f"  via {safe_text(via)}", style="dim")
        label = link.get("label")
        if label and not link.get("self"):
            text.append("  " + readable_line(label, 80), style="dim")
        return text

    def action_bisect(self) -> None:
        """Bisect the record shown, in this screen's assembly, with the defaults (the first
        version to the recorded one); the dialog's worker replays, the UI does not wait."""
        detail = self.detail
        assembly_id = getattr(self.screen, "assembly_id", None)
        if detail is None or assembly_id is None:
            self.notify("Highlight a record to bisect it.", severity="warning")
            return
        lens_app(self).open_bisect(assembly_id, detail.kind, detail.record_id)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        index = event.option_index
        if 0 <= index < len(self._links):
            self.post_message(self.LinkChosen(self._links[index]))
