"""OpenTelemetry spans of LLM agents -> export (format ``otel``).

Reads OTLP JSON, OTLP JSON lines (the Collector's file exporter, ``contextlens collect``'s
journal) and Phoenix span exports (Parquet) into one span model (``otel_spans.py``), finds
what each span is under the GenAI semantic conventions and OpenInference
(``otel_messages.py``), and builds the contract with the ``Builder``:

- **Each model-call span is one request** whose included records are exactly the messages
  it sent, in order (the system instructions first, as a system record), tagged
  ``input:exact``, with its recorded usage (``tokens:recorded``: the input tokens are the
  request's size). One message sent again by a later request (or an answer sent back) is
  one record, found by its content (role, text, tool calls, tool results); the first of its
  choices is the run's answer (assistant message; its tool calls are tool calls).
- **Conversations**: ``gen_ai.conversation.id`` (on the span or an ancestor), else
  OpenInference's ``session.id``, else the trace. Requests are taken in start-time order.
  Within a conversation, a request continues the chain of requests whose records it resends
  (system instructions aside); one that resends none starts a chain of its own (a subagent,
  a second agent of the trace): each chain is a thread of the ``chat-full-history`` runtime
  policy (replay/runtimes.py), so verify checks that each request sent its chain's whole
  history. What an earlier request of the chain sent or produced and this one did not send
  is omitted (``evicted``). A request whose records are out of their chain's order (a
  rewritten history) stays ``observed``, as one without message content does.
- **Tool spans** (``execute_tool``, OpenInference TOOL) are tool calls with their results:
  matched to the assistant's tool call by ``gen_ai.tool.call.id`` / ``tool_call.id``, they give
  the call its completion time and failure, and the result of a call no later request sent;
  unmatched, they are a call of the model call that ran last before them in the trace.
- **Retrieved documents** (RETRIEVER / ``retrieval`` spans) are artifacts of one retrieval
  tool call each, on the model call nearest them in the trace; not candidates of any request.
- A model-call span wrapping another (a framework's span around the client's) is the same
  request: the inner one, closer to the wire, is read.
- A span carrying ``contextlens.assembly.*`` (``otel_assembly.py``, docs/otel.md) is the
  runtime's own assembly: its decisions are the request's rows, under its policy version.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ContextlensError
from .builder import AdaptResult, Builder, Rec
from .common import EPOCH, after, as_text
from .files import Sample, read_source
from .otel_assembly import Governed, GovernedConversation, build_governed, parse_governed
from .otel_messages import Message, ModelCall, Retrieval, SpanMeaning, ToolRun
from .otel_spans import PHOENIX_COLUMNS, Span, SpanReader, documents_in, parquet_columns
from .tokens import DEFAULT_ESTIMATOR, TokenEstimator, exact_estimator

FORMAT = "otel"
EXACT_TAG = "input:exact"
PARQUET_MAGIC = b"PAR1"
_OTLP_HEAD = re.compile(rb'\s*\{\s*"resource_?(?:S|s)pans"\s*:\s*\[')
_US = dt.timedelta(microseconds=1)


@dataclass
class _Chain:
    """One chain of requests of a conversation: a thread of the chat-full-history rule."""

    name: str
    history: list[Rec] = field(default_factory=list)  # every record, in the order first seen
    by_key: dict[str, list[Rec]] = field(default_factory=dict)  # message content -> records
    extra: dict[str, list[Rec]] = field(default_factory=dict)  # a message's call/result records
    roles: dict[str, str] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)  # tool call id -> our tool_call_id
    ran: list[str] = field(default_factory=list)  # calls whose tool span ended, result unsent
    members: set[str] = field(default_factory=set)

    def add(self, recs: list[Rec], role: str) -> None:
        for r in recs:
            if r.id not in self.members:
                self.members.add(r.id)
                self.history.append(r)
                self.roles.setdefault(r.id, role)


@dataclass
class _Conv:
    cid: str
    chains: list[_Chain] = field(default_factory=list)
    results: dict[str, Rec] = field(default_factory=dict)  # our tool_call_id -> its artifact
    tool_runs: dict[str, ToolRun] = field(default_factory=dict)  # our tool_call_id -> its span
    made: list[tuple[str, _Chain]] = field(default_factory=list)  # answers' calls, in order
    governed: GovernedConversation | None = None


class _Adaptation:
    def __init__(self, path: Path, b: Builder, spans: list[Span]) -> None:
        self.path = path
        self.b = b
        self.spans = spans
        self.meaning = SpanMeaning(lambda span, what: b.warn(f"{span.label} ({span.name!r}): {what}"))
        self.by_id = {(s.trace_id, s.span_id): s for s in spans}
        self.attrs = {id(s): self.meaning.attrs(s) for s in spans}
        self.convs: dict[tuple[str, str], _Conv] = {}
        self.runs: list[tuple[str, dt.datetime, str]] = []  # (trace, start, run id), in order
        self.agent_runs: dict[tuple[str, str], str] = {}  # agent span -> its latest run
        self.no_content = 0

    # -- the span tree
    def parent(self, span: Span) -> Span | None:
        return self.by_id.get((span.trace_id, span.parent_id)) if span.parent_id else None

    def ancestors(self, span: Span) -> list[Span]:
        out: list[Span] = []
        seen = {span.span_id}
        node = self.parent(span)
        while node is not None and node.span_id not in seen:  # ids may loop in hostile input
            out.append(node)
            seen.add(node.span_id)
            node = self.parent(node)
        return out

    def inherited(self, span: Span, key: str) -> Any:
        for node in [span, *self.ancestors(span)]:
            value = self.attrs[id(node)].get(key)
            if value not in (None, ""):
                return value
        return None

    def agents(self, span: Span) -> list[Span]:
        """The agent spans above ``span``, nearest first."""
        return [a for a in self.ancestors(span) if self.meaning.is_agent(self.attrs[id(a)])]

    def agent_name(self, span: Span) -> str | None:
        """The agent a model call ran for: named on its span, else its nearest agent span's
        name (``gen_ai.agent.name``, ``agent.name``, else the span's own name)."""
        name = self.meaning.agent_name(span, self.attrs[id(span)])
        agents = self.agents(span) if name is None else []
        if agents:
            name = self.meaning.agent_name(agents[0], self.attrs[id(agents[0])]) or agents[0].name
        return name

    # -- the whole file
    def run(self) -> None:
        b, meaning = self.b, self.meaning
        calls: list[ModelCall] = []
        tools: list[ToolRun] = []
        retrievals: list[Retrieval] = []
        for s in self.spans:
            a = self.attrs[id(s)]
            if meaning.is_model_call(s, a):
                calls.append(meaning.model_call(s, a))
            elif meaning.is_tool(a):
                tools.append(meaning.tool_run(s, a))
            elif meaning.is_retrieval(a):
                retrievals.append(meaning.retrieval(s, a))
        calls = self._innermost(calls)
        b.bump("spans", len(self.spans))
        b.bump("otel.model_calls", len(calls))
        if b.estimator is DEFAULT_ESTIMATOR:
            b.use_exact(exact_estimator([c.model for c in calls]))
        governed = {id(c): parse_governed(c.span, b.warn) for c in calls}
        if any(governed.values()) and b.exact_encoding is None:
            # the records' counts are the runtime's own: not to be scaled by calibration
            b.exact_encoding = "runtime"
        timeline: list[tuple[dt.datetime, int, int, Any]] = []
        for c in calls:
            timeline.append((self._start(c.span), 1, c.span.order, c))
        for t in tools:
            timeline.append((t.span.end or self._start(t.span), 0, t.span.order, t))
        timeline.sort(key=lambda x: (x[0], x[1], x[2]))
        unplaced: list[ToolRun] = []
        for _, _, _, item in timeline:
            if isinstance(item, ModelCall):
                self._request(item, governed[id(item)])
            elif not self._tool_run(item):
                unplaced.append(item)
        for conv in self.convs.values():
            for chain in conv.chains:
                self._ran_tools(conv, chain, None)
                b.thread(chain.name, chain.history)
        for t in unplaced:
            self._tool_by_parent(t)
        for r in sorted(retrievals, key=lambda r: (self._start(r.span), r.span.order)):
            self._retrieval(r)
        if self.no_content:
            b.warn(f"{self.path.name}: {self.no_content} model call{'s' if self.no_content != 1 else ''} "
                   "carry no message content (the instrumentation's content capture is off): "
                   "recorded with their usage only, not replayable")

    def _start(self, span: Span) -> dt.datetime:
        return span.start or span.end or EPOCH + dt.timedelta(seconds=span.order)

    def _innermost(self, calls: list[ModelCall]) -> list[ModelCall]:
        """One request per API call: of a model-call span and one it wraps (a framework's span
        around its client library's), the inner one, closer to the wire, unless only the
        outer one holds the messages."""
        by_span = {(c.span.trace_id, c.span.span_id): c for c in calls}
        dropped: set[tuple[str, str]] = set()
        for c in calls:
            for a in self.ancestors(c.span):
                outer = by_span.get((a.trace_id, a.span_id))
                if outer is None:
                    continue
                keep_inner = c.input is not None or outer.input is None
                dropped.add((a.trace_id, a.span_id) if keep_inner else (c.span.trace_id, c.span.span_id))
        self.b.bump("otel.wrapping_spans", len(dropped))
        return [c for c in calls if (c.span.trace_id, c.span.span_id) not in dropped]

    # -- conversations
    def _conv(self, span: Span, call: ModelCall) -> _Conv:
        conv_id = self.inherited(span, "gen_ai.conversation.id")
        session = self.inherited(span, "session.id") if conv_id is None else None
        key = (("conversation", str(conv_id)) if conv_id is not None else
               ("session", str(session)) if session is not None else ("trace", span.trace_id))
        conv = self.convs.get(key)
        if conv is not None:
            return conv
        t0 = self._start(span)
        roots = [self._start(a) for a in self.ancestors(span)]
        created = min([t0, *roots]) - dt.timedelta(milliseconds=1)
        title = next((m.text for m in call.input or [] if m.role == "user" and m.text), "")
        agent = self.inherited(span, "gen_ai.agent.name") or self.inherited(span, "agent.name")
        title = title or (f"{agent}: {span.name}" if agent else span.name) or key[1]
        conv = _Conv(self.b.conversation(title, created))
        self.convs[key] = conv
        return conv

    def _chain(self, conv: _Conv, messages: list[Message]) -> _Chain:
        """The chain whose records this request resends most (system instructions aside);
        a new one when it resends none."""
        keys = [m.key() for m in messages if m.role != "system"]
        best, score = None, 0
        for chain in conv.chains:
            n = sum(1 for k in keys if k in chain.by_key)
            if n > score or (n == score and n > 0):
                best, score = chain, n
        if best is not None:
            return best
        name = conv.cid if not conv.chains else f"{conv.cid}#chain{len(conv.chains)}"
        chain = _Chain(name)
        conv.chains.append(chain)
        return chain

    # -- one request
    def _participant(self, conv: _Conv, call: ModelCall) -> tuple[str, str, str | None]:
        """(participant id, runtime kind, parent run): an agent nested in another agent's run
        is a subagent, its requests child runs of the parent agent's latest request."""
        agents = self.agents(call.span)
        name = self.agent_name(call.span)
        nested = len(agents) >= 2
        model = call.requested
        key = f"model:{name}:{model}" if name else f"model:{model}"
        label = f"{model} ({name})" if name else model
        pid = self.b.participant(conv.cid, key, label, "subagent" if nested else "model",
                                 call.provider, model)
        parent = self.agent_runs.get((agents[1].trace_id, agents[1].span_id)) if nested else None
        return pid, ("subagent_child" if nested else "chat"), parent

    def _request(self, call: ModelCall, gov: Governed | None) -> None:
        b, span = self.b, call.span
        conv = self._conv(span, call)
        t0 = self._start(span)
        t1 = after(span.end or t0, t0)
        pid, runtime_kind, parent_run = self._participant(conv, call)
        status = "failed" if span.status == "error" else ("succeeded" if span.end else "running")
        tags = [f"trace:{span.trace_id}", f"span:{span.span_id}"]
        agent = self.agents(span)
        if gov is not None:
            conv.governed = conv.governed or GovernedConversation()
            rid = b.run(conv.cid, pid, call.provider, call.model, t0, ended_at=t1 if span.end else None,
                        runtime_kind=runtime_kind, parent_model_run_id=parent_run, status=status)
            build_governed(b, conv.cid, conv.governed, gov, call, rid, t0, tags + ["contextlens:assembly"])
            self._answer(conv, None, call, rid, pid, t1, None, governed=conv.governed)
            self._ran(span, agent, rid)
            return
        messages = ([Message("system", call.system)] if call.system else []) + (call.input or [])
        chain = self._chain(conv, messages) if call.input is not None else None
        included: list[Rec] = []
        runtime = "observed"
        if chain is not None:
            included = self._input(conv, chain, messages, t0 - _US)
            self._ran_tools(conv, chain, t0 - _US)
            place = {r.id: i for i, r in enumerate(chain.history)}
            seqs = [place[r.id] for r in included]
            if all(x < y for x, y in zip(seqs, seqs[1:])):
                runtime = "chat-full-history"
            else:
                tags.append("otel:history_rewritten")
            tags.insert(0, EXACT_TAG)
            tags.append(f"otel_messages:{call.source}")
        else:
            self.no_content += 1
            tags.append("otel:no_content")
        ids = {r.id for r in included}
        omitted = [(r, "evicted", "window",
                    "in this chain's history (an earlier request of it sent or produced it) but "
                    "not in this model call's recorded input")
                   for r in (chain.history if chain is not None else []) if r.id not in ids]
        trigger = next((r.id for r in reversed(included) if r.kind == "message"
                        and chain is not None and chain.roles.get(r.id) == "user"), None)
        rid = b.run(conv.cid, pid, call.provider, call.model, t0, ended_at=t1 if span.end else None,
                    trigger_message_id=trigger, runtime_kind=runtime_kind,
                    parent_model_run_id=parent_run, status=status)
        tool_tokens = b.count(call.tools_text) if call.tools_text else 0
        tags.append(f"tool_schema_tokens_estimate:{tool_tokens}")
        name = self.agent_name(span)
        if name:
            tags.append(f"agent:{name}")
        b.runtime = runtime
        try:
            b.assembly(rid, included, omitted, call.input_tokens, overhead_estimate=tool_tokens,
                       extra_tags=tags)
        finally:
            b.runtime = "observed"
        self._answer(conv, chain, call, rid, pid, t1, trigger)
        self._ran(span, agent, rid)

    def _ran(self, span: Span, agents: list[Span], rid: str) -> None:
        self.runs.append((span.trace_id, self._start(span), rid))
        if agents:
            self.agent_runs[(agents[0].trace_id, agents[0].span_id)] = rid

    def _input(self, conv: _Conv, chain: _Chain, messages: list[Message], t: dt.datetime) -> list[Rec]:
        """The records of one request's messages, in order; a message met for the first
        time becomes records (created just before the request)."""
        out: list[Rec] = []
        seen: dict[str, int] = {}
        for m in messages:
            key = m.key()
            n = seen.get(key, 0)
            seen[key] = n + 1
            known = chain.by_key.get(key, [])
            if n < len(known):
                rec = known[n]
            else:
                recs = self._records(conv, chain, m, t)
                rec = recs[0]
                chain.by_key.setdefault(key, []).append(rec)
                chain.extra[rec.id] = recs[1:]
                chain.add(recs, m.role)
            out.append(rec)
            out.extend(chain.extra.get(rec.id, []))
        return out

    def _records(self, conv: _Conv, chain: _Chain, m: Message, t: dt.datetime) -> list[Rec]:
        b, cid = self.b, conv.cid
        recs: list[Rec] = []
        if m.role == "assistant":
            # an answer no traced request produced (history given to the first request):
            # its tool calls are shown in its text, since no run of ours made them
            calls = "\n".join(f"[tool call {c.name}] {as_text(c.arguments)}" for c in m.calls)
            recs.append(b.message(cid, "assistant", "\n".join(x for x in (m.text, calls) if x), t,
                                  speaker_label="assistant"))
        elif m.role == "system":
            recs.append(b.message(cid, "system", m.text, t, speaker_label="system"))
        elif m.text or not m.responses:
            role = "tool" if m.role == "tool" else "user"
            recs.append(b.message(cid, role, m.text, t, participant_id=b.user_of[cid] if role == "user" else None,
                                  speaker_label=None if role == "user" else "tool"))
        for r in m.responses:
            tid = chain.calls.get(r.id) if r.id else None
            if tid is not None and tid in conv.results:
                recs.append(conv.results[tid])  # its tool span's result, stored first
            elif tid is not None:
                run = conv.tool_runs.get(tid)
                done = (run.span.end if run and run.span.end else t)
                rec = b.tool_result(tid, r.text, bool(run and run.error), done)
                conv.results[tid] = rec
                recs.append(rec)
            else:
                recs.append(b.message(cid, "tool", r.text, t, speaker_label=r.name or "tool"))
        return recs

    def _answer(self, conv: _Conv, chain: _Chain | None, call: ModelCall, rid: str, pid: str,
                t1: dt.datetime, trigger: str | None, governed: GovernedConversation | None = None) -> None:
        """The first choice of the call's output: the run's answer and its tool calls."""
        if not call.output:
            return
        if len(call.output) > 1:
            self.b.bump("otel.other_choices", len(call.output) - 1)
        m = call.output[0]
        b = self.b
        text = m.text
        rec = b.message(conv.cid, "assistant", text, t1, participant_id=pid, model_run_id=rid,
                        speaker_label=call.model, parent_message_id=trigger)
        made = [b.tool_call(rid, c.name, c.arguments, t1) for c in m.calls]
        if len(made) >= 2:
            for c in made:
                b.call_row(c.id)["parallel_group"] = f"{rid}:parallel"
            b.bump("parallel_groups")
        answer = Message("assistant", m.text, m.calls)
        if governed is not None:
            governed.answers.append((rec, answer))
            return
        if chain is None:
            return
        chain.by_key.setdefault(answer.key(), []).append(rec)
        chain.extra[rec.id] = made
        chain.add([rec, *made], "assistant")
        for c, made_rec in zip(m.calls, made):
            conv.made.append((made_rec.id, chain))
            if c.id:
                chain.calls[c.id] = made_rec.id

    # -- tools
    def _match(self, t: ToolRun) -> tuple[_Conv, _Chain, str] | None:
        """The assistant's tool call a tool span ran: the latest call with its id; for a
        span without one, the first call of its name no tool span has claimed yet."""
        convs = list(self.convs.values())
        if t.call_id:
            for conv in reversed(convs):
                for chain in reversed(conv.chains):
                    if t.call_id in chain.calls:
                        return conv, chain, chain.calls[t.call_id]
            return None
        start = self._start(t.span)
        for conv in reversed(convs):
            for tid, chain in conv.made:
                row = self.b.call_row(tid)
                if tid not in conv.tool_runs and row["tool_name"] == t.name and row["requested_at"] <= start:
                    return conv, chain, tid
        return None

    def _tool_run(self, t: ToolRun) -> bool:
        """A tool span matched to the assistant's call it ran: the call's completion and,
        unless a later request sends it, its result. False when no call matches."""
        found = self._match(t)
        if found is None:
            return False
        conv, chain, tid = found
        conv.tool_runs[tid] = t
        row = self.b.call_row(tid)
        if t.span.end is not None:
            row["completed_at"] = max(t.span.end, row["requested_at"])
        if t.error is not None:
            row["status"] = "failed"
        if tid not in conv.results and tid not in chain.ran:
            chain.ran.append(tid)
        self.b.bump("otel.tool_spans")
        return True

    def _ran_tools(self, conv: _Conv, chain: _Chain, t: dt.datetime | None) -> None:
        """Results of tools that ran before ``t`` (all of them: None) and that no request
        has sent yet: they are in the chain's history from then on."""
        for tid in chain.ran:
            if tid in conv.results:
                continue
            run = conv.tool_runs[tid]
            body = run.result if run.result is not None else (run.error or "")
            rec = self.b.tool_result(tid, body, run.error is not None, run.span.end or t or EPOCH)
            conv.results[tid] = rec
            chain.add([rec], "tool")
        chain.ran.clear()

    def _run_near(self, span: Span) -> str | None:
        """The model call of the trace that started last before ``span``, else its first."""
        start = self._start(span)
        same = [(t0, rid) for trace, t0, rid in self.runs if trace == span.trace_id]
        before = [rid for t0, rid in same if t0 <= start]
        return before[-1] if before else (same[0][1] if same else None)

    def _run_for(self, span: Span, what: str) -> str | None:
        """The model call ``span`` (a tool span, a retrieval) is attached to: the one nearest
        it in its trace; None, with a warning, when its trace has none."""
        rid = self._run_near(span)
        if rid is None:
            self.b.warn(f"{span.label} ({span.name!r}): {what} with no model call in its trace "
                        "to attach it to, skipped")
        return rid

    def _tool_by_parent(self, t: ToolRun) -> None:
        rid = self._run_for(t.span, "a tool span")
        if rid is None:
            return
        start = self._start(t.span)
        call = self.b.tool_call(rid, t.name, t.arguments if t.arguments is not None else {}, start)
        body = t.result if t.result is not None else (t.error or "")
        self.b.tool_result(call.id, body, t.error is not None, t.span.end or start)
        self.b.bump("otel.tool_spans_by_parent")

    def _retrieval(self, r: Retrieval) -> None:
        rid = self._run_for(r.span, "a retrieval")
        if rid is None:
            return
        start = self._start(r.span)
        call = self.b.tool_call(rid, r.span.name or "retrieval", {"query": r.query}, start)
        done = r.span.end or start
        for doc_id, content, score in r.documents or [("", "", None)]:
            head = f"document {doc_id}" + (f" (score {score})" if score is not None else "")
            body = f"{head}\n{content}" if doc_id or score is not None else (content or "(no documents)")
            self.b.tool_result(call.id, body, r.span.status == "error", done)
        self.b.bump("otel.retrievals")


# --------------------------------------------------------------------------- the adapter


def read_spans(path: Path, data: bytes, b: Builder) -> list[Span]:
    reader = SpanReader(path, b.warn)
    if data[:4] == PARQUET_MAGIC:
        reader.read_parquet(io.BytesIO(data))
    else:
        reader.read_json(data, b)
    spans = reader.finish()
    for key, n in reader.stats.items():
        b.bump(key, n)
    return spans


def adapt_otel(path: Path, out_dir: Path, estimator: TokenEstimator | None = None) -> AdaptResult:
    data = read_source(path)
    b = Builder(FORMAT, path, data, estimator)
    spans = read_spans(path, data, b)
    if not spans:
        raise ContextlensError(f"{path}: OpenTelemetry data without spans: nothing to read")
    _Adaptation(path, b, spans).run()
    return b.write(out_dir)


class OtelAdapter:
    """The ``otel`` adapter (entry point of ``contextlens.adapters``)."""

    name = FORMAT
    description = "OpenTelemetry spans of LLM calls: OTLP JSON / JSON lines, Phoenix span export (Parquet)"

    def sniff(self, sample: Sample) -> str | None:
        if sample.head[:4] == PARQUET_MAGIC:
            # the column names are in the file's footer: read the schema, nothing else
            columns = parquet_columns(sample.path)
            if columns is None:
                return "a Parquet file pyarrow cannot read"
            missing = [c for c in PHOENIX_COLUMNS if c not in columns]
            if missing:
                return f"a Parquet file without {', '.join(missing)} (not a Phoenix span export)"
            return None
        if not sample.complete and _OTLP_HEAD.match(sample.head):
            return None  # one OTLP document larger than the detection head
        if sample.document is None and sample.lines is None:
            return sample.not_json_reason()
        if documents_in(sample.document, sample.lines):
            return None
        return 'no OTLP/JSON document {"resourceSpans": [...]}, as the file or one of its lines'

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        return adapt_otel(path, out_dir, estimator)
