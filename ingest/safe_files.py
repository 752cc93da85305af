"""Reading a file someone else named (a path option, a file a bundle or export lists), bounded.

A FIFO blocks its reader forever, ``/dev/zero`` never ends, a socket or a folder is not a
file: :func:`read_capped` opens with ``O_NONBLOCK`` (so opening a FIFO never waits for a
writer), refuses anything but a regular file by ``fstat`` of what it opened (no window
between a check and the open), and reads at most ``cap`` bytes, so a file that grows, or
lies about its size, cannot make the reader grow without bound. Every refusal is one
ContextlensError naming the file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import ContextlensError

__all__ = ["POLICY_CAP", "MANIFEST_CAP", "file_kind", "read_capped", "read_text_capped", "require_not_special"]

# policy TOML files are a few KB; a megabyte is far beyond any real one
POLICY_CAP = 1 << 20
# manifest.json lists each table's files and sha256: tens of KB for thousands of files
MANIFEST_CAP = 64 << 20


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "not a regular file"


def _size_words(cap: int) -> str:
    return f"{cap >> 20} MB" if cap >= 1 << 20 else f"{cap:,} bytes"


def read_capped(path: str | os.PathLike[str], cap: int, what: str = "") -> bytes:
    """The bytes of the regular file ``path`` (symbolic links followed), at most ``cap``;
    a FIFO, device, socket or folder, or a file over ``cap``, is a ContextlensError."""
    label = f"{path}" + (f" ({what})" if what else "")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ContextlensError(f"{label}: no such file") from None
    except IsADirectoryError:
        raise ContextlensError(f"{label}: a folder, not a regular file") from None
    except (OSError, ValueError) as err:
        raise ContextlensError(f"{label}: cannot read ({getattr(err, 'strerror', None) or err})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ContextlensError(f"{label}: {file_kind(mode)}, not a regular file; only regular files are read")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:
            raise ContextlensError(f"{label}: over {_size_words(cap)}, too large to be read")
        return b"".join(chunks)
    except OSError as err:
        raise ContextlensError(f"{label}: cannot read ({err.strerror or err})") from None
    finally:
        os.close(fd)


def read_text_capped(path: str | os.PathLike[str], cap: int, what: str = "") -> str:
    """:func:`read_capped` decoded as UTF-8 (not UTF-8: a ContextlensError naming the file)."""
    data = read_capped(path, cap, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ContextlensError(f"{path}: not UTF-8 text (byte {err.start})") from None


def require_not_special(path: str | os.PathLike[str], what: str) -> None:
    """Raise when ``path`` exists and is not a regular file (a folder, FIFO, device or
    socket), naming what it is: ``<path> is a folder, not a <what>``. Nothing is opened."""
    try:
        mode = os.stat(Path(path)).st_mode
    except (OSError, ValueError):
        return  # absent or unreachable: the caller's own open or write says why
    if not stat.S_ISREG(mode):
        raise ContextlensError(f"{path} is {file_kind(mode)}, not a {what}")
