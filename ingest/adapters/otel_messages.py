"""What a span says, under the conventions LLM instrumentations write: one model call (the
messages it sent, what it answered, its usage), one tool run, or one retrieval.

Conventions read (their own texts, not guesses: the OpenTelemetry GenAI semantic conventions'
registry and JSON schemas, OpenInference's spec/semantic_conventions.md, and what
pydantic-ai, opentelemetry-instrumentation-openai-v2, openinference-instrumentation-openai
and OpenLLMetry write):

- **GenAI, current**: ``gen_ai.operation.name`` (``chat``, ``text_completion``,
  ``generate_content``; ``execute_tool``; ``invoke_agent``; ``retrieval``),
  ``gen_ai.system_instructions`` (parts), ``gen_ai.input.messages`` /
  ``gen_ai.output.messages`` (a JSON string or structured: ``{role, parts}``, parts of type
  ``text``, ``reasoning``, ``tool_call`` ``{id, name, arguments}``, ``tool_call_response``
  ``{id, response}`` (pydantic-ai: ``result``), ``blob`` / ``uri`` / ``file``, server tool
  calls), ``gen_ai.tool.definitions``, ``gen_ai.usage.input_tokens`` (which, the
  conventions say, includes the cached tokens) / ``output_tokens``,
  ``gen_ai.request.model`` / ``gen_ai.response.model``, ``gen_ai.provider.name`` (older
  ``gen_ai.system``), ``gen_ai.conversation.id``, ``gen_ai.agent.name``, ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id`` / ``arguments`` / ``result``, ``gen_ai.retrieval.documents``. The
  ``gen_ai.client.inference.operation.details`` event (a log record, or a span event) holds
  the same attributes; they fill in what the span lacks.
- **GenAI, older**: per-message events ``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message`` and ``gen_ai.choice`` (their
  ``content`` / ``tool_calls`` / ``id`` in the log record's body, or in a span event's
  ``gen_ai.event.content`` JSON attribute; pydantic-ai instrumentation version 1 put the list
  in a span attribute ``events``); ``gen_ai.content.prompt`` / ``gen_ai.content.completion``
  events and the ``gen_ai.prompt`` / ``gen_ai.completion`` JSON attributes; OpenLLMetry's
  indexed ``gen_ai.prompt.N.role`` / ``content`` / ``tool_calls.K.*`` / ``tool_call_id`` and
  ``gen_ai.completion.N.*``, with ``gen_ai.usage.prompt_tokens`` / ``completion_tokens``.
- **OpenInference**: ``openinference.span.kind`` (LLM, TOOL, AGENT, CHAIN, RETRIEVER,
  EMBEDDING, RERANKER), ``llm.input_messages.N.message.role`` / ``content`` /
  ``contents.M.message_content.*`` / ``tool_calls.K.tool_call.{id, function.name,
  function.arguments}`` / ``tool_call_id``, ``llm.output_messages.N.*``, ``llm.prompts`` /
  ``llm.choices`` (completions), ``llm.token_count.prompt`` (cache reads included) /
  ``completion``, ``llm.model_name``, ``llm.provider`` / ``llm.system``, ``llm.tools.N.tool.json_schema``,
  ``session.id``, ``input.value`` / ``output.value``, ``tool.name``, ``tool_call.id``,
  ``retrieval.documents.N.document.{id, content, score}``.

A message whose shape none of these documents is a warning naming the span, and its JSON is
kept as its text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from .common import as_text, token_count
from .otel_spans import Span

__all__ = ["Message", "ModelCall", "Retrieval", "ToolCall", "ToolResponse", "ToolRun",
           "SpanMeaning", "canonical_arguments"]

MODEL_OPERATIONS = {"chat", "text_completion", "generate_content", "completion"}
MESSAGE_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                  "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
CHOICE_EVENT = "gen_ai.choice"
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
_ROLES = {"system": "system", "developer": "system", "instruction": "system",
          "user": "user", "human": "user", "customer": "user",
          "assistant": "assistant", "model": "assistant", "ai": "assistant", "bot": "assistant",
          "tool": "tool", "function": "tool", "ipython": "tool"}


@dataclass(frozen=True)
class ToolCall:
    id: str | None
    name: str
    arguments: Any


@dataclass(frozen=True)
class ToolResponse:
    id: str | None
    name: str | None
    text: str


@dataclass
class Message:
    role: str  # system, user, assistant or tool
    text: str
    calls: list[ToolCall] = field(default_factory=list)
    responses: list[ToolResponse] = field(default_factory=list)
    _key: str | None = field(default=None, repr=False, compare=False)

    def key(self) -> str:
        """What identifies the message by content: the same message sent again by a later
        request (or an answer sent back) has the same key, whichever form each span used.
        (Computed once: a long conversation resends every message with every request.)"""
        if self._key is None:
            value = [self.role, self.text,
                     [(c.id, c.name, canonical_arguments(c.arguments)) for c in self.calls],
                     [(r.id, r.text) for r in self.responses]]
            self._key = hashlib.sha256(
                json.dumps(value, ensure_ascii=False).encode("utf-8", "replace")).hexdigest()
        return self._key


@dataclass
class ModelCall:
    span: Span
    system: str | None  # the system instructions sent apart from the messages
    input: list[Message] | None  # None: the span holds no message content
    output: list[Message]
    input_tokens: int | None
    output_tokens: int | None
    model: str  # the model that answered (the response's), else the one asked
    provider: str
    tools_text: str  # the tool definitions sent, for the estimate of what they cost
    source: str  # which convention the messages were read from
    requested: str  # the model asked for: the participant (one per model the agent asks)


@dataclass
class ToolRun:
    span: Span
    call_id: str | None
    name: str
    arguments: Any
    result: str | None
    error: str | None


@dataclass
class Retrieval:
    span: Span
    query: str
    documents: list[tuple[str, str, Any]]  # (id, content, score)


def canonical_arguments(value: Any) -> str:
    """Tool call arguments compared as JSON: the string ``'{"city": "Paris"}'`` one span
    records and the object another records are the same arguments."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return value
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return repr(value)


