"""Collect benchmark: spans per second through `contextlens collect`, against decoding alone.

A receiver's least cost per batch is decoding it: protobuf parsing and the conversion to
the OTLP/JSON line the journal holds. This builds realistic GenAI batches (model-call spans
whose ``gen_ai.input.messages`` carry a growing conversation, with output messages, tool
definitions and usage, and ``execute_tool`` spans), then

- **decoding alone**: ``ingest.collect.decode_body`` on every body, in this process, timed;
- **collect**: the same bodies posted over loopback to a real ``contextlens collect``
  subprocess (``--port 0``) by ``--clients`` threads on keep-alive connections, from the
  first request to the last 200 (each batch parsed, converted, written and fsync'ed before
  its answer); a 503 (busy) is retried after its Retry-After and counted;

and prints both rates and their ratio as a Markdown table for docs/benchmarks.md. The
number of requests is bounded (``--batches``), all to 127.0.0.1, and the server is stopped
at the end. Run:

    python benchmarks/bench_collect.py --batches 200 --spans 50 --clients 4
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ingest.collect import decode_body, read_journal
from ingest.collect.wire import PROTOBUF

_WORDS = ("the build fails because the linker cannot find the symbol defined in the "
          "module compiled without the flag; rerun with verbose output and check the "
          "include path before changing the configuration of the test runner ").split()


def _text(n: int, seed: int) -> str:
    return " ".join(_WORDS[(seed + i * 7) % len(_WORDS)] for i in range(n))


def _body(batch: int, spans: int) -> bytes:
    """One ExportTraceServiceRequest of ``spans`` spans: four in five a model call of an
    agent conversation (its messages so far, up to 12 turns, each some 60 words), one in
    five a tool execution."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    for key, value in (("service.name", "coding-agent"), ("telemetry.sdk.language", "python")):
        kv = rs.resource.attributes.add()
        kv.key, kv.value.string_value = key, value
    ss = rs.scope_spans.add()
    ss.scope.name, ss.scope.version = "pydantic-ai", "2.68.0"
    tools = json.dumps([{"type": "function", "name": f"tool_{k}", "description": _text(12, k),
                         "parameters": {"type": "object", "properties": {
                             "path": {"type": "string"}}}} for k in range(4)])
    for n in range(spans):
        span = ss.spans.add()
        span.trace_id = (batch + 1).to_bytes(8, "big") + (n // 10 + 1).to_bytes(8, "big")
        span.span_id = (batch + 1).to_bytes(4, "big") + (n + 1).to_bytes(4, "big")
        span.start_time_unix_nano = 1_700_000_000_000_000_000 + batch * 1_000_000 + n
        span.end_time_unix_nano = span.start_time_unix_nano + 800_000_000
        turn = n % 12
        if n % 5 == 4:
            span.name, span.kind = "execute_tool tool_1", 1
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "tool_1",
                          "gen_ai.tool.call.id": f"call_{batch}_{n}",
                          "gen_ai.tool.call.arguments": json.dumps({"path": f"src/m{n}.py"}),
                          "gen_ai.tool.call.result": _text(120, n)}
        else:
            span.name, span.kind = "chat gpt-4o", 3
            messages = [{"role": "user" if t % 2 == 0 else "assistant",
                         "parts": [{"type": "text", "content": _text(60, t)}]}
                        for t in range(turn + 1)]
            attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                          "gen_ai.conversation.id": f"conv-{batch}-{n // 12}",
                          "gen_ai.system_instructions": json.dumps(
                              [{"type": "text", "content": _text(40, 3)}]),
                          "gen_ai.tool.definitions": tools,
                          "gen_ai.input.messages": json.dumps(messages),
                          "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                              {"type": "text", "content": _text(30, n)}]}])}
            for key, value in (("gen_ai.usage.input_tokens", 400 + 90 * turn),
                               ("gen_ai.usage.output_tokens", 45)):
                kv = span.attributes.add()
                kv.key, kv.value.int_value = key, value
        for key, value in attributes.items():
            kv = span.attributes.add()
            kv.key, kv.value.string_value = key, value
    return req.SerializeToString()


def decoding_alone(bodies: list[bytes], spans_each: int, repeat: int) -> float:
    """Spans per second of decode_body over every body (the best of ``repeat`` passes)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for body in bodies:
            assert decode_body(body, PROTOBUF).spans == spans_each
        best = min(best, time.perf_counter() - t0)
    return len(bodies) * spans_each / best


def through_collect(bodies: list[bytes], spans_each: int, clients: int, gzipped: bool,
                    work: Path) -> tuple[float, int, float]:
    """(spans per second through a real collector, 503s retried, its peak RSS in MB)."""
    journal = work / f"spans-{'gzip' if gzipped else 'plain'}.jsonl"
    server = subprocess.Popen(
        [sys.executable, "-m", "inspector.cli", "collect", "--db", str(journal), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert server.stdout is not None
    found = re.search(r"http://127\.0\.0\.1:(\d+)/v1/traces", server.stdout.readline())
    assert found, "collect did not start"
    port = int(found.group(1))
    sent = [gzip.compress(b, compresslevel=6) for b in bodies] if gzipped else bodies
    headers = {"Content-Type": PROTOBUF, **({"Content-Encoding": "gzip"} if gzipped else {})}
    todo = list(range(len(sent)))
    lock = threading.Lock()
    busy = [0]

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                if not todo:
                    break
                i = todo.pop()
            while True:
                conn.request("POST", "/v1/traces", body=sent[i], headers=headers)
                response = conn.getresponse()
                response.read()
                if response.status == 200:
                    break
                assert response.status == 503, response.status
                with lock:
                    busy[0] += 1
                time.sleep(float(response.getheader("Retry-After", "1")))
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    server.send_signal(signal.SIGINT)
    _, status, usage = os.wait4(server.pid, 0)  # ru_maxrss: the collector's peak, in KiB
    server.returncode = os.waitstatus_to_exitcode(status)
    assert server.returncode == 0, server.returncode
    stored = sum(1 for _ in read_journal(journal))
    assert stored == len(bodies), (stored, len(bodies))
    return len(bodies) * spans_each / elapsed, busy[0], usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200, help="requests to post")
    parser.add_argument("--spans", type=int, default=50, help="spans per request")
    parser.add_argument("--clients", type=int, default=4, help="concurrent connections")
    parser.add_argument("--repeat", type=int, default=3, help="passes of decoding alone")
    args = parser.parse_args()
    bodies = [_body(b, args.spans) for b in range(args.batches)]
    size = sum(map(len, bodies))
    alone = decoding_alone(bodies, args.spans, args.repeat)
    with tempfile.TemporaryDirectory() as work:
        plain = through_collect(bodies, args.spans, args.clients, False, Path(work))
        zipped = through_collect(bodies, args.spans, args.clients, True, Path(work))
    print(f"{args.batches} requests of {args.spans} spans ({size / len(bodies) / 1024:.0f} KiB "
          f"each, {size / args.batches / args.spans / 1024:.1f} KiB a span), "
          f"{args.clients} clients\n")
    print("| measure | spans/s | against decoding alone | busy answers retried | collect's peak RSS |")
    print("|---|---|---|---|---|")
    print(f"| decoding alone (protobuf to the OTLP/JSON line, in process) | {alone:,.0f} | 1x | | |")
    for name, (rate, busy, rss) in (("protobuf", plain), ("gzip protobuf", zipped)):
        print(f"| collect, {name} | {rate:,.0f} | {rate / alone:.2f}x | {busy} | {rss:.0f} MB |")


if __name__ == "__main__":
    main()
