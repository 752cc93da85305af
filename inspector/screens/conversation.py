"""A conversation as a tree: branches nested at their fork points, each branch's model runs
(subagent children under their parent run) and the assemblies each run recorded."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static, Tree
from textual.widgets.tree import TreeNode

from ingest.errors import ContextlensError

from ..widgets.safe import one_line, safe_text

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
    ) -> None:
        super().__init__()
        self.conversation = conversation
        self.branches = branches
        self.runs = runs
        self.assemblies = assemblies


class ConversationFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def _count(n: int, noun: str) -> str:
    plural = {"branch": "branches", "assembly": "assemblies"}.get(noun, noun + "s")
    return f"{n} {noun if n == 1 else plural}"


def _ordered(rows: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: tuple("" if r.get(k) is None else str(r.get(k)) for k in keys))


class ConversationScreen(Screen[None]):
    """Branches, runs and assemblies of one conversation; Enter opens an assembly."""

    BINDINGS = [
        Binding("enter", "open", "Open assembly"),
        Binding("x", "toggle_runs", "Collapse/expand runs"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, conversation_id: str, focus_assembly: str | None = None) -> None:
        super().__init__()
        self.conversation_id = conversation_id
        self.focus_assembly = focus_assembly
        self._expanded = True

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"conversation {safe_text(self.conversation_id)} · loading…", id="conversation-header", markup=False)
        tree: Tree[dict[str, Any]] = Tree(Text(safe_text(self.conversation_id)), id="conversation-tree")
        yield tree
        yield Footer()

    def on_mount(self) -> None:
        self.load_conversation()

    @work(thread=True, exclusive=True, group="conversation")
    def load_conversation(self) -> None:
        store = self.app.store()  # type: ignore[attr-defined]
        try:
            conversations = store.conversations()
            branches = store.branches(self.conversation_id).to_pylist()
            runs = store.model_runs(self.conversation_id).to_pylist()
            assemblies = store.assemblies_of_conversation(self.conversation_id).to_pylist()
        except ContextlensError as err:
            self.post_message(ConversationFailed(str(err)))
            return
        # one conversation: bounded by its own branches, runs and assemblies
        match = conversations.filter(pa.compute.equal(conversations["conversation_id"], self.conversation_id))
        conversation = match.to_pylist()[0] if match.num_rows else None
        self.post_message(ConversationLoaded(conversation, branches, runs, assemblies))

    def on_conversation_failed(self, message: ConversationFailed) -> None:
        self.query_one("#conversation-header", Static).update(Text(safe_text(message.error), style="bold red"))

    def on_conversation_loaded(self, message: ConversationLoaded) -> None:
        conv = message.conversation or {}
        header = Text()
        header.append(f"conversation {safe_text(self.conversation_id)}", style="bold")
        if conv.get("title"):
            header.append(f"  “{one_line(conv['title'], 80)}”")
        if conv.get("owner_id"):
            header.append(f"  ·  owner {safe_text(conv['owner_id'])}", style="dim")
        header.append(
            "  ·  " + ", ".join(
                _count(len(items), noun)
                for items, noun in (
                    (message.branches, "branch"), (message.runs, "run"),
                    (message.assemblies, "assembly"),
                )
            )
        )
        self.query_one("#conversation-header", Static).update(header)
        self._build_tree(message)

    def _build_tree(self, message: ConversationLoaded) -> None:
        tree = self.query_one("#conversation-tree", Tree)
        tree.clear()
        conv = message.conversation or {}
        root_label = Text(f"conversation {safe_text(self.conversation_id)}", style="bold")
        if conv.get("title"):
            root_label.append(f"  {one_line(conv['title'], 60)}", style="dim")
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

        focus_node: TreeNode[dict[str, Any]] | None = None

        def add_assemblies(node: TreeNode[dict[str, Any]], items: list[dict[str, Any]]) -> None:
            nonlocal focus_node
            for a in items:
                label = Text()
                label.append("◆ assembly ", style="magenta")
                label.append(safe_text(a["assembly_id"]), style="bold")
                label.append(f"  policy {safe_text(a.get('policy_version'))}")
                if a.get("scenario"):
                    label.append(f"  {safe_text(a['scenario'])}", style="cyan")
                when = a.get("assembled_at")
                if when is not None and hasattr(when, "strftime"):
                    label.append(f"  {when:%Y-%m-%d %H:%M}", style="dim")
                leaf = node.add_leaf(label, data={"type": "assembly", "id": a["assembly_id"]})
                if a["assembly_id"] == self.focus_assembly:
                    focus_node = leaf

        def add_run(node: TreeNode[dict[str, Any]], run: dict[str, Any]) -> None:
            label = Text()
            label.append("run ", style="blue")
            label.append(safe_text(run["model_run_id"]), style="bold")
            label.append(f"  {safe_text(run.get('runtime_kind'))}")
            label.append(f"  {safe_text(run.get('participant_id'))}", style="cyan")
            status = str(run.get("status") or "")
            label.append(f"  {status}", style=STATUS_STYLE.get(status, ""))
            label.append(f"  {safe_text(run.get('provider'))}/{safe_text(run.get('model'))}", style="dim")
            run_node = node.add(label, data={"type": "run", "id": run["model_run_id"]}, expand=True)
            add_assemblies(run_node, assemblies_by_run.get(run["model_run_id"], []))
            for child in child_runs.get(run["model_run_id"], []):
                add_run(run_node, child)

        def add_branch(node: TreeNode[dict[str, Any]], branch: dict[str, Any]) -> None:
            label = Text()
            label.append("branch ", style="green")
            label.append(safe_text(branch["branch_id"]), style="bold")
            if branch.get("name"):
                label.append(f"  “{one_line(branch['name'], 40)}”")
            if branch.get("parent_branch_id"):
                fork = branch.get("fork_message_id")
                label.append(
                    f"  forked from {safe_text(branch['parent_branch_id'])}"
                    + (f" at {safe_text(fork)}" if fork else ""),
                    style="dim",
                )
            branch_node = node.add(label, data={"type": "branch", "id": branch["branch_id"]}, expand=True)
            for run in runs_by_branch.get(branch["branch_id"], []):
                add_run(branch_node, run)
            add_assemblies(branch_node, orphan_assemblies.get(branch["branch_id"], []))
            for child in children.get(branch["branch_id"], []):
                add_branch(branch_node, child)

        for branch in children.get(None, []):
            add_branch(tree.root, branch)
        tree.root.expand()
        tree.focus()
        if focus_node is not None:
            target = focus_node
            self.call_after_refresh(lambda: tree.move_cursor(target, animate=False))

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
            target = outermost_run
            self.call_after_refresh(lambda: tree.move_cursor(target, animate=False))

    def action_back(self) -> None:
        self.app.pop_screen()
