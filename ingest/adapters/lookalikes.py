"""What a transcript that no adapter accepted looks like: the unknown-format error names the
closest known format, the evidence, and why the file still did not match ("looks like a
Codex CLI rollout (session_meta on line 1) but does not match codex (no line is …)"), or
that no installed adapter reads that format.

Each recogniser reads the detection ``Sample`` (the bounded head of the file, never more)
and returns the evidence it found, or None. They are looser than the adapters' sniffers on
purpose: they say what a file resembles, the sniffer decides whether it is that format.
"""

from __future__ import annotations

import re
import zipfile
from typing import Any, Callable, Iterable, Mapping

from .files import Sample

__all__ = ["LOOKALIKES", "SIGNATURES", "closest", "explain"]

_SCAN = 50  # lines a recogniser looks at
_KEY = re.compile(rb'"([A-Za-z_][A-Za-z0-9_.-]{0,63})"\s*:')
_KEYS_BYTES = 1 << 16


def _first(sample: Sample) -> Any:
    return sample.lines[0] if sample.lines else None


def _objects(sample: Sample) -> Iterable[tuple[int, dict[str, Any]]]:
    for n, line in enumerate((sample.lines or [])[:_SCAN], 1):
        if isinstance(line, dict):
            yield n, line


def _codex(sample: Sample) -> str | None:
    first = _first(sample)
    if isinstance(first, dict) and first.get("type") == "session_meta":
        return "session_meta on line 1"
    for n, line in _objects(sample):
        if line.get("type") in ("response_item", "turn_context", "compacted") and "payload" in line:
            return f"{line['type']} on line {n}"
    return None


def _claude_code(sample: Sample) -> str | None:
    for n, line in _objects(sample):
        if line.get("type") in ("user", "assistant") and isinstance(line.get("message"), dict):
            return f"a {line['type']} line with a message on line {n}"
        if "sessionId" in line and ("parentUuid" in line or "uuid" in line):
            return f"sessionId and uuid on line {n}"
    return None


def _gemini(sample: Sample) -> str | None:
    first = _first(sample)
    if isinstance(first, dict) and {"sessionId", "projectHash"} <= set(first) and sample.document is None:
        return "session metadata (sessionId, projectHash) on line 1"
    doc = sample.document
    if isinstance(doc, dict):
        if "sessionId" in doc and "messages" in doc:
            return "top-level keys sessionId and messages"
        msgs = doc.get("messages")
        if isinstance(msgs, list) and any(isinstance(m, dict) and m.get("type") == "gemini" for m in msgs[:_SCAN]):
            return 'messages of type "gemini"'
    return None


def _inspect_json(sample: Sample) -> str | None:
    doc = sample.document
    if isinstance(doc, dict) and {"eval", "samples"} <= set(doc) and "version" in doc:
        return "top-level keys version, eval and samples"
    return None


def _inspect_zip(sample: Sample) -> str | None:
    if not sample.head.startswith(b"PK\x03\x04"):
        return None
    try:  # the zip's directory: its names only, no member is read
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


def _otel(sample: Sample) -> str | None:
    """A span object without its OTLP envelope: OTLP/JSON's own keys, or the SDK console
    exporter's ``context: {trace_id, span_id}``."""

    def bare(obj: dict[str, Any]) -> bool:
        context = obj.get("context")
        return ("traceId" in obj and "spanId" in obj) or (
            isinstance(context, dict) and "trace_id" in context and "span_id" in context)

    if isinstance(sample.document, dict) and bare(sample.document):
        return "a span object (its trace and span ids) without the resourceSpans envelope"
    for n, line in _objects(sample):
        if bare(line):
            return f"a span object (its trace and span ids) on line {n}, without the resourceSpans envelope"
    return None


def _messages(sample: Sample) -> list[Any] | None:
    doc = sample.document
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        return doc["messages"]
    if isinstance(doc, list):
        return doc
    return None


def _anthropic(sample: Sample) -> str | None:
    doc = sample.document
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        model = doc.get("model")
        if isinstance(model, str) and model.startswith("claude"):
            return f"a messages list and model {model!r}"
        if "max_tokens" in doc and "system" in doc:
            return "a messages list with max_tokens and system"
    return None


def _openai(sample: Sample) -> str | None:
    msgs = _messages(sample)
    if msgs and any(isinstance(m, dict) and "role" in m and "content" in m for m in msgs[:_SCAN]):
        return 'a list of messages with "role" and "content"'
    return None


