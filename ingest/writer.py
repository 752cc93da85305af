"""ExportWriter: how a producer writes a valid export folder.

    with ExportWriter(out_dir, export_id="exp-1", producer="my-runtime/2.3") as w:
        w.write("conversations", [{"conversation_id": "c1", ...}])   # dicts, or
        w.write("assembly_records", arrow_table_or_record_batch)     # Arrow, streamed
        sha = w.add_blob(b"raw tool output")
        w.add_policy("v4", toml_text)

Rows are written through the contract's Arrow schema, so a wrong type fails here, at the
producer, with the table and column named. Tables are streamed into part files, so a
producer can write hundreds of millions of rows with bounded memory. The folder appears
whole or not at all: everything is written under a temporary name and renamed on close.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from .contract import SCHEMA_VERSION, TABLES
from .errors import ContextlensError

PART_ROWS = 2_000_000  # rows per part file before a table becomes a folder of parts


def file_sha256(path: Path, bufsize: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(bufsize):
            h.update(chunk)
    return h.hexdigest()


def table_sha256(root: Path, files: list[str]) -> str:
    """sha256 over a table's files: each file's relative path and its sha256, in sorted order."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + file_sha256(root / rel).encode() + b"\n")
    return h.hexdigest()


class _TableSink:
    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.name = name
        self.schema = TABLES[name].arrow_schema
        self.rows = 0
        self.part_rows = 0
        self.parts: list[Path] = []
        self.writer: pq.ParquetWriter | None = None

    def _open_part(self) -> None:
        folder = self.root / self.name
        folder.mkdir(exist_ok=True)
        path = folder / f"part-{len(self.parts):05d}.parquet"
        self.parts.append(path)
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")
        self.part_rows = 0

    def write(self, table: pa.Table) -> None:
        if not self.parts:
            self.schema = table.schema  # the contract's, plus declared extra columns
        if self.writer is None or self.part_rows >= PART_ROWS:
            if self.writer is not None:
                self.writer.close()
            self._open_part()
        assert self.writer is not None
        self.writer.write_table(table, row_group_size=256_000)
        self.rows += table.num_rows
        self.part_rows += table.num_rows

    def close(self) -> list[str]:
        if self.writer is None:
            self._open_part()
            assert self.writer is not None
            self.writer.write_table(self.schema.empty_table())
        self.writer.close()
        if len(self.parts) == 1:
            # A single part becomes <table>.parquet: the common, simplest layout.
            single = self.root / f"{self.name}.parquet"
            self.parts[0].rename(single)
            (self.root / self.name).rmdir()
            return [single.name]
        return [str(p.relative_to(self.root)) for p in self.parts]


def conform(name: str, data: Any, extra: dict[str, pa.DataType] | None = None) -> pa.Table:
    """Turn dicts or Arrow data into a table of exactly the contract's schema for ``name``.

    Extra columns are an error here (a producer using our writer writes the contract),
    unless declared in ``extra`` (name -> Arrow type; appended after the contract's
    columns); a reader of exports keeps extra columns it finds.
    """
    schema = TABLES[name].arrow_schema
    if extra:
        schema = pa.schema(list(schema) + [pa.field(k, t) for k, t in extra.items()])
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        missing = [f.name for f in schema if f.name not in data.column_names]
        extra = [c for c in data.column_names if c not in schema.names]
        if missing or extra:
            raise ContextlensError(
                f"table {name}: columns do not match the contract"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unexpected {', '.join(extra)}" if extra else "")
            )
        try:
            return data.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
            raise ContextlensError(f"table {name}: {err}") from None
    rows = list(data)
    allowed = frozenset(schema.names)  # once: building it per row was most of a transcript's write
    for i, row in enumerate(rows):
        unknown = row.keys() - allowed
        if unknown:
            raise ContextlensError(
                f"table {name}, row {i}: unknown column {sorted(unknown)[0]}"
            )
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise ContextlensError(f"table {name}: {err}") from None


