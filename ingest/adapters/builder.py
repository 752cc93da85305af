"""The ``Builder``: it collects the rows of one transcript (conversation, branch,
participants, messages, runs, calls, artifacts, memories, recorded assemblies) and writes them
as a valid export with ``ExportWriter``. Every built-in adapter and third-party adapter plugin
uses it (``from ingest.adapters import Builder``).

It is one class of over 600 lines on purpose: the rules that keep an adapted export valid
(ids, record order, included positions, recorded tokens, the selection hash) are easiest to
check read together.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from ..contract import TRANSCRIPT_FACT_TABLES, TRANSCRIPT_FACTS, selection_hash
from ..tags import (
    ESTIMATOR_RESIDUAL_TOKENS, FIXED_OVERHEAD_TOKENS, TIMES_UNRECORDED, TOKENS_RECORDED,
    UNATTRIBUTED_TOKENS, int_tag, tag,
)
from ..writer import ExportWriter
from .assembly_rows import AssemblyRows
from .calibration import calibrate, scaled
from .tokens import DEFAULT_ESTIMATOR, TiktokenEstimator, TokenEstimator
from .common import (
    DEFAULT_CONTEXT_WINDOW, EPOCH, PLACEMENT_COLUMNS, PREVIEW_CHARS, context_window, first_lines,
    human_size, short_hash,
)

# the speaker label of the record standing for history a mid-session log does not hold
HISTORY_BEFORE_FILE = "history before this file"

# the made-up times of a log without any start at EPOCH (2000-01-01) and keep its order
MADE_UP_BEFORE = EPOCH.replace(year=2001)


class Placement(NamedTuple):
    message_key: str
    block_index: int
    after_text: bool


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class AdaptResult:
    export_dir: Path
    format: str
    warnings: list[str]
    # per assembly: recorded input tokens minus the estimate of its included records
    # (what the transcript does not explain: system prompt, tool schemas). Only for
    # assemblies whose request has recorded usage; also in the assembly's tags.
    unattributed_tokens: dict[str, int] = field(default_factory=dict)
    # rows written per table, plus a few adapter counts (requests, compactions, subagents)
    stats: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- builder


@dataclass
class Rec:
    """A candidate record of an assembly: kind, id, estimated tokens."""

    kind: str
    id: str
    tokens: int


@dataclass(frozen=True)
class Shown:
    """How an included record was sent when not verbatim: rendering, reason, detail, and
    the tokens of what was sent."""

    rendering: str
    reason: str
    detail: str
    tokens: int


def source_identity(source: Path, data: bytes) -> bytes:
    """What a transcript's export id and record ids are derived from.

    A JSON-lines log (its first line one JSON object) grows by appending: its ids come from
    its file name and first line, so the requests already read keep their ids as it grows,
    a followed file (ingest/follow.py) stays equal to a one-shot ingest of the same bytes,
    and ingesting the grown file again replaces the export instead of adding a second one.
    The name keeps apart two logs that begin alike (a Codex fork copies its parent's lines).
    Any other transcript (one JSON document, rewritten whole) is identified by its content.
    """
    end = data.find(b"\n")
    first = data[:end].strip() if end > 0 else b""
    if first.startswith(b"{") and first.endswith(b"}"):
        try:
            is_object = isinstance(json.loads(first), dict)
        except (ValueError, RecursionError):
            is_object = False
        if is_object:
            return source.name.encode("utf-8", "surrogateescape") + b"\0" + first
    return data


class Builder:
    """Collects one transcript's rows; ``write`` emits them with ExportWriter."""

    def __init__(
        self,
        fmt: str,
        source: Path,
        source_bytes: bytes,
        estimator: TokenEstimator | None = None,
    ) -> None:
        self.fmt = fmt
        self.source = source
        self.estimator = estimator or DEFAULT_ESTIMATOR
        self.digest = short_hash(source_identity(source, source_bytes), 12)
        self.prefix = self.digest[:10]
        self.export_id = f"{fmt}-{self.digest}"
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.blobs: dict[str, bytes] = {}
        self.warnings: list[str] = []
        self.unattributed: dict[str, int] = {}
        self.stats: dict[str, int] = {}
        self._n: dict[str, int] = {}
        self._participants: dict[tuple[str, str], str] = {}
        self.branch_of: dict[str, str] = {}
        self.user_of: dict[str, str] = {}
        self._calls: dict[str, dict[str, Any]] = {}
        self._runs: dict[str, dict[str, Any]] = {}
        self.first_time: dt.datetime | None = None
        self.exact_encoding: str | None = None  # set when counts come from the model's tokenizer
        # The runtime policy (replay/runtimes.py) of the requests being built and the values
        # it ran with; "observed" means no runtime policy reproduces them. An adapter sets
        # both before the assemblies of a conversation.
        self.runtime = "observed"
        self.runtime_settings: dict[str, Any] = {}
        # transcript facts (ingest.contract.TRANSCRIPT_FACTS) per record or run id
        self.facts: dict[str, dict[str, Any]] = {}
        # per run: (included count, the last included id, or the last omitted one when none
        # is included, runtime, settings) of its recorded assembly: its rows are in
        # ``assembly_rows``
        self._members: dict[str, tuple[int, str | None, str, dict[str, Any]]] = {}
        # the rows of every recorded assembly (and so of its decisions): on disk, not in
        # memory, since a long session has n²/2 of them (assembly_rows.py)
        self.assembly_rows = AssemblyRows()
        # assembly row (its seq) -> its count, where ``write`` sets one after calibration
        self._tokens_set: dict[int, int] = {}
        # the records standing for history a log that starts mid-session does not hold
        self._before_file: list[str] = []

    def use_exact(self, estimator: TiktokenEstimator | None) -> None:
        """Count with the model's own tokenizer (before anything is counted); None keeps
        the estimate, to be calibrated on the recording."""
        if estimator is not None:
            self.estimator = estimator
            self.exact_encoding = estimator.name

    # -- helpers
    def count(self, text: str) -> int:
        try:
            return max(0, int(self.estimator.count(text or "")))
        except Exception:  # a plug-in estimator must never break an adaptation
            return -(-len((text or "").encode("utf-8", "replace")) // 4)

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def bump(self, key: str, by: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + by

    def new_id(self, kind: str) -> str:
        n = self._n.get(kind, 0)
        self._n[kind] = n + 1
        return f"{self.prefix}:{kind}{n}"

    def _add(self, table: str, row: dict[str, Any]) -> dict[str, Any]:
        self.rows.setdefault(table, []).append(row)
        return row

    def _seen(self, t: dt.datetime) -> dt.datetime:
        if self.first_time is None or t < self.first_time:
            self.first_time = t
        return t

    # -- transcript facts (what a runtime policy replays from)
    def thread(self, name: str, records: Iterable[Rec]) -> None:
        """``records`` are one thread of the transcript (a session, a subagent's own
        transcript, one conversation) in the order the runtime sends them: each gets its
        thread and its place in it. A request's history is its thread up to the newest record
        of its recorded assembly (runs get their bounds in ``write``)."""
        for i, r in enumerate(records):
            self.facts.setdefault(r.id, {}).update(thread=name, seq=i)

    def fact(self, record_id: str, **values: Any) -> None:
        """Add runtime facts to a record (a compaction marker, a cleared result, a SWE-agent
        history entry): docs/transcripts.md lists them."""
        self.facts.setdefault(record_id, {}).update(values)

    def _scale_facts(self, factor: float) -> None:
        """The facts' counts scaled as calibration scaled the rows' counts."""
        for f in self.facts.values():
            if "tokens" in f:
                f["tokens"] = scaled(f["tokens"], factor)
            for key, count in (("cleared", "tokens"), ("entry", "elided_tokens")):
                if isinstance(f.get(key), dict) and count in f[key]:
                    f[key][count] = scaled(f[key][count], factor)

    def _run_facts(self) -> None:
        """Each run's history bounds from its recorded assembly, and its runtime policy: the
        thread of its newest record, how far into it, and the thread it inherited records
        from (the compaction summariser). A run whose records are not all threaded stays
        ``observed``."""
        # a message's or result's count as finally written (text can be completed later)
        for table, key in (("messages", "message_id"), ("tool_artifacts", "artifact_id")):
            for row in self.rows.get(table, []):
                if row[key] in self.facts:
                    self.facts[row[key]]["tokens"] = row["content_tokens"]
        asm = {r["model_run_id"]: r for r in self.rows.get("context_assemblies", [])}
        runs = {run_id: m for run_id, m in self._members.items() if m[2] != "observed"}
        if runs:
            for run_id, facts in self._run_bounds(runs).items():
                facts["carried"] = int(asm[run_id]["assembled_tokens"] or 0)
                self.facts[run_id] = facts
                asm[run_id]["policy_version"] = runs[run_id][2]
        for f in self.facts.values():
            cleared = f.get("cleared")
            if cleared and isinstance(cleared.get("after"), str):
                # cleared from that record on: its place in the thread
                cleared["after"] = self.facts.get(cleared["after"], {}).get("seq", -1)

    def _run_bounds(self, runs: dict[str, tuple[int, str | None, str, dict[str, Any]]]
                    ) -> dict[str, dict[str, Any]]:
        """The runtime facts of each run of ``runs`` whose assembly's records are all
        threaded (without ``carried``), in ``runs``' order, computed over the assembly rows
        in DuckDB: the thread of its newest record (``last``), how far into it any of its
        records reaches, and the thread and reach of its first included record of another
        thread (what it inherited)."""
        threaded = {rid: f for rid, f in self.facts.items() if "thread" in f}
        facts = pa.table({"record_id": list(threaded),
                          "fthread": [f["thread"] for f in threaded.values()],
                          "fseq": [f["seq"] for f in threaded.values()]},
                         schema=pa.schema([("record_id", pa.string()), ("fthread", pa.string()),
                                           ("fseq", pa.int64())]))
        own = {f"{run_id}:asm": (threaded.get(last, {}).get("thread") if last is not None else None)
               for run_id, (_, last, _, _) in runs.items()}
        owns = pa.table({"aid": list(own), "own": list(own.values())},
                        schema=pa.schema([("aid", pa.string()), ("own", pa.string())]))
        got = {aid: (unthreaded, upto, other) for aid, unthreaded, upto, other in self.assembly_rows.query(
            """SELECT r.assembly_id,
                      count(*) FILTER (WHERE f.fthread IS NULL),
                      max(f.fseq) FILTER (WHERE f.fthread = o.own),
                      arg_min(f.fthread, r.step) FILTER (WHERE r.decision = 'included'
                                                         AND f.fthread <> o.own)
               FROM rec r JOIN owns o ON o.aid = r.assembly_id
               LEFT JOIN facts f ON f.record_id = r.record_id
               GROUP BY r.assembly_id""", facts=facts, owns=owns)}
        others = {aid: other for aid, (u, _, other) in got.items() if not u and other is not None}
        reach: dict[str, int] = {}
        if others:
            table = pa.table({"aid": list(others), "other": list(others.values())},
                             schema=pa.schema([("aid", pa.string()), ("other", pa.string())]))
            reach = dict(self.assembly_rows.query(
                """SELECT r.assembly_id, max(f.fseq)
                   FROM rec r JOIN others o ON o.aid = r.assembly_id
                   JOIN facts f ON f.record_id = r.record_id
                   WHERE r.decision = 'included' AND f.fthread = o.other
                   GROUP BY r.assembly_id""", facts=facts, others=table))
        out: dict[str, dict[str, Any]] = {}
        for run_id, (_, _, runtime, settings) in runs.items():
            aid = f"{run_id}:asm"
            unthreaded, upto, other = got.get(aid, (0, None, None))
            if unthreaded:
                continue
            facts_of: dict[str, Any] = {
                "runtime": runtime, "settings": settings, "thread": own[aid],
                "upto": upto if upto is not None else -1,
            }
            if other is not None:
                facts_of["inherits"] = other
                facts_of["inherits_upto"] = reach[aid]
            out[run_id] = facts_of
        return out

    def history_before_file(self, cid: str, created_at: dt.datetime) -> Rec:
        """A record standing for the history a log that starts mid-session does not hold
        (the first record of its thread): what the session's requests carried of it is
        measured once the counts are calibrated (``write``), as the part of the first
        recorded request no record and not the fixed overhead explains. It is sent like the
        history it stands for: until a compaction drops it."""
        rec = self.message(cid, "system", "", created_at, speaker_label=HISTORY_BEFORE_FILE)
        self._before_file.append(rec.id)
        self.fact(rec.id, role="history_before_file")
        self.bump("history_before_file")
        return rec

    def _measure_history_before_file(self) -> None:
        """Give each history-before-file record its size (see ``history_before_file``) and
        take it out of the unexplained tokens of the requests that sent it."""
        if not self._before_file:
            return
        messages = {r["message_id"]: r for r in self.rows.get("messages", [])}
        assemblies = {a["assembly_id"]: a for a in self.rows.get("context_assemblies", [])}
        # the rows that sent them (one per request at most): fetched, changed here, and
        # their counts written back over the assembly rows' in ``write``
        ids = pa.table({"record_id": list(dict.fromkeys(self._before_file))},
                       schema=pa.schema([("record_id", pa.string())]))
        rows_of: dict[str, list[dict[str, Any]]] = {}
        fetched: list[dict[str, Any]] = []
        for seq, aid, rid, decision, rendering, tokens in self.assembly_rows.query(
                "SELECT seq, assembly_id, record_id, decision, rendering, tokens FROM scaled "
                "WHERE record_id IN (SELECT record_id FROM ids) ORDER BY seq", ids=ids):
            row = {"seq": seq, "assembly_id": aid, "record_id": rid, "decision": decision,
                   "rendering": rendering, "tokens": tokens}
            fetched.append(row)
            rows_of.setdefault(rid, []).append(row)
        def measured(rows: list[dict[str, Any]], rendering: str) -> tuple[int, int | None, int | None]:
            """(size, unexplained, overhead) of the first recorded request that sent the
            record so rendered: what it carried beyond its records and the fixed overhead."""
            sent = sorted((assemblies[r["assembly_id"]] for r in rows if r["decision"] == "included"
                           and r["rendering"] == rendering
                           and TOKENS_RECORDED in assemblies[r["assembly_id"]]["tags"]),
                          key=lambda a: (a["assembled_at"], a["assembly_id"]))
            left = int_tag(sent[0]["tags"], UNATTRIBUTED_TOKENS) if sent else None
            fixed = int_tag(sent[0]["tags"], FIXED_OVERHEAD_TOKENS) if sent else None
            return (max(left - fixed, 0) if left is not None and fixed is not None else 0), left, fixed

        for mid in self._before_file:
            rows = rows_of.get(mid, [])
            size, left, fixed = measured(rows, "verbatim")
            # what a microcompaction of its results left of it (rendering cleared)
            rest = min(measured(rows, "cleared")[0], size)
            cleared = self.facts.get(mid, {}).get("cleared")
            if isinstance(cleared, dict):
                cleared["tokens"] = rest
            row = messages[mid]
            if size:
                row["content"] = (
                    f"[history before this file: the session began before this log; its first "
                    f"request carried {size:,} tokens that no record here explains beyond the "
                    f"{fixed:,} every request carries (system prompt, tools): measured as the "
                    f"recorded input, less the records and that overhead]")
            else:
                row["content"] = (
                    "[history before this file: the session began before this log; what it "
                    "carried is inside the tokens no record explains"
                    + (f" ({left:,} in its first request)" if left is not None else "")
                    + ": nothing in the file separates it from the system prompt and tools "
                      "(no compaction dropped it), so no what-if can drop it]")
            row["content_tokens"] = size
            self.facts.setdefault(mid, {})["tokens"] = size
            for r in rows:
                a = assemblies[r["assembly_id"]]
                if r["decision"] == "omitted":
                    r["tokens"] = size
                    a["baseline_tokens"] += size  # the history replay would send it too
                    continue
                sent = rest if r["rendering"] == "cleared" else size
                r["tokens"] = sent
                a["baseline_tokens"] += size - sent  # the history replay sends it whole
                # included: the request's tokens are unchanged, its records explain more
                tags = []
                for t in a["tags"]:
                    for name in (UNATTRIBUTED_TOKENS, ESTIMATOR_RESIDUAL_TOKENS):
                        value = int_tag([t], name)
                        if value is not None:
                            t = tag(name, value - sent)
                    tags.append(t)
                a["tags"] = tags
                if a["assembly_id"] in self.unattributed:
                    self.unattributed[a["assembly_id"]] -= sent
        self._tokens_set = {r["seq"]: r["tokens"] for r in fetched}

    # -- entities
    def conversation(self, title: str, created_at: dt.datetime) -> str:
        cid = self.new_id("c")
        self._seen(created_at)
        title = " ".join((title or "").split())
        self._add(
            "conversations",
            {
                "conversation_id": cid,
                "title": (title[:117] + "…") if len(title) > 118 else (title or self.source.name),
                "owner_id": "user",
                "created_at": created_at,
            },
        )
        bid = f"{cid}:main"
        self.branch_of[cid] = bid
        self._add(
            "branches",
            {
                "branch_id": bid,
                "conversation_id": cid,
                "parent_branch_id": None,
                "fork_message_id": None,
                "name": "main",
                "created_at": created_at,
            },
        )
        self.user_of[cid] = self.participant(cid, "user", "user", "user")
        return cid

    def participant(
        self,
        cid: str,
        key: str,
        label: str,
        kind: str,
        provider: str | None = None,
        model: str | None = None,
    ) -> str:
        pid = self._participants.get((cid, key))
        if pid is None:
            pid = f"{cid}:p:{key}"
            self._participants[(cid, key)] = pid
            self._add(
                "participants",
                {
                    "participant_id": pid,
                    "conversation_id": cid,
                    "label": label,
                    "kind": kind,
                    "provider": provider,
                    "model": model,
                },
            )
        return pid

    def message(
        self,
        cid: str,
        role: str,
        content: str,
        created_at: dt.datetime,
        participant_id: str | None = None,
        model_run_id: str | None = None,
        speaker_label: str | None = None,
        parent_message_id: str | None = None,
        visibility: str = "conversation",
    ) -> Rec:
        mid = self.new_id("m")
        tokens = self.count(content)
        self.facts[mid] = {"tokens": tokens}
        self._seen(created_at)
        self._add(
            "messages",
            {
                "message_id": mid,
                "conversation_id": cid,
                "branch_id": self.branch_of[cid],
                "parent_message_id": parent_message_id,
                "role": role,
                "participant_id": participant_id,
                "model_run_id": model_run_id,
                "speaker_label": speaker_label,
                "content": content,
                "content_tokens": tokens,
                "visibility_scope": visibility,
                "created_at": created_at,
            },
        )
        return Rec("message", mid, tokens)

    def run(
        self,
        cid: str,
        participant_id: str,
        provider: str,
        model: str,
        started_at: dt.datetime,
        ended_at: dt.datetime | None = None,
        trigger_message_id: str | None = None,
        runtime_kind: str = "chat",
        parent_model_run_id: str | None = None,
        subagent_batch_id: str | None = None,
        status: str = "succeeded",
    ) -> str:
        rid = self.new_id("r")
        self._seen(started_at)
        self._runs[rid] = self._add(
            "model_runs",
            {
                "model_run_id": rid,
                "conversation_id": cid,
                "branch_id": self.branch_of[cid],
                "participant_id": participant_id,
                "trigger_message_id": trigger_message_id,
                "runtime_kind": runtime_kind,
                "parent_model_run_id": parent_model_run_id,
                "subagent_batch_id": subagent_batch_id,
                "provider": provider,
                "model": model or "unknown",
                "status": status,
                "started_at": started_at,
                "ended_at": ended_at,
            },
        )
        self.bump("requests")
        return rid

    def run_row(self, rid: str) -> dict[str, Any]:
        return self._runs[rid]

    def tool_call(
        self,
        run_id: str,
        tool_name: str,
        arguments: Any,
        requested_at: dt.datetime,
        parallel_group: str | None = None,
    ) -> Rec:
        tid = self.new_id("t")
        if isinstance(arguments, str):
            try:
                json.loads(arguments)
                args_json = arguments
            except ValueError:
                args_json = json.dumps(arguments)
        else:
            try:
                args_json = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
            except (TypeError, ValueError):
                args_json = json.dumps(str(arguments))
        tool_name = str(tool_name or "unknown")
        tokens = self.count(tool_name + " " + args_json)
        self.facts[tid] = {"tokens": tokens}
        self._calls[tid] = self._add(
            "tool_calls",
            {
                "tool_call_id": tid,
                "model_run_id": run_id,
                "tool_name": tool_name,
                "arguments_json": args_json,
                "status": "pending",
                "retryable": False,
                "parallel_group": parallel_group,
                "requested_at": requested_at,
                "completed_at": None,
            },
        )
        self.bump("tool_calls")
        return Rec("tool_call", tid, tokens)

    def call_row(self, tid: str) -> dict[str, Any]:
        return self._calls[tid]

    def tool_result(
        self,
        tool_call_id: str,
        body: str,
        is_error: bool,
        created_at: dt.datetime,
        content_type: str = "text/plain",
        visibility: str = "conversation",
        placement: Placement | None = None,
    ) -> Rec:
        """One artifact per tool result, and its mechanical compact memory. ``placement``
        says where the transcript put the result (the PLACEMENT_COLUMNS)."""
        call = self._calls[tool_call_id]
        run = self._runs.get(call["model_run_id"])
        status = "failed" if is_error else "succeeded"
        call["status"] = status
        call["completed_at"] = max(created_at, call["requested_at"])
        raw = body.encode("utf-8", "replace")
        sha = hashlib.sha256(raw).hexdigest()
        self.blobs[sha] = raw
        aid = self.new_id("a")
        tokens = self.count(body)
        self.facts[aid] = {"tokens": tokens}
        tool = call["tool_name"]
        cid = run["conversation_id"] if run else next(iter(self.branch_of))
        branch = self.branch_of[cid]
        owner_p = run["participant_id"] if run else self.user_of[cid]
        preview = body[:PREVIEW_CHARS]
        self._add(
            "tool_artifacts",
            {
                "artifact_id": aid,
                "tool_call_id": tool_call_id,
                "tool_name": tool,
                "status": status,
                "result_preview": preview,
                "error": (first_lines(body, 1) or "error") if is_error else None,
                "byte_size": len(raw),
                "sha256": sha,
                "storage_ref": f"blobs/{sha}",
                "content_type": content_type,
                "content_tokens": tokens,
                "privacy_class": "internal",
                "visibility_scope": visibility,
                "owner_participant_id": owner_p,
                "owner_model_run_id": call["model_run_id"],
                "shared_with": [],
                "branch_id": branch,
                "retention_class": "keep",
                "created_at": call["completed_at"],
                "result_message_key": placement.message_key if placement else None,
                "result_block_index": placement.block_index if placement else None,
                "result_after_text": placement.after_text if placement else None,
            },
        )
        summary = f"{tool} {status}, {human_size(len(raw))}, first lines: {first_lines(body) or '(empty)'}"
        self._add(
            "tool_memories",
            {
                "memory_id": self.new_id("mem"),
                "conversation_id": cid,
                "branch_id": branch,
                "source_artifact_ids": [aid],
                "source_tool_names": [tool],
                "summary": summary,
                "structured_json": json.dumps(
                    {"tool": tool, "status": status, "byte_size": len(raw), "tokens": tokens}
                ),
                "content_tokens": self.count(summary),
                "confidence": 1.0,
                "trust_source": "mechanical",
                "ambiguity_notes": None,
                "privacy_class": "internal",
                "freshness_class": "session",
                "observed_at": call["completed_at"],
                "stale_after": None,
                "revalidation_tools": [],
                "provenance_locators": [f"blobs/{sha}"],
                "conflicts_with": [],
                "supersedes": [],
                "superseded_by": None,
                "promotion_policy": "auto",
                "promoted": True,
                "visibility_scope": visibility,
                "owner_participant_id": owner_p,
                "owner_model_run_id": call["model_run_id"],
                "created_at": call["completed_at"],
            },
        )
        if is_error:
            self.bump("tool_errors")
        return Rec("tool_artifact", aid, tokens)

    def assembly(
        self,
        run_id: str,
        included: list[Rec],
        omitted: list[tuple[Rec, str, str, str]],
        recorded_input: int | None,
        overhead_estimate: int = 0,
        extra_tags: Iterable[str] = (),
        context_window_tokens: int | None = None,
        shown_as: Mapping[str, Shown] | None = None,
        families: Mapping[str, tuple[str, str]] | None = None,
    ) -> str:
        """One recorded context assembly: ``included`` in prompt order; ``omitted`` as
        (record, reason_code, policy_family, detail). ``overhead_estimate`` is the estimate of
        what was sent outside the records (system prompt, tool schemas) when known.
        ``shown_as`` maps the id of an included record that was not sent verbatim to how it
        was sent (a tool result a runtime cleared in place). ``families`` maps a record id
        to the (policy_family, detail) of its row when the runtime recorded its own (the
        builder's are a transcript's: window, "sent in the recorded request")."""
        run = self._runs[run_id]
        aid = f"{run_id}:asm"
        last = included[-1].id if included else (omitted[-1][0].id if omitted else None)
        self._members[run_id] = (len(included), last, self.runtime, dict(self.runtime_settings))
        # One final row per record, and its one trace step (policy_decisions is made from
        # the same row when written): (assembly, step, kind, id, decision, rendering,
        # position, family, reason, detail, tokens). Included records all come before any
        # omitted one, so the count so far is the next prompt position (duplicates are
        # skipped, so positions stay 0..n-1). A long session's history is all of this, so
        # the loops stay plain.
        rows: list[tuple[Any, ...]] = []
        seen: set[tuple[str, str]] = set()
        shown_as = shown_as or {}
        inc_tokens = 0
        msgs_in = arts_in = 0
        cleared_tokens: list[int] = []
        for r in included:
            key = (r.kind, r.id)
            if key in seen:
                continue
            seen.add(key)
            msgs_in += r.kind == "message"
            shown = shown_as.get(r.id)
            n = len(rows)
            if shown is None:
                inc_tokens += r.tokens
                arts_in += r.kind == "tool_artifact"
                family, detail = ("window", "sent in the recorded request") if families is None \
                    else families.get(r.id, ("window", "sent in the recorded request"))
                rows.append((aid, n, r.kind, r.id, "included", "verbatim", n, family, "in_window",
                             detail, r.tokens))
            else:
                inc_tokens += shown.tokens
                cleared_tokens.append(r.tokens - shown.tokens)  # the body the baseline sends
                family, detail = ("window", shown.detail) if families is None \
                    else families.get(r.id, ("window", shown.detail))
                rows.append((aid, n, r.kind, r.id, "included", shown.rendering or "verbatim", n,
                             family, shown.reason, detail, shown.tokens))
        all_tokens = inc_tokens + sum(cleared_tokens)  # the history replay sends full bodies
        msgs_all = msgs_in
        for r, reason, family, detail in omitted:
            key = (r.kind, r.id)
            if key in seen:
                continue
            seen.add(key)
            all_tokens += r.tokens
            msgs_all += r.kind == "message"
            if families is not None and r.id in families:
                family, detail = families[r.id]
            rows.append((aid, len(rows), r.kind, r.id, "omitted", None, None, family, reason,
                         detail, r.tokens))
        self.assembly_rows.extend(rows)
        tags = [f"source:{self.fmt}", f"transcript:{self.source.name}"]
        if recorded_input is not None:
            unattributed = recorded_input - inc_tokens
            assembled = recorded_input
            overhead = max(unattributed, 0)
            tags += [TOKENS_RECORDED, tag(UNATTRIBUTED_TOKENS, unattributed)]
            self.unattributed[aid] = unattributed
        else:
            assembled = inc_tokens + overhead_estimate
            overhead = overhead_estimate
            tags.append("tokens:estimated")
        tags.extend(extra_tags)
        self._add(
            "context_assemblies",
            {
                "assembly_id": aid,
                "model_run_id": run_id,
                "conversation_id": run["conversation_id"],
                "branch_id": run["branch_id"],
                "participant_id": run["participant_id"],
                "runtime_kind": run["runtime_kind"],
                "provider": run["provider"],
                "model": run["model"],
                "policy_version": "observed",
                "assembler_version": f"{self.fmt}-adapter/1",
                "assembled_at": run["started_at"],
                "token_budget": context_window_tokens
                or context_window(run["model"])
                or DEFAULT_CONTEXT_WINDOW,
                "byte_budget": 0,
                # the replay's budget cap; null when the model's window is not known
                "context_limit": context_window_tokens or context_window(run["model"]),
                "exact_evidence_ids": [],
                "baseline_tokens": all_tokens + overhead,
                "assembled_tokens": assembled,
                "baseline_message_count": msgs_all,
                "assembled_message_count": msgs_in,
                "raw_artifact_count": arts_in,
                "selected_memory_count": 0,
                "rehydrated_artifact_count": 0,
                "graph_query_ms": 0.0,
                "policy_eval_ms": 0.0,
                "serialization_ms": 0.0,
                "selection_hash": selection_hash([row[2:7] for row in rows]),
                "payload_sha256": None,
                "tags": tags,
            },
        )
        return aid

    # -- output
    def _write_assembly_rows(self, w: ExportWriter) -> None:
        """assembly_records and policy_decisions streamed from the assembly rows in the
        order they were made, a record batch at a time: the calibrated counts, and those
        ``_measure_history_before_file`` set."""
        for batch in self.assembly_rows.final_batches(self._tokens_set):
            w.write("assembly_records", batch.select(
                ["assembly_id", "record_kind", "record_id", "decision", "rendering", "position",
                 "policy_family", "reason_code", "detail", "tokens"]))
            step = batch.column("step")
            w.write("policy_decisions", pa.RecordBatch.from_arrays([
                pc.binary_join_element_wise(batch.column("assembly_id"), pc.cast(step, pa.string()), ":d"),
                batch.column("assembly_id"), step, batch.column("record_kind"),
                batch.column("record_id"), batch.column("policy_family"),
                pc.if_else(pc.equal(batch.column("decision"), "included"), "allow", "deny"),
                batch.column("reason_code"), batch.column("detail"),
            ], names=["decision_id", "assembly_id", "step", "record_kind", "record_id",
                      "policy_family", "outcome", "reason_code", "detail"]))

    def write(self, out_dir: Path) -> AdaptResult:
        try:
            return self._write(out_dir)
        finally:
            self.assembly_rows.close()  # its scratch folder goes, whatever happened

    def _write(self, out_dir: Path) -> AdaptResult:
        cal = calibrate(self.rows, self.assembly_rows, self.unattributed, self.exact_encoding)
        if cal.fitted:
            self._scale_facts(cal.factor)
        self._measure_history_before_file()
        self._run_facts()
        keys = {"messages": "message_id", "tool_calls": "tool_call_id",
                "tool_artifacts": "artifact_id", "model_runs": "model_run_id"}
        for table in TRANSCRIPT_FACT_TABLES:
            for row in self.rows.get(table, []):
                f = self.facts.get(row[keys[table]])
                row[TRANSCRIPT_FACTS] = json.dumps(f, sort_keys=True) if f else None
        if cal.fitted:
            self.stats["token_calibration_pairs"] = cal.pairs
            self.stats["token_calibration_x100"] = int(round(cal.factor * 100))
        for a in self.rows.get("context_assemblies", []):
            # a time before 2001 was made up from EPOCH in the log's order (no agent log is
            # that old): say so, or the made-up date reads as when the request was made
            if a["assembled_at"] < MADE_UP_BEFORE and TIMES_UNRECORDED not in a["tags"]:
                a["tags"] = a["tags"] + [TIMES_UNRECORDED]
        created = self.first_time or EPOCH
        with ExportWriter(
            out_dir,
            export_id=self.export_id,
            producer=f"contextlens {self.fmt}-adapter/1",
            created_at=created,
            overwrite=True,
        ) as w:
            for table, rows in self.rows.items():
                if rows:
                    extra = dict(PLACEMENT_COLUMNS) if table == "tool_artifacts" else {}
                    if table in TRANSCRIPT_FACT_TABLES:
                        extra[TRANSCRIPT_FACTS] = pa.string()
                    w.write(table, rows, extra=extra)
            if self.assembly_rows.count:
                self._write_assembly_rows(w)
            for body in self.blobs.values():
                w.add_blob(body)
        stats = dict(self.stats)
        for table, rows in self.rows.items():
            stats[f"rows.{table}"] = len(rows)
        if self._members:  # an assembly was made: its tables are counted, even when empty
            stats["rows.assembly_records"] = stats["rows.policy_decisions"] = self.assembly_rows.count
        return AdaptResult(
            Path(out_dir), self.fmt, list(self.warnings), dict(self.unattributed), stats
        )
