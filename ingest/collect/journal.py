"""The collector's store: an append-only journal of OTLP/JSON lines.

One accepted request is one line: an ``ExportTraceServiceRequest`` in the OTLP/JSON
encoding, ``{"resourceSpans": [...]}`` (or an ``ExportLogsServiceRequest``,
``{"resourceLogs": [...]}``), then a newline. That is the format of the
OpenTelemetry Collector's file exporter, so ``contextlens ingest`` and ``open --follow``
read the journal as they read such a file, while it grows.

Why not a DuckDB store: DuckDB allows one writing process, and a reader cannot open a
database another process is writing. A journal can be read while it is written: a reader
takes the complete lines and leaves a half-written last one for later.

The guarantees:

- **Durable before acknowledged.** :meth:`Journal.append` writes its lines and calls
  ``fdatasync`` (``fsync`` where there is none) before it returns; the server answers 200
  only after that. A SIGKILL at any moment loses no acknowledged batch.
- **Atomic per batch.** A line is written with its newline in one go; if a kill (or a full
  disk) leaves part of a line at the end, the next :meth:`Journal.open` cuts it off and
  says so. A reader never takes a line without its newline, so it never sees half a batch.
  A line whose write completed but whose sync did not may survive a kill without having
  been acknowledged; the sender then sends the batch again, so a batch can be in the
  journal twice (OTLP's "duplicate data", which its specification accepts).
- **One writer.** ``<journal>.lock`` is held with ``flock`` (``ingest/store/lock.py``) for
  as long as the journal is open; a second collector on the same file is refused.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Iterator

from ..adapters.files import file_kind
from ..errors import ContextlensError, StoreBusyError
from ..store.lock import StoreLock

__all__ = ["Journal", "read_journal"]

# What the first line of a journal starts with: ours and the Collector's file exporter's
_JOURNAL_HEAD = re.compile(rb"\A\s*\{\s*\"resource(Spans|Logs)\"\s*:")
_FIRST_BYTES = (b'{"resourceSpans":', b'{"resourceLogs":')  # what our writer writes first
_HEAD_BYTES = 4096
_TAIL_CHUNK = 1 << 20

_sync = getattr(os, "fdatasync", os.fsync)  # fdatasync: the data and the size, not the mtime


class Journal:
    """``with Journal(path) as journal:`` the journal open for appending, its lock held.

    ``notes`` holds what opening did that the user should hear of (a half-written last
    line cut off); ``size`` is the journal's length in bytes, always at the end of a
    complete line."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.notes: list[str] = []
        self.size = 0
        self._fd: int | None = None
        self._lock: StoreLock | None = None
        self._damaged = False
        self.created = False  # made by this open (a failed start removes it again)

    # ------------------------------------------------------------------ open and close

    def __enter__(self) -> "Journal":
        self.open()
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def open(self) -> None:
        _refuse_non_journal(self.path)
        lock = StoreLock(self.path)
        try:
            lock.__enter__()
        except StoreBusyError:
            pid = _lock_holder(lock.path)
            raise ContextlensError(
                f"{self.path} is busy: another collect ({pid}) is writing it; "
                "one collector per journal"
            ) from None
        self._lock = lock
        try:
            self._open_locked()
        except BaseException:
            self.close()
            raise

    def _open_locked(self) -> None:
        created = self.created = not self.path.exists()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as err:
            raise ContextlensError(f"cannot write {self.path}: {err.strerror or err}") from None
        self._fd = fd
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between the check and the open
            raise ContextlensError(
                f"{self.path}: {file_kind(st.st_mode)}, not a regular file; "
                "collect writes its journal to a regular file")
        self.size = st.st_size
        if created:
            _sync_folder(self.path.parent)
        self._end_on_a_complete_line()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.__exit__(None, None, None)

    def _end_on_a_complete_line(self) -> None:
        """Cut off what a killed writer left after the last newline. A last line that is a
        whole JSON document without its newline (a file written by hand) is kept and ended."""
        if self.size == 0:
            return
        with open(self.path, "rb") as f:
            end = _last_newline_end(f, self.size)
            if end == self.size:
                return
            f.seek(end)
            tail = f.read(self.size - end)
        if _is_json_document(tail):
            self._write_all(b"\n")
            self._sync()
            self.size += 1
            self.notes.append(f"ended the last line of {self.path} (it had no newline)")
            return
        assert self._fd is not None
        os.ftruncate(self._fd, end)
        self._sync()
        self.size = end
        self.notes.append(
            f"cut {len(tail):,} bytes off the end of {self.path}: a batch left half-written "
            "by a collector that was stopped (never acknowledged, so its sender sent it again)")

    # ------------------------------------------------------------------ appending

    def append(self, lines: list[bytes]) -> None:
        """Append ``lines`` (each without its newline), then sync: on return they are on
        disk. On a failed write (a full disk) what was written of them is cut off again
        and the OSError raised: the journal still ends on a complete line."""
        if self._damaged:
            raise OSError(errno.EIO, "its end could not be cut back to a complete line after "
                                     "a failed write; stop collect and start it again")
        data = b"".join(line + b"\n" for line in lines)
        before = self.size
        try:
            self._write_all(data)
            self._sync()
        except OSError:
            try:
                assert self._fd is not None
                os.ftruncate(self._fd, before)
            except OSError:
                # appending after a torn line would glue it to the next batch: refuse to
                # write until a restart cuts it off (Journal.open)
                self._damaged = True
            raise
        self.size = before + len(data)

    def _write_all(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def _sync(self) -> None:
        assert self._fd is not None
        _sync(self._fd)


# ----------------------------------------------------------------------------- reading


def read_journal(path: Path) -> Iterator[dict[str, Any]]:
    """The batches of a journal, one OTLP/JSON document per complete line (a last line
    without its newline is being written, and is left out)."""
    with open(path, "rb") as f:
        for raw in f:
            if raw.endswith(b"\n") and raw.strip():
                yield json.loads(raw)


# ----------------------------------------------------------------------------- helpers


def _refuse_non_journal(path: Path) -> None:
    """A folder, a FIFO, a device or a file that is not OTLP JSON lines is refused before
    anything opens it (a FIFO would block the open; a DuckDB store would be spoiled)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise ContextlensError(f"{path}: its folder {path.parent} does not exist") from None
        return
    except (OSError, ValueError) as err:
        raise ContextlensError(f"{path}: cannot read ({err})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ContextlensError(
            f"{path}: {file_kind(st.st_mode)}, not a regular file; collect writes its journal "
            "(OTLP JSON lines) to a file")
    if st.st_size == 0:
        return
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except OSError as err:
        raise ContextlensError(f"{path}: cannot read ({err.strerror or err})") from None
    # a first batch cut short by a kill is still ours: the next open cuts it off
    cut_short = b"\n" not in head and any(first.startswith(head.lstrip())
                                           for first in _FIRST_BYTES)
    if not (_JOURNAL_HEAD.match(head) or cut_short):
        raise ContextlensError(
            f"{path}: not an OTLP JSON lines journal (it does not start with "
            '{"resourceSpans": ...}); collect appends only to its own journal or to a '
            "Collector file exporter's output: name a new file")


def _last_newline_end(f: Any, size: int) -> int:
    """The offset just after the last newline of the file (0 if it has none)."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        f.seek(start)
        chunk = f.read(end - start)
        at = chunk.rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def _is_json_document(tail: bytes) -> bool:
    try:
        value = json.loads(tail)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and ("resourceSpans" in value or "resourceLogs" in value)


def _lock_holder(lock_path: Path) -> str:
    try:
        text = lock_path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "pid unknown"


def _sync_folder(folder: Path) -> None:
    """Make a new file's name durable (its folder's entry), where the system allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
