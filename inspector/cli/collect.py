"""``contextlens collect``: receive OpenTelemetry traces over OTLP/HTTP into a journal that
``open --follow``, ``ingest`` and ``--db`` read (``ingest/collect``, docs/collect.md)."""

from __future__ import annotations

from pathlib import Path

import click

from ingest.errors import ContextlensError

from .options import _said, _warn


class _Size(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        from ingest.collect import parse_size

        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)


def _is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        import ipaddress

        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


@click.command()
@click.option("--db", "db", metavar="FILE", required=True, type=click.Path(path_type=Path),
              help="The journal to append to (OTLP JSON lines; made if missing).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything that can reach it can write spans: "
                   "another than loopback is warned about.")
@click.option("--port", type=click.IntRange(0, 65535), default=4318, show_default=True,
              help="Port to listen on (4318 is OTLP/HTTP's; 0 picks a free one and prints it).")
@click.option("--max-body", type=_Size(), default="16MiB", show_default=True,
              help="Largest request body, before and after decompression (413 above it).")
@click.option("--max-in-flight", type=click.IntRange(min=1), default=4, show_default=True,
              metavar="N",
              help="Requests read, decoded or being written at once; one more is answered 503 "
                   "with Retry-After.")
def collect(db: Path, host: str, port: int, max_body: int, max_in_flight: int) -> None:
    """Receive OpenTelemetry traces (OTLP/HTTP, POST /v1/traces, protobuf or JSON, gzip;
    log events on /v1/logs) and append each batch to the journal FILE, durably before it is
    acknowledged.

    `contextlens open FILE --follow` shows the requests as they arrive. Ctrl+C (or SIGTERM)
    stops it: the batches being received are finished, and it exits 0."""
    from ingest.collect import Journal
    from ingest.collect.server import Collector, ListenError

    def log(line: str) -> None:
        click.echo(line, err=True)

    if not _is_loopback(host):
        _warn(f"listening on {host}, not on loopback: anything that can reach it can write "
              f"spans into {db} (there is no authentication)")
    with Journal(db) as journal:
        for note in journal.notes:
            log(_said(note))
        collector = Collector(journal, max_body=max_body, max_in_flight=max_in_flight, log=log)

        def started(addresses: list[tuple[str, int]]) -> None:
            urls = [_url(h, p) for h, p in addresses] or [_url(host, port)]
            endpoint = urls[0]
            listening = ", ".join(f"{u}/v1/traces" for u in urls)
            click.echo(f"collecting OTLP traces at {listening} into {_said(str(db))}; "
                       f"export to it with OTEL_EXPORTER_OTLP_ENDPOINT={endpoint} "
                       "(Ctrl+C stops)")

        try:
            import asyncio

            asyncio.run(collector.serve(host, port, started))
        except ListenError as err:
            if journal.created and journal.size == 0:
                db.unlink(missing_ok=True)  # nothing listened: leave no empty journal behind
            raise ContextlensError(str(err)) from None
        stats = collector.stats
        refused = f", {stats.refused:,} refused" if stats.refused else ""
        records = (f", {stats.log_records:,} log record{'' if stats.log_records == 1 else 's'}"
                   if stats.log_records else "")
        log(f"stopped: {stats.batches:,} batch{'' if stats.batches == 1 else 'es'}, "
            f"{stats.spans:,} span{'' if stats.spans == 1 else 's'}{records} stored in "
            f"{_said(str(db))} since start{refused}")
