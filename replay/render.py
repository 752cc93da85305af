"""The prompt as the model saw it, rebuilt from an assembly's included records.

Each included record becomes one ``PromptPart``: a header saying what it is and how it was
rendered, and the body the model received, with the record's privacy class. Parts are not
masked here: the read model (``readmodel.masking``) masks them before anyone sees them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ingest.contract import cleared_text
from ingest.errors import ContextlensError
from ingest.text import visible_text as _visible_text
from ingest.timefmt import sentence_time


@dataclass(frozen=True)
class PromptPart:
    record_kind: str
    record_id: str
    position: int
    rendering: str
    tokens: int
    header: str
    body: str
    privacy_class: str | None


def _header(row: dict[str, Any]) -> str:
    kind = row["record_kind"]
    rid = row["record_id"]
    rendering = row["rendering"]
    if kind == "message":
        who = row.get("role") or "message"
        if row.get("speaker_label"):
            who += f" ({row['speaker_label']})"
        return f"{who} · {rid}"
    if kind == "tool_call":
        return f"tool call {row.get('tool_name') or ''} [{row.get('status') or ''}] · {rid}"
    if kind == "tool_artifact":
        return f"tool result {row.get('tool_name') or ''} [{row.get('status') or ''}] · {rid} · {rendering}"
    if kind == "tool_memory":
        return f"memory · {rid} · {rendering}"
    if kind == "checkpoint":
        return f"checkpoint · {rid}"
    if kind == "skill_state":
        return f"skill state · {rid}"
    return f"{kind} · {rid}"


def _body(row: dict[str, Any], raw: str | None) -> str:
    rendering = row["rendering"]
    content = row.get("content") or ""
    if rendering == "stale_marker":
        tools = ", ".join(row.get("revalidation_tools") or []) or "its source tool"
        return (
            f"[STALE: observed {sentence_time(row.get('observed_at'))}, stale since "
            f"{_stale_since(row)}; do not treat as current, revalidate with "
            f"{tools}] {content}"
        )
    if rendering == "revalidation_hint":
        tools = ", ".join(row.get("revalidation_tools") or []) or "the source tool"
        return f"[Revalidate with {tools} before relying on this] {content}"
    if rendering == "reference":
        return f"[reference to raw artifact {row['record_id']}, sha256 {str(row.get('sha256') or '')[:12]}…] {content}"
    if rendering == "summary":
        return f"[summary] {content}"
    if rendering == "cleared":
        return cleared_text(row.get("detail"))
    if rendering == "rehydrated_raw" and raw is not None:
        return raw
    if row["record_kind"] == "tool_artifact" and row.get("error"):
        return f"{content}\nerror: {row['error']}"
    return content


# the assembler's words for when a memory went stale under the policy that marked it
# (replay/assembler.py, step 7: "stale since <time> (<class>, <n>h window)")
_STALE_SINCE = re.compile(r"\bstale since (\d{4}-\d\d-\d\d \d\d:\d\d UTC)")


def _stale_since(row: dict[str, Any]) -> str:
    """When the marked memory went stale: as the decision that marked it says (the policy's
    freshness window, which a replay under another version moves), else the memory's own
    ``stale_after``."""
    found = _STALE_SINCE.search(row.get("detail") or "")
    return found.group(1) if found else sentence_time(row.get("stale_after"))


def body_as(row: dict[str, Any], rendering: str) -> str:
    """The body a ``prompt_records`` row would give the model under ``rendering`` (a raw
    rehydration is not read: its stored preview stands in)."""
    return _body({**row, "rendering": rendering}, None)


def render_prompt(store: Any, assembly_id: str) -> list[PromptPart]:
    """The included records of ``assembly_id`` in prompt order, as the model received them.

    ``store`` is an ``ingest.store.Store``. Raw bodies of rehydrated artifacts are read from
    the export's blobs (confined to its root and checked against their sha256).
    """
    table = store.prompt_records(assembly_id)
    parts: list[PromptPart] = []
    for row in table.to_pylist():  # one assembly: bounded by its included records
        raw = None
        if row["rendering"] == "rehydrated_raw" and row.get("storage_ref"):
            try:
                raw = store.read_blob(assembly_id, row["storage_ref"], row["sha256"]).decode(
                    "utf-8", errors="replace"
                )
            except ContextlensError as err:
                raw = f"[raw body unavailable: {err}]"
        body = _body(row, raw)
        parts.append(
            PromptPart(
                record_kind=row["record_kind"],
                record_id=row["record_id"],
                position=int(row["position"]) if row["position"] is not None else -1,
                rendering=row["rendering"] or "",
                tokens=int(row["tokens"] or 0),
                header=_header(row),
                body=body,
                privacy_class=row.get("privacy_class"),
            )
        )
    return parts


# the unsafe-character rule lives in ingest.text; kept importable from here
visible_text = _visible_text
