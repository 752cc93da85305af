"""``contextlens collect``: an OTLP/HTTP trace receiver whose store is a journal of OTLP/JSON
lines (the OpenTelemetry Collector's file exporter format).

``wire`` turns request bodies (protobuf or JSON, gzip or deflate) into journal lines and
failures into ``google.rpc.Status`` answers; ``journal`` appends them durably, one line per
batch, under a writer's lock; ``server`` is the aiohttp receiver that bounds what is in
flight. Headless: no Textual, no rich (the command is ``inspector/cli/collect.py``).
"""

from __future__ import annotations

from .journal import Journal, read_journal
from .wire import Batch, Rejected, decode_body, decompress, parse_size, size_text

__all__ = ["Batch", "Journal", "Rejected", "decode_body", "decompress", "parse_size",
           "read_journal", "size_text"]
