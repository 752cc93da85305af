"""Validate an export folder against the contract, columnar and in DuckDB.

The store's ingest loads each table once (``CREATE TABLE AS ... read_parquet``) and then
checks the loaded tables with SQL: required values, closed enumerations, primary keys,
foreign keys, cycles, and the manifest's row counts and sha256s. Only when a check fails is
the offending table's Parquet read again, to name the first bad row in file order.

Every error is one line naming the export, file or table, column, row and value::

    export sample_data: table tool_memories, column freshness_class, row 12 (memory_id=m-9):
    unknown value 'fresh' (allowed: volatile, session, bounded, durable, permanent)

Row numbers are 0-based, in file order across a table's files (sorted by relative path).
Dangling soft references are warnings, e.g. a memory whose source artifact is missing is
"broken provenance"; they are listed, never repaired.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pydantic

from .contract import ADDED_COLUMNS, DUCKDB_TYPES, ENUMS, SCHEMA_VERSION, TABLES, Manifest, Table
from .errors import ContextlensError, ValidationError
from .writer import table_sha256

Progress = Callable[[str, int, int], None]

MAX_WARNINGS_PER_CHECK = 50

# DuckDB spells some types differently in DESCRIBE than in DDL.
_TYPE_ALIASES = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}


def fetch_one(cursor: duckdb.DuckDBPyConnection) -> tuple | None:
    """The first row of a result, reading it to the end (DuckDB requires a finished result
    before the connection runs anything else)."""
    rows = cursor.fetchall()
    return rows[0] if rows else None


def q(name: str) -> str:
    """Quote an identifier (table or column names come from the contract or a file's schema)."""
    return '"' + name.replace('"', '""') + '"'


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _show(value: Any, limit: int = 80) -> str:
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text


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
        files = "[" + ", ".join(_sql_str(str(p)) for p in self.files) + "]"
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
        return f"export {self.root.name}"

    def error(self, message: str) -> ValidationError:
        return ValidationError(f"{self.label}: {message}")


# --------------------------------------------------------------------------- files


def read_layout(export_dir: str | os.PathLike[str]) -> ExportLayout:
    """Read manifest.json and every table's Parquet footers (never the rows)."""
    root = Path(export_dir)
    label = f"export {root.name}"
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
        manifest_json = manifest_path.read_text(encoding="utf-8")
        manifest = Manifest.model_validate_json(manifest_json)
    except (OSError, UnicodeDecodeError) as err:
        raise ValidationError(f"{label}: manifest.json cannot be read: {err}") from None
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(top level)"
        raise ValidationError(
            f"{label}: manifest.json is invalid at {where}: {first.get('msg')}"
        ) from None
    if manifest.schema_version != SCHEMA_VERSION:
        raise ValidationError(
            f"{label}: manifest.json schema_version {manifest.schema_version!r} is not "
            f"supported (this contextlens reads {SCHEMA_VERSION!r})"
        )
    tables: dict[str, TableSource] = {}
    for name, table in TABLES.items():
        tables[name] = _table_source(root, label, table)
    return ExportLayout(root, manifest, manifest_json, tables)


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


def _expected_type(kind: str) -> str:
    t = DUCKDB_TYPES[kind]
    return _TYPE_ALIASES.get(t, t)


def resolve_types(con: duckdb.DuckDBPyConnection, layout: ExportLayout) -> None:
    """Find each table's column types and decide the casts to the contract's types.

    A column of another type is accepted when every value converts; otherwise the error
    names the table, column, expected and found type, and the first value that fails.
    """
    for name, src in layout.tables.items():
        try:
            described = con.execute(f"DESCRIBE SELECT * FROM {src.scan_sql()}").fetchall()
        except duckdb.Error as err:
            raise layout.error(f"table {name}: cannot read {src.display}: {_one_line(err)}") from None
        src.columns = {row[0]: row[1] for row in described}
        for col in TABLES[name].columns:
            found = src.columns.get(col.name)
            expected = _expected_type(col.kind)
            if found is None and (name, col.name) in ADDED_COLUMNS:
                src.absent.add(col.name)
                continue
            if found is None:
                raise layout.error(f"table {name}: missing required column {col.name}")
            if found == expected:
                continue
            target = DUCKDB_TYPES[col.kind]
            sql = (
                f"SELECT filename, file_row_number, {q(col.name)}::VARCHAR "
                f"FROM {src.scan_sql(', filename=true, file_row_number=true')} "
                f"WHERE {q(col.name)} IS NOT NULL AND TRY_CAST({q(col.name)} AS {target}) IS NULL "
                f"ORDER BY filename, file_row_number LIMIT 1"
            )
            try:
                bad = fetch_one(con.execute(sql))
            except duckdb.Error:
                raise layout.error(
                    f"table {name}, column {col.name}: expected {target}, found {found}"
                ) from None
            if bad is not None:
                row = src.global_row(bad[0], bad[1])
                raise layout.error(
                    f"table {name}, column {col.name}, row {row}: expected {target}, "
                    f"found {found} value '{_show(bad[2])}' that does not convert"
                )
            src.casts[col.name] = target


def select_list(src: TableSource) -> str:
    """Columns to load: the contract's, cast where needed, then any extra columns as found."""
    contract = TABLES[src.name].column_names
    parts = []
    for col in contract:
        if col in src.absent:
            parts.append(f"CAST(NULL AS {DUCKDB_TYPES[TABLES[src.name].column(col).kind]}) AS {q(col)}")
        elif col in src.casts:
            parts.append(f"CAST({q(col)} AS {src.casts[col]}) AS {q(col)}")
        else:
            parts.append(q(col))
    parts += [q(c) for c in src.columns if c not in contract and c != "export_id"]
    return ", ".join(parts)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


# --------------------------------------------------------------------------- hashes


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


def _key_text(table: Table, values: tuple) -> str:
    return ", ".join(f"{k}={_show(v)}" for k, v in zip(table.primary_key, values))


def _first_row(
    con: duckdb.DuckDBPyConnection,
    layout: ExportLayout,
    name: str,
    predicate: str,
    columns: list[str],
    params: list | None = None,
) -> tuple[int, tuple, tuple] | None:
    """The first row (file order) of table ``name``'s Parquet matching ``predicate`` over the
    contract-typed columns: (row number, key values, values of ``columns``)."""
    src = layout.tables[name]
    table = TABLES[name]
    pk = list(table.primary_key)
    cols = ", ".join(q(c) for c in pk + columns)
    sql = (
        f"SELECT filename, file_row_number, {cols} FROM ("
        f"SELECT {select_list(src)}, filename, file_row_number "
        f"FROM {src.scan_sql(', filename=true, file_row_number=true')}) "
        f"WHERE {predicate} ORDER BY filename, file_row_number LIMIT 1"
    )
    row = fetch_one(con.execute(sql, params or []))
    if row is None:
        return None
    return src.global_row(row[0], row[1]), tuple(row[2 : 2 + len(pk)]), tuple(row[2 + len(pk) :])


def _pk_distinct_expr(table: Table) -> str:
    # count(DISTINCT) is about twice as fast as GROUP BY ... HAVING on big tables (and over
    # a 64-bit hash of a composite key, twice again); the exact grouping only runs when a
    # duplicate (or a hash collision) is possible
    if len(table.primary_key) == 1:
        return f"count(DISTINCT {q(table.primary_key[0])})"
    return f"count(DISTINCT hash({', '.join(q(c) for c in table.primary_key)}))"


def check_values(
    con: duckdb.DuckDBPyConnection, layout: ExportLayout, export_id: str
) -> dict[str, tuple[int, int]]:
    """Non-null required columns, closed enumerations and JSON columns, in one aggregate
    scan per table that also counts rows and distinct primary keys (returned per table for
    ``check_primary_keys``)."""
    key_counts: dict[str, tuple[int, int]] = {}
    for name, table in TABLES.items():
        checks: list[tuple[str, str, Any]] = []  # (kind, column, sql predicate)
        for col in table.columns:
            if not col.nullable:
                checks.append(("null", col.name, f"{q(col.name)} IS NULL"))
            if col.enum:
                allowed = ", ".join(_sql_str(v) for v in ENUMS[col.enum])
                checks.append(("enum", col.name, f"{q(col.name)} NOT IN ({allowed})"))
            if col.kind == "json":
                checks.append(("json", col.name, f"NOT json_valid({q(col.name)})"))
        agg = ", ".join(
            ["count(*)", _pk_distinct_expr(table)] + [f"count_if({p})" for _, _, p in checks]
        )
        counts = fetch_one(con.execute(
            f"SELECT {agg} FROM {q(name)} WHERE export_id = ?", [export_id]
        ))
        key_counts[name] = (counts[0], counts[1])
        for (kind, col_name, pred), count in zip(checks, counts[2:]):
            if not count:
                continue
            found = _first_row(con, layout, name, pred, [col_name])
            row, key, (value,) = found if found else (-1, (), (None,))
            where = f"table {name}, column {col_name}, row {row} ({_key_text(table, key)})"
            if kind == "null":
                raise layout.error(f"{where}: required value is null")
            if kind == "json":
                raise layout.error(f"{where}: not valid JSON: '{_show(value)}'")
            allowed_text = ", ".join(ENUMS[table.column(col_name).enum])  # type: ignore[arg-type]
            raise layout.error(
                f"{where}: unknown value '{_show(value)}' (allowed: {allowed_text})"
            )
    return key_counts


def check_primary_keys(
    con: duckdb.DuckDBPyConnection,
    layout: ExportLayout,
    export_id: str,
    key_counts: dict[str, tuple[int, int]] | None = None,
) -> None:
    for name, table in TABLES.items():
        pk = ", ".join(q(c) for c in table.primary_key)
        if key_counts is not None and name in key_counts:
            total, distinct = key_counts[name]
        else:
            total, distinct = fetch_one(con.execute(
                f"SELECT count(*), {_pk_distinct_expr(table)} FROM {q(name)} WHERE export_id = ?",
                [export_id],
            ))
        if total == distinct:
            continue
        dup = fetch_one(con.execute(
            f"SELECT {pk} FROM {q(name)} WHERE export_id = ? GROUP BY {pk} "
            f"HAVING count(*) > 1 LIMIT 1",
            [export_id],
        ))
        if dup is None:
            continue
        src = layout.tables[name]
        match = " AND ".join(f"{q(c)} = ?" for c in table.primary_key)
        rows = con.execute(
            f"SELECT filename, file_row_number FROM ("
            f"SELECT {select_list(src)}, filename, file_row_number "
            f"FROM {src.scan_sql(', filename=true, file_row_number=true')}) WHERE {match} "
            f"ORDER BY filename, file_row_number LIMIT 5",
            list(dup),
        ).fetchall()
        where = ", ".join(str(src.global_row(f, r)) for f, r in rows)
        raise layout.error(
            f"table {name}: duplicate primary key ({_key_text(table, dup)}) at rows {where}"
        )


def _fk_predicate(fk_column: str, is_list: bool, target: str, target_col: str) -> str:
    """Rows whose reference names no row of the target table in the same export."""
    targets = f"(SELECT {q(target_col)} FROM {q(target)} WHERE export_id = ?)"
    if is_list:
        return (
            f"len(list_filter({q(fk_column)}, lambda v: v IS NOT NULL)) > 0 AND EXISTS ("
            f"SELECT 1 FROM (SELECT unnest({q(fk_column)}) AS ref) WHERE ref NOT IN {targets})"
        )
    return f"{q(fk_column)} IS NOT NULL AND {q(fk_column)} NOT IN {targets}"


# References repeated by many rows (an assembly's records and decisions)
_CLUSTERED_FKS = {("assembly_records", "assembly_id"), ("policy_decisions", "assembly_id")}


def check_foreign_keys(
    con: duckdb.DuckDBPyConnection, layout: ExportLayout, export_id: str
) -> list[str]:
    """Hard keys raise; soft keys return warnings (one per dangling reference, capped)."""
    warnings: list[str] = []
    for name, table in TABLES.items():
        for fk in table.foreign_keys:
            is_list = table.column(fk.column).kind == "list"
            col, target, tcol = q(fk.column), q(fk.table), q(fk.target)
            if is_list:
                count_sql = (
                    f"SELECT count(*) FROM (SELECT unnest({col}) AS ref FROM {q(name)} "
                    f"WHERE export_id = ?) r WHERE ref IS NOT NULL AND NOT EXISTS "
                    f"(SELECT 1 FROM {target} t WHERE t.{tcol} = r.ref AND t.export_id = ?)"
                )
            elif (name, fk.column) in _CLUSTERED_FKS:
                # many rows per key value: check each distinct value once
                count_sql = (
                    f"SELECT count(*) FROM (SELECT DISTINCT {col} AS ref FROM {q(name)} "
                    f"WHERE export_id = ?) r WHERE ref IS NOT NULL AND NOT EXISTS "
                    f"(SELECT 1 FROM {target} t WHERE t.{tcol} = r.ref AND t.export_id = ?)"
                )
            else:
                count_sql = (
                    f"SELECT count(*) FROM {q(name)} s WHERE s.export_id = ? AND s.{col} IS NOT NULL "
                    f"AND NOT EXISTS (SELECT 1 FROM {target} t WHERE t.{tcol} = s.{col} "
                    f"AND t.export_id = ?)"
                )
            dangling = fetch_one(con.execute(count_sql, [export_id, export_id]))[0]
            if not dangling:
                continue
            if not fk.soft:
                found = _first_row(
                    con, layout, name,
                    _fk_predicate(fk.column, is_list, fk.table, fk.target),
                    [fk.column], [export_id],
                )
                row, key, (value,) = found if found else (-1, (), (None,))
                raise layout.error(
                    f"table {name}, column {fk.column}, row {row} ({_key_text(table, key)}): "
                    f"'{_show(value)}' names no row of table {fk.table}"
                )
            warnings += _soft_fk_warnings(con, layout, name, fk, is_list, export_id, dangling)
    return warnings


def _soft_fk_warnings(con, layout, name, fk, is_list, export_id, dangling) -> list[str]:
    table = TABLES[name]
    src = layout.tables[name]
    pk = list(table.primary_key)
    pk_cols = ", ".join(q(c) for c in pk)
    targets = f"(SELECT {q(fk.target)} FROM {q(fk.table)} WHERE export_id = ?)"
    ref_expr = f"unnest({q(fk.column)})" if is_list else q(fk.column)
    sql = (
        f"SELECT filename, file_row_number, {pk_cols}, ref FROM ("
        f"SELECT {pk_cols}, filename, file_row_number, {ref_expr} AS ref FROM ("
        f"SELECT {select_list(src)}, filename, file_row_number "
        f"FROM {src.scan_sql(', filename=true, file_row_number=true')})) "
        f"WHERE ref IS NOT NULL AND ref NOT IN {targets} "
        f"ORDER BY filename, file_row_number, ref LIMIT {MAX_WARNINGS_PER_CHECK}"
    )
    out = []
    provenance = fk.column == "source_artifact_ids"
    for row in con.execute(sql, [export_id]).fetchall():
        n = src.global_row(row[0], row[1])
        key = _key_text(table, tuple(row[2 : 2 + len(pk)]))
        ref = row[2 + len(pk)]
        text = f"{name} row {n} ({key}): {fk.column} names missing {fk.table} {_show(ref)}"
        if provenance:
            text += " (broken provenance)"
        out.append(text)
    if dangling > len(out):
        out.append(
            f"{name}: {dangling - len(out)} more dangling {fk.column} references to {fk.table}"
        )
    return out


def check_cycles(con: duckdb.DuckDBPyConnection, layout: ExportLayout, export_id: str) -> None:
    """Branch parents must form a tree; supersession must not loop back on itself."""
    row = fetch_one(con.execute(
        "SELECT memory_id FROM tool_memories WHERE export_id = ? AND "
        "(superseded_by = memory_id OR list_contains(supersedes, memory_id)) "
        "ORDER BY memory_id LIMIT 1",
        [export_id],
    ))
    if row:
        raise layout.error(f"table tool_memories: memory {row[0]} supersedes itself")

    cycle = _find_cycle(
        con,
        "SELECT branch_id AS src, parent_branch_id AS dst FROM branches "
        "WHERE export_id = ? AND parent_branch_id IS NOT NULL",
        [export_id],
    )
    if cycle:
        raise layout.error(
            f"table branches: parent_branch_id forms a cycle: {' -> '.join(cycle)}"
        )
    # "a replaces b": from supersedes (m replaces each listed) and superseded_by (r replaces m)
    cycle = _find_cycle(
        con,
        "SELECT memory_id AS src, unnest(supersedes) AS dst FROM tool_memories "
        "WHERE export_id = ? UNION SELECT superseded_by AS src, memory_id AS dst "
        "FROM tool_memories WHERE export_id = ? AND superseded_by IS NOT NULL",
        [export_id, export_id],
    )
    if cycle:
        raise layout.error(
            f"table tool_memories: supersession forms a cycle: {' -> '.join(cycle)}"
        )


def _find_cycle(con: duckdb.DuckDBPyConnection, edges_sql: str, params: list) -> list[str] | None:
    """The smallest-id cycle in a directed graph given as (src, dst) rows, or None."""
    sql = f"""
        WITH RECURSIVE edges AS ({edges_sql}),
        walk(start, cur, path) AS (
            SELECT src, dst, [src] FROM edges WHERE dst IS NOT NULL
            UNION ALL
            SELECT w.start, e.dst, list_append(w.path, w.cur)
            FROM walk w JOIN edges e ON e.src = w.cur
            WHERE w.cur <> w.start AND NOT list_contains(w.path, w.cur)
        )
        SELECT path FROM walk WHERE cur = start ORDER BY start, len(path) LIMIT 1
    """
    row = fetch_one(con.execute(sql, params))
    if row is None:
        return None
    path = list(row[0])
    return path + [path[0]]


# A record may be stamped a little after the export was written (clocks of two machines);
# later than this, and later than the ingest itself, it is reported as in the future.
FUTURE_TOLERANCE = dt.timedelta(days=1)
# Timestamps no Python datetime can hold (e.g. nanoseconds written as microseconds)
_MAX_TIME = "TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'"
_MIN_TIME = "TIMESTAMPTZ '0001-01-01 00:00:00+00'"
# Columns that name a time ahead by design
_FUTURE_ALLOWED = {("tool_memories", "stale_after")}
# (table, later column, earlier column): a row that ends before it starts contradicts itself
_ROW_ORDER = (
    ("tool_calls", "completed_at", "requested_at"),
    ("model_runs", "ended_at", "started_at"),
)
# (table, column, parent table, parent key, parent time): created before the parent, a warning
_PARENT_ORDER = (
    ("branches", "created_at", "conversations", "conversation_id", "created_at"),
    ("messages", "created_at", "conversations", "conversation_id", "created_at"),
)


def check_times(
    con: duckdb.DuckDBPyConnection,
    layout: ExportLayout,
    export_id: str,
    now: dt.datetime | None = None,
) -> list[str]:
    """Timestamps: unrepresentable values and rows that end before they start are errors;
    times in the future and records older than their conversation are warnings."""
    created = layout.manifest.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.timezone.utc)
    now = now or dt.datetime.now(dt.timezone.utc)
    horizon = max(created, now) + FUTURE_TOLERANCE
    warnings: list[str] = []
    for name, table in TABLES.items():
        cols = [c.name for c in table.columns if c.kind == "ts"]
        if not cols:
            continue
        checks: list[tuple[str, str, str]] = []
        for col in cols:
            checks.append(("range", col, f"({q(col)} > {_MAX_TIME} OR {q(col)} < {_MIN_TIME})"))
            if (name, col) not in _FUTURE_ALLOWED:
                checks.append(("future", col, f"{q(col)} > {_sql_ts(horizon)}"))
        for tname, later, earlier in _ROW_ORDER:
            if tname == name:
                checks.append(("order", later, f"{q(later)} < {q(earlier)}"))
        agg = ", ".join(f"count_if({p})" for _, _, p in checks)
        counts = fetch_one(con.execute(
            f"SELECT {agg} FROM {q(name)} WHERE export_id = ?", [export_id]
        ))
        for (kind, col, pred), count in zip(checks, counts):
            if not count:
                continue
            found = _first_row(con, layout, name, pred, [col] + _ROW_EARLIER.get((name, col), []))
            row, key, values = found if found else (-1, (), (None, None))
            where = f"table {name}, column {col}, row {row} ({_key_text(table, key)})"
            if kind == "range":
                raise layout.error(
                    f"{where}: {_show(values[0])} is outside the years 1 to 9999 "
                    f"(a time in another unit?)"
                )
            if kind == "order":
                earlier = _ROW_EARLIER[(name, col)][0]
                raise layout.error(
                    f"{where}: {_show(values[0])} is before {earlier} {_show(values[1])}"
                )
            text = (
                f"{name} row {row} ({_key_text(table, key)}): {col} {_show(values[0])} is in the "
                f"future (after the export was written, {created.isoformat()})"
            )
            if count > 1:
                text += f"; {count - 1} more such rows"
            warnings.append(text)
    for name, col, parent, fk, parent_col in _PARENT_ORDER:
        table = TABLES[name]
        src = layout.tables[name]
        early = fetch_one(con.execute(
            f"SELECT count(*) FROM {q(name)} s JOIN {q(parent)} p ON p.{q(fk)} = s.{q(fk)} "
            f"AND p.export_id = s.export_id WHERE s.export_id = ? AND s.{q(col)} < p.{q(parent_col)}",
            [export_id],
        ))[0]
        if not early:  # the common case: no second read of the Parquet
            continue
        pk = list(table.primary_key)
        pk_cols = ", ".join(f"s.{q(c)}" for c in pk)
        rows = con.execute(
            f"SELECT s.filename, s.file_row_number, s.{q(fk)}, s.{q(col)}, p.{q(parent_col)}, "
            f"{pk_cols} FROM (SELECT {select_list(src)}, filename, file_row_number "
            f"FROM {src.scan_sql(', filename=true, file_row_number=true')}) s "
            f"JOIN {q(parent)} p ON p.{q(fk)} = s.{q(fk)} AND p.export_id = ? "
            f"WHERE s.{q(col)} < p.{q(parent_col)} "
            f"ORDER BY s.filename, s.file_row_number LIMIT {MAX_WARNINGS_PER_CHECK}",
            [export_id],
        ).fetchall()
        for filename, file_row, ref, when, parent_when, *key in rows:
            warnings.append(
                f"{name} row {src.global_row(filename, file_row)} "
                f"({_key_text(table, tuple(key))}): {col} {_show(when)} is before its "
                f"{parent[:-1]} {_show(ref)} was created ({_show(parent_when)})"
            )
        if early > len(rows):
            warnings.append(
                f"{name}: {early - len(rows)} more rows whose {col} is before their {parent[:-1]}'s"
            )
    return warnings


