"""OTLP/HTTP request bodies (traces, and logs) in, the OTLP/JSON document the journal holds
out.

What the OpenTelemetry Protocol specification (opentelemetry-proto, docs/specification.md,
"OTLP/HTTP") asks of a receiver, and how this module answers it:

- Two encodings on one path, chosen by ``Content-Type``: ``application/x-protobuf`` (binary
  proto3) and ``application/json`` (the proto3 JSON mapping with OTLP's deviations). Any
  other type is refused with 415.
- ``Content-Encoding: gzip`` may be used by the client; we also take ``deflate`` (the
  Python SDK's other compression). The size limit holds "including after decompression":
  decompression stops at the limit and the request is refused with 413, so a gzip bomb
  never costs more than the limit in memory.
- Undecodable or invalid data is a permanent failure: 400, never retried by the client.
- Every 4xx/5xx body is a ``google.rpc.Status`` in the request's encoding; success is an
  ``ExportTraceServiceResponse`` (``ExportLogsServiceResponse`` for logs), empty:
  ``partial_success`` left unset.

Whatever the encoding, the journal gets one canonical form: the OTLP/JSON encoding of the
request, as the Collector's file exporter writes it. Hex ``traceId``/``spanId`` (NOT the
base64 of protobuf's standard JSON mapping), lowerCamelCase keys, enums as integers, 64-bit
integers as decimal strings, default values left out. A JSON body goes through the protobuf
message too (hex ids turned to bytes first), so it is validated field by field against the
schema, unknown fields are dropped as the specification requires, and its journal line is
the same as the protobuf body's would be.

Nothing here does I/O: the server (``ingest/collect/server.py``) reads bodies and writes
the journal.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass
from typing import Any

from ..text import one_line

__all__ = [
    "LOGS",
    "TRACES",
    "Batch",
    "Signal",
    "Rejected",
    "decode_body",
    "decompress",
    "encoding_of",
    "parse_size",
    "size_text",
    "status_body",
    "success_body",
    "PROTOBUF",
    "JSON",
]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# google.rpc.Code values for the Status of a failure (the specification does not use
# Status.code, and clients must not act on it; it is set for troubleshooting).
RPC_CODE = {400: 3, 404: 5, 405: 12, 413: 8, 415: 3, 417: 3, 500: 13, 503: 14}

_TRACE_ID_BYTES = 16
_SPAN_ID_BYTES = 8


class Rejected(Exception):
    """A request refused: ``status`` the HTTP status, ``str(err)`` the reason, for the sender
    (in the Status body) and for the server's log."""

    def __init__(self, status: int, reason: str, retry_after: int | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


@dataclass(frozen=True)
class Batch:
    """One accepted request: how many spans or log records it holds and its journal line
    (OTLP/JSON, no newline; empty when it held none: nothing to store)."""

    items: int
    line: bytes

    @property
    def spans(self) -> int:
        return self.items


@dataclass(frozen=True)
class Signal:
    """What differs between the two requests this receiver takes: the message, the JSON
    keys of its three levels, and the id fields of its items (``links`` for spans)."""

    name: str
    message: str  # the ExportXServiceRequest's name, for reasons
    top: str
    scope: str
    items: str
    noun: str
    ids: tuple[str, ...]

    def request(self) -> Any:
        if self.name == "traces":
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                ExportTraceServiceRequest,
            )

            return ExportTraceServiceRequest()
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
        )

        return ExportLogsServiceRequest()


TRACES = Signal("traces", "ExportTraceServiceRequest", "resourceSpans", "scopeSpans", "spans",
                "span", ("traceId", "spanId", "parentSpanId"))
# Log records: where instrumentations that send message content as events put it
# (gen_ai.user.message, gen_ai.client.inference.operation.details, ...), each naming its span
LOGS = Signal("logs", "ExportLogsServiceRequest", "resourceLogs", "scopeLogs", "logRecords",
              "log record", ("traceId", "spanId"))


def encoding_of(content_type: str) -> str | None:
    """``PROTOBUF`` or ``JSON`` for a request's media type (parameters already removed by
    the caller, e.g. ``; charset=utf-8``), None for any other."""
    kind = content_type.strip().lower()
    if kind == PROTOBUF:
        return PROTOBUF
    if kind == JSON:
        return JSON
    return None


