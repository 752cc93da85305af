"""Re-export: write one export of a store back out as an export folder, with ExportWriter.

    export_store("store.duckdb", "out/")                 # the store's only export
    export_store("store.duckdb", "out/", "exp-2025-03")  # one of several
    write_export("out/", "exp-1", "producer", {"messages": table, ...}, blobs, policies)

Every contract table is written in the contract's columns (the store's own ``export_id``
column and any extra columns a producer added are left out: ExportWriter writes exactly the
contract), rows ordered by primary key, streamed in Arrow batches. The manifest keeps the
original export id, producer and created_at. Blobs and policy files are copied from the
folder the export was ingested from when it is still there. Export -> store -> export is
lossless for the contract's tables (``tests/unit/test_roundtrip.py``).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Iterable, Mapping

import duckdb
import pyarrow as pa

from .contract import TABLES, TRANSCRIPT_FACT_TABLES, TRANSCRIPT_FACTS
from .errors import ContextlensError, NotFoundError
from .store.blobs import read_no_follow
from .store.database import open_store
from .sql import fetch_one, q, show_value as _show
from .writer import ExportWriter

BATCH_ROWS = 256_000


def export_store(
    store_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    export_id: str | None = None,
) -> Path:
    """Write ``export_id`` (default: the store's only export) to ``out_dir``; returns it."""
    path = Path(store_path)
    con = open_store(path, read_only=True)
    try:
        known = [r[0] for r in con.execute(
            "SELECT export_id FROM exports ORDER BY export_id"
        ).fetchall()]
        if export_id is None:
            if len(known) != 1:
                raise ContextlensError(
                    f"store {path} holds {len(known)} exports; name one of: {_ids(known)}"
                )
            export_id = known[0]
        elif export_id not in known:
            raise NotFoundError(
                f"store {path} has no export '{_show(export_id)}' (it has: {_ids(known)})"
            )
        source_dir, producer, created_at = fetch_one(con.execute(
            "SELECT source_dir, producer, created_at FROM exports WHERE export_id = ?",
            [export_id],
        ))
        if isinstance(created_at, dt.datetime) and created_at.tzinfo is None:
            created_at = created_at.replace(tzinfo=dt.timezone.utc)
        have = {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
        ).fetchall()}
        out = Path(out_dir)
        try:
            _write(con, out, export_id, producer, created_at, have, source_dir)
        except OSError as err:  # ENOSPC, EACCES, ... while writing Parquet or a blob
            raise _cannot_write(err, out) from None
        return out
    finally:
        con.close()


def write_export(
    out_dir: str | os.PathLike[str],
    export_id: str,
    producer: str,
    tables: Mapping[str, pa.Table],
    blobs: Iterable[bytes] = (),
    policies: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
    created_at: dt.datetime | None = None,
    replace: bool = False,
) -> Path:
    """Write ``tables`` (contract tables in their contract columns; a missing one is
    empty), ``blobs``, ``policies`` (version -> TOML text) and extra text ``files`` (name ->
    text, at the folder's root) as the export folder ``out_dir``, whole or not at all.

    An existing non-empty ``out_dir`` is refused unless ``replace``, and even then only when
    it holds an export (its manifest.json): a folder of other files is never removed."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ContextlensError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not replace:
            raise ContextlensError(f"{out} exists and is not empty (--force replaces it)")
        if not (out / "manifest.json").is_file():
            raise ContextlensError(
                f"{out} is not an export folder (no manifest.json): not replacing it"
            )
    try:
        with ExportWriter(out, export_id=export_id, producer=producer, created_at=created_at,
                          overwrite=replace) as writer:
            for name in TABLES:
                table = tables.get(name)
                if table is not None and table.num_rows:
                    columns = TABLES[name].column_names
                    extra = None
                    if (TRANSCRIPT_FACTS in table.column_names
                            and table.column(TRANSCRIPT_FACTS).null_count < table.num_rows):
                        # a transcript's runtime facts travel with it (replay/runtimes.py)
                        columns, extra = [*columns, TRANSCRIPT_FACTS], {TRANSCRIPT_FACTS: pa.string()}
                    writer.write(name, table.select(columns), extra=extra)
            for body in blobs:
                writer.add_blob(body)
            for version, text in sorted((policies or {}).items()):
                writer.add_policy(version, text)
            for name, text in (files or {}).items():
                if Path(name).name != name or name in ("manifest.json", "blobs", "policies"):
                    raise ContextlensError(f"{name!r}: not a file name for an export's root")
                (writer.tmp / name).write_text(text, encoding="utf-8")
    except OSError as err:
        raise _cannot_write(err, out) from None
    return out


def _cannot_write(err: OSError, out: Path) -> ContextlensError:
    """ENOSPC, EACCES, ... while writing Parquet or a blob: one line naming the path."""
    name = err.filename or out
    return ContextlensError(f"cannot write {name}: {err.strerror or err}")


def _ids(ids: list[str]) -> str:
    return _show(", ".join(ids), 200) if ids else "none"


def _write(
    con: duckdb.DuckDBPyConnection, out: Path, export_id: str, producer: str | None,
    created_at: dt.datetime, have: set[str], source_dir: str | None,
) -> None:
    """Every contract table of ``export_id`` in its contract columns, then the extras."""
    with ExportWriter(
        out, export_id=export_id, producer=producer or "contextlens export_store",
        created_at=created_at,
    ) as writer:
        for name, table in TABLES.items():
            if name not in have:
                continue
            cols = ", ".join(q(c) for c in table.column_names)
            extra = None
            if name in TRANSCRIPT_FACT_TABLES and con.execute(
                    "SELECT count(*) FROM duckdb_columns() WHERE table_name = ? AND column_name = ?",
                    [name, TRANSCRIPT_FACTS]).fetchall()[0][0]:
                # a transcript's runtime facts travel with it (replay/runtimes.py)
                cols += f", {q(TRANSCRIPT_FACTS)}"
                extra = {TRANSCRIPT_FACTS: pa.string()}
            order = ", ".join(q(c) for c in table.primary_key)
            reader = con.sql(
                f"SELECT {cols} FROM {q(name)} WHERE export_id = ? ORDER BY {order}",
                params=[export_id],
            ).to_arrow_reader(BATCH_ROWS)
            for batch in reader:
                if batch.num_rows:
                    writer.write(name, batch, extra=extra)
        _copy_extras(writer, Path(source_dir) if source_dir else None, con, export_id)


def _copy_extras(
    writer: ExportWriter, source: Path | None, con: duckdb.DuckDBPyConnection, export_id: str
) -> None:
    """Blobs the export's artifacts name and its policy files, from the source folder."""
    if source is None or not source.is_dir():
        return
    from hashlib import sha256

    refs = con.execute(
        "SELECT DISTINCT sha256 FROM tool_artifacts WHERE export_id = ? AND storage_ref IS NOT NULL",
        [export_id],
    ).fetchall()
    for (sha,) in refs:
        if not isinstance(sha, str) or not sha.isalnum():
            continue
        body = read_no_follow(source, ("blobs", sha))
        if body is not None and sha256(body).hexdigest() == sha.lower():
            writer.add_blob(body)
    policies = source / "policies"
    if policies.is_dir():
        for toml in sorted(policies.glob("*.toml")):
            if toml.is_file() and not toml.is_symlink():
                try:
                    writer.add_policy(toml.stem, toml.read_text(encoding="utf-8"))
                except (ContextlensError, OSError, UnicodeDecodeError):
                    continue