_ROW_EARLIER = {(t, later): [earlier] for t, later, earlier in _ROW_ORDER}


def _sql_ts(value: dt.datetime) -> str:
    return f"TIMESTAMPTZ '{value.astimezone(dt.timezone.utc).isoformat()}'"


def check_loaded(
    con: duckdb.DuckDBPyConnection,
    layout: ExportLayout,
    export_id: str,
    hashes: dict[str, Future] | None = None,
    tick: Callable[[str], None] | None = None,
) -> tuple[dict[str, int], list[str]]:
    """Every content check over the loaded tables; raises the first error, returns
    (rows per table, warnings)."""
    tick = tick or (lambda _label: None)
    tick("checking required values and enumerations")
    key_counts = check_values(con, layout, export_id)
    tick("checking primary keys")
    check_primary_keys(con, layout, export_id, key_counts)
    tick("checking references")
    warnings = check_foreign_keys(con, layout, export_id)
    tick("checking cycles")
    check_cycles(con, layout, export_id)
    warnings += check_times(con, layout, export_id)
    tick("checking manifest row counts and sha256")
    rows = check_manifest(con, layout, export_id, hashes)
    return rows, warnings


CHECK_STEPS = 5


def create_or_insert(
    con: duckdb.DuckDBPyConnection, src: TableSource, export_id: str, exists: bool, order_by: str = ""
) -> None:
    """Load one table's Parquet into the store table of the same name, tagged with export_id."""
    select = f"SELECT {select_list(src)}, ? AS export_id FROM {src.scan_sql()}{order_by}"
    try:
        if not exists:
            con.execute(f"CREATE TABLE {q(src.name)} AS {select}", [export_id])
            return
        have = {r[0] for r in con.execute(f"DESCRIBE {q(src.name)}").fetchall()}
        for col, typ in list(src.columns.items()) + [
                (c.name, DUCKDB_TYPES[c.kind]) for c in TABLES[src.name].columns if c.name in src.absent]:
            if col not in have and col != "export_id":
                con.execute(
                    f"ALTER TABLE {q(src.name)} ADD COLUMN {q(col)} {src.casts.get(col, typ)}"
                )
        con.execute(f"INSERT INTO {q(src.name)} BY NAME {select}", [export_id])
    except duckdb.Error as err:
        raise load_error(src, err) from None


