"""The OTLP/HTTP receiver: ``POST /v1/traces`` (and ``/v1/logs``) into the journal, with
aiohttp.

A request's life, and what bounds its cost:

1. Its headers are read. A wrong path or method (404, 405), a media type other than
   protobuf or JSON (415), a ``Content-Length`` over the body limit (413) are answered at
   once, before any of the body is read.
2. It is *admitted*: at most ``max_in_flight`` requests are admitted at a time, from here
   until their batch is on disk. One more is answered 503 with ``Retry-After`` (OTLP's
   "server overloaded"; the SDKs retry it after that many seconds): no queue grows, and
   memory stays below ``max_in_flight`` times a few times the body limit. A client that
   sent ``Expect: 100-continue`` is told to send its body only now, so a refused body is
   never uploaded.
3. The body is read, at most ``max_body`` bytes (413 beyond, the connection closed), then
   decompressed (bounded by the same limit) and decoded in a worker thread, so the event
   loop keeps answering (``ingest/collect/wire.py``).
4. Its journal line is appended and synced by the journal's writer thread; the lines of all
   the requests waiting at that moment share one write and one sync (group commit). Only
   then is it answered 200.

Each refusal is one line in the server's log (masked, escaped, cut) and a
``google.rpc.Status`` with the same reason for the sender; the reason is also the HTTP
reason phrase, which is what the Python SDK's exporter logs. Nothing stored is touched by a
refused request.

``/v1/logs`` is taken too, into the same journal: instrumentations that send message
content as log events (``gen_ai.user.message``, ``gen_ai.client.inference.operation.details``,
each naming its span) export them there, and the otel adapter reads them with their spans.
``/v1/metrics`` is answered 404 with a reason (an empty success would tell the sender its
metrics were delivered when they were dropped).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web

from ..secrets import mask_then_cut
from ..text import one_line
from .journal import Journal
from .wire import (
    JSON,
    LOGS,
    PROTOBUF,
    TRACES,
    Batch,
    Rejected,
    Signal,
    decode_body,
    decompress,
    encoding_of,
    size_text,
    status_body,
    success_body,
)

__all__ = ["Collector", "CollectorStats", "TRACES_PATH", "LOGS_PATH", "DEFAULT_MAX_BODY",
           "DEFAULT_MAX_IN_FLIGHT"]

TRACES_PATH = "/v1/traces"
LOGS_PATH = "/v1/logs"
# Below the specification's RECOMMENDED 64 MiB, on purpose: a batch's journal line is about
# 1.2 times its protobuf body, and a reader of the journal takes lines of up to 64 MB
# (ingest/adapters/files.py, SNIFF_LINE_CAP); memory in flight is a few times this per
# request. An SDK's default batch (512 spans) of GenAI spans is a few MB. --max-body raises it.
DEFAULT_MAX_BODY = 16 << 20
DEFAULT_MAX_IN_FLIGHT = 4
RETRY_AFTER_SECONDS = 1
PROGRESS_EVERY = 1.0  # seconds between progress lines, at most
_READ_CHUNK = 1 << 16
_LOGGED_REASON = 300  # characters of a reason the log line shows
_REASON_PHRASE = 200  # characters of the HTTP reason phrase

_OTHER_SIGNALS = {
    "/v1/metrics": "metrics",
    "/v1development/profiles": "profiles",
}


@dataclass
class CollectorStats:
    """What a collector has done since it started."""

    batches: int = 0
    spans: int = 0
    log_records: int = 0
    bytes: int = 0
    refused: int = 0


class Collector:
    """The receiver over an open :class:`Journal`. ``log`` takes each line of the server's
    log (the command line prints them on stderr)."""

    def __init__(self, journal: Journal, *, max_body: int = DEFAULT_MAX_BODY,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 log: Callable[[str], None] = print) -> None:
        self.journal = journal
        self.max_body = max_body
        self.max_in_flight = max_in_flight
        self.log = log
        self.stats = CollectorStats()
        self.in_flight = 0
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._decoder = ThreadPoolExecutor(1, thread_name_prefix="otlp-decode")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="journal-write")
        self._shown = CollectorStats()
        self._last_progress = 0.0
        self._progress_handle: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ the application

    def application(self) -> web.Application:
        # client_max_size is irrelevant: bodies are streamed and bounded here, not read
        # by aiohttp's request.read()
        app = web.Application()
        app.router.add_route("*", TRACES_PATH, self._traces, expect_handler=self._expect)
        app.router.add_route("*", LOGS_PATH, self._logs, expect_handler=self._expect)
        app.router.add_route("*", "/{path:.*}", self._elsewhere, expect_handler=self._expect)
        return app

    async def serve(self, host: str, port: int,
                    started: Callable[[list[tuple[str, int]]], None]) -> None:
        """Listen on ``host:port`` until SIGINT or SIGTERM, then stop cleanly: no new
        request is taken, the admitted ones are finished (their batches written and
        answered), the journal is left ending on a complete line. ``started`` is called with
        the addresses listened on (``port`` 0 picks a free one)."""
        _quiet_aiohttp_logs(self.log)
        # auto_decompress off: aiohttp would inflate gzip bodies itself, without our limit
        runner = web.AppRunner(self.application(), access_log=None, handle_signals=False,
                               shutdown_timeout=10.0, auto_decompress=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            try:
                await site.start()
            except OSError as err:
                raise ListenError(host, port, err) from None
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            started([_host_port(a) for a in runner.addresses])
            await stop.wait()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        finally:
            await runner.cleanup()
            if self._flusher is not None:
                await asyncio.gather(self._flusher, return_exceptions=True)
            self._decoder.shutdown(wait=True)
            self._writer.shutdown(wait=True)
            self._print_progress()

    # ------------------------------------------------------------------ handlers

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """``Expect: 100-continue`` is answered by the handler once the request is admitted
        (aiohttp's default would invite the body before we know we can take it)."""
        if request.headers.get("Expect", "").strip().lower() != "100-continue":
            return self._refuse(request, Rejected(417, "only Expect: 100-continue is understood"))
        return None

    async def _elsewhere(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        signal_name = _OTHER_SIGNALS.get(path.rstrip("/"))
        if signal_name:
            reason = (f"this receiver takes traces (POST {TRACES_PATH}) and logs "
                      f"(POST {LOGS_PATH}); {signal_name} are not collected: do not export "
                      f"them to it (e.g. OTEL_{signal_name.upper()}_EXPORTER=none)")
        else:
            reason = (f"no such path {_said(path, 100)}: OTLP spans go to POST {TRACES_PATH}, "
                      f"log records to POST {LOGS_PATH}")
        return self._refuse(request, Rejected(404, reason))

    async def _traces(self, request: web.Request) -> web.StreamResponse:
        return await self._export(request, TRACES)

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        return await self._export(request, LOGS)

    async def _export(self, request: web.Request, signal: Signal) -> web.StreamResponse:
        if request.method != "POST":
            response = self._refuse(request, Rejected(
                405, f"{_said(request.method, 20)} is not allowed: send {signal.name} with "
                     "POST"))
            response.headers["Allow"] = "POST"
            return response
        encoding = encoding_of(request.content_type)
        if encoding is None:
            # aiohttp reports a missing Content-Type as application/octet-stream
            given = request.content_type if "Content-Type" in request.headers else "none"
            return self._refuse(request, Rejected(
                415, f"Content-Type {_said(given, 60)} is not OTLP: send {PROTOBUF} or "
                     f"{JSON}"))
        coding = request.headers.get("Content-Encoding", "")
        if coding.strip().lower() not in ("", "identity", "gzip", "x-gzip", "deflate"):
            return self._refuse(request, Rejected(
                415, f"Content-Encoding {_said(coding, 40)} is not supported "
                     "(send gzip, deflate or none)"), encoding)
        length = request.content_length
        if length is not None and length > self.max_body:
            return self._refuse(request, Rejected(
                413, f"the body is {length:,} bytes, over the limit of "
                     f"{size_text(self.max_body)} (--max-body)"), encoding)
        if self.in_flight >= self.max_in_flight:
            return self._refuse(request, Rejected(
                503, f"busy: as many batches as it takes at once are being received or "
                     f"stored (--max-in-flight {self.max_in_flight}); retry after "
                     f"{RETRY_AFTER_SECONDS} s", retry_after=RETRY_AFTER_SECONDS), encoding)
        self.in_flight += 1
        try:
            return await self._take(request, signal, encoding, coding)
        except Rejected as rejected:
            return self._refuse(request, rejected, encoding)
        finally:
            self.in_flight -= 1

    async def _take(self, request: web.Request, signal: Signal, encoding: str,
                    coding: str) -> web.StreamResponse:
        expects = request.headers.get("Expect", "").strip().lower() == "100-continue"
        if expects and request.version >= (1, 1):  # HTTP/1.0 has no 100 Continue
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the response proper starts after it, as aiohttp's own
        body = await self._read_body(request)
        loop = asyncio.get_running_loop()
        try:
            batch = await loop.run_in_executor(self._decoder, self._decode, body, signal,
                                               encoding, coding)
        except Rejected:
            raise
        except Exception as err:  # a bug of ours: the sender is told, the log says what
            raise Rejected(500, f"internal error decoding the batch: {type(err).__name__}: "
                                f"{err}") from err
        del body
        if batch.items:
            await self._commit(batch.line)
            self.stats.batches += 1
            if signal is TRACES:
                self.stats.spans += batch.items
            else:
                self.stats.log_records += batch.items
            self.stats.bytes += len(batch.line) + 1
            self._progress()
        return web.Response(status=200, body=success_body(encoding), content_type=encoding)

    def _decode(self, body: bytes, signal: Signal, encoding: str, coding: str) -> Batch:
        return decode_body(decompress(body, coding, self.max_body), encoding, signal)

    async def _read_body(self, request: web.Request) -> bytes:
        chunks: list[bytes] = []
        total = 0
        async for chunk in request.content.iter_chunked(_READ_CHUNK):
            total += len(chunk)
            if total > self.max_body:
                raise Rejected(413, f"the body is over the limit of {size_text(self.max_body)} "
                                    "(--max-body)")
            chunks.append(chunk)
        return b"".join(chunks)

    # ------------------------------------------------------------------ the journal

    async def _commit(self, line: bytes) -> None:
        """Return once ``line`` is on disk (group commit: one write and one sync for every
        line waiting when the writer comes round)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((line, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        await future

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            waiting, self._pending = self._pending, []
            try:
                await loop.run_in_executor(self._writer, self.journal.append,
                                           [line for line, _ in waiting])
            except OSError as err:
                failure: BaseException = Rejected(
                    503, f"cannot write the journal {self.journal.path}: "
                         f"{err.strerror or err}", retry_after=RETRY_AFTER_SECONDS)
            except BaseException as err:  # cancelled at shutdown: nobody is answered 200
                failure = err
            else:
                for _, future in waiting:
                    if not future.done():
                        future.set_result(None)
                continue
            for _, future in waiting:
                if not future.done():
                    future.set_exception(failure)
            if not isinstance(failure, Exception):
                raise failure

    # ------------------------------------------------------------------ answers and log

    def _refuse(self, request: web.Request, rejected: Rejected,
                encoding: str | None = None) -> web.Response:
        self.stats.refused += 1
        peer = _peer(request)
        self.log(f"refused {request.method} {_said(request.path, 60)} from {peer}: "
                 f"{rejected.status} {_said(rejected.reason, _LOGGED_REASON)}")
        encoding = encoding or encoding_of(request.content_type) or JSON
        response = web.Response(status=rejected.status, reason=_reason_phrase(rejected.reason),
                                body=status_body(rejected.status, rejected.reason, encoding),
                                content_type=encoding)
        if rejected.retry_after is not None:
            response.headers["Retry-After"] = str(rejected.retry_after)
        if rejected.status == 413 or rejected.status >= 500:
            response.force_close()  # the unread rest of the body is not waited for
        return response

    def _progress(self) -> None:
        """A progress line at most every PROGRESS_EVERY seconds, and one after the last
        batch of a burst (a timer, only while there is something not yet shown)."""
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_EVERY:
            self._print_progress()
        elif self._progress_handle is None:
            delay = PROGRESS_EVERY - (now - self._last_progress)
            self._progress_handle = asyncio.get_running_loop().call_later(
                delay, self._print_progress)

    def _print_progress(self) -> None:
        if self._progress_handle is not None:
            self._progress_handle.cancel()
            self._progress_handle = None
        self._last_progress = time.monotonic()
        new_batches = self.stats.batches - self._shown.batches
        if not new_batches:
            return
        new_spans = self.stats.spans - self._shown.spans
        new_records = self.stats.log_records - self._shown.log_records
        self._shown = CollectorStats(**vars(self.stats))
        self.log(f"stored {_count(new_batches, 'batch')} "
                 f"({_items(new_spans, new_records)}); since start: "
                 f"{_count(self.stats.batches, 'batch')}, "
                 f"{_items(self.stats.spans, self.stats.log_records)}")


class ListenError(Exception):
    """The address could not be listened on (in use, not this machine's, no permission)."""

    def __init__(self, host: str, port: int, err: OSError) -> None:
        # asyncio words a bind failure "error while attempting to bind on address
        # ('127.0.0.1', 4318): address already in use"; the errno says it shorter
        why = os.strerror(err.errno) if err.errno else str(err)
        super().__init__(f"cannot listen on {host}:{port}: {why}")


def _count(n: int, noun: str) -> str:
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"{n:,} {noun if n == 1 else plural}"


def _items(spans: int, records: int) -> str:
    """``12 spans``, or ``12 spans, 3 log records`` once there are log records."""
    if not records:
        return _count(spans, "span")
    return f"{_count(spans, 'span')}, {_count(records, 'log record')}"


def _said(text: str, limit: int) -> str:
    """Untrusted text for a log line or a reason: secrets masked, escapes shown, one line."""
    return one_line(mask_then_cut(text, limit).text)


def _reason_phrase(reason: str) -> str:
    """The reason as an HTTP reason phrase: printable ASCII only, cut."""
    ascii_only = reason.encode("ascii", "replace").decode("ascii")
    return re.sub(r"[^\x20-\x7e]", "?", ascii_only)[:_REASON_PHRASE]


def _peer(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return "an unknown peer"


def _host_port(address: Any) -> tuple[str, int]:
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return str(address), 0


class _OneLine(logging.Handler):
    """aiohttp's own log lines (a malformed request, a connection error) as one line each in
    the server's log, never a traceback."""

    def __init__(self, log: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                err = record.exc_info[1]
                message = f"{message}: {type(err).__name__}: {err}"
            self._log(f"server: {_said(message, _LOGGED_REASON)}")
        except Exception:  # a log line must never take the server down
            pass


def _quiet_aiohttp_logs(log: Callable[[str], None]) -> None:
    for name in ("aiohttp.server", "aiohttp.web", "aiohttp.access", "asyncio"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [_OneLine(log)]
        logger.propagate = False
