"""Reading what the user named, safely: only regular files, and a bounded head for sniffing.

A FIFO blocks its reader forever, ``/dev/zero`` never ends, a directory is not a
transcript: every path is refused by its type (``os.stat``) before anything opens it.
Detection reads a bounded head of the file (:func:`read_sample`) and every adapter's
``sniff`` decides on that one :class:`Sample`.
"""

from __future__ import annotations

import os
import stat
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ContextlensError
from ..safe_files import file_kind, read_capped

# Formats are decided on the first SNIFF_BYTES of a file; a line cut there is read to its
# end, up to SNIFF_LINE_CAP in all, so that a transcript whose first line is huge (a pasted
# file, a long tool result) is still decided on a complete line.
SNIFF_BYTES = 8 << 20
SNIFF_LINE_CAP = 64 << 20
SNIFF_LINES = 2000  # JSON lines parsed for sniffing, at most

def is_regular_file(path: Path) -> bool:
    """True for a regular file (symlinks followed); never opens the path."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def require_regular_file(path: Path, purpose: str = "") -> os.stat_result:
    """The stat of ``path`` if it is a regular file; otherwise a ContextlensError naming the
    path and what it is. Nothing is opened, so a FIFO or a device never blocks."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ContextlensError(f"{path}: no such file or folder") from None
    except (OSError, ValueError) as err:
        raise ContextlensError(f"{path}: cannot read ({err})") from None
    if not stat.S_ISREG(st.st_mode):
        why = f" ({purpose})" if purpose else ""
        raise ContextlensError(
            f"{path}: {file_kind(st.st_mode)}, not a regular file; only regular files are read{why}"
        )
    return st


_GIVEN = threading.local()


@contextmanager
def given_source(path: Path, data: bytes) -> Any:
    """Within the block, :func:`read_source` of ``path`` in this thread is ``data``: a followed
    file (ingest/follow.py) is read once, from where the last read stopped, and its adapter
    is handed the complete lines read so far instead of opening the file again."""
    previous = getattr(_GIVEN, "source", None)
    _GIVEN.source = (Path(path), data)
    try:
        yield
    finally:
        _GIVEN.source = previous


# The most of one transcript an adapter reads. An adapter parses its file whole (its rows
# are spilled as they are made, not its lines), so its memory follows the file's size: a
# 2,000-request Claude Code session is 26 MB and ingests in 685 MB (docs/benchmarks.md);
# a file past this is refused in one line rather than read until the machine runs out.
TRANSCRIPT_CAP = 1 << 30


def read_source(path: Path) -> bytes:
    """The bytes of the transcript ``path`` an adapter converts: what :func:`given_source`
    holds for it, else the file's content (a regular file, TRANSCRIPT_CAP at most)."""
    given = getattr(_GIVEN, "source", None)
    if given is not None and given[0] == Path(path):
        return given[1]
    return read_capped(path, TRANSCRIPT_CAP, "transcript")


def read_head(path: Path) -> tuple[bytes, bool, bool]:
    """(head, the head is the whole file, a line was longer than SNIFF_LINE_CAP).

    The first SNIFF_BYTES, extended to the end of the line they cut, SNIFF_LINE_CAP at most.
    The caller has checked that ``path`` is a regular file."""
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
        if len(head) < SNIFF_BYTES:
            return head, True, False
        parts = [head]
        total = len(head)
        rest = b""
        ended = False
        if not head.endswith(b"\n"):
            while total < SNIFF_LINE_CAP:
                chunk = f.read(min(1 << 20, SNIFF_LINE_CAP - total))
                if not chunk:
                    ended = True
                    break
                nl = chunk.find(b"\n")
                if nl >= 0:
                    parts.append(chunk[: nl + 1])
                    total += nl + 1
                    rest = chunk[nl + 1:]
                    break
                parts.append(chunk)
                total += len(chunk)
        data = b"".join(parts)
        if not ended and not rest:
            ended = not f.read(1)
    too_long = not ended and b"\n" not in data
    return data, ended and not rest, too_long


@dataclass
class Sample:
    """What detection knows of a transcript file, handed to every adapter's ``sniff``.

    ``head`` is the first bytes of the file (at least 8 MB, or the whole file, extended to
    the end of the line the limit cuts, 64 MB at most); ``complete`` says it is the whole
    file. ``document`` is the file parsed as one JSON value (None if it is not JSON, or not
    read whole: see ``why_not_json``); ``lines`` the JSON lines of ``head`` that parse (the first 2,000
    non-blank lines; None if none does). A sniffer must not read the file itself.
    """

    path: Path
    head: bytes
    complete: bool
    size: int
    long_line: bool = False
    document: Any = None
    lines: list[Any] | None = None
    why_not_json: str | None = None
    _json: bool = field(default=False, repr=False)

    @property
    def is_json(self) -> bool:
        """The head parsed as one JSON document (``document`` may still be JSON null)."""
        return self._json

    @property
    def empty(self) -> bool:
        return self.size == 0

    def not_json_reason(self) -> str:
        """Why the built-in JSON formats cannot read this file: empty, or not JSON."""
        if self.empty:
            return "empty file"
        if self.long_line:
            return f"not JSON nor JSON lines (no line ends in the first {SNIFF_LINE_CAP >> 20} MB)"
        return f"not JSON nor JSON lines ({self.why_not_json})"


def read_sample(path: Path) -> Sample:
    """The :class:`Sample` of a regular file (refused by type otherwise). Nesting too deep
    for the JSON parser is an error naming the file and, for JSON lines, the line."""
    from .jsonread import json_error, loads_document, parse_line

    st = require_regular_file(path)
    try:
        head, complete, long_line = read_head(path)
    except OSError as err:
        raise ContextlensError(f"{path}: cannot read ({err})") from None
    sample = Sample(path, head, complete, st.st_size, long_line)
    if not complete:
        # a part of the file is not the file's document, even when it parses (one line)
        sample.why_not_json = f"over {len(head) >> 20} MB, not read whole"
    else:
        try:
            sample.document = loads_document(path, head, verify_text=False)
            sample._json = True
        except (ValueError, UnicodeDecodeError) as err:
            sample.why_not_json = json_error(err)
    lines: list[Any] = []
    n = 0
    for n, raw in enumerate(head.splitlines(), start=1):
        if n > SNIFF_LINES:
            break
        if not raw.strip():
            continue
        try:
            lines.append(parse_line(path, n, raw, verify_text=False))
        except (ValueError, UnicodeDecodeError):
            continue
    sample.lines = lines or None
    return sample