def load_error(src: TableSource, err: BaseException) -> ValidationError:
    """A table that could not be loaded, named by file, column and row where we can find
    them (DuckDB's own message names neither table nor column)."""
    prefix = f"{src.label}: " if src.label else ""
    bad = _first_invalid_utf8(src)
    if bad is not None:
        rel, col, row, value = bad
        return ValidationError(
            f"{prefix}table {src.name}, column {col}, row {row} (file {rel}): not valid UTF-8: "
            f"'{_show(value)}'"
        )
    return ValidationError(f"{prefix}table {src.name}: cannot load {src.display}: {_one_line(err)}")


def _first_invalid_utf8(src: TableSource) -> tuple[str, str, int, str] | None:
    """(file, column, row, value shown with escapes) of the first string value that is not
    UTF-8, reading the string columns a batch at a time; only runs after a load failed."""
    offset = 0
    for path, rel, rows in zip(src.files, src.rel_files, src.file_rows):
        try:
            pf = pq.ParquetFile(path)
            names = [
                f.name for f in pf.schema_arrow
                if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            ]
            for col in names:
                start = 0
                for batch in pf.iter_batches(columns=[col], batch_size=65536):
                    arr = batch.column(0)
                    try:
                        arr.validate(full=True)
                    except pa.ArrowInvalid:
                        raw = arr.cast(pa.binary()) if not pa.types.is_large_string(arr.type) \
                            else arr.cast(pa.large_binary())
                        for i, value in enumerate(raw.to_pylist()):
                            if value is None:
                                continue
                            try:
                                value.decode("utf-8")
                            except UnicodeDecodeError:
                                shown = value.decode("utf-8", "backslashreplace")
                                return rel, col, offset + start + i, shown
                    start += batch.num_rows
        except (pa.ArrowException, OSError):
            return None
        offset += rows
    return None


