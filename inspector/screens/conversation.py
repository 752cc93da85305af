"""A conversation as a tree: branches nested at their fork points, each branch's model runs
(subagent children grouped by subagent under the run that called them) and the assemblies
each run recorded. A compaction (a system message with speaker ``compact_boundary``, as the
transcript adapters write it) is a marker among the runs, where it happened."""

from __future__ import annotations

import re
from typing import Any

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
from readmodel.ids import NO_AFFIXES, natural_key, store_id_affixes
from readmodel.times import recorded_time

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


def subagent_of(participant_id: str | None, participant: dict[str, Any] | None) -> tuple[str, str] | None:
    """(agent id, description) of a subagent participant, None for any other participant.

    The transcript adapters name a subagent participant ``…:subagent:<agentId>`` and label
    it ``subagent <description> (<agentId>)``."""
    if participant is None or participant.get("kind") != "subagent":
        return None
    pid = str(participant_id or "")
    agent = pid.rsplit("subagent:", 1)[1] if "subagent:" in pid else pid
    desc = str(participant.get("label") or "")
    desc = desc.removeprefix("subagent ").removesuffix(f"({agent})").strip()
    return agent, desc


def _before(when: Any, started: Any) -> bool:
    """Whether a compaction at ``when`` happened before a run started at ``started``."""
    if when is None or started is None:
        return False
    try:
        return bool(when <= started)
    except TypeError:
        return str(when) <= str(started)


