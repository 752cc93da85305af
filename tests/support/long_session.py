"""Long Claude Code sessions made the way the runtime grows one: a real session's own turns
repeated after it, each copy with fresh uuids chained by ``parentUuid``, fresh request and
tool-use ids, later timestamps and recorded input that keeps growing. Compaction markers are
left out, so every request carries the whole history before it (the case that made an
ingest quadratic in memory). Used by benchmarks/bench_long_session.py and
tests/cli/test_long_session.py."""

from __future__ import annotations

import datetime as dt
import json
import uuid as uuidlib
from pathlib import Path
from typing import Any

# the real dev-set session the benchmark extends (a microcompaction, then a compaction)
# the development data, beside the repository (../shared/realdata)
DEV_SESSION = (Path(__file__).resolve().parents[3] / "shared" / "realdata" / "claude-code-entire"
               / "839b35f7-compact-microcompact.jsonl")
_DROPPED_SUBTYPES = {"compact_boundary", "microcompact_boundary"}


def _turn_lines(source: Path) -> list[dict[str, Any]]:
    """The user and assistant lines of ``source`` (no compaction markers, progress or
    snapshots): the turns a copy repeats."""
    kept = []
    for raw in source.read_bytes().splitlines():
        if not raw.strip():
            continue
        d = json.loads(raw)
        if d.get("type") in ("user", "assistant") and not d.get("isCompactSummary"):
            kept.append(d)
    return kept


def _ts(d: dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(str(d["timestamp"]).replace("Z", "+00:00"))


def _requests(lines: list[dict[str, Any]]) -> int:
    return len({d.get("requestId") for d in lines if d.get("type") == "assistant"})


def _remap_blocks(content: Any, suffix: str) -> Any:
    if not isinstance(content, list):
        return content
    out = []
    for blk in content:
        if isinstance(blk, dict):
            blk = dict(blk)
            if blk.get("type") == "tool_use" and isinstance(blk.get("id"), str):
                blk["id"] = blk["id"] + suffix
            if blk.get("type") == "tool_result" and isinstance(blk.get("tool_use_id"), str):
                blk["tool_use_id"] = blk["tool_use_id"] + suffix
        out.append(blk)
    return out


def extend_session(out: Path, requests: int, source: Path = DEV_SESSION) -> int:
    """Write a session of ``requests`` model requests to ``out`` by repeating the turns of
    ``source``; returns the requests written."""
    unit = _turn_lines(source)
    span = _ts(unit[-1]) - _ts(unit[0]) + dt.timedelta(seconds=1)
    usage = [d["message"]["usage"] for d in unit
             if d.get("type") == "assistant" and isinstance(d["message"].get("usage"), dict)]
    total = lambda u: sum(int(u.get(k) or 0) for k in
                          ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    growth = max(total(usage[-1]) - total(usage[0]), 1)
    written = 0
    seen_requests: set[str] = set()
    last_uuid: str | None = None
    with open(out, "w", encoding="utf-8") as f:
        copy = 0
        while written < requests:
            suffix = "" if copy == 0 else f"_c{copy}"
            new_uuid: dict[str, str] = {}
            for d in unit:
                d = dict(d)
                if d.get("type") == "assistant":
                    key = str(d.get("requestId")) + suffix
                    if key not in seen_requests:
                        if written >= requests:
                            break
                        seen_requests.add(key)
                        written += 1
                old = d.get("uuid")
                fresh = old if copy == 0 else str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{old}{suffix}"))
                new_uuid[old] = fresh
                d["uuid"] = fresh
                parent = d.get("parentUuid")
                d["parentUuid"] = new_uuid.get(parent, last_uuid if copy else parent)
                d["timestamp"] = (_ts(d) + span * copy).isoformat().replace("+00:00", "Z")
                if copy and d.get("requestId"):
                    d["requestId"] = d["requestId"] + suffix
                msg = d.get("message")
                if isinstance(msg, dict):
                    msg = dict(msg)
                    if copy and isinstance(msg.get("id"), str):
                        msg["id"] = msg["id"] + suffix
                    if copy:
                        msg["content"] = _remap_blocks(msg.get("content"), suffix)
                    if copy and isinstance(msg.get("usage"), dict):
                        u = dict(msg["usage"])
                        u["cache_read_input_tokens"] = int(u.get("cache_read_input_tokens") or 0) + growth * copy
                        msg["usage"] = u
                    d["message"] = msg
                f.write(json.dumps(d) + "\n")
                last_uuid = fresh
            copy += 1
    return written


def short_lines_session(out: Path, requests: int) -> int:
    """A session of ``requests`` turns of one short prompt line and one short answer line
    (recorded usage growing by a few tokens a turn): many lines, little text."""
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    parent = None
    with open(out, "w", encoding="utf-8") as f:
        for i in range(requests):
            u = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"short-u{i}"))
            a = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"short-a{i}"))
            f.write(json.dumps({
                "type": "user", "uuid": u, "parentUuid": parent, "sessionId": "short",
                "timestamp": (t0 + dt.timedelta(seconds=2 * i)).isoformat().replace("+00:00", "Z"),
                "message": {"role": "user", "content": f"step {i}"}}) + "\n")
            f.write(json.dumps({
                "type": "assistant", "uuid": a, "parentUuid": u, "sessionId": "short",
                "requestId": f"req_{i}",
                "timestamp": (t0 + dt.timedelta(seconds=2 * i + 1)).isoformat().replace("+00:00", "Z"),
                "message": {"id": f"msg_{i}", "role": "assistant", "model": "claude-sonnet-4-5",
                            "content": [{"type": "text", "text": f"done {i}"}],
                            "usage": {"input_tokens": 3000 + 8 * i, "output_tokens": 3}}}) + "\n")
            parent = a
    return requests