# (format names an adapter may be registered under, what it looks like, recogniser), most
# specific first. A format with no installed adapter is named as not read yet.
LOOKALIKES: tuple[tuple[tuple[str, ...], str, Callable[[Sample], str | None]], ...] = (
    (("otel",), "OpenTelemetry spans", _otel),
    (("codex",), "a Codex CLI rollout", _codex),
    (("claude-code",), "a Claude Code session", _claude_code),
    (("gemini-cli",), "a Gemini CLI session", _gemini),
    (("inspect-ai", "inspect_ai", "inspect"), "an inspect_ai eval log", _inspect_json),
    (("inspect-ai", "inspect_ai", "inspect"), "an inspect_ai .eval archive", _inspect_zip),
    (("letta", "letta-af", "letta-agent-file"), "a Letta agent file", _letta),
    (("esaa", "esaa-events"), "an ESAA event log", _esaa),
    (("anthropic-messages",), "an Anthropic Messages request log", _anthropic),
    (("openai-chat",), "OpenAI chat messages", _openai),
)


# The keys each format's records carry (top-level keys of the document, of its first
# element, or of its JSON lines): when no recogniser sees a format, the one whose keys the
# file shares most is named as the closest.
SIGNATURES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("otel", "OpenTelemetry spans (OTLP JSON)",
     frozenset({"resourceSpans", "resourceLogs", "scopeSpans", "spans", "traceId", "spanId",
                "parentSpanId", "startTimeUnixNano"})),
    ("codex", "a Codex CLI rollout", frozenset({"type", "payload", "timestamp"})),
    ("claude-code", "a Claude Code session",
     frozenset({"type", "message", "sessionId", "uuid", "parentUuid", "timestamp", "cwd"})),
    ("gemini-cli", "a Gemini CLI session",
     frozenset({"sessionId", "projectHash", "startTime", "lastUpdated", "messages"})),
    ("inspect-ai", "an inspect_ai eval log",
     frozenset({"version", "status", "eval", "plan", "results", "stats", "samples"})),
    ("letta", "a Letta agent file",
     frozenset({"agents", "blocks", "core_memory", "messages", "llm_config", "tools"})),
    ("esaa", "an ESAA event log",
     frozenset({"event_id", "event_seq", "actor", "ts", "event", "action", "payload"})),
    ("anthropic-messages", "an Anthropic Messages request log",
     frozenset({"model", "messages", "system", "max_tokens", "tools", "request", "response"})),
    ("openai-chat", "OpenAI chat messages",
     frozenset({"messages", "model", "role", "content", "tool_calls", "traj", "history"})),
)


def _keys(sample: Sample) -> set[str]:
    """The keys the file's records carry: the document's (or its first element's) top
    level, else those of its first JSON lines."""
    doc = sample.document
    if isinstance(doc, list):
        doc = next((d for d in doc[:_SCAN] if isinstance(d, dict)), None)
    if isinstance(doc, dict):
        return {str(k) for k in doc}
    keys: set[str] = set()
    for _n, line in _objects(sample):
        keys.update(str(k) for k in line)
    if not keys and sample.document is None and sample.head.lstrip()[:1] in (b"{", b"["):
        # a JSON document that does not parse (cut short, a stray byte): the keys its
        # first 64 KB spell, at any depth, still say what it was meant to be
        keys = {m.decode("utf-8", "replace") for m in _KEY.findall(sample.head[:_KEYS_BYTES])}
    return keys


def closest(sample: Sample, tried: Mapping[str, str]) -> str | None:
    """``closest: <format> (shares keys …; <why that format refused it>)`` for a JSON file
    no recogniser placed, naming the known format whose keys it shares most (the larger
    share of that format's keys; the earlier in ``SIGNATURES`` on a tie), or that it shares
    none (with its keys); None when it is not JSON objects."""
    keys = _keys(sample)
    if not keys:
        return None
    listed = sorted(keys)
    named = ", ".join(k[:40] for k in listed[:8]) + (", …" if len(listed) > 8 else "")
    best = max(SIGNATURES, key=lambda sig: (len(keys & sig[2]) / len(sig[2]),
                                            -SIGNATURES.index(sig)))
    name, what, signature = best
    shared = sorted(keys & signature)
    if not shared:
        return f"no known format has its keys ({named})"
    why = f"; {tried[name]}" if name in tried else ""
    return f"closest: {what} (shares {', '.join(shared)}{why})"


def explain(sample: Sample, tried: Mapping[str, str]) -> str | None:
    """What the file looks like and why it was not read, for the unknown-format error:
    ``tried`` holds every installed format's reason for refusing it. None when the file
    looks like no known format."""
    for names, what, recognise in LOOKALIKES:
        try:
            evidence = recognise(sample)
        except Exception:  # noqa: BLE001 - a recogniser must never break the error it explains
            evidence = None
        if not evidence:
            continue
        refused = next((n for n in names if n in tried), None)
        if refused is not None:
            return f"looks like {what} ({evidence}) but does not match {refused} ({tried[refused]})"
        return f"looks like {what} ({evidence}), which no installed adapter reads yet"
    return None
