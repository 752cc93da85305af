"""OTLP trace requests to send, and `contextlens collect` run as a real subprocess.

``request(...)`` builds an ``ExportTraceServiceRequest`` of GenAI-looking spans with the
opentelemetry-proto classes (what an SDK's exporter sends); ``Collector`` starts the
command, waits on its own startup line (never a sleep) and posts to it.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def span_ids(n: int, batch: int = 0) -> tuple[bytes, bytes]:
    """A (trace id, span id) pair unique to (batch, n), never zero."""
    return (bytes([1 + batch % 250]) + batch.to_bytes(7, "big") + n.to_bytes(8, "big"),
            bytes([2]) + batch.to_bytes(4, "big") + n.to_bytes(3, "big"))


def request(spans: int = 3, batch: int = 0, attribute: str = "hello") -> Any:
    """An ExportTraceServiceRequest: one resource, one scope, ``spans`` chat spans whose
    ``gen_ai.input.messages`` holds ``attribute``."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "agent"
    ss = rs.scope_spans.add()
    ss.scope.name = "test"
    for n in range(spans):
        span = ss.spans.add()
        span.trace_id, span.span_id = span_ids(n, batch)
        span.name = "chat gpt-4o"
        span.kind = 3  # SPAN_KIND_CLIENT
        span.start_time_unix_nano = 1_700_000_000_000_000_000 + n
        span.end_time_unix_nano = 1_700_000_000_500_000_000 + n
        for key, value in (("gen_ai.operation.name", "chat"),
                           ("gen_ai.input.messages",
                            json.dumps([{"role": "user", "parts": [
                                {"type": "text", "content": attribute}]}]))):
            kv = span.attributes.add()
            kv.key, kv.value.string_value = key, value
        kv = span.attributes.add()
        kv.key, kv.value.int_value = "gen_ai.usage.input_tokens", 12 + n
    return req


def log_request(ids: tuple[bytes, bytes], content: str = "What is the weather?") -> Any:
    """An ExportLogsServiceRequest of one GenAI event naming the span ``ids`` (trace, span):
    how instrumentations that send message content as events send it."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest,
    )

    req = ExportLogsServiceRequest()
    record = req.resource_logs.add().scope_logs.add().log_records.add()
    record.time_unix_nano = 1_700_000_000_000_000_000
    record.event_name = "gen_ai.user.message"
    record.trace_id, record.span_id = ids
    record.body.kvlist_value.values.add(key="content").value.string_value = content
    return req


def spans_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [span for rs in document.get("resourceSpans", [])
            for ss in rs.get("scopeSpans", []) for span in ss.get("spans", [])]


def journal_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a journal, each parsed (a test that expects no torn line)."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), "the journal does not end on a complete line"
    return [json.loads(line) for line in data.splitlines() if line.strip()]


@dataclass
class Response:
    status: int
    reason: str
    headers: dict[str, str]
    body: bytes

    def message(self) -> str:
        """The google.rpc.Status message of a failure, in the response's encoding."""
        if self.headers.get("content-type", "").startswith(PROTOBUF):
            from google.rpc.status_pb2 import Status

            status = Status()
            status.ParseFromString(self.body)
            return status.message
        return json.loads(self.body)["message"]


class Collector:
    """A running ``contextlens collect``; ``stop()`` ends it with SIGINT and returns its
    exit code and log (stderr)."""

    def __init__(self, journal: Path, *args: str) -> None:
        self.journal = journal
        self.process = subprocess.Popen(
            [sys.executable, "-m", "inspector.cli", "collect", "--db", str(journal),
             "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.process.stdout is not None
        self.startup = self.process.stdout.readline()  # the server's own "listening" line
        found = re.search(r"http://127\.0\.0\.1:(\d+)/v1/traces", self.startup)
        if not found:
            _, err = self.process.communicate(timeout=30)
            raise AssertionError(f"collect did not start: {self.startup!r} {err!r}")
        self.port = int(found.group(1))
        self.log = ""

    def post(self, body: bytes, content_type: str = PROTOBUF, path: str = "/v1/traces",
             method: str = "POST", headers: dict[str, str] | None = None) -> Response:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            sent = {"Content-Type": content_type, **(headers or {})}
            conn.request(method, path, body=body, headers=sent)
            got = conn.getresponse()
            return Response(got.status, got.reason,
                            {k.lower(): v for k, v in got.getheaders()}, got.read())
        finally:
            conn.close()

    def stop(self, sig: int = signal.SIGINT) -> tuple[int, str]:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        _, err = self.process.communicate(timeout=60)
        self.log = err
        return self.process.returncode, err

    def kill(self) -> None:
        self.process.kill()
        self.process.communicate(timeout=60)


@contextmanager
def collecting(journal: Path, *args: str) -> Iterator[Collector]:
    collector = Collector(journal, *args)
    try:
        yield collector
    finally:
        if collector.process.poll() is None:
            collector.stop()