def _ordered(rows: list[dict[str, Any]], when: str, id_key: str) -> list[dict[str, Any]]:
    """``rows`` by time, then by id in natural order (r25 before r100)."""
    return sorted(rows, key=lambda r: ("" if r.get(when) is None else str(r.get(when)),
                                       natural_key("" if r.get(id_key) is None else str(r[id_key]))))


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
        shown = IdText(bool(self.app.reveal))(self.conversation_id, ID_WIDTH)  # type: ignore[attr-defined]
        yield Static(f"conversation {shown} · loading…", id="conversation-header", markup=False)
        tree: Tree[dict[str, Any]] = Tree(Text(shown), id="conversation-tree")
        yield tree
        yield Footer()

    def on_mount(self) -> None:
        self.load_conversation()

    @work(thread=True, exclusive=True, group="conversation")
    def load_conversation(self) -> None:
        answers = self.app.answers()  # type: ignore[attr-defined]
        reveal = bool(self.app.reveal)  # type: ignore[attr-defined]
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
        error = IdText(bool(self.app.reveal)).prose(message.error)  # type: ignore[attr-defined]
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

        def short(value: Any, assembly: bool = False) -> str:
            return ids(value, ID_WIDTH, assembly=assembly)

        root_label = Text(f"conversation {short(self.conversation_id)}", style="bold")
        if conv.get("title"):
            root_label.append(f"  {readable_line(conv['title'], 60)}", style="dim")
        tree.root.set_label(root_label)
        tree.root.data = {"type": "conversation"}

        branches = _ordered(message.branches, "created_at", "branch_id")
        branch_ids = {b["branch_id"] for b in branches}
        children: dict[str | None, list[dict[str, Any]]] = {}
        for b in branches:
            parent = b.get("parent_branch_id")
            children.setdefault(parent if parent in branch_ids else None, []).append(b)

        runs = _ordered(message.runs, "started_at", "model_run_id")
        run_ids = {r["model_run_id"] for r in runs}
        runs_by_branch: dict[str, list[dict[str, Any]]] = {}
        child_runs: dict[str, list[dict[str, Any]]] = {}
        for r in runs:
            parent = r.get("parent_model_run_id")
            if parent and parent in run_ids:
                child_runs.setdefault(parent, []).append(r)
            else:
                runs_by_branch.setdefault(r["branch_id"], []).append(r)
        assemblies_by_run: dict[str, list[dict[str, Any]]] = {}
        for a in _ordered(message.assemblies, "assembled_at", "assembly_id"):
            assemblies_by_run.setdefault(a["model_run_id"], []).append(a)
        # assemblies whose run is missing still appear, under their branch
        orphan_assemblies: dict[str, list[dict[str, Any]]] = {}
        for run_id, items in assemblies_by_run.items():
            if run_id not in run_ids:
                for a in items:
                    orphan_assemblies.setdefault(a["branch_id"], []).append(a)

        compactions_by_branch: dict[str, list[dict[str, Any]]] = {}
        ordinal = {m["message_id"]: k for k, m in enumerate(message.compactions, 1)}
        for m in message.compactions:
            compactions_by_branch.setdefault(m["branch_id"], []).append(m)

        def add_compaction(node: TreeNode[dict[str, Any]], m: dict[str, Any]) -> None:
            node.add_leaf(
                compaction_label(m, ordinal[m["message_id"]]),
                data={"type": "compaction", "id": m["message_id"]},
            )

        focus_node: TreeNode[dict[str, Any]] | None = None

        def add_assemblies(node: TreeNode[dict[str, Any]], items: list[dict[str, Any]]) -> None:
            nonlocal focus_node
            for a in items:
                label = Text()
                label.append("◆ assembly ", style="magenta")
                label.append(short(a["assembly_id"], assembly=True), style="bold")
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

                leaf = node.add_leaf(label, data={"type": "assembly", "id": a["assembly_id"]})
                if a["assembly_id"] == self.focus_assembly:
                    focus_node = leaf

        def add_run(node: TreeNode[dict[str, Any]], run: dict[str, Any]) -> None:
            participant_id = run.get("participant_id")
            subagent = subagent_of(participant_id, message.participants.get(participant_id))
            label = Text()
            label.append("run ", style="blue")
            label.append(short(run["model_run_id"]), style="bold")
            label.append(f"  {safe_text(run.get('runtime_kind'))}")
            if subagent is None:
                if not one_participant:
                    label.append(f"  {short(participant_id)}", style="cyan")
            else:
                label.append(f"  subagent {ids(subagent[0], ID_WIDTH)}", style="cyan")
            status = safe_text(run.get("status"))
            label.append(f"  {status}", style=STATUS_STYLE.get(status, ""))
            label.append(f"  {ids(run.get('provider'), 40)}/{ids(run.get('model'), 60)}", style="dim")
            run_node = node.add(label, data={"type": "run", "id": run["model_run_id"]}, expand=True)
            add_assemblies(run_node, assemblies_by_run.get(run["model_run_id"], []))
            add_children(run_node, child_runs.get(run["model_run_id"], []))

        def add_children(node: TreeNode[dict[str, Any]], runs: list[dict[str, Any]]) -> None:
            """Child runs under their parent: one group per subagent (↳) (in order of its first
            run), then any other child run."""
            groups: dict[str, list[dict[str, Any]]] = {}
            others: list[dict[str, Any]] = []
            for child in runs:
                pid = child.get("participant_id")
                if subagent_of(pid, message.participants.get(pid)) is not None:
                    groups.setdefault(str(pid), []).append(child)
                else:
                    others.append(child)
            for pid, members in groups.items():
                agent, desc = subagent_of(pid, message.participants.get(pid)) or (pid, "")
                label = Text("↳ subagent ", style="bold magenta")
                label.append(ids(agent, ID_WIDTH), style="bold magenta")
                if desc:
                    label.append(f"  {one_line(ids.masked(desc), 60)}")
                label.append(f"  {_count(len(members), 'run')}", style="dim")
                if agent != pid:
                    label.append(f"  participant {ids(pid, ID_WIDTH)}", style="dim")
                group = node.add(label, data={"type": "subagent", "id": pid}, expand=True)
                for child in members:
                    add_run(group, child)
            for child in others:
                add_run(node, child)

        def add_branch(node: TreeNode[dict[str, Any]], branch: dict[str, Any]) -> None:
            label = Text()
            label.append("branch ", style="green")
            label.append(short(branch["branch_id"]), style="bold")
            if branch.get("name"):
                label.append(f"  “{one_line(ids.masked(branch['name']), 40)}”")
            if branch.get("parent_branch_id"):
                fork = branch.get("fork_message_id")
                label.append(
                    f"  forked from {short(branch['parent_branch_id'])}"
                    + (f" at {short(fork)}" if fork else ""),
                    style="dim",
                )
            branch_node = node.add(label, data={"type": "branch", "id": branch["branch_id"]}, expand=True)
            markers = list(compactions_by_branch.get(branch["branch_id"], []))
            for run in runs_by_branch.get(branch["branch_id"], []):
                # a compaction goes before the first run started after it
                while markers and _before(markers[0]["created_at"], run.get("started_at")):
                    add_compaction(branch_node, markers.pop(0))
                add_run(branch_node, run)
            for marker in markers:
                add_compaction(branch_node, marker)
            add_assemblies(branch_node, orphan_assemblies.get(branch["branch_id"], []))
            for child in children.get(branch["branch_id"], []):
                add_branch(branch_node, child)

        for branch in children.get(None, []):
            add_branch(tree.root, branch)
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
            self.app.open_assembly(data["id"])  # type: ignore[attr-defined]

    def action_open(self) -> None:
        tree = self.query_one("#conversation-tree", Tree)
        node = tree.cursor_node
        if node is not None and (node.data or {}).get("type") == "assembly":
            self.app.open_assembly(node.data["id"])  # type: ignore[attr-defined,index]

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