@dataclass(frozen=True)
class ValidationReport:
    export_id: str
    rows: dict[str, int]
    warnings: list[str]


def validate_export(export_dir: str | os.PathLike[str], progress: Progress | None = None) -> ValidationReport:
    """Validate an export without writing a store (loads it into an in-memory DuckDB)."""
    layout = read_layout(export_dir)
    export_id = layout.manifest.export_id
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        resolve_types(con, layout)
        total = len(layout.tables) + CHECK_STEPS
        done = 0
        with ThreadPoolExecutor(max_workers=1) as pool:
            hashes = start_hashing(layout, pool)
            for src in layout.tables.values():
                if progress:
                    progress(f"loading {src.name}", done, total)
                create_or_insert(con, src, export_id, exists=False)
                done += 1

            def tick(label: str) -> None:
                nonlocal done
                if progress:
                    progress(label, done, total)
                done += 1

            rows, warnings = check_loaded(con, layout, export_id, hashes, tick)
        if progress:
            progress("done", total, total)
        return ValidationReport(export_id, rows, warnings)
    except duckdb.Error as err:
        raise ContextlensError(f"{layout.label}: {_one_line(err)}") from None
    finally:
        con.close()


def manifest_digest(manifest_json: str) -> dict[str, str]:
    """The part of a manifest that identifies an export's content: table -> sha256."""
    data = json.loads(manifest_json)
    return {
        name: json.dumps(
            [entry.get("sha256", ""), entry.get("rows"), sorted(entry.get("files", []))]
        )
        for name, entry in sorted(data.get("tables", {}).items())
    }
