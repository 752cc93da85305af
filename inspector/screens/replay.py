"""The policy picker: choose the version to replay an assembly under, and what to diff against.

Only the versions that apply to the request are offered (``readmodel.applicable``): an
export's request gets each version of the registry, with its description and what it
changes from its parent (``PolicyRegistry.changes``); a transcript request recorded under a
runtime policy (``claude-code``, ``swe-agent``…) gets that family, with its keys, examples of
its variants and a line to type a version with changed keys
(``swe-agent:last_n_observations.n=3``). The recorded version is marked and highlighted first. "Against" is the A side of the diff: the recorded assembly, or a
replay under another version. The picker only chooses; the diff screen replays.

The request is named as the request list names it (``readmodel.ids``): the store's id
affixes are read by the worker that loads the versions, and the title is shortened then.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from ingest.errors import ContextlensError
from readmodel import RECORDED, PolicyInfo
from readmodel.ids import NO_AFFIXES, store_id_affixes

from ..lens_app import lens_app
from ..widgets.id_text import IdText
from ..widgets.safe import one_line, safe_text



@dataclass(frozen=True)
class ReplayChoice:
    """Replay under ``version`` (side B) and diff it against ``against`` (side A):
    ``"recorded"`` or another version."""

    version: str
    against: str = RECORDED


def change_value(value: Any) -> str:
    """A policy value as a short literal: strings bare, lists and tables as JSON."""
    if value is None:
        return "unset"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str, separators=(", ", ": "))
    return str(value)


def policy_prompt(info: PolicyInfo, recorded: str | None) -> Text:
    """One option of the picker: version, parent, description and changes."""
    text = Text()
    text.append(f"{safe_text(info.version):<5}", style="bold")
    if info.version == recorded:
        text.append(" ● recorded", style="bold green")
    if info.runtime:
        text.append("  runtime policy", style="dim")
        text.append("\n")
        text.append(one_line(info.description, 600))
        for change in info.changes:
            default = "as recorded" if change["parent"] is None else change_value(change["parent"])
            text.append("\n  ")
            text.append(safe_text(change["key"]), style="cyan")
            text.append(f" (default {one_line(default, 20)}): ", style="dim")
            text.append(one_line(change_value(change["value"]), 120))
        return text
    if info.extends:
        text.append(f"  extends {safe_text(info.extends)}", style="dim")
    else:
        text.append("  root policy", style="dim")
    text.append("\n")
    text.append(one_line(info.description, 600))
    if info.changes:
        text.append("\n")
        text.append("changes ", style="dim")
        for index, change in enumerate(info.changes):
            key, parent, value = change["key"], change["parent"], change["value"]
            if index:
                text.append(" · ", style="dim")
            text.append(safe_text(key), style="cyan")
            text.append(f" {one_line(change_value(parent), 40)} → ", style="")
            text.append(one_line(change_value(value), 40), style="bold")
    return text


class PoliciesLoaded(Message):
    def __init__(self, policies: list[PolicyInfo]) -> None:
        super().__init__()
        self.policies = policies


class IdsKnown(Message):
    """The store's id affixes (``readmodel.ids.store_id_affixes``): ids shown short."""

    def __init__(self, affixes: tuple[str, str]) -> None:
        super().__init__()
        self.affixes = affixes


class PoliciesFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class PolicyPicker(ModalScreen[ReplayChoice | None]):
    """Pick a policy version to replay the open assembly under."""

    BINDINGS = [
        Binding("enter", "choose", "Replay under version", show=False),
        Binding("a", "focus_against", "Diff against…"),
        Binding("escape", "cancel", "Cancel"),
    ]

    VERB = "replays"  # what enter in the typed-version box does

    def __init__(self, assembly_id: str, recorded_version: str | None) -> None:
        super().__init__()
        self.assembly_id = assembly_id
        self.recorded_version = recorded_version
        self.policies: list[PolicyInfo] = []
        self.affixes: tuple[str, str] = NO_AFFIXES  # the store's (IdsKnown)

    def ids(self) -> IdText:
        """Ids as the request list shows them: masked unless the app reveals."""
        return IdText(bool(lens_app(self).reveal), self.affixes)

    def title_text(self) -> Text:
        """``Replay r5  (recorded under …)``: the request's id as the list shows it."""
        title = Text()
        title.append("Replay ", style="bold")
        title.append(self.ids()(self.assembly_id, None, assembly=True), style="bold")
        if self.recorded_version:
            title.append(f"  (recorded under {safe_text(self.recorded_version)})", style="dim")
        return title

    def compose(self) -> ComposeResult:
        with Vertical(id="replay-dialog"):
            yield Static(self.title_text(), classes="dialog-title", id="replay-title")
            # side A above the versions: its list opens downward over them, inside the
            # dialog, and never over the footer of a short terminal
            with Horizontal(id="against-row"):
                yield Label("diff against (side A)", id="against-label")
                yield Select[str](
                    [(self._recorded_label(), RECORDED)],
                    value=RECORDED,
                    allow_blank=False,
                    id="against",
                    compact=True,
                )
            versions = OptionList(id="policy-versions", markup=False)
            versions.add_option(Option(Text("Loading the policy registry…", style="dim"), disabled=True))
            yield versions
            yield Static(self.hint(typed=False), id="replay-hint", markup=False)

    def hint(self, typed: bool) -> str:
        """The keys of the dialog (``typed``: with the box for a version with changed keys,
        which tab reaches first)."""
        verb = self.VERB.removesuffix("s")
        keys = "a: side A · type: a version with changed keys" if typed else "a / tab: choose side A"
        return f"enter: {verb} under the highlighted version (side B) · {keys} · esc: cancel"

    def _recorded_label(self) -> str:
        return f"the recorded assembly ({self.recorded_version or '?'})"

    def on_mount(self) -> None:
        self.query_one("#policy-versions", OptionList).focus()
        self.load_policies()

    def applicable(self, answers: Any) -> list[PolicyInfo]:
        """The versions that replay this request (``readmodel.applicable``): an export's,
        the registry's; a transcript's, its runtime family and examples of its variants."""
        from readmodel.applicable import policy_choices, request_policies

        return policy_choices(answers, request_policies(answers, self.assembly_id))

    @work(thread=True, exclusive=True, group="policies")
    def load_policies(self) -> None:
        try:
            answers = lens_app(self).answers()
            if self.assembly_id:  # (compare's picker names no request)
                self.post_message(IdsKnown(store_id_affixes(answers)))
            policies = self.applicable(answers)
        except ContextlensError as err:
            self.post_message(PoliciesFailed(str(err)))
            return
        self.post_message(PoliciesLoaded(policies))

    def on_ids_known(self, message: IdsKnown) -> None:
        self.affixes = message.affixes
        for title in self.query("#replay-title").results(Static):
            title.update(self.title_text())

    def on_policies_loaded(self, message: PoliciesLoaded) -> None:
        self.policies = message.policies
        versions = self.query_one("#policy-versions", OptionList)
        versions.clear_options()
        options: list[Option | None] = []
        for index, policy in enumerate(self.policies):
            if index:
                options.append(None)  # a separator line between versions
            options.append(Option(policy_prompt(policy, self.recorded_version), id=f"policy-{policy.version}"))
        versions.add_options(options)
        family = next((p.version for p in self.policies if p.runtime), None)
        if family is not None and not self.query("#typed-version"):
            self.query_one("#replay-dialog").mount(
                Input(placeholder=f"or type a version with changed keys: {family}:key=value,…  "
                                  f"(enter {self.VERB})", id="typed-version",
                      select_on_focus=False),  # letters typed on the list are kept
                before=self.query_one("#against-row"))
            # say how to get there: tab, or typing (on_key moves the letters there)
            self.query_one("#replay-hint", Static).update(self.hint(typed=True))
        names = [p.version for p in self.policies]
        start = self.recorded_version if self.recorded_version in names else (names or [None])[0]
        if start is not None:
            versions.highlighted = versions.get_option_index(f"policy-{start}")
        against = self.query_one("#against", Select)
        against.set_options(
            [(self._recorded_label(), RECORDED)]
            + [(f"a replay under {safe_text(v)}", v) for v in names]
        )
        against.value = RECORDED

    def on_policies_failed(self, message: PoliciesFailed) -> None:
        versions = self.query_one("#policy-versions", OptionList)
        versions.clear_options()
        versions.add_option(
            # the ids it names as the title names them (IdsKnown came first)
            Option(Text(f"Cannot load the policies: "
                        f"{self.ids().prose(message.error)}",
                        style="bold red"),
                   disabled=True)
        )
        self.add_class("-failed")

    @on(OptionList.OptionSelected, "#policy-versions")
    def version_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self._choose(event.option.id)

    @on(Select.Changed, "#against")
    def against_changed(self, _event: Select.Changed) -> None:
        # back to the versions: enter there replays
        if self.policies:
            self.query_one("#policy-versions", OptionList).focus()

    def highlighted_version(self) -> str | None:
        versions = self.query_one("#policy-versions", OptionList)
        option = versions.highlighted_option
        return self._version_of(option.id if option is not None else None)

    def _version_of(self, option_id: str | None) -> str | None:
        if option_id is None or not option_id.startswith("policy-"):
            return None
        return option_id.removeprefix("policy-")

    def _choose(self, option_id: str | None) -> None:
        version = self._version_of(option_id)
        if version is None:
            return
        against = self.query_one("#against", Select).value
        against = against if isinstance(against, str) else RECORDED
        self.dismiss(ReplayChoice(version, against))

    def action_choose(self) -> None:
        versions = self.query_one("#policy-versions", OptionList)
        option = versions.highlighted_option
        self._choose(option.id if option is not None else None)

    @on(Input.Submitted, "#typed-version")
    def typed_version(self, event: Input.Submitted) -> None:
        event.stop()
        version = event.value.strip()
        if version:
            against = self.query_one("#against", Select).value
            self.dismiss(ReplayChoice(version, against if isinstance(against, str) else RECORDED))

    def action_focus_against(self) -> None:
        self.query_one("#against", Select).focus()

    def on_key(self, event: events.Key) -> None:
        """A version typed on the list goes into the box for one: its letters did nothing,
        or jumped to side A, and were lost. a picks side A unless a version is being typed
        (focus moves to the box after the keys already on their way)."""
        box = next(self.query("#typed-version").results(Input), None)
        versions = self.query_one("#policy-versions", OptionList)
        if (box is None or self.focused is not versions or not event.is_printable
                or event.character in (None, " ") or (event.key == "a" and not box.value)):
            return
        event.stop()
        event.prevent_default()
        box.focus()
        box.insert_text_at_cursor(event.character)

    def action_cancel(self) -> None:
        self.dismiss(None)
