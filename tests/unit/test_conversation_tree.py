"""The conversation's graph is shaped into its tree by the read model, as plain data (the
conversation screen only formats the nodes)."""

from __future__ import annotations

from readmodel.conversation_tree import ConversationNode, conversation_tree


def _shape(node: ConversationNode) -> tuple:
    return (node.kind, node.id, tuple(_shape(c) for c in node.children))


def test_branches_runs_subagents_compactions_and_assemblies_nest_where_they_happened() -> None:
    branches = [
        {"branch_id": "fork", "created_at": "t2", "parent_branch_id": "main"},
        {"branch_id": "main", "created_at": "t1", "parent_branch_id": None},
    ]
    runs = [
        {"model_run_id": "r10", "branch_id": "main", "started_at": "t5", "participant_id": "me"},
        {"model_run_id": "r2", "branch_id": "main", "started_at": "t3", "participant_id": "me"},
        {"model_run_id": "sub1", "branch_id": "main", "started_at": "t4",
         "participant_id": "s:subagent:a7", "parent_model_run_id": "r2"},
        {"model_run_id": "tool", "branch_id": "main", "started_at": "t4",
         "participant_id": "helper", "parent_model_run_id": "r2"},
    ]
    assemblies = [
        {"assembly_id": "a2", "model_run_id": "r2", "branch_id": "main", "assembled_at": "t3"},
        {"assembly_id": "a-lost", "model_run_id": "gone", "branch_id": "fork",
         "assembled_at": "t6"},
    ]
    compactions = [{"message_id": "c1", "branch_id": "main", "created_at": "t4"}]
    participants = {"s:subagent:a7": {"kind": "subagent", "label": "subagent look it up (a7)"}}

    tree = conversation_tree(branches, runs, assemblies, compactions, participants)

    assert [_shape(b) for b in tree] == [
        ("branch", "main", (
            ("run", "r2", (
                ("assembly", "a2", ()),
                ("subagent", "s:subagent:a7", (("run", "sub1", ()),)),
                ("run", "tool", ()),
            )),
            ("compaction", "c1", ()),  # before the first run started after it
            ("run", "r10", ()),
            ("branch", "fork", (("assembly", "a-lost", ()),)),  # its run is missing
        )),
    ]
    group = tree[0].children[0].children[1]
    assert (group.agent, group.description) == ("a7", "look it up")
    assert tree[0].children[1].ordinal == 1
