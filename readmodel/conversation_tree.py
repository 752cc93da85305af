"""A conversation's graph shaped into the tree the conversation screen shows, as plain data:
branches nested at their fork points, each branch's model runs in order (subagent child runs
grouped by subagent under the run that called them), the assemblies each run recorded, and a
compaction marker before the first run started after it. The screen only formats the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .ids import natural_key

__all__ = ["ConversationNode", "conversation_tree", "ordered", "subagent_of"]


@dataclass(frozen=True)
class ConversationNode:
    """One line of the conversation tree. ``kind``: branch, run, subagent (a group of one
    subagent's runs), compaction or assembly; ``row``: the branch, run, compaction message
    or assembly row it stands for (empty for a subagent group)."""

    kind: str
    id: str
    row: Mapping[str, Any] = field(default_factory=dict)
    children: tuple["ConversationNode", ...] = ()
    ordinal: int = 0  # a compaction: its place among the conversation's compactions (from 1)
    agent: str = ""  # a subagent group: the agent id and its description
    description: str = ""


def subagent_of(participant_id: str | None, participant: Mapping[str, Any] | None
                ) -> tuple[str, str] | None:
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


def ordered(rows: list[Mapping[str, Any]], when: str, id_key: str) -> list[Mapping[str, Any]]:
    """``rows`` by time, then by id in natural order (r25 before r100)."""
    return sorted(rows, key=lambda r: ("" if r.get(when) is None else str(r.get(when)),
                                       natural_key("" if r.get(id_key) is None else str(r[id_key]))))


class _Shaper:
    """The conversation's rows indexed once: branches by parent, runs by branch and by
    parent run, assemblies by run (or by branch when their run is missing), compactions by
    branch."""

    def __init__(self, branches: list[Mapping[str, Any]], runs: list[Mapping[str, Any]],
                 assemblies: list[Mapping[str, Any]], compactions: list[Mapping[str, Any]],
                 participants: Mapping[str, Mapping[str, Any]]) -> None:
        self.participants = participants
        branches = ordered(branches, "created_at", "branch_id")
        branch_ids = {b["branch_id"] for b in branches}
        self.children: dict[str | None, list[Mapping[str, Any]]] = {}
        for b in branches:
            parent = b.get("parent_branch_id")
            self.children.setdefault(parent if parent in branch_ids else None, []).append(b)

        runs = ordered(runs, "started_at", "model_run_id")
        run_ids = {r["model_run_id"] for r in runs}
        self.runs_by_branch: dict[str, list[Mapping[str, Any]]] = {}
        self.child_runs: dict[str, list[Mapping[str, Any]]] = {}
        for r in runs:
            parent = r.get("parent_model_run_id")
            if parent and parent in run_ids:
                self.child_runs.setdefault(parent, []).append(r)
            else:
                self.runs_by_branch.setdefault(r["branch_id"], []).append(r)
        self.assemblies_by_run: dict[str, list[Mapping[str, Any]]] = {}
        for a in ordered(assemblies, "assembled_at", "assembly_id"):
            self.assemblies_by_run.setdefault(a["model_run_id"], []).append(a)
        # assemblies whose run is missing still appear, under their branch
        self.orphan_assemblies: dict[str, list[Mapping[str, Any]]] = {}
        for run_id, items in self.assemblies_by_run.items():
            if run_id not in run_ids:
                for a in items:
                    self.orphan_assemblies.setdefault(a["branch_id"], []).append(a)

        self.compactions_by_branch: dict[str, list[Mapping[str, Any]]] = {}
        self.ordinal = {m["message_id"]: k for k, m in enumerate(compactions, 1)}
        for m in compactions:
            self.compactions_by_branch.setdefault(m["branch_id"], []).append(m)

    def compaction(self, m: Mapping[str, Any]) -> ConversationNode:
        return ConversationNode("compaction", m["message_id"], m,
                                ordinal=self.ordinal[m["message_id"]])

    @staticmethod
    def assemblies(items: list[Mapping[str, Any]]) -> list[ConversationNode]:
        return [ConversationNode("assembly", a["assembly_id"], a) for a in items]

    def run(self, run: Mapping[str, Any]) -> ConversationNode:
        run_id = run["model_run_id"]
        return ConversationNode("run", run_id, run, tuple(
            self.assemblies(self.assemblies_by_run.get(run_id, []))
            + self.child_groups(self.child_runs.get(run_id, []))))

    def child_groups(self, runs: list[Mapping[str, Any]]) -> list[ConversationNode]:
        """Child runs under their parent: one group per subagent (in order of its first
        run), then any other child run."""
        groups: dict[str, list[Mapping[str, Any]]] = {}
        others: list[Mapping[str, Any]] = []
        for child in runs:
            pid = child.get("participant_id")
            if subagent_of(pid, self.participants.get(pid)) is not None:
                groups.setdefault(str(pid), []).append(child)
            else:
                others.append(child)
        out = []
        for pid, members in groups.items():
            agent, desc = subagent_of(pid, self.participants.get(pid)) or (pid, "")
            out.append(ConversationNode("subagent", pid, {}, tuple(self.run(c) for c in members),
                                        agent=agent, description=desc))
        return out + [self.run(c) for c in others]

    def branch(self, branch: Mapping[str, Any]) -> ConversationNode:
        branch_id = branch["branch_id"]
        items: list[ConversationNode] = []
        markers = list(self.compactions_by_branch.get(branch_id, []))
        for run in self.runs_by_branch.get(branch_id, []):
            # a compaction goes before the first run started after it
            while markers and _before(markers[0]["created_at"], run.get("started_at")):
                items.append(self.compaction(markers.pop(0)))
            items.append(self.run(run))
        items += [self.compaction(m) for m in markers]
        items += self.assemblies(self.orphan_assemblies.get(branch_id, []))
        items += [self.branch(child) for child in self.children.get(branch_id, [])]
        return ConversationNode("branch", branch_id, branch, tuple(items))


def conversation_tree(branches: list[Mapping[str, Any]], runs: list[Mapping[str, Any]],
                      assemblies: list[Mapping[str, Any]],
                      compactions: list[Mapping[str, Any]] | None = None,
                      participants: Mapping[str, Mapping[str, Any]] | None = None,
                      ) -> list[ConversationNode]:
    """The conversation's top-level branches, each with everything under it (the rows of a
    ``ConversationView``: branches, runs, assemblies, compactions oldest first, and
    participant_id -> label, kind)."""
    shaper = _Shaper(branches, runs, assemblies, compactions or [], participants or {})
    return [shaper.branch(b) for b in shaper.children.get(None, [])]
