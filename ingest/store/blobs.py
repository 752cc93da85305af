"""Reading a raw body from the ``blobs/`` folder of the export an artifact came from."""

from __future__ import annotations

from hashlib import sha256 as _sha256
from pathlib import Path, PurePosixPath

from ..errors import ContextlensError, NotFoundError
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
        root = Path(source["source_dir"]) / "blobs"
        ref = PurePosixPath(storage_ref.replace("\\", "/"))
        if not storage_ref or ref.is_absolute() or storage_ref.startswith(("/", "~")) or ".." in ref.parts:
            raise ContextlensError(f"blob '{storage_ref}': refused, not a path inside blobs/")
        parts = ref.parts[1:] if ref.parts and ref.parts[0] == "blobs" else ref.parts
        if not parts:
            raise ContextlensError(f"blob '{storage_ref}': refused, not a path inside blobs/")
        target = root.joinpath(*parts)
        try:
            resolved = target.resolve(strict=True)
            root_resolved = root.resolve(strict=True)
        except (FileNotFoundError, RuntimeError):
            raise NotFoundError(f"blob '{storage_ref}' not found in {root}") from None
        if not resolved.is_relative_to(root_resolved) or not resolved.is_file():
            raise ContextlensError(f"blob '{storage_ref}': refused, it resolves outside blobs/")
        body = resolved.read_bytes()
        if sha256 is not None and _sha256(body).hexdigest() != sha256.lower():
            raise ContextlensError(
                f"blob '{storage_ref}': sha256 {_sha256(body).hexdigest()[:12]}… does not "
                f"match the recorded {sha256[:12]}…"
            )
        return body

