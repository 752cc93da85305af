"""An export folder as found on disk: its manifest, each table's Parquet files and their
schema, its blobs folder (never a link), and the manifest's checks (row counts, sha256s)."""

from __future__ import annotations

import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pydantic

from .contract import ADDED_COLUMNS, SCHEMA_VERSION, TABLES, Manifest, Table
from .errors import ContextlensError, ValidationError
from .safe_files import MANIFEST_CAP, read_text_capped
from .sql import fetch_one, q, show_value, sql_str
from .writer import table_sha256

__all__ = ["ExportLayout", "TableSource", "check_manifest", "manifest_digest", "read_layout",
           "start_hashing"]


@dataclass
class TableSource:
    name: str
    files: list[Path]  # absolute, sorted by relative path
    rel_files: list[str]
    hive: bool
    file_rows: list[int]
    columns: dict[str, str] = field(default_factory=dict)  # name -> DuckDB type as found
    casts: dict[str, str] = field(default_factory=dict)  # name -> DuckDB type to cast to
    absent: set[str] = field(default_factory=set)  # ADDED_COLUMNS the files lack (read as null)
    label: str = ""  # "export <folder>", the prefix of its errors

    @property
    def display(self) -> str:
        return self.rel_files[0] if len(self.rel_files) == 1 else f"{self.name}/"

    def scan_sql(self, extra: str = "") -> str:
        """A read_parquet over the files; the file list is inlined as literals of paths we
        found on disk (a table function's arguments are constants)."""
        files = "[" + ", ".join(sql_str(str(p)) for p in self.files) + "]"
        opts = ", union_by_name=true"
        if self.hive:
            opts += ", hive_partitioning=true"
        return f"read_parquet({files}{opts}{extra})"

    def global_row(self, filename: str, file_row: int) -> int:
        offset = 0
        for path, rows in zip(self.files, self.file_rows):
            if str(path) == filename:
                return offset + int(file_row)
            offset += rows
        return int(file_row)

@dataclass
class ExportLayout:
    root: Path
    manifest: Manifest
    manifest_json: str
    tables: dict[str, TableSource]

    @property
    def label(self) -> str:
        return f"export {show_value(self.root.name)}"

    def error(self, message: str) -> ValidationError:
        return ValidationError(f"{self.label}: {message}")


# --------------------------------------------------------------------------- files

def read_layout(export_dir: str | os.PathLike[str]) -> ExportLayout:
    """Read manifest.json and every table's Parquet footers (never the rows)."""
    root = Path(export_dir)
    label = f"export {show_value(root.name)}"
    if not root.is_dir():
        raise ValidationError(f"{label}: {root} is not a folder")
    manifest_path = root / "manifest.json"
    found_any_table = any(
        (root / f"{t}.parquet").exists() or (root / t).is_dir() for t in TABLES
    )
    if not manifest_path.exists():
        if not found_any_table:
            raise ValidationError(
                f"{label}: empty export: no manifest.json and no table files in {root}"
            )
        raise ValidationError(f"{label}: manifest.json is missing")
    try:
        # bounded: a FIFO or /dev/zero named manifest.json is refused, never read
        manifest_json = read_text_capped(manifest_path, MANIFEST_CAP)
        manifest = Manifest.model_validate_json(manifest_json)
    except ContextlensError as err:
        raise ValidationError(f"{label}: {err}") from None
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(top level)"
        raise ValidationError(
            f"{label}: manifest.json is invalid at {where}: {first.get('msg')}"
        ) from None
    if manifest.schema_version != SCHEMA_VERSION:
        raise ValidationError(
            f"{label}: manifest.json schema_version '{show_value(manifest.schema_version)}' is not "
            f"supported (this contextlens reads {SCHEMA_VERSION!r})"
        )
    _refuse_linked_blobs(root, label)
    tables: dict[str, TableSource] = {}
    for name, table in TABLES.items():
        tables[name] = _table_source(root, label, table)
    return ExportLayout(root, manifest, manifest_json, tables)

