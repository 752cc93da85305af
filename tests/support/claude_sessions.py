"""Made-up Claude Code sessions whose recorded sizes are known: for what-ifs measured on the
size a request really had (tests of replay/runtimes.py and the screens that show them)."""

from __future__ import annotations

import json
from pathlib import Path

OVERHEAD = 20_000  # what every request of the made-up sessions sends beside its records
PRIOR = 100_000  # the history a mid-session log's first requests carried


def session(path: Path, steps: int, compact_after: int | None, mid_session: bool,
            chars: int = 40_000) -> Path:
    """A Claude Code session of ``steps`` requests, each after a user turn of ``chars``
    characters; usage records twice the bytes/4 estimate of what was sent since the last
    compaction, plus OVERHEAD (and PRIOR before the first compaction of a mid-session log)."""
    lines: list[dict] = []
    parent = "outside-the-file" if mid_session else None
    sent = 0  # estimated tokens since the last compaction
    prior = PRIOR if mid_session else 0

    def add(kind: str, minute: int, **extra) -> None:
        nonlocal parent
        uuid = f"{kind[0]}{len(lines)}"
        lines.append({"type": kind, "sessionId": "s", "uuid": uuid, "parentUuid": parent,
                      "timestamp": f"2025-06-01T{9 + minute // 60:02d}:{minute % 60:02d}:00Z", **extra})
        parent = uuid

    for i in range(steps):
        if compact_after is not None and i == compact_after:
            add("system", 3 * i, subtype="compact_boundary",
                compactMetadata={"trigger": "auto", "preTokens": 150_000})
            summary = "Summary: the work so far."
            add("user", 3 * i, isCompactSummary=True, message={"role": "user", "content": summary})
            sent, prior = len(summary) // 4, 0
        text = f"step {i}: " + "x" * chars
        add("user", 3 * i + 1, message={"role": "user", "content": text})
        sent += len(text) // 4
        add("assistant", 3 * i + 2, requestId=f"r{i}", message={
            "id": f"msg_{i}", "model": "claude-sonnet-4-5", "role": "assistant",
            "content": [{"type": "text", "text": f"done with step {i}"}],
            "usage": {"input_tokens": OVERHEAD + prior + 2 * sent, "output_tokens": 5}})
        sent += 5
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