def _json(value: Any) -> Any:
    """A structured value, or the JSON a string attribute holds; None when it holds none."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("[", "{"):
            try:
                return json.loads(text)
            except (ValueError, RecursionError):  # not JSON, or nested past the parser
                return None
        return None
    return value


def indexed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Flattened list attributes (``llm.input_messages.0.message.role``) as a list of objects
    keyed by the rest of each key (``{"message.role": ...}``), in index order."""
    found: dict[int, dict[str, Any]] = {}
    head = prefix + "."
    for key, value in attrs.items():
        if not key.startswith(head):
            continue
        index, _, rest = key[len(head):].partition(".")
        if index.isdigit() and rest:
            found.setdefault(int(index), {})[rest] = value
    return [found[i] for i in sorted(found)]


def _number(value: Any) -> int | None:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())  # an int64 written as a string attribute
    return token_count(value)


class SpanMeaning:
    """Reads spans; ``warn(span, what)`` is called once per span and kind of problem."""

    def __init__(self, warn: Callable[[Span, str], None]) -> None:
        self._warn = warn
        self._warned: set[tuple[str, str, str]] = set()

    def warn(self, span: Span, what: str, kind: str | None = None) -> None:
        key = (span.trace_id, span.span_id, kind or what)
        if key not in self._warned:
            self._warned.add(key)
            self._warn(span, what)

    # -- what a span is
    @staticmethod
    def attrs(span: Span) -> dict[str, Any]:
        """The span's attributes, with those of its operation-details event where the span
        lacks them (an instrumentation may put the messages on the event only)."""
        merged = dict(span.attributes)
        for e in span.events:
            if e.name == DETAILS_EVENT:
                for k, v in e.attributes.items():
                    merged.setdefault(k, v)
        return merged

    @staticmethod
    def operation(attrs: dict[str, Any]) -> str:
        return str(attrs.get("gen_ai.operation.name") or "").lower()

    @staticmethod
    def kind(attrs: dict[str, Any]) -> str:
        return str(attrs.get("openinference.span.kind") or "").upper()

    def is_model_call(self, span: Span, attrs: dict[str, Any]) -> bool:
        op, kind = self.operation(attrs), self.kind(attrs)
        if op in MODEL_OPERATIONS or kind == "LLM":
            return True
        if op or kind:
            return False
        if str(attrs.get("llm.request.type") or "") in ("chat", "completion"):
            return True
        return any(k.startswith("gen_ai.prompt.") for k in attrs) or any(
            e.name in MESSAGE_EVENTS or e.name == CHOICE_EVENT for e in span.events)

    def is_tool(self, attrs: dict[str, Any]) -> bool:
        return self.operation(attrs) == "execute_tool" or self.kind(attrs) == "TOOL"

    def is_retrieval(self, attrs: dict[str, Any]) -> bool:
        return self.operation(attrs) == "retrieval" or self.kind(attrs) == "RETRIEVER"

    def is_agent(self, attrs: dict[str, Any]) -> bool:
        return self.operation(attrs) == "invoke_agent" or self.kind(attrs) == "AGENT"

    @staticmethod
    def agent_name(span: Span, attrs: dict[str, Any]) -> str | None:
        name = attrs.get("gen_ai.agent.name") or attrs.get("agent.name")
        return str(name) if name else None

    # -- a model call
    def model_call(self, span: Span, attrs: dict[str, Any]) -> ModelCall:
        inp, source = self._input(span, attrs)
        out = self._output(span, attrs)
        return ModelCall(
            span, self._system(span, attrs), inp, out,
            self._usage(span, attrs, ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens",
                                      "llm.token_count.prompt")),
            self._usage(span, attrs, ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                                      "llm.token_count.completion")),
            str(next((attrs[k] for k in ("gen_ai.response.model", "gen_ai.request.model",
                                         "llm.model_name", "llm.response.model_name",
                                         "llm.request.model_name") if attrs.get(k)), "unknown")),
            str(next((attrs[k] for k in ("gen_ai.provider.name", "gen_ai.system", "llm.provider",
                                         "llm.system") if attrs.get(k)), "unknown")),
            self._tools_text(attrs), source,
            str(next((attrs[k] for k in ("gen_ai.request.model", "llm.request.model_name",
                                         "llm.model_name", "gen_ai.response.model") if attrs.get(k)),
                     "unknown")))

    def _usage(self, span: Span, attrs: dict[str, Any], keys: tuple[str, ...]) -> int | None:
        for key in keys:
            if attrs.get(key) is None:
                continue
            n = _number(attrs[key])
            if n is None:
                self.warn(span, f"{key} is {as_text(attrs[key])[:40]!r}, not a whole number of "
                                "tokens; the request's size is estimated", key)
                return None
            return n
        return None

    @staticmethod
    def _tools_text(attrs: dict[str, Any]) -> str:
        if attrs.get("gen_ai.tool.definitions") is not None:
            return as_text(attrs["gen_ai.tool.definitions"])
        schemas = [t.get("tool.json_schema") for t in indexed(attrs, "llm.tools")]
        functions = indexed(attrs, "llm.request.functions")
        return "\n".join(as_text(s) for s in [*schemas, *functions] if s)

    def _system(self, span: Span, attrs: dict[str, Any]) -> str | None:
        value = attrs.get("gen_ai.system_instructions")
        if value is None:
            return None
        parsed = _json(value)
        if parsed is None:
            return str(value)  # plain text instructions
        if isinstance(parsed, dict):
            parsed = [parsed]
        msg = self._parts(span, parsed if isinstance(parsed, list) else [parsed], "system")
        return msg.text

    def _input(self, span: Span, attrs: dict[str, Any]) -> tuple[list[Message] | None, str]:
        if attrs.get("gen_ai.input.messages") is not None:
            return self._messages(span, attrs["gen_ai.input.messages"], "gen_ai.input.messages"), \
                "gen_ai.input.messages"
        oi = indexed(attrs, "llm.input_messages")
        if oi:
            return [self._openinference(span, m) for m in oi], "llm.input_messages"
        tl = indexed(attrs, "gen_ai.prompt")
        if tl:
            return [self._flat(span, m) for m in tl], "gen_ai.prompt.N"
        events = self._event_messages(span, attrs)
        if events is not None:
            return events[0], "events"
        legacy = attrs.get("gen_ai.prompt") or self._event_attribute(span, "gen_ai.content.prompt",
                                                                     "gen_ai.prompt")
        if legacy is not None:
            return self._messages(span, legacy, "gen_ai.prompt"), "gen_ai.prompt"
        prompts = indexed(attrs, "llm.prompts")
        if prompts or isinstance(attrs.get("llm.prompts"), list):
            texts = [p.get("prompt.text") for p in prompts] or attrs.get("llm.prompts") or []
            return [Message("user", as_text(t)) for t in texts], "llm.prompts"
        return None, ""

    def _output(self, span: Span, attrs: dict[str, Any]) -> list[Message]:
        if attrs.get("gen_ai.output.messages") is not None:
            return self._messages(span, attrs["gen_ai.output.messages"], "gen_ai.output.messages")
        oi = indexed(attrs, "llm.output_messages")
        if oi:
            return [self._openinference(span, m) for m in oi]
        tl = indexed(attrs, "gen_ai.completion")
        if tl:
            return [self._flat(span, m, default_role="assistant") for m in tl]
        events = self._event_messages(span, attrs)
        if events is not None and events[1]:
            return events[1]
        legacy = attrs.get("gen_ai.completion") or self._event_attribute(
            span, "gen_ai.content.completion", "gen_ai.completion")
        if legacy is not None:
            return self._messages(span, legacy, "gen_ai.completion", default_role="assistant")
        choices = indexed(attrs, "llm.choices")
        return [Message("assistant", as_text(c.get("completion.text"))) for c in choices]

    @staticmethod
    def _event_attribute(span: Span, event: str, key: str) -> Any:
        return next((e.attributes.get(key) for e in span.events
                     if e.name == event and e.attributes.get(key) is not None), None)

    # -- message shapes
    def _role(self, span: Span, role: Any, default: str) -> str:
        if role is None or role == "":
            return default
        found = _ROLES.get(str(role).lower())
        if found is None:
            self.warn(span, f"message role {as_text(role)[:40]!r} is not one of the conventions' "
                            f"roles; read as {default}", f"role:{role}")
            return default
        return found

    def _messages(self, span: Span, value: Any, key: str, default_role: str = "user") -> list[Message]:
        parsed = _json(value) if isinstance(value, str) else value
        if isinstance(parsed, dict):
            parsed = [parsed]
        if not isinstance(parsed, list):
            self.warn(span, f"{key} is not a list of messages (the documented shape); "
                            "kept as one message of text", key)
            return [Message(default_role, as_text(value))]
        return [self._message(span, m, key, default_role) for m in parsed]

    def _message(self, span: Span, m: Any, key: str, default_role: str = "user") -> Message:
        if isinstance(m, dict) and isinstance(m.get("parts"), list):
            msg = self._parts(span, m["parts"], self._role(span, m.get("role"), default_role))
            return msg
        if isinstance(m, dict) and any(k in m for k in ("content", "tool_calls", "role")):
            return self._openai_style(span, m, default_role)
        self.warn(span, f"a message of {key} has neither role and parts nor role and content "
                        "(not the documented shape); its JSON is kept as its text", f"shape:{key}")
        return Message(default_role, as_text(m))

    def _parts(self, span: Span, parts: list[Any], role: str) -> Message:
        texts: list[str] = []
        calls: list[ToolCall] = []
        responses: list[ToolResponse] = []
        for p in parts:
            if isinstance(p, str):
                texts.append(p)
                continue
            if not isinstance(p, dict):
                texts.append(as_text(p))
                continue
            kind = str(p.get("type") or "")
            if kind == "text":
                texts.append(as_text(p.get("content", p.get("text"))))
            elif kind in ("reasoning", "thinking"):
                texts.append("[reasoning] " + as_text(p.get("content")))
            elif kind == "tool_call":
                calls.append(ToolCall(_str(p.get("id")), str(p.get("name") or "unknown"),
                                      p.get("arguments")))
            elif kind == "tool_call_response":
                body = p.get("response", p.get("result"))
                responses.append(ToolResponse(_str(p.get("id")), _str(p.get("name")),
                                              body if isinstance(body, str) else as_text(body)))
            elif kind in ("blob", "uri", "file", "binary", "image-url", "audio-url", "video-url",
                          "document-url"):
                what = p.get("modality") or p.get("mime_type") or p.get("media_type") or kind
                where = p.get("uri") or p.get("url") or p.get("file_id") or ""
                texts.append(f"[{what}{' ' + str(where) if where else ''}]")
            elif kind in ("server_tool_call", "server_tool_call_response"):
                texts.append(f"[{kind} {as_text(p.get('name'))}] "
                             + as_text(p.get("server_tool_call") or p.get("server_tool_call_response")))
            else:
                self.warn(span, f"message part type {kind!r} is not one the conventions define; "
                                "its JSON is kept as text", f"part:{kind}")
                texts.append(f"[{kind}] {as_text(p)}")
        return Message(role, "\n".join(t for t in texts if t), calls, responses)

    def _openai_style(self, span: Span, m: dict[str, Any], default_role: str) -> Message:
        """``{role, content, tool_calls, tool_call_id}`` (OpenAI's shape, which the older GenAI
        events and pydantic-ai's version 1 also use; a tool event's call id is ``id``)."""
        role = self._role(span, m.get("role"), default_role)
        text = _content_text(m.get("content"))
        calls = [_openai_call(c) for c in (m.get("tool_calls") if isinstance(m.get("tool_calls"), list) else [])
                 if isinstance(c, dict)]
        if role == "tool":
            call_id = _str(m.get("tool_call_id") or m.get("id"))
            return Message("tool", "", [], [ToolResponse(call_id, _str(m.get("name")), text)])
        return Message(role, text, calls)

    def _openinference(self, span: Span, m: dict[str, Any]) -> Message:
        role = self._role(span, m.get("message.role"), "user")
        text = as_text(m.get("message.content")) if m.get("message.content") is not None else ""
        contents = indexed(m, "message.contents")
        if contents and not text:
            parts = []
            for c in contents:
                kind = str(c.get("message_content.type") or "text")
                if kind == "text":
                    parts.append(as_text(c.get("message_content.text")))
                elif kind == "reasoning":
                    parts.append("[reasoning] " + as_text(c.get("message_content.text")))
                elif kind == "tool_use":
                    continue  # the same call is under message.tool_calls
                else:
                    url = c.get("message_content.image.image.url")
                    parts.append(f"[{kind}{' ' + str(url)[:200] if url else ''}]")
            text = "\n".join(p for p in parts if p)
        calls = [ToolCall(_str(c.get("tool_call.id")), str(c.get("tool_call.function.name") or "unknown"),
                          c.get("tool_call.function.arguments"))
                 for c in indexed(m, "message.tool_calls")]
        if not calls and m.get("message.function_call_name"):
            calls = [ToolCall(None, str(m["message.function_call_name"]),
                              m.get("message.function_call_arguments_json"))]
        if role == "tool":
            return Message("tool", "", [], [ToolResponse(_str(m.get("message.tool_call_id")),
                                                         _str(m.get("message.name")), text)])
        return Message(role, text, calls)

    def _flat(self, span: Span, m: dict[str, Any], default_role: str = "user") -> Message:
        """OpenLLMetry's ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``."""
        content: Any = m.get("content")
        if isinstance(content, str) and content.strip().startswith("["):
            parsed = _json(content)  # a list of content parts written as JSON
            if isinstance(parsed, list) and all(isinstance(p, dict) for p in parsed):
                content = parsed
        msg = self._openai_style(span, {"role": m.get("role"), "content": content,
                                        "tool_call_id": m.get("tool_call_id")}, default_role)
        if msg.role != "tool":
            msg.calls = [ToolCall(_str(c.get("id")), str(c.get("name") or "unknown"), c.get("arguments"))
                         for c in indexed(m, "tool_calls")]
        return msg

    def _event_messages(self, span: Span, attrs: dict[str, Any]) -> tuple[list[Message], list[Message]] | None:
        """(input, output) from per-message events; None when the span has none."""
        items: list[tuple[str, Any]] = []
        for e in span.events:
            if e.name in MESSAGE_EVENTS or e.name == CHOICE_EVENT:
                body = {"content": e.body} if isinstance(e.body, str) else e.body
                if not isinstance(body, dict):
                    body = _json(e.attributes.get("gen_ai.event.content"))
                if not isinstance(body, dict):
                    body = {k: (_json(v) if k == "tool_calls" else v) for k, v in e.attributes.items()}
                items.append((e.name, body))
        legacy = _json(attrs.get("events")) if isinstance(attrs.get("events"), str) else None
        if not items and isinstance(legacy, list):  # pydantic-ai instrumentation version 1
            for ev in legacy:
                if isinstance(ev, dict) and ev.get("event.name") in (*MESSAGE_EVENTS, CHOICE_EVENT):
                    items.append((ev["event.name"], ev))
        if not items:
            return None
        inp: list[Message] = []
        out: list[Message] = []
        for name, body in items:
            if name == CHOICE_EVENT:
                if body.get("index", 0) not in (0, "0", None):
                    continue  # another choice: the run's answer is the first
                message = body.get("message") if isinstance(body.get("message"), dict) else body
                out.append(self._openai_style(span, {**message, "role": message.get("role") or "assistant"},
                                              "assistant"))
            else:
                role = MESSAGE_EVENTS[name]
                inp.append(self._openai_style(span, {**body, "role": role}, role))
        return inp, out

    # -- tools and retrievals
    def tool_run(self, span: Span, attrs: dict[str, Any]) -> ToolRun:
        call_id = attrs.get("gen_ai.tool.call.id") or attrs.get("tool_call.id") or attrs.get("tool.id")
        result = attrs.get("gen_ai.tool.call.result", attrs.get("output.value"))
        error = None
        if span.status == "error":
            error = span.status_message or next(
                (as_text(e.attributes.get("exception.message")) for e in span.events
                 if e.name == "exception"), "") or "error"
        return ToolRun(span, _str(call_id),
                       str(attrs.get("gen_ai.tool.name") or attrs.get("tool.name") or span.name or "tool"),
                       attrs.get("gen_ai.tool.call.arguments", attrs.get("input.value")),
                       None if result is None else (result if isinstance(result, str) else as_text(result)),
                       error)

    def retrieval(self, span: Span, attrs: dict[str, Any]) -> Retrieval:
        docs: list[tuple[str, str, Any]] = []
        for d in indexed(attrs, "retrieval.documents"):
            docs.append((as_text(d.get("document.id")), as_text(d.get("document.content")),
                         d.get("document.score")))
        if not docs and attrs.get("gen_ai.retrieval.documents") is not None:
            parsed = _json(attrs["gen_ai.retrieval.documents"])
            for d in parsed if isinstance(parsed, list) else []:
                if isinstance(d, dict):
                    docs.append((as_text(d.get("id")), as_text(d.get("content") or d.get("text")),
                                 d.get("score")))
        query = attrs.get("gen_ai.retrieval.query.text", attrs.get("input.value"))
        return Retrieval(span, as_text(query), docs)


def _str(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _openai_call(c: dict[str, Any]) -> ToolCall:
    fn = c.get("function") if isinstance(c.get("function"), dict) else {}
    return ToolCall(_str(c.get("id")), str(fn.get("name") or c.get("name") or "unknown"),
                    fn.get("arguments", c.get("arguments")))


def _content_text(content: Any) -> str:
    """A message ``content``: a string, or a list of parts (OpenAI ``{type: text, text}``,
    pydantic-ai version 1 ``{kind: text | thinking, text}``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for p in content:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, dict):
                kind = p.get("type") or p.get("kind")
                if kind in ("text", "input_text", "output_text") or (kind is None and "text" in p):
                    out.append(as_text(p.get("text")))
                elif kind in ("thinking", "reasoning"):
                    out.append("[reasoning] " + as_text(p.get("text") or p.get("content")))
                elif kind in ("image_url", "input_image", "image", "input_audio", "file"):
                    out.append(f"[{kind}]")
                else:
                    out.append(as_text(p))
            else:
                out.append(as_text(p))
        return "\n".join(x for x in out if x)
    return as_text(content)
