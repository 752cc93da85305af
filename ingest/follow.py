"""Following a transcript that is still being written (``contextlens open --follow``).

A :class:`FollowedFile` reads a growing file incrementally: it remembers how far it has
read and the last complete line, reads only what was appended since, and keeps a
half-written last line back until its newline arrives. A file truncated, replaced (another
inode: a rotation, an editor's save, ``mv``) or rewritten from its start is noticed and read
again whole. A transcript that is one JSON document (a Gemini CLI session, an inspect_ai
log), rewritten whole on every turn, is read again whole whenever it changes.

A :class:`Follower` turns what was read into a store: the adapter converts the complete
lines read so far (handed to it through ``files.given_source``, so the file is not opened
again from its start) and the export is ingested into a new store file, one per update.
The store is therefore exactly a one-shot ingest of the same bytes, and a JSON-lines log's
ids stay the same as it grows (``builder.source_identity``), so a list keeps its cursor on
the request it was on. Files the adapter reads beside the transcript (Claude Code's
subagent transcripts, ``Adapter.companions``) are watched too: one that appears or grows
makes an update.

What an update costs: reading the appended bytes only; the conversion and the ingest are
of the whole session (each request of a transcript carries the history before it, so its
rows grow with the session anyway). docs/benchmarks.md measures it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .adapters.files import given_source, require_regular_file
from .errors import ContextlensError

# How often the app looks at a followed file: a flushed line shows within this plus the
# update's own time.
POLL_SECONDS = 0.2
# The first line is compared (up to this many bytes) to notice a file rewritten in place.
_HEAD_CHECK = 64 << 10

WarnFn = Callable[[str], None]


@dataclass(frozen=True)
class FileChange:
    """What one read of a followed file found."""

    changed: bool  # complete content was added (or the file was read again)
    reset: bool  # the file was truncated, replaced or rewritten: read again from its start
    read_bytes: int  # bytes read from the file by this look


class FollowedFile:
    """The complete content of a growing file, read from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._identity: tuple[int, int] | None = None  # (device, inode) read from
        self._complete = bytearray()  # every complete line read so far
        self._pending = b""  # bytes after the last newline: a line still being written
        self._document = False  # one JSON document, not JSON lines: read whole on change
        self._signature: tuple[int, int] | None = None  # (size, mtime) of a document

    @property
    def data(self) -> bytes:
        """The content an ingest of the file would read now: every complete line, and a last
        line without its newline only when it is already one whole JSON object (a writer
        that ends its file without a newline is not kept a line behind)."""
        if self._pending and _whole_object(self._pending):
            return bytes(self._complete) + self._pending
        return bytes(self._complete)

    @property
    def offset(self) -> int:
        """Bytes of the file consumed: the complete lines and the pending part."""
        return len(self._complete) + len(self._pending)

    def read(self) -> FileChange:
        """Look at the file once; read what was appended, or all of it again after a
        truncation or replacement. A file that vanished for a moment (a rotation in
        progress) is no change; one that is not a regular file is a ContextlensError."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return FileChange(False, False, 0)
        st = require_regular_file(self.path)
        identity = (st.st_dev, st.st_ino)
        if self._identity is None or identity != self._identity or st.st_size < self.offset:
            return self._read_again(identity, first=self._identity is None)
        if self._document:
            if (st.st_size, st.st_mtime_ns) == self._signature:
                return FileChange(False, False, 0)
            return self._read_again(identity, first=False)
        if st.st_size == self.offset:
            return FileChange(False, False, 0)
        with open(self.path, "rb") as f:
            head = f.read(min(len(self._complete), _HEAD_CHECK))
            if head != bytes(self._complete[: len(head)]):
                # rewritten in place from its start (same inode, longer): not an append
                return self._read_again(identity, first=False)
            f.seek(self.offset)
            added = f.read(st.st_size - self.offset)
        before = len(self._complete)
        self._take(self._pending + added)
        return FileChange(len(self._complete) > before or _whole_object(self._pending),
                          False, len(added))

    def _read_again(self, identity: tuple[int, int], first: bool) -> FileChange:
        with open(self.path, "rb") as f:
            content = f.read()
            st = os.fstat(f.fileno())
        self._identity = identity
        self._complete = bytearray()
        self._pending = b""
        self._document = not _is_json_lines(content)
        if self._document:
            self._complete += content
            self._signature = (st.st_size, st.st_mtime_ns)
        else:
            self._take(content)
        return FileChange(True, not first, len(content))

    def _take(self, chunk: bytes) -> None:
        """Move the complete lines of ``chunk`` into the content; keep the rest pending."""
        cut = chunk.rfind(b"\n") + 1
        self._complete += chunk[:cut]
        self._pending = chunk[cut:]


def _whole_object(line: bytes) -> bool:
    text = line.strip()
    if not (text.startswith(b"{") and text.endswith(b"}")):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _is_json_lines(content: bytes) -> bool:
    """A file read line by line: its first line is one whole JSON object (the rule
    ``builder.source_identity`` keeps ids stable by). Anything else is a document, and
    an empty file is taken as JSON lines to come."""
    end = content.find(b"\n")
    if end < 0:
        return not content.strip() or _whole_object(content)
    return _whole_object(content[:end])


@dataclass(frozen=True)
class FollowUpdate:
    """A followed file, read again into a store."""

    store: Path  # a new store holding the file as read so far
    generation: int  # 1 for the first store, then one more per update
    reset: bool  # the file had been truncated or replaced and was read again from its start
    read_bytes: int  # bytes read from the transcript for this update
    warnings: tuple[str, ...]


class Follower:
    """Keeps a store in step with a growing transcript: each :meth:`update` that finds new
    complete content adapts it and ingests it into a new store file under ``work_dir``
    (``<name>-<generation>.duckdb``). The caller moves to the new store and removes an old
    one with :meth:`retire` once nothing reads it."""

    def __init__(self, path: Path, work_dir: Path, fmt: str | None = None,
                 name: str = "followed") -> None:
        self.path = Path(path)
        self.fmt = fmt
        self.work_dir = Path(work_dir)
        self.name = name
        self.file = FollowedFile(self.path)
        self.generation = 0
        self._companions: dict[Path, tuple[int, int]] = {}

    def _companion_signatures(self) -> dict[Path, tuple[int, int]]:
        from .adapters import get_adapter

        adapter = get_adapter(self.fmt) if self.fmt else None
        companions = getattr(adapter, "companions", None)
        found: dict[Path, tuple[int, int]] = {}
        for p in (companions(self.path) if callable(companions) else []):
            try:
                st = os.stat(p)
            except OSError:
                continue
            found[Path(p)] = (st.st_size, st.st_mtime_ns)
        return found

    def update(self) -> FollowUpdate | None:
        """Read what was appended; if it completed anything (or a companion file changed),
        a new store with the whole file as read so far. None when nothing changed, or no
        complete line has been written yet."""
        from .adapters import adapt, detect_format
        from .store import ingest

        change = self.file.read()
        data = self.file.data
        if not data.strip():
            return None
        if self.fmt is None:
            self.fmt = detect_format(self.path)
            if self.fmt == "export":
                raise ContextlensError(f"{self.path}: an export folder is not followed; "
                                       "follow a transcript file")
        companions = self._companion_signatures()
        if not change.changed and companions == self._companions and self.generation:
            return None
        self._companions = companions
        self.generation += 1
        self.work_dir.mkdir(parents=True, exist_ok=True)
        export = self.work_dir / f"{self.name}-{self.generation}.export"
        store = self.store_path(self.generation)
        for stale in (export, store, store.with_name(store.name + ".wal")):
            if stale.is_dir():
                shutil.rmtree(stale)
            elif stale.exists():
                stale.unlink()
        try:
            with given_source(self.path, data):
                result = adapt(self.path, export, self.fmt)
            ingest(export, store)
        finally:
            shutil.rmtree(export, ignore_errors=True)
        return FollowUpdate(store, self.generation, change.reset, change.read_bytes,
                            tuple(result.warnings))

    def store_path(self, generation: int) -> Path:
        return self.work_dir / f"{self.name}-{generation}.duckdb"

    def retire(self, store: Path) -> None:
        """Remove a store an update replaced (and its WAL), once nothing reads it."""
        for p in (store, store.with_name(store.name + ".wal")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
