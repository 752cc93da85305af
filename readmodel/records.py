"""What a record carries, by kind: the text a model would read of it."""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["record_content"]


def record_content(kind: str, record: Mapping[str, Any] | None) -> str:
    """The record's own text (unmasked: the read model masks it)."""
    if not record:
        return ""
    if kind == "message":
        return str(record.get("content") or "")
    if kind == "tool_memory":
        return str(record.get("summary") or "")
    if kind == "tool_artifact":
        text = str(record.get("result_preview") or "")
        if record.get("error"):
            text += f"\nerror: {record['error']}"
        return text
    if kind == "tool_call":
        return f"{record.get('tool_name', '')}({record.get('arguments_json') or ''})"
    if kind == "checkpoint":
        return str(record.get("state_json") or "")
    if kind == "skill_state":
        return "skills: " + ", ".join(record.get("loaded_skills") or [])
    return ""
