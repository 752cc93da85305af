"""OpenTelemetry spans read into one span model, whatever file they came in.

Three containers hold the same spans:

- **OTLP JSON**: one ``ExportTraceServiceRequest`` in the OTLP/JSON encoding,
  ``{"resourceSpans": [{"resource": {...}, "scopeSpans": [{"scope": {...}, "spans": [...]}]}]}``:
  lowerCamelCase keys, hex ``traceId`` / ``spanId``, attributes as
  ``[{"key": k, "value": {"stringValue" | "intValue" | ...: v}}]``, 64-bit integers as decimal
  strings, times in ``...UnixNano``. Also read: base64 ids (the proto3 JSON mapping some
  tools write), snake_case keys, enum names for ``kind`` and ``status.code``.
- **OTLP JSON lines**: one such document per line (the OpenTelemetry Collector's file
  exporter; what ``contextlens collect`` writes). A line may also be a logs document
  (``{"resourceLogs": [...]}``): a log record that names a span (``traceId``/``spanId``) is an
  event of that span, so log-based GenAI events (``gen_ai.user.message``,
  ``gen_ai.client.inference.operation.details``) are read with their span. A malformed line
  (a half-written last one) is a warning naming it.
- **A Phoenix (Arize) span export** as Parquet: the dataframe of
  ``px.Client().get_spans_dataframe()`` / ``TraceDataset.save()``: columns ``name``,
  ``span_kind``, ``parent_id``, ``start_time``, ``end_time``, ``status_code``,
  ``status_message``, ``events``, ``context.span_id``, ``context.trace_id`` and one
  ``attributes.<key>`` column per attribute, its value unflattened by Phoenix (a list of
  ``{"message.role": ..., "message.content": ...}`` objects for ``llm.input_messages``, a nested
  object for keys outside OpenInference's conventions); each is flattened back to the
  dotted keys the spans were sent with.

What is not right in a span is a warning naming its trace and span id, never a crash: a span
id used by two different spans (the later is skipped; an exact copy, a batch delivered
twice, is read once), an end before its start, a time that is not one, an attribute of
more than ``HUGE_VALUE`` bytes (kept, but named), events the SDK dropped.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..errors import ContextlensError
from .common import UTC
from .jsonread import iter_jsonl, json_error, loads_document

__all__ = ["Event", "Span", "SpanReader", "documents_in", "flatten", "is_otlp_document",
           "parquet_columns", "unix_nanos", "PHOENIX_COLUMNS"]

UNIX = dt.datetime(1970, 1, 1, tzinfo=UTC)
# More than any model's context window holds (a million tokens is about 4 MB of text): such an
# attribute is kept but named, it is more likely a producer's bug than a prompt.
HUGE_VALUE = 4 << 20
# The columns of a Phoenix span export that say it is one (the others are optional)
PHOENIX_COLUMNS = ("context.span_id", "context.trace_id", "span_kind")
_ATTRIBUTE_PREFIX = "attributes."

WarnFn = Callable[[str], None]


@dataclass
class Event:
    """A span event, or a log record that names the span (``body`` set)."""

    name: str
    time: dt.datetime | None
    attributes: dict[str, Any]
    body: Any = None


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: dt.datetime | None
    end: dt.datetime | None
    status: str  # "ok", "error" or "unset"
    status_message: str
    attributes: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""
    where: str = ""  # where in the file: "line 3", "row 12"
    order: int = 0  # file order
    dropped_events: int = 0

    @property
    def label(self) -> str:
        return f"span {self.span_id} of trace {self.trace_id}"


# --------------------------------------------------------------------------- OTLP values


def _get(obj: dict[str, Any], camel: str) -> Any:
    """``obj[camel]``, else its snake_case spelling (``resourceSpans`` / ``resource_spans``)."""
    if camel in obj:
        return obj[camel]
    snake = "".join("_" + c.lower() if c.isupper() else c for c in camel)
    return obj.get(snake)


_VALUE_KINDS = ("stringValue", "boolValue", "intValue", "doubleValue", "arrayValue",
                "kvlistValue", "bytesValue")


def any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value: int64 strings as ints, arrays as lists,
    key-value lists as dicts, bytes as their base64 text. A value that is not an AnyValue
    object is taken as it is (some writers put plain JSON values)."""
    if not isinstance(value, dict):
        return value
    for kind in _VALUE_KINDS:
        v = _get(value, kind)
        if v is None:
            continue
        if kind == "intValue":
            try:
                return int(v)
            except (TypeError, ValueError):
                return v
        if kind == "doubleValue":
            try:
                return float(v)  # "NaN", "Infinity" are the proto3 JSON spellings
            except (TypeError, ValueError):
                return v
        if kind == "arrayValue":
            items = _get(v, "values") if isinstance(v, dict) else v
            return [any_value(i) for i in items] if isinstance(items, list) else []
        if kind == "kvlistValue":
            items = _get(v, "values") if isinstance(v, dict) else v
            return attributes(items)
        return v
    return None