class ExportWriter:
    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        export_id: str,
        producer: str,
        created_at: dt.datetime | None = None,
        overwrite: bool = False,
    ) -> None:
        self.out_dir = Path(out_dir)
        if self.out_dir.is_symlink() or (self.out_dir.exists() and not self.out_dir.is_dir()):
            # never written through a link, nor over a file
            raise ContextlensError(f"{self.out_dir}: exists and is not a folder")
        if self.out_dir.exists() and any(self.out_dir.iterdir()) and not overwrite:
            raise ContextlensError(f"{self.out_dir}: folder exists and is not empty")
        self.export_id = export_id
        self.producer = producer
        self.created_at = created_at or dt.datetime.now(dt.timezone.utc)
        self.tmp = self.out_dir.with_name(self.out_dir.name + ".writing")
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir(parents=True)
        self._sinks: dict[str, _TableSink] = {}
        self._closed = False

    # -- data
    def write(
        self,
        name: str,
        data: Iterable[dict[str, Any]] | pa.Table | pa.RecordBatch,
        extra: dict[str, pa.DataType] | None = None,
    ) -> None:
        if name not in TABLES:
            raise ContextlensError(f"unknown table {name!r}")
        table = conform(name, data, extra)
        sink = self._sinks.setdefault(name, _TableSink(self.tmp, name))
        sink.write(table)

    def add_blob(self, body: bytes) -> str:
        """Store a raw artifact body content-addressed; returns its sha256 (its storage_ref
        is ``blobs/<sha256>``)."""
        sha = hashlib.sha256(body).hexdigest()
        blobs = self.tmp / "blobs"
        blobs.mkdir(exist_ok=True)
        path = blobs / sha
        if not path.exists():
            path.write_bytes(body)
        return sha

    def add_policy(self, version: str, toml_text: str) -> None:
        if not version.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ContextlensError(f"policy version {version!r}: not a safe file name")
        folder = self.tmp / "policies"
        folder.mkdir(exist_ok=True)
        (folder / f"{version}.toml").write_text(toml_text, encoding="utf-8")

    # -- finish
    def close(self) -> Path:
        if self._closed:
            return self.out_dir
        tables: dict[str, Any] = {}
        for name in TABLES:  # every table is present, even when empty
            sink = self._sinks.get(name) or _TableSink(self.tmp, name)
            files = sink.close()
            tables[name] = {
                "rows": sink.rows,
                "sha256": table_sha256(self.tmp, files),
                "files": files,
            }
        manifest = {
            "export_id": self.export_id,
            "schema_version": SCHEMA_VERSION,
            "producer": self.producer,
            "created_at": self.created_at.astimezone(dt.timezone.utc).isoformat(),
            "tables": tables,
        }
        (self.tmp / "manifest.json").write_text(
            json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        try:
            if self.out_dir.exists():
                shutil.rmtree(self.out_dir)
            self.tmp.rename(self.out_dir)
        except OSError as err:
            self.abort()  # whole or not at all: no half-written folder left beside it
            raise ContextlensError(f"cannot write {self.out_dir}: {err.strerror or err}") from None
        self._closed = True
        return self.out_dir

    def abort(self) -> None:
        self._closed = True
        for sink in self._sinks.values():
            if sink.writer is not None:
                try:
                    sink.writer.close()
                except OSError:  # a full disk fails the footer too: the folder goes anyway
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "ExportWriter":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, _tb: Any) -> None:
        from .interrupts import WriteFailed

        if exc_type is None:
            try:
                self.close()
            except OSError as err:
                self.abort()
                raise WriteFailed(err.filename or self.out_dir, err) from None
            except BaseException:
                self.abort()
                raise
            return
        self.abort()
        if isinstance(exc, OSError):  # a full disk, a size limit: one line, nothing left
            raise WriteFailed(exc.filename or self.out_dir, exc) from None
