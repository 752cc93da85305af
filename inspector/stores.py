"""Which store a command works on: the bundled sample, an export folder, or a store file.

Export folders (the bundled sample included) are ingested once into a store under the user
cache directory, keyed by the export's manifest, so opening them again is instant and a
changed export gets a fresh store.
"""

from __future__ import annotations

import functools
import hashlib
import re
import os
from pathlib import Path
from typing import Callable

from ingest.errors import ContextlensError

ProgressFn = Callable[[str, int, int], None]
WarnFn = Callable[[str], None]


@functools.cache
def code_key() -> str:
    """A fingerprint of the code that builds cached exports and stores (the ingest package:
    contract, adapters, loading): a changed contextlens never reuses what an older one
    adapted or ingested."""
    import ingest

    digest = hashlib.sha256()
    root = Path(ingest.__file__).parent
    for f in sorted(root.rglob("*.py")):
        digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:16]


def cache_name(name: str) -> str:
    """A user's file name made safe as part of a cache file's name: letters, digits, dot,
    dash and underscore kept, anything else (a backslash DuckDB reads as a folder
    separator, an escape sequence, a newline) an underscore; cut to 80 characters. The
    hash beside it keeps names apart."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80].lstrip(".") or "_"


def cache_dir() -> Path:
    base = os.environ.get("CONTEXTLENS_CACHE") or os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base else Path.home() / ".cache"
    if not os.environ.get("CONTEXTLENS_CACHE"):
        root = root / "contextlens"
    root.mkdir(parents=True, exist_ok=True)
    return root


def follow_dir(path: Path) -> Path:
    """Where the stores of a followed transcript go: one folder per file (its name made
    safe, and a hash of where it is), under the cache directory."""
    key = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "follow" / f"{cache_name(Path(path).name)}-{key}"


def bundled_export() -> Path:
    from sample_data import SAMPLE_DIR

    if not (SAMPLE_DIR / "manifest.json").exists():
        raise ContextlensError(f"the bundled sample is missing: {SAMPLE_DIR}/manifest.json")
    return SAMPLE_DIR


def is_export_dir(path: Path) -> bool:
    return path.is_dir() and (path / "manifest.json").is_file()


def cached_store_for_export(export_dir: Path, progress: ProgressFn | None = None) -> Path:
    """Ingest ``export_dir`` into a cache store (once per manifest) and return the store."""
    from ingest.store import ingest

    manifest = export_dir / "manifest.json"
    key = hashlib.sha256(
        str(export_dir.resolve()).encode() + b"\0" + manifest.read_bytes() + b"\0"
        + code_key().encode()
    ).hexdigest()[:16]
    db = cache_dir() / f"{cache_name(export_dir.resolve().name)}-{key}.duckdb"
    if not db.exists():
        ingest(export_dir, db, progress=progress)
    return db


def is_store_file(path: Path) -> bool:
    """A DuckDB database file (its header carries the magic bytes DUCK at offset 8). Only a
    regular file is opened: a FIFO or a device would block or never end."""
    from ingest.adapters.files import is_regular_file

    if not is_regular_file(path):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return head[8:12] == b"DUCK"


def export_for(path: Path, fmt: str | None = None, warn: WarnFn | None = None) -> Path:
    """An export folder for what the user named: the folder itself, or a transcript adapted
    (once per file content) into an export under the cache directory."""
    from ingest.adapters import adapt, detect_format
    from ingest.adapters.files import require_regular_file

    if fmt in (None, "export") and is_export_dir(path):
        return path
    if not path.is_dir():
        require_regular_file(path)
    fmt = fmt or detect_format(path)
    if fmt == "export":
        raise ContextlensError(f"{path}: not an export folder (no manifest.json)")
    stat = path.stat()
    key = hashlib.sha256(
        f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\0{fmt}\0{code_key()}".encode()
    ).hexdigest()[:16]
    out = cache_dir() / "transcripts" / f"{cache_name(path.name)}-{key}"
    if not (out / "manifest.json").exists():
        result = adapt(path, out, fmt)
        for w in result.warnings:
            if warn:
                warn(w)
    return out


def resolve_store(
    path: str | os.PathLike[str] | None,
    progress: ProgressFn | None = None,
    fmt: str | None = None,
    warn: WarnFn | None = None,
) -> Path:
    """A store file for what the user named: nothing (the bundled sample), an export folder,
    a store file, or a transcript (Claude Code, OpenAI chat, Anthropic Messages)."""
    if path is None:
        return cached_store_for_export(bundled_export(), progress)
    from ingest.adapters.files import require_regular_file

    p = Path(path)
    str(p).encode("utf-8")  # a name that is not UTF-8 is named now, not by DuckDB's bad_cast
    if not p.exists():
        raise ContextlensError(f"{p}: no such file or folder")
    if not p.is_dir():
        require_regular_file(p)
    if fmt is None and is_store_file(p):
        return p
    return cached_store_for_export(export_for(p, fmt, warn), progress)