def attributes(items: Any) -> dict[str, Any]:
    """OTLP ``attributes`` (``[{"key", "value"}]``) as a dict; a plain object is taken as it is."""
    if isinstance(items, dict):
        return dict(items)
    out: dict[str, Any] = {}
    for kv in items if isinstance(items, list) else []:
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[kv["key"]] = any_value(kv.get("value"))
    return out


def _id(value: Any, size: int) -> str | None:
    """A trace (16 bytes) or span (8 bytes) id as lower-case hex: OTLP/JSON's hex, or the
    base64 of protobuf's standard JSON mapping. None for an absent or all-zero id."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.startswith("0x"):
        text = text[2:]
    if len(text) == 2 * size:
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raw = b""
        if raw:
            return None if not any(raw) else raw.hex()
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text  # neither: kept as written, it still tells spans apart
    if len(raw) == size:
        return None if not any(raw) else raw.hex()
    return text


def unix_nanos(value: Any) -> dt.datetime | None:
    """Unix nanoseconds (a decimal string or a number) as a UTC time; None for 0, absent or
    not a time."""
    try:
        ns = int(value)
    except (TypeError, ValueError):
        return None
    if ns <= 0:
        return None
    try:
        return UNIX + dt.timedelta(microseconds=ns // 1000)
    except OverflowError:
        return None


def _status(value: Any) -> tuple[str, str]:
    if isinstance(value, str):  # Phoenix: "OK" / "ERROR" / "UNSET"
        code: Any = value
        message = ""
    elif isinstance(value, dict):
        code = value.get("code", 0)
        message = str(value.get("message") or "")
    else:
        return "unset", ""
    text = str(code).upper()
    if text in ("2", "STATUS_CODE_ERROR", "ERROR"):
        return "error", message
    if text in ("1", "STATUS_CODE_OK", "OK"):
        return "ok", message
    return "unset", message


def is_otlp_document(value: Any) -> bool:
    return isinstance(value, dict) and any(
        isinstance(_get(value, k), list) for k in ("resourceSpans", "resourceLogs"))


# --------------------------------------------------------------------------- the reader


class SpanReader:
    """Spans of one file, in file order, deduplicated and checked; log records that name a
    span become its events. ``warn`` takes each warning."""

    def __init__(self, path: Path, warn: WarnFn) -> None:
        self.path = path
        self.warn = warn
        self.spans: list[Span] = []
        self._by_id: dict[tuple[str, str], Span] = {}
        self._raw: dict[tuple[str, str], str] = {}
        self._logs: list[tuple[str, str, Event]] = []
        self.duplicates = 0
        self.stats: dict[str, int] = {}

    def _bump(self, key: str, by: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + by

    # -- containers
    def read_json(self, data: bytes, builder: Any) -> None:
        """One OTLP JSON document, a list of them, or OTLP JSON lines."""
        first_error = "not one JSON value"
        try:
            doc = loads_document(self.path, data)
        except (ValueError, UnicodeDecodeError) as err:
            doc = None
            first_error = json_error(err)
        if isinstance(doc, (dict, list)):
            docs = doc if isinstance(doc, list) else [doc]
            if not any(is_otlp_document(d) for d in docs):
                raise ContextlensError(
                    f"{self.path}: not OpenTelemetry spans (no \"resourceSpans\" list: a JSON "
                    "document of OTLP/JSON, or OTLP/JSON lines, is read)")
            for i, d in enumerate(docs):
                self._document(d, "document" if len(docs) == 1 else f"document {i}")
        else:
            found = False
            for n, value in iter_jsonl(self.path, data, builder):
                if is_otlp_document(value):
                    found = True
                    self._document(value, f"line {n}")
                else:
                    self.warn(f"{self.path.name} line {n}: not an OTLP document "
                              "(no resourceSpans nor resourceLogs list), skipped")
            if not found:
                raise ContextlensError(
                    f"{self.path}: not OpenTelemetry spans: no line is an OTLP/JSON document "
                    f"{{\"resourceSpans\": [...]}} (as one document: {first_error})")
        self._attach_logs()

    def read_parquet(self, source: Any) -> None:
        """A Phoenix span export (``source``: a path or a file object)."""
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(source)
        except Exception as err:  # pyarrow raises its own error kinds for a damaged file
            raise ContextlensError(f"{self.path}: not a readable Parquet file ({err})") from None
        names = set(pf.schema_arrow.names)
        missing = [c for c in PHOENIX_COLUMNS if c not in names]
        if missing:
            raise ContextlensError(
                f"{self.path}: a Parquet file without {', '.join(missing)}: not a Phoenix "
                "span export (its columns: " + ", ".join(sorted(names)[:8]) + ")")
        n = 0
        try:
            for batch in pf.iter_batches(batch_size=1024):
                for row in batch.to_pylist():
                    self._phoenix_row(row, f"row {n}")
                    n += 1
        except ContextlensError:
            raise
        except Exception as err:
            raise ContextlensError(f"{self.path}: Parquet row {n} cannot be read ({err})") from None

    # -- OTLP
    def _document(self, doc: dict[str, Any], where: str) -> None:
        for rs in _get(doc, "resourceSpans") or []:
            if not isinstance(rs, dict):
                continue
            resource = attributes((_get(rs, "resource") or {}).get("attributes"))
            scopes = _get(rs, "scopeSpans") or _get(rs, "instrumentationLibrarySpans") or []
            for ss in scopes if isinstance(scopes, list) else []:
                if not isinstance(ss, dict):
                    continue
                scope = _get(ss, "scope") or _get(ss, "instrumentationLibrary") or {}
                name = str(scope.get("name") or "") if isinstance(scope, dict) else ""
                for raw in _get(ss, "spans") or []:
                    if isinstance(raw, dict):
                        self._otlp_span(raw, resource, name, where)
        for rl in _get(doc, "resourceLogs") or []:
            if not isinstance(rl, dict):
                continue
            for sl in _get(rl, "scopeLogs") or []:
                if not isinstance(sl, dict):
                    continue
                for rec in _get(sl, "logRecords") or []:
                    if isinstance(rec, dict):
                        self._log_record(rec)

    def _otlp_span(self, raw: dict[str, Any], resource: dict[str, Any], scope: str,
                   where: str) -> None:
        trace = _id(_get(raw, "traceId"), 16)
        span_id = _id(_get(raw, "spanId"), 8)
        name = str(raw.get("name") or "")
        if trace is None or span_id is None:
            self.warn(f"{self.path.name} {where}: span {name!r} has no "
                      f"{'trace id' if trace is None else 'span id'}, skipped")
            return
        status, message = _status(raw.get("status"))
        events = []
        for e in raw.get("events") or []:
            if isinstance(e, dict):
                events.append(Event(str(e.get("name") or ""), unix_nanos(_get(e, "timeUnixNano")),
                                    self._checked(attributes(e.get("attributes")), trace, span_id)))
        try:
            dropped = int(_get(raw, "droppedEventsCount") or 0)
        except (TypeError, ValueError):
            dropped = 0
        span = Span(trace, span_id, _id(_get(raw, "parentSpanId"), 8), name,
                    unix_nanos(_get(raw, "startTimeUnixNano")), unix_nanos(_get(raw, "endTimeUnixNano")),
                    status, message, {}, events, resource, scope, where, dropped_events=dropped)
        span.attributes = self._checked(attributes(raw.get("attributes")), trace, span_id)
        self._add(span, raw)

    def _log_record(self, rec: dict[str, Any]) -> None:
        trace = _id(_get(rec, "traceId"), 16)
        span_id = _id(_get(rec, "spanId"), 8)
        attrs = attributes(rec.get("attributes"))
        name = _get(rec, "eventName") or attrs.get("event.name") or ""
        if trace is None or span_id is None:
            self._bump("otel.log_records_without_span")
            return
        time = unix_nanos(_get(rec, "timeUnixNano")) or unix_nanos(_get(rec, "observedTimeUnixNano"))
        body = any_value(rec.get("body"))
        self._logs.append((trace, span_id, Event(str(name), time,
                                                 self._checked(attrs, trace, span_id), body)))

    def _attach_logs(self) -> None:
        orphans = 0
        for trace, span_id, event in self._logs:
            span = self._by_id.get((trace, span_id))
            if span is None:
                orphans += 1
                continue
            span.events.append(event)
        if orphans:
            self.warn(f"{self.path.name}: {orphans} log record{'s' if orphans != 1 else ''} "
                      "name a span that is not in the file, skipped")
        self._logs.clear()

    # -- Phoenix
    def _phoenix_row(self, row: dict[str, Any], where: str) -> None:
        trace = _id(row.get("context.trace_id"), 16)
        span_id = _id(row.get("context.span_id"), 8)
        name = str(row.get("name") or "")
        if trace is None or span_id is None:
            self.warn(f"{self.path.name} {where}: span {name!r} has no "
                      f"{'trace id' if trace is None else 'span id'}, skipped")
            return
        attrs: dict[str, Any] = {}
        for key, value in row.items():
            if key.startswith(_ATTRIBUTE_PREFIX):
                attrs.update(flatten(key[len(_ATTRIBUTE_PREFIX):], value))
        if row.get("span_kind") and "openinference.span.kind" not in attrs:
            attrs["openinference.span.kind"] = str(row["span_kind"])
        events = []
        raw_events = row.get("events")
        for e in raw_events if isinstance(raw_events, list) else []:
            if isinstance(e, dict):
                e_attrs = e.get("attributes")
                if isinstance(e_attrs, str):
                    try:
                        e_attrs = json.loads(e_attrs)
                    except ValueError:
                        e_attrs = {}
                flat: dict[str, Any] = {}
                for k, v in (e_attrs.items() if isinstance(e_attrs, dict) else ()):
                    flat.update(flatten(str(k), v))
                events.append(Event(str(e.get("name") or ""), _phoenix_time(e.get("timestamp")), flat))
        status, _ = _status(row.get("status_code"))
        span = Span(trace, span_id, _id(row.get("parent_id"), 8), name,
                    _phoenix_time(row.get("start_time")), _phoenix_time(row.get("end_time")),
                    status, str(row.get("status_message") or ""),
                    self._checked(attrs, trace, span_id), events, {}, "phoenix", where)
        self._add(span, None)

    # -- checks
    def _checked(self, attrs: dict[str, Any], trace: str, span_id: str) -> dict[str, Any]:
        for key, value in attrs.items():
            if isinstance(value, str) and len(value) > HUGE_VALUE:
                self.warn(f"span {span_id} of trace {trace}: attribute {key} holds "
                          f"{len(value) / (1 << 20):.1f} MB, more than any model's context "
                          "window; kept whole")
        return attrs

    def _add(self, span: Span, raw: dict[str, Any] | None) -> None:
        key = (span.trace_id, span.span_id)
        text = json.dumps(raw, sort_keys=True, default=str) if raw is not None else None
        if key in self._by_id:
            if text is not None and text == self._raw.get(key):
                self.duplicates += 1  # a batch delivered twice (OTLP allows it): read once
            else:
                first = self._by_id[key]
                self.warn(f"{span.label}: the span id is used again by span {span.name!r} "
                          f"({span.where}; first {first.name!r}, {first.where}), the later skipped")
            return
        if span.start is not None and span.end is not None and span.end < span.start:
            self.warn(f"{span.label} ({span.name!r}): ends before it starts "
                      f"(clocks out of order); its end is taken as its start")
            span.end = span.start
        if span.dropped_events:
            self.warn(f"{span.label} ({span.name!r}): the SDK dropped {span.dropped_events} of "
                      "its events (its event count limit, OTEL_SPAN_EVENT_COUNT_LIMIT)")
        span.order = len(self.spans)
        self.spans.append(span)
        self._by_id[key] = span
        if text is not None:
            self._raw[key] = text

    def finish(self) -> list[Span]:
        if self.duplicates:
            self.warn(f"{self.path.name}: {self.duplicates} span{'s' if self.duplicates != 1 else ''} "
                      "appear more than once, identical (a batch delivered again): read once")
            self._bump("otel.duplicate_spans", self.duplicates)
        return self.spans


def _phoenix_time(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, str):
        from .common import parse_ts

        return parse_ts(value)
    return None


def flatten(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    """A Phoenix attribute column's value as the dotted keys it was sent with: an object's
    keys and a list of objects' indices join the prefix; other values stay as they are."""
    if value is None:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from flatten(f"{prefix}.{k}", v)
    elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            if isinstance(v, dict):
                yield from flatten(f"{prefix}.{i}", v)
    else:
        yield prefix, value


def parquet_columns(path: Path) -> set[str] | None:
    """The column names of a Parquet file, from its footer alone (pyarrow reads the schema
    and nothing else); None when it is not readable Parquet."""
    try:
        import pyarrow.parquet as pq

        return set(pq.read_schema(path).names)
    except Exception:  # a damaged or foreign file is simply not this format
        return None


def documents_in(sample_document: Any, lines: Iterable[Any] | None) -> bool:
    """Whether a detection sample holds an OTLP document (the file's, or one of its lines)."""
    docs = sample_document if isinstance(sample_document, list) else [sample_document]
    if any(is_otlp_document(d) for d in docs):
        return True
    return any(is_otlp_document(line) for line in lines or [])
