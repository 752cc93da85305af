"""Transcript adapters: turn the logs agents already write into the export contract.

    from ingest.adapters import detect_format, adapt
    fmt = detect_format(Path("session.jsonl"))            # "claude-code"
    res = adapt(Path("session.jsonl"), Path("out/export"))  # AdaptResult
    ingest.store.ingest(res.export_dir, "store.duckdb")

Formats: ``claude-code`` (Claude Code session JSONL, with its ``<session>/subagents/``
folder), ``codex`` (Codex CLI rollout JSONL), ``gemini-cli`` (Gemini CLI session JSON or
its JSONL log), ``openai-chat`` (OpenAI chat messages with ``tool_calls``; tau-bench ``traj``),
``anthropic-messages`` (Anthropic Messages API request bodies, optionally with responses),
and ``export`` (already an export folder: nothing to convert). Other packages add formats
through the entry point group ``contextlens.adapters`` (see ``registry``). See
docs/transcripts.md.
"""

from __future__ import annotations

from typing import Any

from .builder import AdaptResult, Builder
from .common import EPOCH
from .files import Sample
from .registry import (
    ENTRY_POINT_GROUP,
    Adapter,
    adapt,
    available_adapters,
    detect_format,
    format_names,
    get_adapter,
)
from .tokens import DEFAULT_ESTIMATOR, ByteEstimator, TokenEstimator

__all__ = [
    "ENTRY_POINT_GROUP",
    "FORMATS",
    "AdaptResult",
    "Builder",
    "EPOCH",
    "Adapter",
    "ByteEstimator",
    "DEFAULT_ESTIMATOR",
    "Sample",
    "TokenEstimator",
    "adapt",
    "available_adapters",
    "detect_format",
    "format_names",
    "get_adapter",
]


def __getattr__(name: str) -> Any:
    # FORMATS is read from the registry when asked for, so that importing this package
    # never loads plugin metadata
    if name == "FORMATS":
        return tuple(format_names())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
