"""Formats a transcript may look like that no installed adapter reads: the unknown-format
error names the closest one and the evidence, instead of only listing what was tried.

Each recogniser reads the detection ``Sample`` (never the file) and returns the evidence it
found ("session_meta on line 1"), or None. They are deliberately cheap and specific: a
format named here that an adapter later reads is simply detected by that adapter first.
"""

from __future__ import annotations

import zipfile
from typing import Any, Callable

from .files import Sample

__all__ = ["LOOKALIKES", "closest_unsupported"]


def _first(sample: Sample) -> Any:
    return sample.lines[0] if sample.lines else None


def _codex(sample: Sample) -> str | None:
    first = _first(sample)
    if isinstance(first, dict) and first.get("type") == "session_meta" and "payload" in first:
        return "session_meta on line 1"
    for n, line in enumerate(sample.lines or [], 1):
        if isinstance(line, dict) and line.get("type") in ("response_item", "turn_context"):
            return f"{line['type']} on line {n}"
        if n >= 50:
            break
    return None


def _inspect_json(sample: Sample) -> str | None:
    doc = sample.document
    if isinstance(doc, dict) and {"eval", "samples"} <= set(doc) and "version" in doc:
        return "top-level keys version, eval and samples"
    return None


def _inspect_zip(sample: Sample) -> str | None:
    if not sample.head.startswith(b"PK\x03\x04"):
        return None
    try:
        names = zipfile.ZipFile(sample.path).namelist()[:200]
    except (zipfile.BadZipFile, OSError):
        return None
    if "header.json" in names and any(n.startswith("samples/") for n in names):
        return "a zip holding header.json and samples/"
    return None


def _letta(sample: Sample) -> str | None:
    doc = sample.document
    if isinstance(doc, dict):
        if "core_memory" in doc and isinstance(doc.get("messages"), list):
            return "core_memory and messages (agent file v1)"
        if isinstance(doc.get("agents"), list) and "blocks" in doc:
            return "agents and blocks (agent file v2)"
    return None


def _esaa(sample: Sample) -> str | None:
    first = _first(sample)
    if isinstance(first, dict) and "actor" in first and ("event_id" in first or "event_seq" in first):
        key = "event" if "event" in first else "action"
        return f"event_id, actor and {key} on line 1"
    return None


# (what it looks like, recogniser), most specific first
LOOKALIKES: tuple[tuple[str, Callable[[Sample], str | None]], ...] = (
    ("a Codex CLI rollout", _codex),
    ("an inspect_ai eval log", _inspect_json),
    ("an inspect_ai .eval archive", _inspect_zip),
    ("a Letta agent file", _letta),
    ("an ESAA event log", _esaa),
)


def closest_unsupported(sample: Sample) -> tuple[str, str] | None:
    """(what the file looks like, the evidence), or None when it looks like none of them."""
    for name, recognise in LOOKALIKES:
        try:
            evidence = recognise(sample)
        except Exception:  # noqa: BLE001 - a recogniser must never break the error it explains
            evidence = None
        if evidence:
            return name, evidence
    return None
