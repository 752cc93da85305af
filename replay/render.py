"""The prompt as the model saw it, rebuilt from an assembly's included records.

Each included record becomes one ``PromptPart``: a header saying what it is and how it was
rendered, and the body the model received. Restricted privacy classes and secret-looking
values are masked unless the caller explicitly asks to reveal them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ingest.contract import RESTRICTED_PRIVACY
from ingest.errors import ContextlensError
from ingest.secrets import mask_text as mask_secrets  # credentials, whatever the privacy class


def masked_placeholder(privacy_class: str) -> str:
    return f"[masked: {privacy_class} content; reveal to show]"


def is_restricted(privacy_class: str | None) -> bool:
    return privacy_class in RESTRICTED_PRIVACY


def mask_value(text: str | None, privacy_class: str | None, reveal: bool) -> str:
    """What may be shown of ``text``: all of it when revealed, else masked as needed."""
    if text is None:
        return ""
    if reveal:
        return text
    if is_restricted(privacy_class):
        return masked_placeholder(str(privacy_class))
    return mask_secrets(text)


@dataclass(frozen=True)
class PromptPart:
    record_kind: str
    record_id: str
    position: int
    rendering: str
    tokens: int
    header: str
    body: str
    masked: bool


def _fmt_ts(value: Any) -> str:
    if value is None:
        return "unknown time"
    try:
        return value.strftime("%Y-%m-%d %H:%M UTC")
    except AttributeError:
        return str(value)


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
            f"[STALE: observed {_fmt_ts(row.get('observed_at'))}, stale since "
            f"{_fmt_ts(row.get('stale_after'))}; do not treat as current, revalidate with "
            f"{tools}] {content}"
        )
    if rendering == "revalidation_hint":
        tools = ", ".join(row.get("revalidation_tools") or []) or "the source tool"
        return f"[Revalidate with {tools} before relying on this] {content}"
    if rendering == "reference":
        return f"[reference to raw artifact {row['record_id']}, sha256 {str(row.get('sha256') or '')[:12]}…] {content}"
    if rendering == "summary":
        return f"[summary] {content}"
    if rendering == "rehydrated_raw" and raw is not None:
        return raw
    if row["record_kind"] == "tool_artifact" and row.get("error"):
        return f"{content}\nerror: {row['error']}"
    return content


def render_prompt(store: Any, assembly_id: str, reveal: bool = False) -> list[PromptPart]:
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
        privacy = row.get("privacy_class")
        shown = mask_value(body, privacy, reveal)
        parts.append(
            PromptPart(
                record_kind=row["record_kind"],
                record_id=row["record_id"],
                position=int(row["position"]) if row["position"] is not None else -1,
                rendering=row["rendering"] or "",
                tokens=int(row["tokens"] or 0),
                header=_header(row),
                body=shown,
                masked=shown != body,
            )
        )
    return parts


# Control characters (C0 but newline and tab, DEL, C1) and bidirectional overrides: log
# content must never steer the terminal or reorder what the reader sees.
_UNSAFE_CHARS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def _escape_char(m: re.Match[str]) -> str:
    ch = m.group()
    return "\\x%02x" % ord(ch) if ord(ch) < 0x100 else "\\u%04x" % ord(ch)


def visible_text(text: str | None) -> str:
    """``text`` with every control or bidi-override character shown as a visible escape
    (ESC becomes ``\\x1b``), so a terminal prints it literally and does not obey it."""
    if not text:
        return text or ""
    return _UNSAFE_CHARS.sub(_escape_char, text)