def _refuse_linked_blobs(root: Path, label: str) -> None:
    """A symbolic link in blobs/ could point a raw body anywhere on the reader's disk."""
    blobs = root / "blobs"
    if blobs.is_symlink():
        raise ValidationError(f"{label}: blobs/ is a symbolic link; blob bodies must be files in the export")
    if not blobs.is_dir():
        return
    pending = [blobs]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_symlink():
                    rel = Path(entry.path).relative_to(root).as_posix()
                    raise ValidationError(
                        f"{label}: blob {show_value(rel)} is a symbolic link; blob bodies must be "
                        "files in the export"
                    )
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))

def _table_source(root: Path, label: str, table: Table) -> TableSource:
    name = table.name
    single = root / f"{name}.parquet"
    folder = root / name
    if single.is_file():
        files = [single]
    elif folder.is_dir():
        files = sorted(p for p in folder.rglob("*.parquet") if p.is_file())
        if not files:
            raise ValidationError(f"{label}: table {name}: folder {name}/ holds no .parquet files")
    else:
        raise ValidationError(
            f"{label}: table {name} is missing (expected {name}.parquet or {name}/)"
        )
    rel = [str(p.relative_to(root).as_posix()) for p in files]
    order = sorted(range(len(files)), key=lambda i: rel[i])
    files = [files[i] for i in order]
    rel = [rel[i] for i in order]
    hive = any("=" in part for r in rel for part in Path(r).parts[1:-1])
    file_rows: list[int] = []
    # an optional column added to the contract later reads as null when absent
    required = [c.name for c in table.columns if (name, c.name) not in ADDED_COLUMNS]
    for path, rel_name in zip(files, rel):
        try:
            meta = pq.read_metadata(path)
            schema = meta.schema.to_arrow_schema()
        except (pa.ArrowException, OSError) as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValidationError(
                f"{label}: file {rel_name} is not a readable Parquet file ({reason})"
            ) from None
        file_rows.append(meta.num_rows)
        partition_keys = {
            part.split("=", 1)[0] for part in Path(rel_name).parts[1:-1] if "=" in part
        }
        present = set(schema.names) | partition_keys
        for col in required:
            if col not in present:
                raise ValidationError(
                    f"{label}: table {name}, file {rel_name}: missing required column {col}"
                )
    return TableSource(name, files, rel, hive, file_rows, label=label)


# --------------------------------------------------------------------------- types

def start_hashing(layout: ExportLayout, pool: ThreadPoolExecutor) -> dict[str, Future]:
    """Recompute each table's sha256 in the background (hashlib releases the GIL)."""
    return {
        name: pool.submit(table_sha256, layout.root, src.rel_files)
        for name, src in layout.tables.items()
    }

def check_manifest(
    con: duckdb.DuckDBPyConnection,
    layout: ExportLayout,
    export_id: str,
    hashes: dict[str, Future] | None,
) -> dict[str, int]:
    """Row counts and sha256 per table against manifest.json; returns the row counts."""
    rows: dict[str, int] = {}
    for name, src in layout.tables.items():
        entry = layout.manifest.tables.get(name)
        if entry is None:
            raise layout.error(f"manifest.json has no entry for table {name}")
        count = fetch_one(con.execute(
            f"SELECT count(*) FROM {q(name)} WHERE export_id = ?", [export_id]
        ))[0]
        rows[name] = count
        if count != entry.rows:
            raise layout.error(
                f"table {name}: {count} rows, but manifest.json says {entry.rows}"
            )
        if sorted(entry.files) != src.rel_files:
            raise layout.error(
                f"table {name}: files {', '.join(src.rel_files)} do not match manifest.json "
                f"({', '.join(sorted(entry.files)) or 'none'})"
            )
    if hashes is not None:
        for name, fut in hashes.items():
            actual = fut.result()
            expected = layout.manifest.tables[name].sha256
            if actual != expected:
                raise layout.error(
                    f"table {name}: sha256 {actual[:12]}… does not match manifest.json "
                    f"({expected[:12]}…); the files changed after the export was written"
                )
    return rows


# --------------------------------------------------------------------------- content

def manifest_digest(manifest_json: str) -> dict[str, str]:
    """The part of a manifest that identifies an export's content: table -> sha256."""
    data = json.loads(manifest_json)
    return {
        name: json.dumps(
            [entry.get("sha256", ""), entry.get("rows"), sorted(entry.get("files", []))]
        )
        for name, entry in sorted(data.get("tables", {}).items())
    }
