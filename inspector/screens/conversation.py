"""A conversation as a tree: branches nested at their fork points, each branch's model runs
(subagent children grouped by subagent under the run that called them) and the assemblies
each run recorded. A compaction (a system message with speaker ``compact_boundary``, as the
transcript adapters write it) is a marker among the runs, where it happened."""

from __future__ import annotations

import re
from typing import Any, Mapping

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static, Tree
from textual.widgets.tree import TreeNode

from ingest.errors import ContextlensError
from ingest.timefmt import table_time
from readmodel.conversation_tree import ConversationNode, conversation_tree, subagent_of
from readmodel.conversation_tree import ordered as _ordered  # noqa: F401 - tests ask for it
from readmodel.ids import NO_AFFIXES, store_id_affixes
from readmodel.times import recorded_time

from ..lens_app import lens_app
from ..widgets.id_text import IdText
from ..widgets.safe import one_line, readable_line, safe_text

PREVIEW_WIDTH = 48  # a request's last user message or tool result, on its line
ID_WIDTH = 120  # ids longer than this are cut with … (they are still whole in the data)
_COMPACTION_NO = re.compile(r"compaction #(\d+)")
_PRE_TOKENS = re.compile(r"preTokens (\d+)")
_TRIGGER = re.compile(r"trigger ([A-Za-z_]+)")

STATUS_STYLE = {
    "succeeded": "green",
    "failed": "bold red",
    "timed_out": "red",
    "cancelled": "yellow",
    "running": "cyan",
}


class ConversationLoaded(Message):
    def __init__(
        self,
        conversation: dict[str, Any] | None,
        branches: list[dict[str, Any]],
        runs: list[dict[str, Any]],
        assemblies: list[dict[str, Any]],
        compactions: list[dict[str, Any]] | None = None,
        participants: dict[str, dict[str, Any]] | None = None,
        requests: dict[str, dict[str, Any]] | None = None,
        affixes: tuple[str, str] = NO_AFFIXES,
        ids: IdText | None = None,
    ) -> None:
        super().__init__()
        self.affixes = affixes  # the store's id affixes (readmodel.ids)
        # how ids are displayed (masked unless revealed), judged by the worker
        self.ids = ids if ids is not None else IdText(False, affixes)
        self.conversation = conversation
        self.branches = branches
        self.runs = runs
        self.assemblies = assemblies
        self.compactions = compactions or []  # compact_boundary messages, oldest first
        self.participants = participants or {}  # participant_id -> label, kind
        # assembly_id -> assembled_tokens, tool_calls, preview (ReadModel.conversation_requests)
        self.requests = requests or {}


class ConversationFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def _count(n: int, noun: str) -> str:
    plural = {"branch": "branches", "assembly": "assemblies"}.get(noun, noun + "s")
    return f"{n} {noun if n == 1 else plural}"


def compaction_label(message: dict[str, Any], ordinal: int) -> Text:
    """``⟂ compaction #k (preTokens n, trigger t)`` from a compaction marker message.

    Only numbers and a word are read out of its (untrusted) content; anything else in it
    is never shown here."""
    content = str(message.get("content") or "")
    number = _COMPACTION_NO.search(content)
    pre = _PRE_TOKENS.search(content)
    trigger = _TRIGGER.search(content)
    label = Text("⟂ compaction ", style="bold yellow")
    label.append(f"#{int(number.group(1)) if number else ordinal}", style="bold yellow")
    facts = []
    if pre:
        facts.append(f"preTokens {int(pre.group(1)):,}")
    if trigger:
        facts.append(f"trigger {trigger.group(1)}")
    if facts:
        label.append(f" ({', '.join(facts)})", style="yellow")
    label.append("  earlier records are omitted from later requests (compacted)", style="dim")
    when = message.get("created_at")
    if when is not None:
        label.append(f"  {safe_text(table_time(when))}", style="dim")
    return label


