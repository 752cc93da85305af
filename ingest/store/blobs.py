"""Reading a raw body from the ``blobs/`` folder of the export an artifact came from.

Every component below the export folder is opened with ``O_NOFOLLOW`` relative to the
folder opened before it, so a symbolic link anywhere in ``blobs/`` (planted before or after
ingest) is never followed, and nothing is resolved by name twice.
"""

from __future__ import annotations

import os
import stat
from hashlib import sha256 as _sha256
from pathlib import Path, PurePosixPath

from ..errors import ContextlensError
from ..errors import cut as _cut
from .assembly import AssemblyQueries

__all__ = ["BlobQueries"]


class BlobQueries(AssemblyQueries):
    """The blob area of ``Store`` (an assembly id names the export through its assembly)."""

    def read_blob(self, owner_id: str, storage_ref: str, sha256: str | None = None) -> bytes:
        """The raw body named by ``storage_ref`` (``blobs/<sha256>`` or ``<sha256>``) from the
        blobs/ folder of an export; ``owner_id`` is an export id or an assembly id."""
        source = self._one("SELECT source_dir FROM exports WHERE export_id = ?", [owner_id])
        if source is None:
            source = self._one(
                "SELECT e.source_dir FROM exports e WHERE e.export_id = ?",
                [self._assembly_export(owner_id)],
            )
        assert source is not None
        ref = PurePosixPath(storage_ref.replace("\\", "/"))
        if not storage_ref or ref.is_absolute() or storage_ref.startswith(("/", "~")) or ".." in ref.parts:
            raise ContextlensError(f"blob '{_cut(storage_ref)}': refused, not a path inside blobs/")
        parts = ref.parts[1:] if ref.parts and ref.parts[0] == "blobs" else ref.parts
        if not parts:
            raise ContextlensError(f"blob '{_cut(storage_ref)}': refused, not a path inside blobs/")
        body = read_no_follow(Path(source["source_dir"]), ("blobs", *parts))
        if body is None or (
            sha256 is not None and _sha256(body).hexdigest() != sha256.lower()
        ):
            # one message for both: a reader learns nothing about which files exist
            raise ContextlensError(
                f"blob '{_cut(storage_ref)}' is missing or is not the recorded body"
            )
        return body



def read_no_follow(folder: Path, parts: tuple[str, ...]) -> bytes | None:
    """The bytes of the regular file ``folder/parts...``, or None when any component is
    missing, a symbolic link, or not a folder (then a file) as expected."""
    nofollow = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds: list[int] = []
    try:
        fds.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for name in parts[:-1]:
            fds.append(os.open(name, nofollow | os.O_DIRECTORY, dir_fd=fds[-1]))
        fd = os.open(parts[-1], nofollow | os.O_NONBLOCK, dir_fd=fds[-1])
        fds.append(fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    except (OSError, ValueError):
        return None
    finally:
        for fd in fds:
            os.close(fd)
