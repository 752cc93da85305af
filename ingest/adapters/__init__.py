"""Transcript adapters: turn the logs agents already write into the export contract.

    from ingest.adapters import detect_format, adapt
    fmt = detect_format(Path("session.jsonl"))            # "claude-code"
    res = adapt(Path("session.jsonl"), Path("out/export"))  # AdaptResult
    ingest.store.ingest(res.export_dir, "store.duckdb")

Formats: ``claude-code`` (Claude Code session JSONL, with its ``<session>/subagents/``
folder), ``openai-chat`` (OpenAI chat messages with ``tool_calls``; tau-bench ``traj``),
``anthropic-messages`` (Anthropic Messages API request bodies, optionally with responses),
and ``export`` (already an export folder: nothing to convert). See docs/transcripts.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ContextlensError
from .common import AdaptResult
from .tokens import DEFAULT_ESTIMATOR, ByteEstimator, TokenEstimator

__all__ = [
    "FORMATS",
    "AdaptResult",
    "ByteEstimator",
    "DEFAULT_ESTIMATOR",
    "TokenEstimator",
    "adapt",
    "detect_format",
]

FORMATS = ("claude-code", "openai-chat", "anthropic-messages", "export")
SNIFF_BYTES = 8 << 20  # formats are decided on at most this much of a file


def _parse(path: Path) -> tuple[Any, list[Any] | None, str | None]:
    """(whole-file JSON value or None, JSONL values or None, why whole-file JSON failed)."""
    with open(path, "rb") as f:
        data = f.read(SNIFF_BYTES)
    whole: Any = None
    why = None
    try:
        whole = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        why = str(err)[:60]
    lines: list[Any] | None = []
    bad = 0
    for raw in data.splitlines()[:2000]:
        if not raw.strip():
            continue
        try:
            lines.append(json.loads(raw))
        except (ValueError, UnicodeDecodeError):
            bad += 1
    if not lines:
        lines = None
    return whole, lines, why


def _sniff(fn: Any, values: Any) -> str | None:
    try:
        return fn(values)
    except Exception as err:  # a sniffer must never crash detection
        return f"unexpected structure ({type(err).__name__})"


def detect_format(path: Path) -> str:
    """Name the format of ``path`` (one of FORMATS), or raise ContextlensError naming the file
    and, for every format tried, why it did not match."""
    path = Path(path)
    if not path.exists():
        raise ContextlensError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / "manifest.json").is_file():
            return "export"
        raise ContextlensError(
            f"{path}: a folder without manifest.json is not an export; "
            "for a transcript, pass the file itself (tried: export)"
        )
    from . import anthropic_messages, claude_code, openai_chat

    try:
        whole, lines, why_json = _parse(path)
    except OSError as err:
        raise ContextlensError(f"{path}: cannot read ({err})") from None
    reasons: dict[str, str] = {"export": "not a folder with manifest.json"}
    if whole is None and lines is None:
        empty = path.stat().st_size == 0
        msg = "empty file" if empty else f"not JSON nor JSON lines ({why_json})"
        for f in FORMATS[:3]:
            reasons[f] = msg
    else:
        jsonl = lines if whole is None else ([whole] if isinstance(whole, dict) else None)
        # Claude Code is JSON lines only
        if whole is None and lines is not None:
            r = _sniff(claude_code.sniff, lines)
        else:
            r = "a single JSON document, not JSON lines"
        if r is None:
            return "claude-code"
        reasons["claude-code"] = r
        values = whole if whole is not None else lines
        r_a = _sniff(anthropic_messages.sniff, values)
        if r_a is None:
            return "anthropic-messages"
        r_o = _sniff(openai_chat.sniff, values)
        if r_o is None:
            return "openai-chat"
        reasons["anthropic-messages"] = r_a
        reasons["openai-chat"] = r_o
        del jsonl
    tried = "; ".join(f"{f}: {reasons[f]}" for f in FORMATS)
    raise ContextlensError(f"{path}: not a known transcript format (tried {tried})")


def adapt(
    path: Path,
    out_dir: Path,
    fmt: str | None = None,
    estimator: TokenEstimator | None = None,
) -> AdaptResult:
    """Convert the transcript at ``path`` into an export folder ``out_dir`` (replaced if it
    exists) that ``ingest.store.ingest`` accepts. ``fmt`` overrides detection."""
    path = Path(path)
    out_dir = Path(out_dir)
    if fmt is None:
        fmt = detect_format(path)
    if fmt not in FORMATS:
        raise ContextlensError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt == "export":
        if not (path.is_dir() and (path / "manifest.json").is_file()):
            raise ContextlensError(f"{path}: not an export folder (no manifest.json)")
        return AdaptResult(path, "export", [])
    if not path.is_file():
        raise ContextlensError(f"{path}: not a file (format {fmt} reads one transcript file)")
    if path.stat().st_size == 0:
        raise ContextlensError(f"{path}: empty file, nothing to adapt as {fmt}")
    est = estimator or DEFAULT_ESTIMATOR
    if fmt == "claude-code":
        from .claude_code import adapt_claude_code as run
    elif fmt == "openai-chat":
        from .openai_chat import adapt_openai_chat as run
    else:
        from .anthropic_messages import adapt_anthropic_messages as run
    result = run(path, out_dir, est)
    if not result.stats.get("rows.messages") and not result.stats.get("requests"):
        import shutil

        shutil.rmtree(result.export_dir, ignore_errors=True)
        detail = "; ".join(result.warnings[:3])
        raise ContextlensError(
            f"{path}: no {fmt} messages or requests found" + (f" ({detail})" if detail else "")
        )
    return result