def _assembly_label(a: Mapping[str, Any], message: ConversationLoaded) -> Text:
    ids = message.ids
    label = Text()
    label.append("◆ assembly ", style="magenta")
    label.append(ids(a["assembly_id"], ID_WIDTH, assembly=True), style="bold")
    req = message.requests.get(a["assembly_id"], {})
    if req.get("assembled_tokens") is not None:
        label.append(f"  {int(req['assembled_tokens']):,} tok", style="bold")
    if req.get("tool_calls"):
        label.append(f"  {_count(int(req['tool_calls']), 'tool call')}")
    if req.get("preview"):  # what the request answers, before when and how
        label.append(f"  “{readable_line(req['preview'], PREVIEW_WIDTH)}”", style="italic")
    label.append(f"  policy {ids(a.get('policy_version'), 40)}")
    if a.get("scenario"):
        label.append(f"  {ids(a['scenario'], 60)}", style="cyan")
    when = recorded_time(a)  # None: the log records no time (never a made-up one)
    if when is not None:
        label.append(f"  {safe_text(table_time(when))}", style="dim")
    return label


def _run_label(item: ConversationNode, message: ConversationLoaded,
               one_participant: bool) -> Text:
    ids = message.ids
    run = item.row
    participant_id = run.get("participant_id")
    subagent = subagent_of(participant_id, message.participants.get(participant_id))
    label = Text()
    label.append("run ", style="blue")
    label.append(ids(run["model_run_id"], ID_WIDTH), style="bold")
    label.append(f"  {safe_text(run.get('runtime_kind'))}")
    if subagent is None:
        if not one_participant:
            label.append(f"  {ids(participant_id, ID_WIDTH)}", style="cyan")
    else:
        label.append(f"  subagent {ids(subagent[0], ID_WIDTH)}", style="cyan")
    status = safe_text(run.get("status"))
    label.append(f"  {status}", style=STATUS_STYLE.get(status, ""))
    label.append(f"  {ids(run.get('provider'), 40)}/{ids(run.get('model'), 60)}", style="dim")
    return label


def _subagent_label(item: ConversationNode, message: ConversationLoaded,
                    _one_participant: bool) -> Text:
    """``↳ subagent`` heading the runs of one subagent under the run that called it."""
    ids = message.ids
    label = Text("↳ subagent ", style="bold magenta")
    label.append(ids(item.agent, ID_WIDTH), style="bold magenta")
    if item.description:
        label.append(f"  {one_line(ids.masked(item.description), 60)}")
    label.append(f"  {_count(len(item.children), 'run')}", style="dim")
    if item.agent != item.id:
        label.append(f"  participant {ids(item.id, ID_WIDTH)}", style="dim")
    return label


def _branch_label(item: ConversationNode, message: ConversationLoaded,
                  _one_participant: bool) -> Text:
    ids = message.ids
    branch = item.row
    label = Text()
    label.append("branch ", style="green")
    label.append(ids(branch["branch_id"], ID_WIDTH), style="bold")
    if branch.get("name"):
        label.append(f"  “{one_line(ids.masked(branch['name']), 40)}”")
    if branch.get("parent_branch_id"):
        fork = branch.get("fork_message_id")
        label.append(
            f"  forked from {ids(branch['parent_branch_id'], ID_WIDTH)}"
            + (f" at {ids(fork, ID_WIDTH)}" if fork else ""),
            style="dim",
        )
    return label


_LABELS = {"branch": _branch_label, "run": _run_label, "subagent": _subagent_label}


def _shown_ids(view: Any) -> list[Any]:
    """Every id (and name) the screen shows of a conversation view: judged by the worker."""
    values: list[Any] = [view.conversation_id, (view.conversation or {}).get("owner_id")]
    for b in view.branches:
        values += [b.get("branch_id"), b.get("name"), b.get("parent_branch_id"),
                   b.get("fork_message_id")]
    for r in view.runs:
        values += [r.get("model_run_id"), r.get("participant_id"), r.get("provider"),
                   r.get("model")]
    for a in view.assemblies:
        values += [a.get("assembly_id"), a.get("policy_version"), a.get("scenario")]
    return [v for v in values if v is not None]