# ----------------------------------------------------------------------------- decompression


def decompress(body: bytes, content_encoding: str, limit: int) -> bytes:
    """The body with its ``Content-Encoding`` undone, never more than ``limit`` bytes.

    ``gzip`` (several members are read one after another, as ``gzip -d`` does) and
    ``deflate`` (zlib, what RFC 9110 means by it and what the Python SDK sends). Each step
    of zlib is asked for at most what is left of the limit, so a small body that inflates to
    gigabytes stops at ``limit + 1`` bytes and is refused with 413."""
    coding = content_encoding.strip().lower()
    if coding in ("", "identity"):
        return body
    if coding not in ("gzip", "x-gzip", "deflate"):
        raise Rejected(415, f"Content-Encoding {_quoted(coding)} is not supported "
                            "(send gzip, deflate or none)")
    wbits = 15 if coding == "deflate" else 31  # 15: a zlib stream; 31: gzip header and trailer
    out: list[bytes] = []
    total = 0
    data = body
    while True:
        inflater = zlib.decompressobj(wbits)
        try:
            while True:
                # never more than what is left of the limit, plus one byte to know it is over
                chunk = inflater.decompress(data, limit + 1 - total)
                total += len(chunk)
                out.append(chunk)
                if total > limit:
                    raise Rejected(413, f"the body inflates to more than {size_text(limit)} "
                                        "(the limit, --max-body)")
                data = inflater.unconsumed_tail
                if inflater.eof or not data:
                    break
        except zlib.error as err:
            raise Rejected(400, f"the body is not valid {coding} data ({err})") from None
        if not inflater.eof:
            raise Rejected(400, f"the {coding} body is truncated (its stream does not end)")
        data = inflater.unused_data
        if not data.strip(b"\0"):
            break  # the end, or the zero padding gzip allows after its last member
        if coding == "deflate":
            raise Rejected(400, "the deflate body has bytes after the end of its stream")
        # another gzip member follows: read it as gzip -d does
    return b"".join(out)


# ----------------------------------------------------------------------------- decoding


def decode_body(body: bytes, encoding: str, signal: Signal = TRACES) -> Batch:
    """The :class:`Batch` of an uncompressed request body of ``signal`` in ``encoding``
    (``PROTOBUF`` or ``JSON``); :class:`Rejected` (400) naming what is wrong otherwise."""
    request = signal.request()
    if encoding == PROTOBUF:
        _parse_protobuf(body, request, signal)
    else:
        _parse_json(body, request, signal)
    items = _check_ids(request) if signal is TRACES else _count_records(request)
    if items == 0:
        return Batch(0, b"")
    return Batch(items, _journal_line(request, signal))


def _parse_protobuf(body: bytes, request: Any, signal: Signal) -> None:
    from google.protobuf.message import DecodeError

    try:
        request.ParseFromString(body)
    except DecodeError as err:
        # "Error parsing message with type '…ExportTraceServiceRequest': <what>" -> <what>
        what = str(err).rpartition("': ")[2] or str(err)
        raise Rejected(400, f"not a protobuf {signal.message}: truncated, or not OTLP "
                            f"({_quoted(what)})") from None
    if body and not request.ListFields():
        # an empty request is 0 bytes; bytes that parse to nothing known are fields of some
        # other message, or no message at all
        raise Rejected(400, f"not an OTLP {signal.name} export request: the protobuf body holds "
                            f"no {signal.top} (is it another signal's? traces go to /v1/traces, "
                            "logs to /v1/logs)")


