"""The Omitted tab: records left out of a prompt, grouped under their reason."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Tree

from .safe import one_line, readable_line, safe_text


class OmittedTree(Tree[dict[str, Any]]):
    """One group per reason (its records, tokens, stage and a shared detail), one leaf per
    record; a leaf's data is ``{"kind", "id"}``, a group's ``{"reason"}``."""

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(Text("omitted records"), id=id)
        self.show_root = False

    def show_groups(self, rows: list[dict[str, Any]]) -> None:
        """Fill the tree from omitted rows ordered by reason, kind and id, and put the
        cursor on the first record (which highlights it)."""
        self.clear()
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            groups.setdefault(row["reason_code"], []).append(row)
        first_leaf = None
        if not groups:
            self.root.add_leaf(Text("No record was omitted.", style="dim"))
        for reason, members in groups.items():
            group = self.root.add(_group_label(reason, members), data={"reason": reason},
                                  expand=True)
            for m in members:
                node = group.add_leaf(_leaf_label(m),
                                      data={"kind": m["record_kind"], "id": m["record_id"]})
                first_leaf = first_leaf or node
        self.root.expand()
        if first_leaf is not None:
            # Reading last_line lays the lines out now (it otherwise waits for an idle
            # moment), so the leaf has its line and the cursor lands on it.
            _ = self.last_line
            self.move_cursor(first_leaf)


def _group_label(reason: str, members: list[dict[str, Any]]) -> Text:
    tokens = sum(int(m["tokens"] or 0) for m in members)
    label = Text()
    label.append(safe_text(reason), style="bold yellow")
    label.append(f"  {len(members)} record{'s' if len(members) != 1 else ''}")
    label.append(f" · {tokens:,} tok · {safe_text(members[0]['policy_family'])} stage", style="dim")
    details = {m.get("detail") or "" for m in members}
    if len(members) > 1 and len(details) == 1 and next(iter(details)):
        # one shared reason, e.g. "dropped by compaction #1 at … (preTokens …)"
        label.append(f" · {readable_line(next(iter(details)), 100)}", style="dim")
    return label


def _leaf_label(m: dict[str, Any]) -> Text:
    leaf = Text()
    leaf.append(f"{safe_text(m['record_kind']):<14}", style="cyan")
    leaf.append(f"{one_line(m.get('shown_id', m['record_id']), 120):<12} ", style="bold")
    leaf.append(f"{int(m['tokens'] or 0):>6} tok  ", style="dim")
    leaf.append(readable_line(m["label"], 80))
    return leaf
