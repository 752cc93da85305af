"""`contextlens collect` as a sender and its user meet it: a real subprocess on loopback,
waited on by its own startup line. Bodies in both encodings and compressed are stored;
bad requests get a 4xx whose Status says why, one log line each, and touch nothing stored;
log events on /v1/logs are stored beside the spans; a full server says 503 with Retry-After; a second collector on a journal, a journal that is
not one, a port in use are one line and exit 2; a SIGKILL loses no acknowledged batch."""

from __future__ import annotations

import gzip
import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import zlib
from pathlib import Path

from support.otlp import (
    JSON, PROTOBUF, Collector, collecting, journal_lines, log_request, request, span_ids,
    spans_of,
)


def _collect(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inspector.cli", "collect", *argv],
                          capture_output=True, text=True, timeout=120)


def _span_ids_in(path: Path) -> list[str]:
    return [span["spanId"] for doc in journal_lines(path) for span in spans_of(doc)]


def test_protobuf_json_gzip_and_deflate_batches_are_stored(tmp_path: Path) -> None:
    journal = tmp_path / "spans.jsonl"
    as_json = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": span_ids(0, 9)[0].hex().upper(), "spanId": span_ids(0, 9)[1].hex(),
        "name": "chat", "kind": 3, "startTimeUnixNano": "1700000000000000000"}]}]}]})
    big = "x" * (10 << 20)  # a 10 MB attribute, within the limit
    with collecting(journal, "--max-body", "12MiB") as server:
        assert "export to it with OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:" in server.startup
        sent = [
            server.post(request(batch=1).SerializeToString()),
            server.post(as_json.encode(), JSON),
            server.post(gzip.compress(request(batch=2).SerializeToString()),
                        headers={"Content-Encoding": "gzip"}),
            server.post(zlib.compress(request(batch=3).SerializeToString()),
                        headers={"Content-Encoding": "deflate"}),
            server.post(request(spans=1, batch=4, attribute=big).SerializeToString()),
            server.post(log_request(span_ids(0, 1)).SerializeToString(), path="/v1/logs"),
        ]
        assert [r.status for r in sent] == [200] * 6
        assert sent[0].body == b"" and sent[0].headers["content-type"] == PROTOBUF
        assert sent[1].body == b"{}" and sent[1].headers["content-type"].startswith(JSON)
        code, log = server.stop()
    assert code == 0, log
    docs = journal_lines(journal)
    assert len(docs) == 6
    record = docs[5]["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    assert record["eventName"] == "gen_ai.user.message"  # a log event, naming its span
    assert (record["traceId"], record["spanId"]) == tuple(i.hex() for i in span_ids(0, 1))
    assert _span_ids_in(journal) == [
        span_ids(n, b)[1].hex() for b, count in ((1, 3), (9, 1), (2, 3), (3, 3), (4, 1))
        for n in range(count)]
    assert spans_of(docs[1])[0]["traceId"] == span_ids(0, 9)[0].hex()  # hex, lower case
    assert big in json.dumps(spans_of(docs[4])[0]["attributes"])
    assert "stopped: 6 batches, 11 spans, 1 log record stored in" in log


def test_bad_requests_are_refused_with_their_reason_and_lose_nothing(tmp_path: Path) -> None:
    journal = tmp_path / "spans.jsonl"
    bomb = gzip.compress(b"\0" * (16 << 20), compresslevel=9)
    truncated = request(batch=2).SerializeToString()[:-5]
    with collecting(journal, "--max-body", "1MiB") as server:
        assert server.post(request(batch=1).SerializeToString()).status == 200
        cases = [
            (server.post(b"\0" * ((1 << 20) + 1)), 413, "over the limit of 1 MiB"),
            (server.post(bomb, headers={"Content-Encoding": "gzip"}), 413,
             "inflates to more than 1 MiB"),
            (server.post(b"x", "text/plain"), 415, "Content-Type text/plain is not OTLP"),
            (server.post(b"x", headers={"Content-Encoding": "br"}), 415,
             "Content-Encoding br is not supported"),
            (server.post(truncated), 400, "truncated, or not OTLP"),
            (server.post(b"hello, I am not OTLP"), 400, "not OTLP"),
            (server.post(b'{"resourceSpans": [{"scopeSpans": {"spans": []}}]}', JSON), 400,
             "resourceSpans[0].scopeSpans is an object, not a list"),
            (server.post(b"", path="/v1/metrics"), 404, "metrics are not collected"),
            (server.post(b'{"resourceSpans": []}', JSON, path="/v1/logs"), 400,
             "the JSON object has no resourceLogs"),
            (server.post(b"", path="/nope"), 404, "no such path /nope"),
            (server.post(b"", method="GET"), 405, "GET is not allowed"),
        ]
        for response, status, words in cases:
            assert response.status == status, (response.status, response.body, words)
            assert words in response.message(), (response.message(), words)
            assert words[:40] in response.reason  # what the Python SDK's exporter logs
        assert cases[-1][0].headers["allow"] == "POST"
        assert server.post(request(batch=3).SerializeToString()).status == 200
        code, log = server.stop()
    assert code == 0
    refusals = [line for line in log.splitlines() if line.startswith("refused ")]
    assert len(refusals) == len(cases), log
    for line, (_, status, words) in zip(refusals, cases):
        assert f": {status} " in line and words[:40] in line
    assert "Traceback" not in log
    assert _span_ids_in(journal) == [span_ids(n, b)[1].hex() for b in (1, 3) for n in range(3)]


def test_a_full_server_answers_503_with_retry_after(tmp_path: Path) -> None:
    """With one request in flight allowed, a request whose body the server has invited
    (``100 Continue``: admitted) but not yet received holds the only place: the next is
    refused at once, and taken again once the first is done."""
    journal = tmp_path / "spans.jsonl"
    body = request(batch=1).SerializeToString()
    with collecting(journal, "--max-in-flight", "1") as server:
        held = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        try:
            held.sendall(
                f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {PROTOBUF}\r\n"
                f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode())
            invited = held.recv(1024)  # sent only once the request is admitted
            assert invited.startswith(b"HTTP/1.1 100 Continue"), invited

            busy = server.post(request(batch=2).SerializeToString())
            assert busy.status == 503
            assert busy.headers["retry-after"] == "1"
            assert busy.message().startswith("busy: ")
            assert "(--max-in-flight 1); retry after 1 s" in busy.message()

            held.sendall(body)
            reply = http.client.HTTPResponse(held)
            reply.begin()
            assert reply.status == 200
        finally:
            held.close()
        assert server.post(request(batch=3).SerializeToString()).status == 200
        code, log = server.stop(signal.SIGTERM)  # stops as Ctrl+C does
    assert code == 0 and log.splitlines()[-1].startswith("stopped: 2 batches, 6 spans"), log
    assert _span_ids_in(journal) == [span_ids(n, b)[1].hex() for b in (1, 3) for n in range(3)]


def test_one_collector_per_journal_and_what_is_not_a_journal(tmp_path: Path) -> None:
    journal = tmp_path / "spans.jsonl"
    with collecting(journal) as server:
        second = _collect("--db", str(journal), "--port", "0")
        assert second.returncode == 2
        assert second.stderr.splitlines() == [
            f"contextlens: error: {journal} is busy: another collect "
            f"(pid {server.process.pid}) is writing it; one collector per journal"]
        assert server.post(request().SerializeToString()).status == 200
    # (a folder, a FIFO, a device are refused the same way: tests/unit/test_collect_wire.py)
    (tmp_path / "notes.txt").write_text("my notes\n")
    done = _collect("--db", str(tmp_path / "notes.txt"), "--port", "0")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"contextlens: error: {tmp_path / 'notes.txt'}: not an OTLP JSON lines journal (it does "
        'not start with {"resourceSpans": ...}); collect appends only to its own journal or '
        "to a Collector file exporter's output: name a new file"]
    assert (tmp_path / "notes.txt").read_text() == "my notes\n"


