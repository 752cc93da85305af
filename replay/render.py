"""The prompt as the model saw it, rebuilt from an assembly's included records.

Each included record becomes one ``PromptPart``: a header saying what it is and how it was
rendered, and the body the model received, with the record's privacy class. Parts are not
masked here: the read model (``readmodel.masking``) masks them before anyone sees them.

It is also the one home of what a rendering adds to a record (a stale marker's words, a
reference's pointer) and of what that costs in tokens: the reference assembler's budget
and the columnar engine count a rendering from the definitions here, so the figure a
prompt part carries is the tokens of the text it shows.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.contract import cleared_text
from ingest.errors import ContextlensError
from ingest.text import visible_text as _visible_text
from ingest.timefmt import SENTENCE_FORMAT, sentence_time


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
    if rendering in WRAPPERS:
        return wrapper_text(row) + content
    if rendering == "cleared":
        return cleared_text(row.get("detail"))
    if rendering == "rehydrated_raw" and raw is not None:
        return raw
    if row["record_kind"] == "tool_artifact" and row.get("error"):
        return f"{content}\nerror: {row['error']}"
    return content


# --------------------------------------------------------------------------- renderings
# What a rendering puts before a record's content, and what that costs. One definition for
# the prompt view (``_body``), the reference assembler's budget (``rendering_tokens``) and
# the columnar engine (``*_length``: the same text's length from a few columns, no text
# built), so the three agree to the token.

STALE_MARKER = ("[STALE: observed {observed}, stale since {since}; do not treat as current, "
                "revalidate with {tools}] ")
REVALIDATION_HINT = "[Revalidate with {tools} before relying on this] "
REFERENCE = "[reference to raw artifact {record_id}, sha256 {sha256}\u2026] "
SUMMARY = "[summary] "
WRAPPERS = {"stale_marker": STALE_MARKER, "revalidation_hint": REVALIDATION_HINT,
            "reference": REFERENCE, "summary": SUMMARY}
# the tools named when a memory names none
DEFAULT_TOOLS = {"stale_marker": "its source tool", "revalidation_hint": "the source tool"}
# renderings sent instead of the record's content (a reference: a pointer and the preview,
# not the raw body): their tokens are their own text's, not the record's content_tokens
STAND_INS = frozenset({"reference"})
SHA_SHOWN = 12  # hex digits of an artifact's sha256 a reference shows


CHARS_PER_TOKEN = 4


def tokens_for_length(chars: Any) -> Any:
    """The token counter of governed exports, by text length (an int, or a numpy array of
    them for the columnar engine): one token per 4 characters, at least one. The sample's
    producer counts every record's content with it (``replay.sample.graph.tokens_of``), so
    a rendering's words count as its content does."""
    return np.maximum(1, np.asarray(chars) // CHARS_PER_TOKEN)


def count_tokens(text: str) -> int:
    """The tokens of ``text`` (``tokens_for_length`` of its length in characters)."""
    return int(tokens_for_length(len(text)))


def wrapper_text(row: dict[str, Any]) -> str:
    """What ``row["rendering"]`` puts before the record's content ("" for none). ``row``:
    the record's rendering, record_id, detail (the decision that rendered it), and its
    observed_at, stale_after, revalidation_tools (memories) or sha256 (artifacts)."""
    rendering = row["rendering"]
    if rendering == "stale_marker":
        return STALE_MARKER.format(observed=sentence_time(row.get("observed_at")),
                                   since=_stale_since(row), tools=_tools(row, rendering))
    if rendering == "revalidation_hint":
        return REVALIDATION_HINT.format(tools=_tools(row, rendering))
    if rendering == "reference":
        return REFERENCE.format(record_id=row["record_id"],
                                sha256=str(row.get("sha256") or "")[:SHA_SHOWN])
    if rendering == "summary":
        return SUMMARY
    return ""


def _tools(row: dict[str, Any], rendering: str) -> str:
    return ", ".join(row.get("revalidation_tools") or []) or DEFAULT_TOOLS[rendering]


def rendering_tokens(row: dict[str, Any], content_tokens: int) -> int:
    """The tokens of what the model receives for a record rendered ``row["rendering"]``:
    its content's ``content_tokens`` plus its wrapper's, or, for a stand-in (a reference),
    the stand-in's whole text (wrapper and ``row["content"]``, the preview)."""
    wrapper = wrapper_text(row)
    if not wrapper:
        return content_tokens
    if row["rendering"] in STAND_INS:
        return count_tokens(wrapper + (row.get("content") or ""))
    return content_tokens + count_tokens(wrapper)


def _fixed(template: str) -> int:
    """The characters of ``template`` outside its fields."""
    return sum(len(literal) for literal, *_ in string.Formatter().parse(template))


def _time_lengths(us: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """len(sentence_time(t)) of microsecond UTC times (columnar; ``valid`` False: no time)."""
    out = np.full(len(us), len(sentence_time(None)), dtype=np.int64)
    if valid.any():
        times = pa.array(us[valid], pa.timestamp("us", tz="UTC"))
        out[valid] = np.asarray(pc.utf8_length(pc.strftime(times, format=SENTENCE_FORMAT)))
    return out


def _tools_lengths(tools_chars: np.ndarray, rendering: str) -> np.ndarray:
    return np.where(tools_chars > 0, tools_chars, len(DEFAULT_TOOLS[rendering]))


def stale_marker_length(observed_us: np.ndarray, observed_valid: np.ndarray, since_us: np.ndarray,
                        since_valid: np.ndarray, tools_chars: np.ndarray) -> np.ndarray:
    """len(wrapper_text) of stale markers, from their times and the length of their joined
    revalidation tools (0: none)."""
    return (_fixed(STALE_MARKER) + _time_lengths(observed_us, observed_valid)
            + _time_lengths(since_us, since_valid) + _tools_lengths(tools_chars, "stale_marker"))


def revalidation_hint_length(tools_chars: np.ndarray) -> np.ndarray:
    """len(wrapper_text) of revalidation hints."""
    return _fixed(REVALIDATION_HINT) + _tools_lengths(tools_chars, "revalidation_hint")


def reference_length(id_chars: np.ndarray, sha_chars: np.ndarray) -> np.ndarray:
    """len(wrapper_text) of references, from the lengths of the artifact id and sha256."""
    return _fixed(REFERENCE) + id_chars + np.minimum(sha_chars, SHA_SHOWN)


SUMMARY_LENGTH = len(SUMMARY)


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
