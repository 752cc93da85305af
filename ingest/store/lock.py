"""The writer's lock of a store: ``<db>.lock``, held with ``flock`` while an ingest runs.

The operating system releases a ``flock`` when its holder exits, however it exits, so a
dead writer's lock is free at once and two writers can never both hold it: there is no
"take over a stale lock" step to race on. The file holds the writer's pid, for the busy
message and so the next writer can remove the scratch files a killed writer left.

A writer unlinks the file while still holding it. A waiter that opened the file before that
unlink would then lock a file nobody else can see, so after locking, a writer checks that
the path still names the file it locked, and starts again otherwise.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import Any

from ..errors import ContextlensError, StoreBusyError

__all__ = ["StoreLock", "remove_quietly", "write_error"]

_ATTEMPTS = 50


def remove_quietly(*paths: Path) -> None:
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError:  # best effort: a leftover is reported by the next ingest's busy check
            pass


def write_error(path: Path, err: OSError) -> ContextlensError:
    """One line for a failed write of ``path`` (ENOSPC, EACCES, EROFS, ...)."""
    return ContextlensError(f"cannot write {path}: {err.strerror or err}")


class StoreLock:
    """``with StoreLock(db_path) as lock:`` holds ``<db>.lock``; ``lock.previous_pid`` is the
    pid a writer that died without cleaning up left in it (else None)."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.path = db_path.with_name(db_path.name + ".lock")
        self.previous_pid: int | None = None
        self._fd: int | None = None

    def __enter__(self) -> "StoreLock":
        for _attempt in range(_ATTEMPTS):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except OSError as err:
                raise ContextlensError(
                    f"cannot write the store {self.db_path}: cannot create its lock "
                    f"{self.path}: {err.strerror or err}"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                text = _read_pid(fd)
                os.close(fd)
                shown = f"pid {text}" if text.isdigit() else "pid unknown"
                raise StoreBusyError(
                    f"store {self.db_path} is busy: another ingest ({shown}) is writing it"
                ) from None
            except OSError as err:
                os.close(fd)
                raise ContextlensError(
                    f"cannot lock the store {self.db_path} ({self.path}): {err.strerror or err}"
                ) from None
            if not _same_file(fd, self.path):
                os.close(fd)  # locked a file another writer had just removed: start again
                continue
            self._fd = fd
            try:
                self._claim(fd)
            except BaseException:
                self._release()
                raise
            return self
        raise StoreBusyError(f"store {self.db_path} is busy: cannot take its lock {self.path}")

    def _claim(self, fd: int) -> None:
        old = _read_pid(fd)
        if old and old.isdigit() and int(old) != os.getpid():
            self.previous_pid = int(old)
        try:
            os.ftruncate(fd, 0)
            data = str(os.getpid()).encode()
            if os.pwrite(fd, data, 0) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as err:
            raise write_error(self.path, err) from None

    def _release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        # unlink while still holding the lock, so no one locks a file about to vanish unseen
        remove_quietly(self.path)
        os.close(fd)

    def __exit__(self, *_: Any) -> None:
        self._release()


def _read_pid(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