class ConversationScreen(Screen[None]):
    """Branches, runs and assemblies of one conversation; Enter opens an assembly."""

    BINDINGS = [
        Binding("enter", "open", "Open assembly"),
        Binding("x", "toggle_runs", "Collapse/expand runs"),
        Binding("escape", "back", "Back"),
        # the cursor moves a page (the tree's own keys would scroll the view, not the cursor)
        Binding("pagedown", "page(1)", "Page down", show=False, priority=True),
        Binding("pageup", "page(-1)", "Page up", show=False, priority=True),
        Binding("home", "edge(0)", "First line", show=False, priority=True),
        Binding("end", "edge(1)", "Last line", show=False, priority=True),
    ]

    def __init__(self, conversation_id: str, focus_assembly: str | None = None) -> None:
        super().__init__()
        self.conversation_id = conversation_id
        self.focus_assembly = focus_assembly
        self._expanded = True
        # True until the tree is built and the cursor placed: a fold asked for meanwhile
        # waits for it (see _toggle_runs).
        self._focus_pending = True

    def compose(self) -> ComposeResult:
        yield Header()
        shown = IdText(bool(lens_app(self).reveal))(self.conversation_id, ID_WIDTH)
        yield Static(f"conversation {shown} · loading…", id="conversation-header", markup=False)
        tree: Tree[dict[str, Any]] = Tree(Text(shown), id="conversation-tree")
        yield tree
        yield Footer()

    def on_mount(self) -> None:
        self.load_conversation()

    @work(thread=True, exclusive=True, group="conversation")
    def load_conversation(self) -> None:
        answers = lens_app(self).answers()
        reveal = bool(lens_app(self).reveal)
        try:
            view = answers.conversation(self.conversation_id, reveal=reveal)
            requests = answers.conversation_requests(self.conversation_id, reveal=reveal)
            affixes = store_id_affixes(answers)
        except ContextlensError as err:
            self.post_message(ConversationFailed(str(err)))
            return
        by_id = {r["assembly_id"]: r for r in requests.to_pylist()}
        ids = IdText(reveal, affixes).warm(_shown_ids(view))
        self.post_message(ConversationLoaded(
            dict(view.conversation) if view.conversation is not None else None,
            [dict(b) for b in view.branches], [dict(r) for r in view.runs],
            [dict(a) for a in view.assemblies], [dict(c) for c in view.compactions],
            {k: dict(v) for k, v in view.participants.items()}, by_id, affixes, ids,
        ))

    def on_conversation_failed(self, message: ConversationFailed) -> None:
        self._focus_pending = False
        error = IdText(bool(lens_app(self).reveal)).prose(message.error)
        self.query_one("#conversation-header", Static).update(Text(error, style="bold red"))

    def on_conversation_loaded(self, message: ConversationLoaded) -> None:
        conv = message.conversation or {}
        ids = message.ids
        header = Text()
        header.append(f"conversation {ids(self.conversation_id, ID_WIDTH)}", style="bold")
        if conv.get("title"):
            header.append(f"  “{readable_line(conv['title'], 80)}”")
        if conv.get("owner_id"):
            header.append(f"  ·  owner {ids(conv['owner_id'], ID_WIDTH)}", style="dim")
        header.append(
            "  ·  " + ", ".join(
                _count(len(items), noun)
                for items, noun in (
                    (message.branches, "branch"), (message.runs, "run"),
                    (message.assemblies, "assembly"),
                )
            )
        )
        participants = {r.get("participant_id") for r in message.runs}
        if len(message.runs) > 1 and len(participants) == 1:
            header.append(f"  ·  every run by {ids(participants.pop(), ID_WIDTH)}", style="dim")
        note = ids.affixes_note()
        if note is not None:
            # as the request list: what the ids shown leave out, so one can be typed whole
            header.append(f"  ·  {note}", style="dim")
        self.query_one("#conversation-header", Static).update(header)
        self._build_tree(message)

    def _build_tree(self, message: ConversationLoaded) -> None:
        tree = self.query_one("#conversation-tree", Tree)
        tree.clear()
        conv = message.conversation or {}
        # the id segments every id of the store shares (readmodel.ids: as the request list
        # shows ids), and a participant every run has, are said once in the header rather
        # than on every line
        participants = {r.get("participant_id") for r in message.runs}
        one_participant = len(message.runs) > 1 and len(participants) == 1

        ids = message.ids  # every id shown through it: masked unless revealed, short

        root_label = Text(f"conversation {ids(self.conversation_id, ID_WIDTH)}", style="bold")
        if conv.get("title"):
            root_label.append(f"  {readable_line(conv['title'], 60)}", style="dim")
        tree.root.set_label(root_label)
        tree.root.data = {"type": "conversation"}

        focus_node: TreeNode[dict[str, Any]] | None = None

        def add(node: TreeNode[dict[str, Any]], item: ConversationNode) -> None:
            """``item`` and everything under it, as lines under ``node``."""
            nonlocal focus_node
            data = {"type": item.kind, "id": item.id}
            if item.kind == "compaction":
                node.add_leaf(compaction_label(dict(item.row), item.ordinal), data=data)
            elif item.kind == "assembly":
                leaf = node.add_leaf(_assembly_label(item.row, message), data=data)
                if item.id == self.focus_assembly:
                    focus_node = leaf
            else:
                label = _LABELS[item.kind](item, message, one_participant)
                added = node.add(label, data=data, expand=True)
                for child in item.children:
                    add(added, child)

        for branch in conversation_tree(message.branches, message.runs, message.assemblies,
                                        message.compactions, message.participants):
            add(tree.root, branch)
        tree.root.expand()
        tree.focus()
        if focus_node is not None:
            self.call_after_refresh(self._focus_node, focus_node)
        else:
            self._focus_pending = False

    def _focus_node(self, node: TreeNode[dict[str, Any]], tries: int = 0) -> None:
        """Put the cursor on ``node`` and scroll it into view, with a few lines of what
        precedes it (such as a compaction marker). The tree's height is only known once its
        lines are laid out, so the scroll waits for the next refresh."""
        tree = self.query_one("#conversation-tree", Tree)
        # Reading last_line makes the tree lay its lines out now (it otherwise waits for an
        # idle moment), so the node has its line and the cursor lands on it.
        if tree.last_line >= 0 and node.line < 0 and tries < 10:
            self.call_after_refresh(self._focus_node, node, tries + 1)
            return
        tree.move_cursor(node, animate=False)

        def scroll() -> None:
            line = node.line
            if line >= 0:
                tree.scroll_to(y=max(line - tree.scrollable_content_region.height // 2, 0),
                               animate=False)
            self._focus_pending = False

        self.call_after_refresh(scroll)

    # ------------------------------------------------------------------ events and actions

    @on(Tree.NodeSelected, "#conversation-tree")
    def node_selected(self, event: Tree.NodeSelected) -> None:
        data = event.node.data or {}
        if data.get("type") == "assembly":
            lens_app(self).open_assembly(data["id"])

    def action_open(self) -> None:
        tree = self.query_one("#conversation-tree", Tree)
        node = tree.cursor_node
        if node is not None and (node.data or {}).get("type") == "assembly":
            lens_app(self).open_assembly(node.data["id"])  # type: ignore[index]

    def action_toggle_runs(self) -> None:
        """Fold every run (leaving the branch outline), or unfold everything."""
        self._toggle_runs()

    def _toggle_runs(self) -> None:
        if self._focus_pending:
            # The cursor is still being placed on the request the screen was opened for:
            # fold after that, so the outcome never depends on which the loop reaches first.
            self.call_after_refresh(self._toggle_runs)
            return
        tree = self.query_one("#conversation-tree", Tree)
        self._expanded = not self._expanded
        if self._expanded:
            tree.root.expand_all()
            return
        # the cursor moves to the outermost folded run above it, so it stays visible
        cursor = tree.cursor_node
        outermost_run = None
        node = cursor
        while node is not None:
            if (node.data or {}).get("type") == "run":
                outermost_run = node
            node = node.parent
        pending = list(tree.root.children)
        while pending:
            node = pending.pop()
            if (node.data or {}).get("type") == "run":
                node.collapse()
            else:
                node.expand()
                pending.extend(node.children)
        if outermost_run is not None:
            # Centre the folded run the same way a focused node is, whatever scroll is
            # still pending from opening the screen: the result does not depend on timing.
            target = outermost_run
            self.call_after_refresh(self._focus_node, target)

    def action_page(self, direction: int) -> None:
        tree = self.query_one("#conversation-tree", Tree)
        page = max(tree.scrollable_content_region.height - 1, 1)
        tree.cursor_line = min(max(tree.cursor_line + direction * page, 0), tree.last_line)

    def action_edge(self, end: int) -> None:
        tree = self.query_one("#conversation-tree", Tree)
        tree.cursor_line = tree.last_line if end else 0

    def action_back(self) -> None:
        self.app.pop_screen()
