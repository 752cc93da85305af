"""The recorded assemblies' rows of one transcript (assembly_records, and the
policy_decisions made from them), kept on disk as they are made.

A request of a long session carries the whole history before it, so a session of n requests
has on the order of n²/2 such rows: millions at 2,000 requests. Held as Python rows they were
gigabytes; here they are buffered a bounded number at a time (``SPILL_ROWS``), written as
Arrow record batches to a Parquet file in a scratch folder, and everything the Builder
computes over them at the end (calibration's sums and growth pairs, the runtime facts, the
final token counts) is a DuckDB query over that file. The export's two tables are streamed
from it in record batches: memory stays flat whatever the session's length.

policy_decisions is not stored: each decision is its record's row (``step`` is the row's
place in its assembly, ``outcome`` allow for included, deny for omitted).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..interrupts import WriteFailed
from ..sql import session

__all__ = ["AssemblyRows", "SPILL_ROWS", "scratch_beside"]

# rows buffered in Python before they go to the scratch Parquet file as one record batch
SPILL_ROWS = 100_000
# DuckDB's memory for the end-of-transcript queries (joins and aggregates over every row);
# it spills to the scratch folder beyond. Held low: the store load that follows in the same
# process has its own cap (loadtables.LOAD_MEMORY), and the two add up in one peak
QUERY_MEMORY = "128MB"
# rows per record batch streamed into the export
BATCH_ROWS = 256_000

SCHEMA = pa.schema([
    ("seq", pa.int64()),  # the row's place among all rows: the export keeps this order
    ("assembly_id", pa.string()),
    ("step", pa.int64()),
    ("record_kind", pa.string()),
    ("record_id", pa.string()),
    ("decision", pa.string()),
    ("rendering", pa.string()),
    ("position", pa.int64()),
    ("policy_family", pa.string()),
    ("reason_code", pa.string()),
    ("detail", pa.string()),
    ("tokens", pa.int64()),
])
_COLUMNS = SCHEMA.names

# the export folder being adapted, when known (``scratch_beside``)
_BESIDE: ContextVar[Path | None] = ContextVar("assembly_rows_beside", default=None)


@contextmanager
def scratch_beside(out_dir: Path) -> Iterator[None]:
    """Within the block, assembly rows are spilled beside ``out_dir`` (the export being
    written), in ``<out_dir>.writing-rows``: on the disk the export goes to, and a full one
    is told by that path."""
    token = _BESIDE.set(Path(out_dir))
    try:
        yield
    finally:
        _BESIDE.reset(token)


class AssemblyRows:
    """Append-only store of assembly_records rows, spilled to Parquet in batches."""

    def __init__(self, spill_rows: int | None = None) -> None:
        self.spill_rows = spill_rows or SPILL_ROWS
        self.count = 0
        self.buffered_peak = 0  # the most rows ever held in Python at once
        self.factor: float | None = None  # calibration's, once ``scale`` is called
        self._cols: list[list[Any]] = [[] for _ in _COLUMNS]
        self._folder: Path | None = None
        self._writer: pq.ParquetWriter | None = None
        self._con: duckdb.DuckDBPyConnection | None = None
        self._cleanup: weakref.finalize | None = None

    # -- writing
    def extend(self, rows: list[tuple[Any, ...]]) -> None:
        """Add the rows of one assembly: tuples of every column but ``seq``, in order."""
        if not rows:
            return
        cols = self._cols
        cols[0].extend(range(self.count, self.count + len(rows)))
        for col, values in zip(cols[1:], zip(*rows)):
            col.extend(values)
        self.count += len(rows)
        if len(cols[0]) >= self.spill_rows:
            self._spill()

    @property
    def folder(self) -> Path:
        if self._folder is None:
            beside = _BESIDE.get()
            try:
                if beside is None:
                    folder = Path(tempfile.mkdtemp(prefix="contextlens-assembly-rows-"))
                else:
                    folder = beside.with_name(beside.name + ".writing-rows")
                    # a killed run's, as ExportWriter removes a killed run's .writing
                    shutil.rmtree(folder, ignore_errors=True)
                    folder.mkdir(parents=True)
            except OSError as err:
                raise WriteFailed(err.filename or beside or tempfile.gettempdir(), err) from None
            self._folder = folder
            self._cleanup = weakref.finalize(self, shutil.rmtree, str(folder), True)
        return self._folder

    def _spill(self) -> None:
        n = len(self._cols[0])
        self.buffered_peak = max(self.buffered_peak, n)
        path = self.folder / "rows.parquet"
        try:
            if self._writer is None:
                self._writer = pq.ParquetWriter(path, SCHEMA, compression="zstd")
            if n:
                batch = pa.RecordBatch.from_arrays(
                    [pa.array(c, type=f.type) for c, f in zip(self._cols, SCHEMA)], schema=SCHEMA)
                self._writer.write_batch(batch, row_group_size=BATCH_ROWS)
        except OSError as err:  # a full scratch disk: one line naming the file
            raise WriteFailed(path, err) from None
        for c in self._cols:
            c.clear()

    # -- reading
    def sql(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection where view ``rec`` is every row (all spilled first)."""
        if self._con is None:
            self._spill()
            assert self._writer is not None
            try:
                self._writer.close()
            except OSError as err:  # the file's footer, on a full disk
                raise WriteFailed(self.folder / "rows.parquet", err) from None
            con = session(duckdb.connect())  # no progress bar on stdout, times in UTC
            con.execute(f"SET memory_limit = '{QUERY_MEMORY}'")
            con.execute("SET temp_directory = ?", [str(self.folder / "duckdb")])
            # every query here aggregates, or orders its rows itself (ORDER BY seq): the
            # order of a scan need not be kept, which spares DuckDB buffering to keep it
            con.execute("SET preserve_insertion_order = false")
            path = str(self.folder / "rows.parquet").replace("'", "''")
            con.execute(f"CREATE VIEW rec AS SELECT * FROM read_parquet('{path}')")
            # the rows with their counts as written: calibration scales them (``scale``)
            con.execute("CREATE VIEW scaled AS SELECT * FROM rec")
            self._con = con
        return self._con

    def scale(self, factor: float) -> None:
        """View ``scaled`` gives every row's count times ``factor``, rounded half to even:
        ``calibration.scaled`` of each count, as Python rounds (DuckDB's round_even of the
        same double product)."""
        self.factor = float(factor)
        # the factor's repr reads back as the same double
        self.sql().execute(
            "CREATE OR REPLACE VIEW scaled AS SELECT * REPLACE (CAST(round_even(CAST(tokens AS "
            f"DOUBLE) * CAST('{self.factor!r}' AS DOUBLE), 0) AS BIGINT) AS tokens) FROM rec")

    def query(self, sql: str, params: list[Any] | None = None,
              **tables: pa.Table) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` over ``rec`` and the Arrow ``tables`` registered by name."""
        con = self.sql()
        for name, table in tables.items():
            con.register(name, table)
        try:
            return con.execute(sql, params or []).fetchall()
        finally:
            for name in tables:
                con.unregister(name)

    def final_batches(self, tokens_set: dict[int, int]) -> Iterator[pa.RecordBatch]:
        """Every row in the order it was made, BATCH_ROWS at a time, read straight from the
        file: its count scaled (``scale``), or the one ``tokens_set`` gives its ``seq``."""
        self.sql()  # every row on disk
        keys = pa.array(list(tokens_set), pa.int64())
        values = pa.array(list(tokens_set.values()), pa.int64())
        try:
            for batch in pq.ParquetFile(self.folder / "rows.parquet").iter_batches(
                    batch_size=BATCH_ROWS):
                tokens = batch.column("tokens")
                if self.factor is not None:
                    tokens = pc.cast(pc.round(pc.multiply(pc.cast(tokens, pa.float64()), self.factor),
                                              round_mode="half_to_even"), pa.int64())
                if len(keys):
                    at = pc.index_in(batch.column("seq"), value_set=keys)
                    tokens = pc.if_else(pc.is_valid(at), pc.take(values, at), tokens)
                yield batch.set_column(batch.schema.get_field_index("tokens"), "tokens", tokens)
        except OSError as err:
            raise WriteFailed(self.folder / "rows.parquet", err) from None

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        if self._writer is not None:
            try:
                self._writer.close()
            except OSError:
                pass
        if self._cleanup is not None:
            self._cleanup()
