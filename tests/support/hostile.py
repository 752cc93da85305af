"""A hostile store: one export whose every text field carries Rich and Textual markup, ANSI
and OSC 8 sequences, C0/C1 controls, bidi overrides and 100,000-character lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .stores import make_export, rename_values

MARKUP = "[bold red]MARKUP[/]"
LINK_MARKUP = "[link=http://evil.example]LINKED[/link]"
TEXTUAL_MARKUP = "[@click=app.quit]CLICK[/] $accent [b]B[/b]"
CSI = "\x1b[31mRED\x1b[0m"
CLEAR = "\x1b[2J\x1b[H"
OSC8 = "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"
CONTROLS = "\x07\x08\x0b\x0c\x7f\x85\x9b"
BIDI = "\u202egnp.exe\u2066x\u2067y\u2068z\u2069"
HOSTILE = MARKUP + LINK_MARKUP + TEXTUAL_MARKUP + CSI + CLEAR + OSC8 + CONTROLS + BIDI
LONG = "L" * 100_000  # one line, no newline

# what must appear on screen for HOSTILE-derived text, at the least
VISIBLE = ("[bold red]MARKUP[/]", "\\x1b[31mRED", "\\x1b[2J", "\\u202e")
# raw characters that must never reach the terminal from content
RAW = ("\x1b", "\x07", "\x9b", "\x85", "\u202e", "\u2066", "\u2069")


def hid(name: str) -> str:
    """A hostile identifier: the plain name followed by every hostile sequence."""
    return f"{name}{HOSTILE}"


# the base export's ids, renamed everywhere they occur (keys and references)
RENAMED = {
    old: hid(old)
    for old in ("as1", "c1", "b1", "b2", "msg1", "msg2", "run1", "tc1", "a1", "m2", "m3",
                "p-model", "k1", "d1", "d2", "a-404")
}
AS1 = RENAMED["as1"]
LONG_ID = "as-long-" + "I" * 100_000  # an assembly id of 100,000 characters
MARKER_ID = "msg-compact" + HOSTILE
DB_NAME = "hostile[b]\x1b[31m\u202ename.duckdb"


def hostile_edit(rows: dict[str, list[dict[str, Any]]]) -> None:
    rename_values(rows, RENAMED)
    rows["conversations"][0]["title"] = "title " + HOSTILE + LONG
    rows["conversations"][1]["title"] = LONG
    for branch in rows["branches"]:
        branch["name"] = "branch " + HOSTILE
    rows["participants"][1]["label"] = "label " + HOSTILE
    for msg in rows["messages"]:
        msg["speaker_label"] = "speaker " + HOSTILE
    rows["messages"][0]["content"] = "content " + HOSTILE + "\n" + LONG + "\nend"
    rows["messages"][1]["content"] = LONG
    rows["tool_calls"][0]["tool_name"] = "tool " + HOSTILE
    rows["tool_calls"][0]["arguments_json"] = json.dumps({"q": HOSTILE}, ensure_ascii=False)
    for art in rows["tool_artifacts"]:
        art["tool_name"] = "tool " + HOSTILE
        art["result_preview"] = "preview " + HOSTILE + LONG
        art["error"] = "error " + HOSTILE if art["error"] else None
    for mem in rows["tool_memories"]:
        mem["summary"] = "summary " + HOSTILE + LONG
        mem["source_tool_names"] = ["tool " + HOSTILE]
    rows["checkpoints"][0]["state_json"] = '{"s": 1}'
    for a in rows["context_assemblies"]:
        a["tags"] = [*a["tags"], "tag " + HOSTILE, "long " + LONG]
    rows["context_assemblies"][0]["tags"][0] = "scenario:" + HOSTILE
    for r in rows["assembly_records"]:
        r["detail"] = "detail " + HOSTILE + LONG
    for d in rows["policy_decisions"]:
        d["detail"] = "decision " + HOSTILE + LONG
    # a compaction marker whose content is hostile (the adapters' speaker label)
    marker = dict(rows["messages"][1])
    marker.update(message_id=MARKER_ID, role="system", model_run_id=None,
                  speaker_label="compact_boundary", participant_id=None,
                  parent_message_id=None, content="[compaction #7 " + HOSTILE + LONG)
    rows["messages"].append(marker)
    # an assembly whose id is one 100,000-character line
    long_assembly = dict(rows["context_assemblies"][1])
    long_assembly.update(assembly_id=LONG_ID, tags=["long-id"], policy_version="v4")
    rows["context_assemblies"].append(long_assembly)
    rows["assembly_records"].append(
        {"assembly_id": LONG_ID, "record_kind": "message", "record_id": RENAMED["msg1"],
         "decision": "included", "rendering": "verbatim", "position": 0,
         "policy_family": "window", "reason_code": "in_window", "detail": LONG, "tokens": 12}
    )


def build_hostile_db(root: Path) -> Path:
    """The hostile export ingested into a store named ``DB_NAME`` (hostile too) under ``root``."""
    from ingest.store import ingest

    export = make_export(root / "export", edit=hostile_edit)
    db = root / DB_NAME
    ingest(export, db)
    return db