def _parse_json(body: bytes, request: Any, signal: Signal) -> None:
    from google.protobuf import json_format

    try:
        document = json.loads(body)
    except UnicodeDecodeError as err:
        raise Rejected(400, f"the JSON body is not UTF-8 (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise Rejected(400, f"not JSON: {err.msg} (line {err.lineno} column {err.colno})") from None
    except RecursionError:
        raise Rejected(400, "not OTLP JSON: nested too deep") from None
    if not isinstance(document, dict):
        raise Rejected(400, f"not an OTLP {signal.name} export request: the JSON body is "
                            f"{_json_kind(document)}, not an object with {signal.top}")
    if signal.top not in document and document:
        keys = ", ".join(_quoted(k, 40) for k in list(document)[:5])
        raise Rejected(400, f"not an OTLP {signal.name} export request: the JSON object has "
                            f"no {signal.top} (its keys: {keys})")
    _hex_ids_to_base64(document, signal)
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except json_format.ParseError as err:
        raise Rejected(400, f"not OTLP JSON: {_quoted(str(err), 300)}") from None
    except (RecursionError, ValueError, TypeError) as err:
        raise Rejected(400, f"not OTLP JSON: {_quoted(str(err), 300)}") from None


def _hex_ids_to_base64(document: dict[str, Any], signal: Signal) -> None:
    """OTLP/JSON writes trace and span ids in hex; protobuf's JSON parser reads bytes fields
    as base64. Rewrite them in place, so ``ParseDict`` reads the right bytes; a value that
    is not hex is refused naming where it is."""
    for r, resource in enumerate(_items(document, signal.top, "")):
        where_r = f"{signal.top}[{r}]"
        for s, scope in enumerate(_items(resource, signal.scope, where_r)):
            where_s = f"{where_r}.{signal.scope}[{s}]"
            for n, item in enumerate(_items(scope, signal.items, where_s)):
                where = f"{where_s}.{signal.items}[{n}]"
                _rewrite_ids(item, signal.ids, where)
                if signal is TRACES:
                    for k, link in enumerate(_items(item, "links", where)):
                        _rewrite_ids(link, ("traceId", "spanId"), f"{where}.links[{k}]")


def _items(parent: Any, key: str, where: str) -> list[Any]:
    if not isinstance(parent, dict):
        raise Rejected(400, f"not OTLP JSON: {where or 'the body'} is {_json_kind(parent)}, "
                            "not an object")
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        at = f"{where}.{key}" if where else key
        raise Rejected(400, f"not OTLP JSON: {at} is {_json_kind(value)}, not a list")
    return value


def _rewrite_ids(obj: Any, keys: tuple[str, ...], where: str) -> None:
    if not isinstance(obj, dict):
        raise Rejected(400, f"not OTLP JSON: {where} is {_json_kind(obj)}, not an object")
    for key in keys:
        value = obj.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise Rejected(400, f"not OTLP JSON: {where}.{key} is {_json_kind(value)}, "
                                "not a hex string")
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise Rejected(400, f"not OTLP JSON: {where}.{key} is not hex "
                                f"({_quoted(value, 40)}; OTLP/JSON writes ids in hex, "
                                "not base64)") from None
        obj[key] = base64.b64encode(raw).decode("ascii")


def _check_ids(request: Any) -> int:
    """The number of spans; :class:`Rejected` for a span or link whose ids are not the sizes
    trace.proto requires (a 16-byte trace id, not all zero; an 8-byte span id, not all zero;
    a parent span id empty or 8 bytes). Ids that parse but have the wrong size are what a
    body of another message type, or random bytes, parse to."""
    spans = 0
    for r, resource_spans in enumerate(request.resource_spans):
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            for n, span in enumerate(scope_spans.spans):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}]"
                _check_id(span.trace_id, _TRACE_ID_BYTES, f"{where}.traceId")
                _check_id(span.span_id, _SPAN_ID_BYTES, f"{where}.spanId")
                if span.parent_span_id:
                    _check_id(span.parent_span_id, _SPAN_ID_BYTES, f"{where}.parentSpanId")
                for k, link in enumerate(span.links):
                    _check_id(link.trace_id, _TRACE_ID_BYTES, f"{where}.links[{k}].traceId")
                    _check_id(link.span_id, _SPAN_ID_BYTES, f"{where}.links[{k}].spanId")
                spans += 1
    return spans


def _count_records(request: Any) -> int:
    """The number of log records. Their ids are optional, and one that is invalid means, as
    logs.proto says, "not associated with a trace": kept as sent, never a refusal."""
    return sum(len(scope.log_records) for resource in request.resource_logs
               for scope in resource.scope_logs)


