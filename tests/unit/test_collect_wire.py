"""The collector's core without a server: request bodies to journal lines (the OTLP/JSON
encoding the specification defines), the bounds on what a body may cost, the failure
answers a sender decodes, and the journal's promises (durable lines, a torn tail cut off,
one writer)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import zlib
from pathlib import Path

import pytest
from support.otlp import journal_lines, log_request, request, span_ids, spans_of

from ingest.collect import Journal, Rejected, decode_body, decompress, read_journal
from ingest.collect.wire import JSON, LOGS, PROTOBUF, status_body, success_body
from ingest.errors import ContextlensError


def _decoded(body: bytes, encoding: str = PROTOBUF) -> dict:
    batch = decode_body(body, encoding)
    return json.loads(batch.line)


def test_protobuf_becomes_otlp_json_hex_ids_camel_case_int_enums_string_int64() -> None:
    req = request(spans=2)
    link = req.resource_spans[0].scope_spans[0].spans[1].links.add()
    link.trace_id, link.span_id = span_ids(7)
    req.resource_spans[0].scope_spans[0].spans[1].parent_span_id = span_ids(0)[1]
    batch = decode_body(req.SerializeToString(), PROTOBUF)
    assert batch.spans == 2 and b"\n" not in batch.line
    doc = json.loads(batch.line)
    first, second = spans_of(doc)
    trace_id, span_id = span_ids(0)
    assert first["traceId"] == trace_id.hex() and first["spanId"] == span_id.hex()
    assert second["parentSpanId"] == span_id.hex()
    assert second["links"][0] == {"traceId": span_ids(7)[0].hex(), "spanId": span_ids(7)[1].hex()}
    assert first["kind"] == 3  # an integer, never "SPAN_KIND_CLIENT"
    assert first["startTimeUnixNano"] == "1700000000000000000"  # 64-bit: a decimal string
    usage = next(a for a in first["attributes"] if a["key"] == "gen_ai.usage.input_tokens")
    assert usage["value"] == {"intValue": "12"}
    assert "resourceSpans" in doc and "scopeSpans" in doc["resourceSpans"][0]
    assert doc["resourceSpans"][0]["resource"]["attributes"][0]["key"] == "service.name"


def test_a_json_body_is_the_same_journal_line_as_its_protobuf() -> None:
    req = request(spans=2)
    line = decode_body(req.SerializeToString(), PROTOBUF).line
    as_json = json.loads(line)
    for span in spans_of(as_json):  # the spec's hex is case-insensitive
        span["traceId"] = span["traceId"].upper()
    as_json["someFutureField"] = {"x": 1}  # unknown fields are ignored, as OTLP requires
    assert decode_body(json.dumps(as_json).encode(), JSON).line == line


def test_the_specifications_json_example_decodes() -> None:
    body = json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "my.service"}}]},
        "scopeSpans": [{"scope": {"name": "my.library", "version": "1.0.0"}, "spans": [{
            "traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B174",
            "parentSpanId": "EEE19B7EC3C1B173", "name": "I'm a server span",
            "startTimeUnixNano": "1544712660000000000", "endTimeUnixNano": 1544712661000000000,
            "kind": 2, "attributes": [{"key": "my.span.attr", "value": {"stringValue": "v"}}]}]}]}]})
    span = spans_of(_decoded(body.encode(), JSON))[0]
    assert span["traceId"] == "5b8efff798038103d269b633813fc60c"
    assert span["endTimeUnixNano"] == "1544712661000000000"
    assert span["kind"] == 2


def test_log_events_become_otlp_json_with_hex_ids_too() -> None:
    req = log_request(span_ids(3))
    req.resource_logs[0].scope_logs[0].log_records.add().event_name = "no span"
    batch = decode_body(req.SerializeToString(), PROTOBUF, LOGS)
    assert batch.items == 2
    with_span, without = json.loads(batch.line)["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    assert (with_span["traceId"], with_span["spanId"]) == tuple(i.hex() for i in span_ids(3))
    assert with_span["body"] == {"kvlistValue": {"values": [
        {"key": "content", "value": {"stringValue": "What is the weather?"}}]}}
    assert "traceId" not in without  # optional for a log record
    as_json = json.loads(batch.line)
    as_json["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["traceId"] = \
        span_ids(3)[0].hex().upper()
    assert decode_body(json.dumps(as_json).encode(), JSON, LOGS).line == batch.line
    with pytest.raises(Rejected, match="no resourceLogs"):
        decode_body(b'{"resourceSpans": []}', JSON, LOGS)


def test_an_empty_request_stores_nothing() -> None:
    assert decode_body(b"", PROTOBUF).spans == 0
    assert decode_body(b"{}", JSON).line == b""
    assert decode_body(b'{"resourceSpans": []}', JSON).spans == 0


@pytest.mark.parametrize("body, encoding, words", [
    (request().SerializeToString()[:-7], PROTOBUF, "truncated, or not OTLP"),
    (b"\xff\xff\xff\xff", PROTOBUF, "truncated, or not OTLP"),
    (b"hello world", PROTOBUF, "truncated, or not OTLP"),
    (b"not json", JSON, "not JSON"),
    (b"[1, 2]", JSON, "the JSON body is a list"),
    (b'{"resourceLogs": []}', JSON, "no resourceSpans (its keys: resourceLogs)"),
    (b'{"resourceSpans": {"a": 1}}', JSON, "resourceSpans is an object, not a list"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', JSON,
     "resourceSpans[0].scopeSpans[0].spans[0].traceId is not hex"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5}]}]}]}', JSON, "not OTLP JSON"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x"}]}]}]}', JSON,
     "spans[0].traceId is missing, not 16 bytes"),
])
def test_bad_bodies_are_refused_with_the_reason(body: bytes, encoding: str, words: str) -> None:
    with pytest.raises(Rejected) as refused:
        decode_body(body, encoding)
    assert refused.value.status == 400
    assert words in refused.value.reason


def test_ids_of_the_wrong_size_or_zero_are_refused() -> None:
    req = request(spans=1)
    req.resource_spans[0].scope_spans[0].spans[0].span_id = b"\0" * 8
    with pytest.raises(Rejected, match=r"spans\[0\]\.spanId is all zeros"):
        decode_body(req.SerializeToString(), PROTOBUF)
    req.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\1" * 4
    with pytest.raises(Rejected, match=r"traceId is 4 bytes, not 16"):
        decode_body(req.SerializeToString(), PROTOBUF)


def test_a_ten_megabyte_attribute_is_kept_whole() -> None:
    big = "x" * (10 << 20)
    span = spans_of(_decoded(request(spans=1, attribute=big).SerializeToString()))[0]
    messages = next(a for a in span["attributes"] if a["key"] == "gen_ai.input.messages")
    assert json.loads(messages["value"]["stringValue"])[0]["parts"][0]["content"] == big


def test_gzip_deflate_and_several_gzip_members_decompress() -> None:
    data = request().SerializeToString()
    assert decompress(gzip.compress(data), "gzip", 1 << 20) == data
    assert decompress(zlib.compress(data), "deflate", 1 << 20) == data
    two = gzip.compress(data[:10]) + gzip.compress(data[10:])
    assert decompress(two, "gzip", 1 << 20) == data
    assert decompress(data, "identity", 1 << 20) == data


def test_a_gzip_bomb_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * (32 << 20), compresslevel=9)  # 32 MiB from ~32 KB
    assert len(bomb) < 64 << 10
    with pytest.raises(Rejected) as refused:
        decompress(bomb, "gzip", 1 << 20)
    assert refused.value.status == 413
    assert "inflates to more than 1 MiB" in refused.value.reason


@pytest.mark.parametrize("body, coding, words", [
    # mtime=0: the same bytes in every xdist worker (test ids are made of them)
    (gzip.compress(b"abc" * 100, mtime=0)[:-12], "gzip", "truncated"),
    (b"plain", "gzip", "not valid gzip"),
    (zlib.compress(b"abc") + b"junk", "deflate", "bytes after the end"),
    (b"x", "br", "Content-Encoding br is not supported"),
], ids=["gzip-truncated", "gzip-not-gzip", "deflate-trailing-junk", "brotli"])
def test_bad_compression_is_refused(body: bytes, coding: str, words: str) -> None:
    with pytest.raises(Rejected) as refused:
        decompress(body, coding, 1 << 20)
    assert words in refused.value.reason


def test_failure_bodies_are_google_rpc_status_in_the_requests_encoding() -> None:
    from google.rpc.status_pb2 import Status

    reason = "not OTLP: ü " + "y" * 300  # a message longer than one varint byte
    status = Status()
    status.ParseFromString(status_body(400, reason, PROTOBUF))
    assert (status.code, status.message) == (3, reason)  # 3: INVALID_ARGUMENT
    assert json.loads(status_body(503, "busy", JSON)) == {"code": 14, "message": "busy"}
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    response = ExportTraceServiceResponse()
    response.ParseFromString(success_body(PROTOBUF))
    assert not response.HasField("partial_success")
    assert json.loads(success_body(JSON)) == {}


# ----------------------------------------------------------------------------- the journal


def test_the_journal_appends_complete_lines_and_reads_them_back(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    lines = [decode_body(request(batch=b).SerializeToString(), PROTOBUF).line for b in range(3)]
    with Journal(path) as journal:
        journal.append(lines[:1])
        journal.append(lines[1:])
        assert journal.size == path.stat().st_size
        assert (tmp_path / "spans.jsonl.lock").exists()
    assert not (tmp_path / "spans.jsonl.lock").exists()
    assert [json.loads(line) for line in lines] == journal_lines(path) == list(read_journal(path))


def test_a_torn_last_line_is_cut_off_on_open_and_said(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    whole = decode_body(request().SerializeToString(), PROTOBUF).line + b"\n"
    path.write_bytes(whole + whole[: len(whole) // 2])
    assert len(list(read_journal(path))) == 1  # a reader never takes the torn line
    with Journal(path) as journal:
        assert len(journal.notes) == 1 and f"cut {len(whole) // 2:,} bytes" in journal.notes[0]
    assert path.read_bytes() == whole
    with Journal(path) as journal:  # nothing more to cut
        assert journal.notes == []


def test_a_first_batch_torn_before_its_first_newline_is_cut_too(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_bytes(b'{"resourceSp')
    with Journal(path) as journal:
        assert journal.notes and journal.size == 0
    assert path.read_bytes() == b""


def test_a_complete_document_without_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    whole = decode_body(request().SerializeToString(), PROTOBUF).line
    path.write_bytes(whole)
    with Journal(path) as journal:
        journal.append([whole])
    assert path.read_bytes() == whole + b"\n" + whole + b"\n"


def test_one_writer_per_journal(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    with Journal(path):
        with pytest.raises(ContextlensError, match=rf"is busy: another collect \(pid {os.getpid()}\)"):
            Journal(path).open()


@pytest.mark.parametrize("make, words", [
    (lambda p: p.mkdir(), "a folder, not a regular file"),
    (lambda p: os.mkfifo(p), "a FIFO (named pipe), not a regular file"),
    (lambda p: p.write_bytes(b"DUCK\0\0\0binary"), "not an OTLP JSON lines journal"),
    (lambda p: p.write_text('{"messages": []}\n'), "not an OTLP JSON lines journal"),
])
def test_what_is_not_a_journal_is_refused_untouched(tmp_path: Path, make, words: str) -> None:
    path = tmp_path / "target"
    make(path)
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(ContextlensError) as refused:
        Journal(path).open()
    assert f"{path}: {words}" in str(refused.value)
    if before is not None:
        assert path.read_bytes() == before
    assert not (tmp_path / "target.lock").exists()


def test_a_failed_write_leaves_the_journal_on_a_complete_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "spans.jsonl"
    line = decode_body(request().SerializeToString(), PROTOBUF).line
    real_write = os.write
    calls: list[int] = []

    def half_then_full(fd: int, data) -> int:  # the disk fills half way through
        if calls:
            raise OSError(28, "No space left on device")
        calls.append(1)
        return real_write(fd, bytes(data[: len(data) // 2]))

    with Journal(path) as journal:
        journal.append([line])
        monkeypatch.setattr(os, "write", half_then_full)
        with pytest.raises(OSError, match="No space left"):
            journal.append([line, line])
        monkeypatch.setattr(os, "write", real_write)
        journal.append([line])
    assert journal_lines(path) == [json.loads(line)] * 2


def test_a_torn_line_that_cannot_be_cut_stops_the_writing_until_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "spans.jsonl"
    line = decode_body(request().SerializeToString(), PROTOBUF).line
    real_write, real_truncate = os.write, os.ftruncate

    def half_then_full(fd: int, data) -> int:
        monkeypatch.setattr(os, "write", _full)
        return real_write(fd, bytes(data[: len(data) // 2]))

    def _full(fd: int, data) -> int:
        raise OSError(28, "No space left on device")

    def cannot(fd: int, size: int) -> None:
        raise OSError(5, "Input/output error")

    with Journal(path) as journal:
        journal.append([line])
        monkeypatch.setattr(os, "write", half_then_full)
        monkeypatch.setattr(os, "ftruncate", cannot)
        with pytest.raises(OSError, match="No space left"):
            journal.append([line])
        monkeypatch.setattr(os, "write", real_write)
        monkeypatch.setattr(os, "ftruncate", real_truncate)
        with pytest.raises(OSError, match="could not be cut back to a complete line"):
            journal.append([line])  # never glued to the torn half line
    with Journal(path) as journal:
        assert journal.notes  # the restart cuts the torn half off
        journal.append([line])
    assert journal_lines(path) == [json.loads(line)] * 2


def test_ids_in_base64_are_refused_in_json() -> None:
    """A sender using protobuf's standard JSON mapping (base64 ids) instead of OTLP/JSON's
    hex is told so, not stored with the wrong ids."""
    b64 = base64.b64encode(span_ids(0)[0]).decode()
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": b64, "spanId": span_ids(0)[1].hex(), "name": "x"}]}]}]}).encode()
    with pytest.raises(Rejected, match="not hex .*OTLP/JSON writes ids in hex, not base64"):
        decode_body(body, JSON)


def test_a_journal_line_is_one_line_for_every_reader_and_safe_in_a_terminal() -> None:
    hostile = "a\u2028b\u2029c\x85d\x1b[31me\u202ef\x7fg\nend é 🙂"
    req = request(spans=1)
    kv = req.resource_spans[0].scope_spans[0].spans[0].attributes.add()
    kv.key, kv.value.string_value = "tool.output", hostile
    line = decode_body(req.SerializeToString(), PROTOBUF).line
    text = line.decode("utf-8")
    assert len(text.splitlines()) == 1  # str.splitlines breaks at U+2028, U+2029, U+0085 too
    assert text.isascii() and not any(ch in text for ch in "\x7f\x1b\n")
    span = spans_of(json.loads(line))[0]
    assert span["attributes"][-1] == {"key": "tool.output", "value": {"stringValue": hostile}}
