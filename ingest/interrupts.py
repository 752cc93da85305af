"""Signals and full disks, as the command line reports them.

SIGTERM (``kill PID``, a service manager, a CI timeout) is taken like Ctrl+C: the command
line's ``main`` has it raise ``Terminated`` in the main thread, not an ``Exception`` (as
``KeyboardInterrupt`` is not), so every ``finally`` and ``except BaseException`` that cleans up
after Ctrl+C (worker processes stopped, a temporary output removed, an ingest rolled back)
runs for it too, and ``main`` prints one line and exits 143.

A signal that arrives inside a DuckDB query comes back as DuckDB's own error ("Query
interrupted"), the exception the handler raised spent: ``last_signal`` says which signal it
was.

Scratch files are named with their writer's pid (``.<name>.<pid>.tmp``): a writer that was
killed (SIGKILL, a power cut) cannot remove its own, so the next writer beside them removes
those of processes that are gone (``remove_dead_scratch``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
from pathlib import Path
from typing import Any, Iterator

from .errors import ContextlensError

__all__ = ["IngestInterrupted", "Terminated", "WriteFailed", "disk_full", "full_reason", "handlers_restored", "last_signal", "note_signal",
           "pid_alive", "raise_on_sigterm",
           "remove_dead_scratch"]

_received: list[int] = []  # the signals the handler took, in order (one process, one main)


class Terminated(SystemExit):
    """SIGTERM reached the command: handled as ``KeyboardInterrupt`` is (see the module).
    A ``SystemExit`` (exit 143 if nothing catches it), because asyncio lets only that and
    KeyboardInterrupt out of a task: any other exception raised in a task of the app's
    event loop ends that task alone, and the app went on running."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


class IngestInterrupted(ContextlensError):
    """Ctrl+C or SIGTERM reached an ingest: it stopped and cleaned up as after any other
    error, or, once the export was being committed, finished first. The message says which
    (``stored``); the exit code is the shell's for the signal (130, 143)."""

    def __init__(self, message: str, signum: int, stored: bool) -> None:
        super().__init__(message, exit_code=128 + signum)
        self.signum = signum
        self.stored = stored


def _raise_terminated(signum: int, _frame: Any) -> None:
    _received.append(signum)
    raise Terminated


def raise_on_sigterm() -> None:
    """From now on SIGTERM raises ``Terminated`` in the main thread (a no-op elsewhere: only
    the main thread may set a handler). A new command: no signal taken yet."""
    _received.clear()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


@contextlib.contextmanager
def handlers_restored(*signums: int) -> Iterator[None]:
    """The handlers of ``signums`` put back as they were when the block ends (in the main
    thread; elsewhere none can be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {signum: signal.getsignal(signum) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            if handler is not None:
                signal.signal(signum, handler)


def note_signal(signum: int) -> None:
    """Record ``signum`` as taken (a handler of its own, such as an ingest's, calls this)."""
    _received.append(signum)


def last_signal() -> int | None:
    """The last signal a handler of ours took in this process, None when none did."""
    return _received[-1] if _received else None


# the errors of a write that found no room: ENOSPC, a quota (EDQUOT), a file size limit
# (EFBIG: RLIMIT_FSIZE, or a file system's own limit)
_FULL = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
_FULL_TEXT = tuple(os.strerror(e) for e in sorted(_FULL))


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` is a write that found no room, from Python (``OSError.errno``), Arrow
    (an OSError whose text carries the reason) or DuckDB (an IOException's text)."""
    if isinstance(err, OSError) and err.errno in _FULL:
        return True
    text = str(err)
    return any(reason in text for reason in _FULL_TEXT)


def full_reason(err: BaseException) -> str:
    """The reason of a failed write, short: the system's words for a full disk, else the
    error's own text."""
    text = str(err)
    for reason in _FULL_TEXT:
        if reason in text:
            return reason
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return text.splitlines()[0] if text else type(err).__name__


class WriteFailed(ContextlensError):
    """A write that failed (a full disk, a size limit, a folder not writable): one line
    naming what was being written, exit 2 (the user's to act on: room, a limit, a folder)."""

    def __init__(self, path: Path | str, err: BaseException | str) -> None:
        self.path = Path(path)
        self.reason = err if isinstance(err, str) else full_reason(err)
        super().__init__(f"cannot write {self.path}: {self.reason}")


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts: it is not ours to
    remove anything of)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_scratch(folder: Path, prefix: str, suffix: str) -> None:
    """Remove ``folder/<prefix><pid><suffix>`` for every pid that is not a live process:
    the scratch files of writers that were killed. Best effort: a file that cannot be
    removed is left for the next run."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        pid = name[len(prefix):len(name) - len(suffix)]
        if not pid.isdigit() or int(pid) == os.getpid() or pid_alive(int(pid)):
            continue
        try:
            (folder / name).unlink()
        except OSError:
            pass