def _check_id(value: bytes, size: int, where: str) -> None:
    if len(value) != size:
        got = "missing" if not value else f"{len(value)} bytes"
        raise Rejected(400, f"invalid span data: {where} is {got}, not {size} bytes")
    if not any(value):
        raise Rejected(400, f"invalid span data: {where} is all zeros (an invalid id)")


def _journal_line(request: Any, signal: Signal) -> bytes:
    """The OTLP/JSON encoding of ``request`` as one line of UTF-8."""
    from google.protobuf import json_format

    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    # MessageToDict writes bytes as base64; OTLP/JSON wants the ids in hex. The dict's lists
    # are in the message's order, so the ids are taken from the message itself.
    if signal is TRACES:
        for resource, rs in zip(request.resource_spans, document.get("resourceSpans", ())):
            for scope, ss in zip(resource.scope_spans, rs.get("scopeSpans", ())):
                for span, sp in zip(scope.spans, ss.get("spans", ())):
                    sp["traceId"] = span.trace_id.hex()
                    sp["spanId"] = span.span_id.hex()
                    if span.parent_span_id:
                        sp["parentSpanId"] = span.parent_span_id.hex()
                    for link, lk in zip(span.links, sp.get("links", ())):
                        lk["traceId"] = link.trace_id.hex()
                        lk["spanId"] = link.span_id.hex()
    else:
        for resource, rl in zip(request.resource_logs, document.get("resourceLogs", ())):
            for scope, sl in zip(resource.scope_logs, rl.get("scopeLogs", ())):
                for record, lr in zip(scope.log_records, sl.get("logRecords", ())):
                    if record.trace_id:
                        lr["traceId"] = record.trace_id.hex()
                    if record.span_id:
                        lr["spanId"] = record.span_id.hex()
    # ASCII, every other character a \uXXXX escape: a line is one line for every reader
    # (str.splitlines also breaks at U+0085, U+2028, U+2029), no C1 or bidirectional control
    # reaches a terminal that prints the journal, a lone surrogate (a JSON \ud800) is kept,
    # and it is the faster of json's two encoders. DEL is ASCII: escaped by hand.
    text = json.dumps(document, separators=(",", ":"))
    return text.replace("\x7f", "\\u007f").encode("ascii")


# ----------------------------------------------------------------------------- responses


def success_body(encoding: str) -> bytes:
    """An ``ExportTraceServiceResponse`` with ``partial_success`` unset: no field at all,
    which is 0 bytes in protobuf and ``{}`` in JSON."""
    return b"" if encoding == PROTOBUF else b"{}"


def status_body(status: int, message: str, encoding: str) -> bytes:
    """The ``google.rpc.Status`` of a failure in ``encoding``. Status is ``code`` (field 1,
    int32) and ``message`` (field 2, string); it is written by hand so the core does not
    depend on googleapis-common-protos (the tests decode it with that package's
    ``status_pb2``)."""
    code = RPC_CODE.get(status, 2)  # 2: UNKNOWN
    if encoding != PROTOBUF:
        return json.dumps({"code": code, "message": message}, ensure_ascii=False).encode("utf-8")
    text = message.encode("utf-8", "replace")
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


# ----------------------------------------------------------------------------- wording


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _quoted(text: str, limit: int = 120) -> str:
    """Untrusted text quoted in a reason: control characters shown escaped, cut at
    ``limit``; the server's log masks secrets on top."""
    return one_line(repr(text) if not isinstance(text, str) else text, limit)


def size_text(n: int) -> str:
    """``n`` bytes in words: ``64 MiB``, ``1,000 bytes``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def parse_size(text: str) -> int:
    """``64MiB``, ``16M``, ``512k``, ``1048576`` as bytes (K/M/G are powers of 1024)."""
    raw = text.strip().lower().replace(" ", "")
    for suffix, shift in (("gib", 30), ("mib", 20), ("kib", 10), ("gb", 30), ("mb", 20),
                          ("kb", 10), ("g", 30), ("m", 20), ("k", 10), ("b", 0)):
        if raw.endswith(suffix):
            number = raw[: -len(suffix)]
            break
    else:
        number, shift = raw, 0
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (e.g. 64MiB, 512k, 1048576)") from None
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"not a size: {text!r} (must be positive)")
    return int(value * (1 << shift))