def test_a_port_in_use_and_another_host_are_said_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _collect("--db", str(tmp_path / "a.jsonl"), "--port", str(port))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"contextlens: error: cannot listen on 127.0.0.1:{port}: Address already in use"]
    assert not (tmp_path / "a.jsonl.lock").exists()
    assert not (tmp_path / "a.jsonl").exists()  # no empty journal left behind
    # another host than loopback is warned about before anything else happens (here the
    # journal is refused, so nothing listens on a reachable address during the test)
    done = _collect("--db", str(tmp_path), "--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2
    warning, error = done.stderr.splitlines()
    assert warning.startswith("warning: listening on 0.0.0.0, not on loopback: anything "
                              "that can reach it can write spans")
    assert error.startswith("contextlens: error: ") and "a folder" in error


def test_a_sigkill_loses_no_acknowledged_batch(tmp_path: Path) -> None:
    journal = tmp_path / "spans.jsonl"
    server = Collector(journal)
    acknowledged: list[int] = []
    enough = threading.Event()

    def send() -> None:
        for batch in range(10_000):  # bounded; the kill ends it long before
            try:
                response = server.post(request(spans=5, batch=batch).SerializeToString())
            except OSError:
                return
            if response.status == 200:
                acknowledged.append(batch)
            if len(acknowledged) == 40:
                enough.set()

    sender = threading.Thread(target=send)
    sender.start()
    assert enough.wait(60)
    server.process.send_signal(signal.SIGKILL)  # while the sender keeps posting
    server.process.communicate(timeout=60)
    sender.join(60)
    assert len(acknowledged) >= 40
    # a kill in the middle of a write leaves part of a line: simulate it, whatever this
    # kill left, so the restart below has one to cut
    with open(journal, "ab") as f:
        f.write(b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0a')
    stored = set(_span_ids_in_complete_lines(journal))
    for batch in acknowledged:
        assert {span_ids(n, batch)[1].hex() for n in range(5)} <= stored, batch

    again = Collector(journal)
    assert again.post(request(spans=1, batch=99_999).SerializeToString()).status == 200
    code, log = again.stop()
    assert code == 0
    cuts = [line for line in log.splitlines() if line.startswith("cut ")]
    assert len(cuts) == 1 and "a batch left half-written" in cuts[0], log
    lines = journal_lines(journal)  # every line whole again
    assert set(_span_ids_in(journal)) >= stored | {span_ids(0, 99_999)[1].hex()}
    assert len(lines) >= len(acknowledged) + 1


def _span_ids_in_complete_lines(path: Path) -> list[str]:
    from ingest.collect import read_journal

    return [span["spanId"] for doc in read_journal(path) for span in spans_of(doc)]
