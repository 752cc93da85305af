"""The DuckDB store: ingest an export, and the query layer every screen and command uses.

``ingest(export_dir, db_path)`` validates and loads an export into a single DuckDB file,
atomically (a temporary copy replaced in one rename) and idempotently (the same manifest is
not loaded twice). ``Store`` opens that file read-only and answers the inspector's questions
with parameterised SQL, returning Arrow tables or plain dicts.

All SQL of the project lives here and in ``validate.py``; user text only ever reaches it as
a bound parameter, and a sort column is checked against a fixed list.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from hashlib import sha256 as _sha256
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable

import duckdb
import pyarrow as pa

from .contract import RECORD_TABLES, TABLES
from .errors import ContextlensError, NotFoundError, StoreBusyError, ValidationError
from .filters import AssemblyFilter, filter_sql, parse_filter
from .store_lint import LintQueries
from .validate import (
    CHECK_STEPS,
    ExportLayout,
    _one_line,
    check_loaded,
    create_or_insert,
    fetch_one,
    manifest_digest,
    q,
    read_layout,
    resolve_types,
    start_hashing,
)

__all__ = ["IngestResult", "Store", "ingest", "STORE_FORMAT", "STORE_VERSION"]

STORE_FORMAT = "contextlens-store"
STORE_VERSION = "1"

Progress = Callable[[str, int, int], None]

# Tables looked up by assembly_id are loaded in that order, so DuckDB's per-row-group
# min/max (zone maps) skip everything but the few row groups holding one assembly.
_CLUSTER_BY = {"assembly_records": "assembly_id", "policy_decisions": "assembly_id"}
CLUSTER_ON_LOAD = True
_MAX_UNSORTED_GROUP = 1_000_000

LIST_COLUMNS: tuple[str, ...] = (
    "assembly_id",
    "assembled_at",
    "conversation_id",
    "branch_id",
    "participant_id",
    "runtime_kind",
    "provider",
    "model",
    "policy_version",
    "assembler_version",
    "included_count",
    "omitted_count",
    "assembled_tokens",
    "baseline_tokens",
    "token_budget",
    "tags",
    "scenario",
)

_SUMMARY_DDL = """
CREATE TABLE IF NOT EXISTS assembly_summary (
    assembly_id VARCHAR, assembled_at TIMESTAMPTZ, conversation_id VARCHAR,
    branch_id VARCHAR, participant_id VARCHAR, runtime_kind VARCHAR, provider VARCHAR,
    model VARCHAR, policy_version VARCHAR, assembler_version VARCHAR,
    included_count BIGINT, omitted_count BIGINT, assembled_tokens BIGINT,
    baseline_tokens BIGINT, token_budget BIGINT, tags VARCHAR[], scenario VARCHAR,
    model_run_id VARCHAR, reason_codes VARCHAR[], search_text VARCHAR, export_id VARCHAR
)
"""

_SUMMARY_INSERT = """
INSERT INTO assembly_summary BY NAME
SELECT a.assembly_id, a.assembled_at, a.conversation_id, a.branch_id, a.participant_id,
       a.runtime_kind, a.provider, a.model, a.policy_version, a.assembler_version,
       coalesce(r.included_count, 0) AS included_count,
       coalesce(r.omitted_count, 0) AS omitted_count,
       a.assembled_tokens, a.baseline_tokens, a.token_budget, a.tags,
       list_transform(list_filter(a.tags, lambda t: starts_with(t, 'scenario:')),
                      lambda t: substr(t, 10))[1] AS scenario,
       a.model_run_id,
       coalesce(r.reason_codes, []::VARCHAR[]) AS reason_codes,
       lower(concat_ws(' ', a.assembly_id, a.conversation_id, a.participant_id, a.model,
                       a.policy_version, array_to_string(a.tags, ' '))) AS search_text,
       a.export_id
FROM context_assemblies a
LEFT JOIN (
    SELECT assembly_id,
           count_if(decision = 'included') AS included_count,
           count_if(decision = 'omitted') AS omitted_count,
           list_sort(list(DISTINCT reason_code)) AS reason_codes
    FROM assembly_records WHERE export_id = ? GROUP BY assembly_id
) r ON r.assembly_id = a.assembly_id
WHERE a.export_id = ?
ORDER BY a.assembled_at, a.assembly_id
"""

_META_DDL = [
    "CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "CREATE TABLE IF NOT EXISTS exports (export_id VARCHAR PRIMARY KEY, source_dir VARCHAR, "
    "manifest_json VARCHAR, ingested_at TIMESTAMPTZ, producer VARCHAR, created_at TIMESTAMPTZ, "
    "rows_json VARCHAR, warnings_json VARCHAR)",
]


# --------------------------------------------------------------------------- ingest


@dataclass(frozen=True)
class IngestResult:
    export_id: str
    db_path: Path
    changed: bool
    rows: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _already_clustered(src: Any, column: str) -> bool:
    """True when the Parquet row groups, in file order, hold ascending non-overlapping
    ranges of ``column`` (read from the footers' statistics): loading in file order then
    gives the same zone maps as sorting, without the sort."""
    import pyarrow.parquet as pq

    last_max = None
    try:
        for path in src.files:
            meta = pq.read_metadata(path)
            names = [meta.schema.column(i).name for i in range(meta.num_columns)]
            if column not in names:
                return False
            idx = names.index(column)
            for rg in range(meta.num_row_groups):
                stats = meta.row_group(rg).column(idx).statistics
                if meta.row_group(rg).num_rows == 0:
                    continue
                if meta.row_group(rg).num_rows > _MAX_UNSORTED_GROUP:
                    return False  # a lookup would scan too much of one unsorted group
                if stats is None or not stats.has_min_max or stats.null_count:
                    return False
                if last_max is not None and stats.min < last_max:
                    return False
                last_max = stats.max
    except (OSError, ValueError, TypeError):
        return False
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _StoreLock:
    """``<db>.lock`` created exclusively and holding the writer's pid."""

    STALE_EMPTY_SECONDS = 30.0

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.path = db_path.with_name(db_path.name + ".lock")
        self.held = False

    def __enter__(self) -> "_StoreLock":
        for _attempt in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                pass
            except OSError as err:
                raise ContextlensError(
                    f"cannot write the store {self.db_path}: {err.strerror or err}"
                ) from None
            else:
                with os.fdopen(fd, "w") as f:
                    f.write(str(os.getpid()))
                self.held = True
                return self
            pid = self._holder()
            if pid is None or (pid and _pid_alive(pid)):
                shown = f"pid {pid}" if pid else "pid unknown"
                raise StoreBusyError(
                    f"store {self.db_path} is busy: another ingest ({shown}) is writing it"
                ) from None
            # the holder died: take the lock over, and drop the half-built copy it left
            if pid:
                tmp = self.db_path.with_name(f"{self.db_path.name}.tmp-{pid}")
                _remove_quietly(tmp, tmp.with_name(tmp.name + ".wal"))
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        raise StoreBusyError(f"store {self.db_path} is busy: cannot take its lock {self.path}")

    def _holder(self) -> int | None:
        """The pid in the lock; 0 for a stale lock without one; None when unknown yet."""
        try:
            text = self.path.read_text().strip()
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return 0
        if text.isdigit():
            return int(text)
        # being written this instant, or left empty by a crash long ago
        return 0 if age > self.STALE_EMPTY_SECONDS else None

    def __exit__(self, *_: Any) -> None:
        if self.held:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            self.held = False


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(path), read_only=read_only)
    con.execute("SET TimeZone = 'UTC'")
    return con


def _check_is_store(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    try:
        row = fetch_one(con.execute(
            "SELECT value FROM store_meta WHERE key = 'format'"
        ))
    except duckdb.Error:
        row = None
    if row is None or row[0] != STORE_FORMAT:
        raise ContextlensError(f"{path} is not a contextlens store")


def _previous_ingest(db_path: Path, export_id: str) -> tuple[str, str, str] | None:
    """(manifest_json, rows_json, warnings_json) of export_id in the existing store, if any."""
    try:
        con = _connect(db_path, read_only=True)
    except duckdb.Error:
        raise ContextlensError(f"{db_path} is not a contextlens store") from None
    try:
        _check_is_store(con, db_path)
        return fetch_one(con.execute(
            "SELECT manifest_json, rows_json, warnings_json FROM exports WHERE export_id = ?",
            [export_id],
        ))
    finally:
        con.close()


def _remove_quietly(*paths: Path) -> None:
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError as err:  # pragma: no cover - best effort cleanup
            if err.errno != errno.ENOENT:
                pass


def ingest(
    export_dir: str | os.PathLike[str],
    db_path: str | os.PathLike[str],
    progress: Progress | None = None,
) -> IngestResult:
    """Validate ``export_dir`` and load it into the store at ``db_path``.

    Raises ValidationError (one line naming file, table, column, row and value) for a bad
    export, StoreBusyError if another ingest holds the store, ContextlensError for a
    ``db_path`` that is not a store. On any failure the existing store is left untouched.
    """
    export_dir = Path(export_dir)
    db_path = Path(db_path)
    report = progress or (lambda _label, _done, _total: None)
    report("reading manifest", 0, 1)
    layout = read_layout(export_dir)
    export_id = layout.manifest.export_id
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ContextlensError(
            f"cannot write the store {db_path}: {err.strerror or err}"
        ) from None

    with _StoreLock(db_path):
        if db_path.exists():
            prev = _previous_ingest(db_path, export_id)
            if prev is not None and manifest_digest(prev[0]) == manifest_digest(
                layout.manifest_json
            ):
                report("already ingested", 1, 1)
                return IngestResult(
                    export_id, db_path, False, json.loads(prev[1]), json.loads(prev[2])
                )
        tmp = db_path.with_name(f"{db_path.name}.tmp-{os.getpid()}")
        tmp_wal = tmp.with_name(tmp.name + ".wal")
        _remove_quietly(tmp, tmp_wal)
        try:
            if db_path.exists():
                report("copying the existing store", 0, 1)
                shutil.copyfile(db_path, tmp)
            rows, warnings = _build(tmp, layout, report)
            os.replace(tmp, db_path)
        except BaseException:
            _remove_quietly(tmp, tmp_wal)
            raise
        finally:
            _remove_quietly(tmp_wal)
    return IngestResult(export_id, db_path, True, rows, warnings)


def _build(tmp: Path, layout: ExportLayout, report: Progress) -> tuple[dict[str, int], list[str]]:
    export_id = layout.manifest.export_id
    total = 1 + len(TABLES) + CHECK_STEPS + 2
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        report(label, done, total)
        done += 1

    con = _connect(tmp, read_only=False)
    # Lookups never depend on row order (the record tables are clustered by assembly_id
    # below), and without the guarantee DuckDB writes a parallel load's row groups whole:
    # a smaller file and no rewrite at checkpoint.
    con.execute("SET preserve_insertion_order = false")
    try:
        for ddl in _META_DDL:
            con.execute(ddl)
        con.execute(_SUMMARY_DDL)
        meta = fetch_one(con.execute("SELECT value FROM store_meta WHERE key = 'format'"))
        if meta is None:
            if fetch_one(con.execute("SELECT count(*) FROM exports"))[0]:
                raise ContextlensError(f"{tmp} is not a contextlens store")
            con.execute(
                "INSERT INTO store_meta VALUES ('format', ?), ('version', ?)",
                [STORE_FORMAT, STORE_VERSION],
            )
        existing = {
            r[0] for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
            ).fetchall()
        }
        tick("reading column types")
        resolve_types(con, layout)
        # the export is replaced whole when re-ingested with other content
        for name in TABLES:
            if name in existing:
                con.execute(f"DELETE FROM {q(name)} WHERE export_id = ?", [export_id])
        con.execute("DELETE FROM assembly_summary WHERE export_id = ?", [export_id])
        con.execute("DELETE FROM exports WHERE export_id = ?", [export_id])

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256") as pool:
            hashes = start_hashing(layout, pool)
            try:
                for name, src in layout.tables.items():
                    tick(f"loading {name}")
                    order = ""
                    if (
                        CLUSTER_ON_LOAD
                        and name in _CLUSTER_BY
                        and not _already_clustered(src, _CLUSTER_BY[name])
                    ):
                        order = f" ORDER BY {q(_CLUSTER_BY[name])}"
                    create_or_insert(con, src, export_id, name in existing, order)
                rows, warnings = check_loaded(con, layout, export_id, hashes, tick)
            finally:
                for fut in hashes.values():
                    fut.cancel()

        tick("summarizing assemblies")
        con.execute(_SUMMARY_INSERT, [export_id, export_id])
        m = layout.manifest
        con.execute(
            "INSERT INTO exports VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                export_id,
                str(layout.root.resolve()),
                layout.manifest_json,
                dt.datetime.now(dt.timezone.utc),
                m.producer,
                m.created_at,
                json.dumps(rows, sort_keys=True),
                json.dumps(warnings),
            ],
        )
        tick("writing the store")
        con.execute("CHECKPOINT")
        report("done", total, total)
        return rows, warnings
    except duckdb.Error as err:
        raise ContextlensError(f"{layout.label}: {_one_line(err)}") from None
    finally:
        con.close()


# --------------------------------------------------------------------------- queries

_CLIP = "CASE WHEN length({e}) > {n} THEN left({e}, {m}) || '…' ELSE {e} END"


def _clip(expr: str, n: int) -> str:
    flat = f"regexp_replace(coalesce({expr}, ''), '\\s+', ' ', 'g')"
    return _CLIP.format(e=flat, n=n, m=n - 1)


# kind -> (table, id column, label expression, created-at expression)
_LABELS: dict[str, tuple[str, str, str, str]] = {
    "message": ("messages", "message_id", f"role || ': ' || {_clip('content', 80)}", "created_at"),
    "tool_call": (
        "tool_calls", "tool_call_id", f"tool_name || '(' || {_clip('arguments_json', 60)} || ')'",
        "requested_at",
    ),
    "tool_artifact": (
        "tool_artifacts", "artifact_id",
        f"tool_name || ' ' || status || ' ' || {_clip('result_preview', 60)}", "created_at",
    ),
    "tool_memory": ("tool_memories", "memory_id", _clip("summary", 80), "created_at"),
    "skill_state": (
        "skill_states", "skill_state_id", "'skills: ' || array_to_string(loaded_skills, ', ')",
        "created_at",
    ),
    "checkpoint": ("checkpoints", "checkpoint_id", "kind || ' checkpoint'", "created_at"),
    "model_run": (
        "model_runs", "model_run_id",
        "runtime_kind || ' run of ' || participant_id || ' (' || provider || '/' || model || ', ' || status || ')'",
        "started_at",
    ),
}

# kind -> expressions for prompt_records' per-kind columns
_NULLS = {
    "role": "NULL::VARCHAR", "speaker_label": "NULL::VARCHAR", "content": "NULL::VARCHAR",
    "privacy_class": "NULL::VARCHAR", "storage_ref": "NULL::VARCHAR", "sha256": "NULL::VARCHAR",
    "observed_at": "NULL::TIMESTAMPTZ", "stale_after": "NULL::TIMESTAMPTZ",
    "revalidation_tools": "NULL::VARCHAR[]", "tool_name": "NULL::VARCHAR",
    "status": "NULL::VARCHAR", "error": "NULL::VARCHAR",
}
_PROMPT_COLUMNS: dict[str, dict[str, str]] = {
    "message": {"role": "role", "speaker_label": "speaker_label", "content": "content"},
    "tool_memory": {
        "content": "summary", "privacy_class": "privacy_class", "observed_at": "observed_at",
        "stale_after": "stale_after", "revalidation_tools": "revalidation_tools",
        "tool_name": "array_to_string(source_tool_names, ', ')",
    },
    "tool_artifact": {
        "content": "result_preview", "privacy_class": "privacy_class",
        "storage_ref": "storage_ref", "sha256": "sha256", "tool_name": "tool_name",
        "status": "status", "error": "error", "observed_at": "created_at",
    },
    "tool_call": {"content": "arguments_json", "tool_name": "tool_name", "status": "status"},
    "checkpoint": {"content": "state_json"},
    "skill_state": {
        "content": "'skills: ' || array_to_string(loaded_skills, ', ') || '; profiles: ' || "
        "array_to_string(active_profiles, ', ') || '; tools: ' || array_to_string(direct_tools, ', ')",
    },
}

_RECORD_ORDER = (
    "ORDER BY (r.decision <> 'included'), "
    "CASE WHEN r.decision = 'included' THEN r.position END NULLS LAST, "
    "r.reason_code, r.record_kind, r.record_id"
)

_DISTINCT_SQL = {
    "policy_version": "SELECT DISTINCT policy_version FROM assembly_summary",
    "runtime_kind": "SELECT DISTINCT runtime_kind FROM assembly_summary",
    "participant_id": "SELECT DISTINCT participant_id FROM assembly_summary",
    "conversation_id": "SELECT DISTINCT conversation_id FROM assembly_summary",
    "scenario": "SELECT DISTINCT scenario FROM assembly_summary",
    "model": "SELECT DISTINCT model FROM assembly_summary",
    "reason_code": "SELECT DISTINCT unnest(reason_codes) FROM assembly_summary",
    "tag": "SELECT DISTINCT unnest(tags) FROM assembly_summary",
}


# replay queries (issue 3): the tables of a conversation graph
_GRAPH_TABLES: tuple[str, ...] = (
    "conversations", "branches", "participants", "messages", "model_runs", "tool_calls",
    "tool_artifacts", "tool_memories", "skill_states", "checkpoints",
)


def _cols_of(table: str, alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{q(c)}" for c in TABLES[table].column_names)


class Store(LintQueries):
    """A read-mostly view over one store file. Thread-safe: calls are serialised."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> None:
        self._con = con
        self.path = path
        self.read_only = read_only
        self._lock = threading.RLock()

    @classmethod
    def open(cls, db_path: str | os.PathLike[str], read_only: bool = True) -> "Store":
        path = Path(db_path)
        if not path.is_file():
            raise ContextlensError(f"no store at {path} (ingest an export first)")
        try:
            con = _connect(path, read_only=read_only)
        except duckdb.Error as err:
            raise ContextlensError(
                f"{path} is not a contextlens store ({_one_line(err)})"
            ) from None
        try:
            _check_is_store(con, path)
        except ContextlensError:
            con.close()
            raise
        return cls(con, path, read_only)

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    # ---- helpers
    def _arrow(self, sql: str, params: Iterable[Any] = ()) -> pa.Table:
        with self._lock:
            return self._con.sql(sql, params=list(params)).to_arrow_table()

    def _dicts(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._con.execute(sql, list(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def _one(self, sql: str, params: Iterable[Any] = ()) -> dict[str, Any] | None:
        rows = self._dicts(sql, params)
        return rows[0] if rows else None

    # ---- exports
    def exports(self) -> list[dict[str, Any]]:
        rows = self._dicts(
            "SELECT export_id, source_dir, producer, created_at, ingested_at, rows_json, "
            "warnings_json FROM exports ORDER BY export_id"
        )
        for r in rows:
            r["rows"] = json.loads(r.pop("rows_json") or "{}")
            r["warnings"] = json.loads(r.pop("warnings_json") or "[]")
        return rows

    # ---- request list
    def count_assemblies(self, flt: AssemblyFilter | str | None = None) -> int:
        where, params = filter_sql(_as_filter(flt))
        with self._lock:
            return fetch_one(self._con.execute(
                f"SELECT count(*) FROM assembly_summary WHERE {where}", params
            ))[0]

    def list_assemblies(
        self,
        flt: AssemblyFilter | str | None = None,
        sort: str = "assembled_at",
        descending: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> pa.Table:
        if sort not in LIST_COLUMNS:
            raise ContextlensError(
                f"cannot sort by '{sort}' (choose one of: {', '.join(LIST_COLUMNS)})"
            )
        where, params = filter_sql(_as_filter(flt))
        direction = "DESC" if descending else "ASC"
        tie = "DESC" if descending else "ASC"
        sql = (
            f"SELECT {', '.join(LIST_COLUMNS)} FROM assembly_summary WHERE {where} "
            f"ORDER BY {q(sort)} {direction} NULLS LAST, assembly_id {tie}, export_id"
        )
        if limit is not None:
            sql += " LIMIT ?"
            params = params + [int(limit)]
        if offset:
            sql += " OFFSET ?"
            params = params + [int(offset)]
        return self._arrow(sql, params)

    def distinct_values(self, field: str) -> list[str]:
        sql = _DISTINCT_SQL.get(field)
        if sql is None:
            raise ContextlensError(
                f"no distinct values for '{field}' (choose one of: {', '.join(_DISTINCT_SQL)})"
            )
        with self._lock:
            values = [r[0] for r in self._con.execute(sql).fetchall()]
        return sorted(v for v in values if v is not None)

    # ---- one assembly
    def assembly(self, assembly_id: str) -> dict[str, Any]:
        row = self._one(
            "SELECT a.*, s.included_count, s.omitted_count, s.scenario FROM context_assemblies a "
            "JOIN assembly_summary s ON s.assembly_id = a.assembly_id AND s.export_id = a.export_id "
            "WHERE a.assembly_id = ? ORDER BY a.export_id LIMIT 1",
            [assembly_id],
        )
        if row is None:
            raise NotFoundError(f"unknown assembly '{assembly_id}'")
        return row

    def _assembly_export(self, assembly_id: str) -> str:
        with self._lock:
            row = fetch_one(self._con.execute(
                "SELECT export_id FROM assembly_summary WHERE assembly_id = ? "
                "ORDER BY export_id LIMIT 1",
                [assembly_id],
            ))
        if row is None:
            raise NotFoundError(f"unknown assembly '{assembly_id}'")
        return row[0]

    def _record_ids(self, assembly_id: str, export_id: str, decision: str | None) -> dict[str, list[str]]:
        sql = (
            "SELECT record_kind, list(record_id) FROM assembly_records "
            "WHERE assembly_id = ? AND export_id = ?"
        )
        params: list[Any] = [assembly_id, export_id]
        if decision is not None:
            sql += " AND decision = ?"
            params.append(decision)
        sql += " GROUP BY record_kind"
        with self._lock:
            return {k: list(ids) for k, ids in self._con.execute(sql, params).fetchall()}

    def assembly_records(self, assembly_id: str, decision: str | None = None) -> pa.Table:
        if decision not in (None, "included", "omitted"):
            raise ContextlensError(f"decision must be 'included' or 'omitted', not '{decision}'")
        export_id = self._assembly_export(assembly_id)
        ids = self._record_ids(assembly_id, export_id, decision)
        parts, params = [], []
        for kind, id_list in sorted(ids.items()):
            if kind not in _LABELS:
                continue
            table, id_col, label, created = _LABELS[kind]
            parts.append(
                f"SELECT ? AS kind, {q(id_col)} AS id, {label} AS label, {created} AS created_at "
                f"FROM {q(table)} WHERE export_id = ? AND {q(id_col)} IN (SELECT unnest(?::VARCHAR[]))"
            )
            params += [kind, export_id, id_list]
        labels = " UNION ALL ".join(parts) or (
            "SELECT NULL::VARCHAR AS kind, NULL::VARCHAR AS id, NULL::VARCHAR AS label, "
            "NULL::TIMESTAMPTZ AS created_at WHERE false"
        )
        where = "r.assembly_id = ? AND r.export_id = ?"
        rparams: list[Any] = [assembly_id, export_id]
        if decision is not None:
            where += " AND r.decision = ?"
            rparams.append(decision)
        sql = (
            f"WITH labels AS ({labels}) "
            "SELECT r.record_kind, r.record_id, r.decision, r.rendering, r.position, "
            "r.policy_family, r.reason_code, r.detail, r.tokens, l.label, l.created_at "
            f"FROM assembly_records r LEFT JOIN labels l ON l.kind = r.record_kind AND l.id = r.record_id "
            f"WHERE {where} {_RECORD_ORDER}"
        )
        return self._arrow(sql, params + rparams)

    def record_privacy(self, assembly_id: str) -> pa.Table:
        """record_kind, record_id, privacy_class of every record of the assembly (privacy is
        null for kinds without one), so callers can mask labels of restricted records."""
        export_id = self._assembly_export(assembly_id)
        ids = self._record_ids(assembly_id, export_id, None)
        parts, params = [], []
        for kind in ("tool_artifact", "tool_memory"):
            if ids.get(kind):
                table, id_col = RECORD_TABLES[kind]
                parts.append(
                    f"SELECT ? AS kind, {q(id_col)} AS id, privacy_class FROM {q(table)} "
                    f"WHERE export_id = ? AND {q(id_col)} IN (SELECT unnest(?::VARCHAR[]))"
                )
                params += [kind, export_id, ids[kind]]
        body = " UNION ALL ".join(parts) or (
            "SELECT NULL::VARCHAR AS kind, NULL::VARCHAR AS id, NULL::VARCHAR AS privacy_class "
            "WHERE false"
        )
        return self._arrow(
            f"WITH p AS ({body}) SELECT r.record_kind, r.record_id, p.privacy_class "
            "FROM assembly_records r LEFT JOIN p ON p.kind = r.record_kind AND p.id = r.record_id "
            "WHERE r.assembly_id = ? AND r.export_id = ? ORDER BY r.record_kind, r.record_id",
            params + [assembly_id, export_id],
        )

    def policy_decisions(self, assembly_id: str, record_id: str | None = None) -> pa.Table:
        export_id = self._assembly_export(assembly_id)
        sql = (
            "SELECT decision_id, step, record_kind, record_id, policy_family, outcome, "
            "reason_code, detail FROM policy_decisions WHERE assembly_id = ? AND export_id = ?"
        )
        params: list[Any] = [assembly_id, export_id]
        if record_id is not None:
            sql += " AND record_id = ?"
            params.append(record_id)
        return self._arrow(sql + " ORDER BY step, decision_id", params)

    def record_decision(self, assembly_id: str, record_id: str) -> dict[str, Any]:
        export_id = self._assembly_export(assembly_id)
        row = self._one(
            "SELECT record_kind, record_id, decision, rendering, position, policy_family, "
            "reason_code, detail, tokens FROM assembly_records "
            "WHERE assembly_id = ? AND export_id = ? AND record_id = ? "
            "ORDER BY record_kind LIMIT 1",
            [assembly_id, export_id, record_id],
        )
        if row is None:
            raise NotFoundError(f"record '{record_id}' is not in assembly '{assembly_id}'")
        return row

    def record(self, record_kind: str, record_id: str, export_id: str | None = None) -> dict[str, Any] | None:
        table, id_col = _record_table(record_kind)
        sql = f"SELECT * FROM {q(table)} WHERE {q(id_col)} = ?"
        params: list[Any] = [record_id]
        if export_id is not None:
            sql += " AND export_id = ?"
            params.append(export_id)
        return self._one(sql + " ORDER BY export_id LIMIT 1", params)

    def _label(self, kind: str, record_id: str, export_id: str) -> str | None:
        table, id_col, label, _ = _LABELS[kind]
        with self._lock:
            row = fetch_one(self._con.execute(
                f"SELECT {label} FROM {q(table)} WHERE {q(id_col)} = ? AND export_id = ? LIMIT 1",
                [record_id, export_id],
            ))
        return row[0] if row else None

    def provenance(self, record_kind: str, record_id: str) -> list[dict[str, Any]]:
        """The record (depth 0) and the chain it derives from, walked breadth first.

        memory -> source artifacts -> tool call -> model run -> trigger message, plus the
        memory's supersession links. A reference to a missing row is a link with
        ``broken=True`` and the walk does not continue past it.
        """
        _record_table(record_kind)
        root = self.record(record_kind, record_id)
        if root is None:
            raise NotFoundError(f"unknown {record_kind} '{record_id}'")
        export_id = root["export_id"]
        links: list[dict[str, Any]] = [
            {
                "kind": record_kind, "id": record_id,
                "label": self._label(record_kind, record_id, export_id) or record_id,
                "broken": False, "depth": 0, "via": None,
                "privacy_class": root.get("privacy_class"),
            }
        ]
        seen = {(record_kind, record_id)}
        queue: list[tuple[str, dict[str, Any], int]] = [(record_kind, root, 0)]
        while queue:
            kind, row, depth = queue.pop(0)
            for target_kind, target_id, via, follow in _edges(kind, row, is_root=depth == 0):
                if not target_id or (target_kind, target_id) in seen:
                    continue
                seen.add((target_kind, target_id))
                target = self._row(target_kind, target_id, export_id)
                links.append(
                    {
                        "kind": target_kind,
                        "id": target_id,
                        "label": (
                            self._label(target_kind, target_id, export_id)
                            if target is not None
                            else f"missing {target_kind} {target_id}"
                        ),
                        "broken": target is None,
                        "depth": depth + 1,
                        "via": via,
                        "privacy_class": (target or {}).get("privacy_class"),
                    }
                )
                if target is not None and follow:
                    queue.append((target_kind, target, depth + 1))
        return links

    def _row(self, kind: str, record_id: str, export_id: str) -> dict[str, Any] | None:
        table, id_col = _LINK_TABLES[kind]
        return self._one(
            f"SELECT * FROM {q(table)} WHERE {q(id_col)} = ? AND export_id = ? LIMIT 1",
            [record_id, export_id],
        )

    def prompt_records(self, assembly_id: str) -> pa.Table:
        export_id = self._assembly_export(assembly_id)
        ids = self._record_ids(assembly_id, export_id, "included")
        parts, params = [], []
        for kind, id_list in sorted(ids.items()):
            if kind not in _PROMPT_COLUMNS:
                continue
            table, id_col = RECORD_TABLES[kind]
            exprs = {**_NULLS, **_PROMPT_COLUMNS[kind]}
            cols = ", ".join(f"{exprs[c]} AS {c}" for c in _NULLS)
            parts.append(
                f"SELECT ? AS kind, {q(id_col)} AS id, {cols} FROM {q(table)} "
                f"WHERE export_id = ? AND {q(id_col)} IN (SELECT unnest(?::VARCHAR[]))"
            )
            params += [kind, export_id, id_list]
        if not parts:
            parts = ["SELECT NULL::VARCHAR AS kind, NULL::VARCHAR AS id, "
                     + ", ".join(f"{v} AS {k}" for k, v in _NULLS.items()) + " WHERE false"]
        sql = (
            f"WITH body AS ({' UNION ALL '.join(parts)}) "
            "SELECT r.record_kind, r.record_id, r.position, r.rendering, r.tokens, "
            + ", ".join(f"b.{c}" for c in _NULLS)
            + " FROM assembly_records r LEFT JOIN body b ON b.kind = r.record_kind AND b.id = r.record_id "
            "WHERE r.assembly_id = ? AND r.export_id = ? AND r.decision = 'included' "
            "ORDER BY r.position NULLS LAST, r.record_kind, r.record_id"
        )
        return self._arrow(sql, params + [assembly_id, export_id])

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

    # ---- conversation screen
    def conversations(self) -> pa.Table:
        return self._arrow(
            "SELECT c.conversation_id, c.title, c.owner_id, c.created_at, "
            "coalesce(b.n, 0) AS branch_count, coalesce(s.n, 0) AS assembly_count "
            "FROM conversations c "
            "LEFT JOIN (SELECT conversation_id, export_id, count(*) AS n FROM branches "
            "           GROUP BY ALL) b ON b.conversation_id = c.conversation_id AND b.export_id = c.export_id "
            "LEFT JOIN (SELECT conversation_id, export_id, count(*) AS n FROM assembly_summary "
            "           GROUP BY ALL) s ON s.conversation_id = c.conversation_id AND s.export_id = c.export_id "
            "ORDER BY c.created_at, c.conversation_id, c.export_id"
        )

    def branches(self, conversation_id: str) -> pa.Table:
        return self._arrow(
            "SELECT branch_id, parent_branch_id, fork_message_id, name, created_at FROM branches "
            "WHERE conversation_id = ? ORDER BY created_at, branch_id",
            [conversation_id],
        )

    def model_runs(self, conversation_id: str) -> pa.Table:
        return self._arrow(
            "SELECT model_run_id, branch_id, participant_id, runtime_kind, parent_model_run_id, "
            "status, provider, model, started_at FROM model_runs WHERE conversation_id = ? "
            "ORDER BY started_at, model_run_id",
            [conversation_id],
        )

    def assemblies_of_conversation(self, conversation_id: str) -> pa.Table:
        return self._arrow(
            "SELECT assembly_id, model_run_id, branch_id, participant_id, policy_version, "
            "assembled_at, scenario FROM assembly_summary WHERE conversation_id = ? "
            "ORDER BY assembled_at, assembly_id",
            [conversation_id],
        )

    # ---- replay (issue 3): conversation graph, verify work lists, tokens report
    def conversation_graph(self, conversation_id: str, export_id: str | None = None) -> dict[str, pa.Table]:
        """Every graph table's rows of one conversation (contract columns, no export_id).

        Rows are taken from ``export_id`` (default: the first export holding the conversation).
        Tool calls, skill states and checkpoints belong to the conversation through their model
        run; an artifact through its branch, its tool call or its owner run.
        """
        if export_id is None:
            row = self._one(
                "SELECT export_id FROM conversations WHERE conversation_id = ? "
                "ORDER BY export_id LIMIT 1",
                [conversation_id],
            )
            if row is None:
                raise NotFoundError(f"unknown conversation '{conversation_id}'")
            export_id = row["export_id"]
        p = [conversation_id, export_id]
        runs = "SELECT model_run_id FROM model_runs WHERE conversation_id = ? AND export_id = ?"
        sql = {
            name: f"SELECT {_cols_of(name)} FROM {q(name)} WHERE conversation_id = ? AND export_id = ?"
            for name in ("conversations", "branches", "participants", "messages", "model_runs",
                         "tool_memories")
        }
        params: dict[str, list[Any]] = {name: p for name in sql}
        for name in ("tool_calls", "skill_states", "checkpoints"):
            sql[name] = (
                f"SELECT {_cols_of(name)} FROM {q(name)} WHERE export_id = ? "
                f"AND model_run_id IN ({runs})"
            )
            params[name] = [export_id] + p
        sql["tool_artifacts"] = (
            f"SELECT {_cols_of('tool_artifacts')} FROM tool_artifacts WHERE export_id = ? AND ("
            "branch_id IN (SELECT branch_id FROM branches WHERE conversation_id = ? AND export_id = ?) "
            f"OR owner_model_run_id IN ({runs}) "
            "OR tool_call_id IN (SELECT tool_call_id FROM tool_calls WHERE export_id = ? "
            f"AND model_run_id IN ({runs})))"
        )
        params["tool_artifacts"] = [export_id] + p + p + [export_id] + p
        order = {name: TABLES[name].primary_key for name in _GRAPH_TABLES}
        return {
            name: self._arrow(
                sql[name] + " ORDER BY " + ", ".join(q(c) for c in order[name]), params[name]
            )
            for name in _GRAPH_TABLES
        }

    def assembly_requests(self, flt: AssemblyFilter | str | None = None) -> pa.Table:
        """context_assemblies rows (contract columns + export_id) of the assemblies matching
        ``flt``, ordered by export, conversation, time and id (verify's work list)."""
        where, params = filter_sql(_as_filter(flt))
        return self._arrow(
            f"SELECT {_cols_of('context_assemblies', 'a')}, a.export_id FROM context_assemblies a "
            "JOIN (SELECT assembly_id, export_id FROM assembly_summary "
            f"      WHERE {where}) s ON s.assembly_id = a.assembly_id AND s.export_id = a.export_id "
            "ORDER BY a.export_id, a.conversation_id, a.assembled_at, a.assembly_id",
            params,
        )

    def recorded_records(self, assembly_ids: list[str], export_id: str) -> pa.Table:
        """assembly_records rows (contract columns) of many assemblies of one export, ordered by
        assembly_id, record_kind, record_id."""
        return self._arrow(
            f"SELECT {_cols_of('assembly_records')} FROM assembly_records WHERE export_id = ? "
            "AND assembly_id IN (SELECT unnest(?::VARCHAR[])) "
            "ORDER BY assembly_id, record_kind, record_id",
            [export_id, list(assembly_ids)],
        )

    def recorded_decisions(self, assembly_id: str) -> pa.Table:
        """policy_decisions rows (contract columns) of one assembly, by step and decision id."""
        export_id = self._assembly_export(assembly_id)
        return self._arrow(
            f"SELECT {_cols_of('policy_decisions')} FROM policy_decisions "
            "WHERE assembly_id = ? AND export_id = ? ORDER BY step, decision_id",
            [assembly_id, export_id],
        )

    def token_totals(self, flt: AssemblyFilter | str | None = None) -> pa.Table:
        """Per scenario (null for untagged requests): assemblies, baseline_tokens (history
        replay), assembled_tokens; ordered by scenario with the untagged last."""
        where, params = filter_sql(_as_filter(flt))
        return self._arrow(
            "SELECT scenario, count(*) AS assemblies, sum(baseline_tokens)::BIGINT AS baseline_tokens, "
            "sum(assembled_tokens)::BIGINT AS assembled_tokens FROM assembly_summary "
            f"WHERE {where} GROUP BY scenario ORDER BY scenario NULLS LAST",
            params,
        )

    def conversation_graphs(self, conversation_ids: list[str], export_id: str) -> dict[str, pa.Table]:
        """``conversation_graph`` of many conversations of one export in one query per table.

        Each table has the contract columns plus ``graph_conversation_id`` (the conversation
        the row belongs to; a row reachable from two conversations appears once for each),
        ordered by graph_conversation_id, then the table's primary key."""
        ids = list(conversation_ids)
        conv = "SELECT unnest(?::VARCHAR[])"
        runs = (f"SELECT DISTINCT conversation_id AS cid, model_run_id FROM model_runs "
                f"WHERE export_id = ? AND conversation_id IN ({conv})")
        out: dict[str, pa.Table] = {}
        for name in _GRAPH_TABLES:
            cols = _cols_of(name, "t")
            if name in ("conversations", "branches", "participants", "messages", "model_runs",
                        "tool_memories"):
                sql = (f"SELECT {cols}, t.conversation_id AS graph_conversation_id FROM {q(name)} t "
                       f"WHERE t.export_id = ? AND t.conversation_id IN ({conv})")
                params: list[Any] = [export_id, ids]
            elif name in ("tool_calls", "skill_states", "checkpoints"):
                sql = (f"SELECT {cols}, r.cid AS graph_conversation_id FROM {q(name)} t "
                       f"JOIN ({runs}) r ON r.model_run_id = t.model_run_id WHERE t.export_id = ?")
                params = [export_id, ids, export_id]
            else:  # tool_artifacts: through the branch, the owner run or the tool call
                sql = (
                    f"WITH runs AS ({runs}), "
                    "br AS (SELECT DISTINCT conversation_id AS cid, branch_id FROM branches "
                    f"       WHERE export_id = ? AND conversation_id IN ({conv})), "
                    "calls AS (SELECT DISTINCT r.cid, c.tool_call_id FROM tool_calls c "
                    "          JOIN runs r ON r.model_run_id = c.model_run_id WHERE c.export_id = ?), "
                    "arts AS (SELECT rowid AS rid, branch_id, owner_model_run_id, tool_call_id "
                    "         FROM tool_artifacts WHERE export_id = ?), "
                    "pairs AS (SELECT br.cid, a.rid FROM arts a JOIN br ON br.branch_id = a.branch_id "
                    "          UNION SELECT r.cid, a.rid FROM arts a JOIN runs r ON r.model_run_id = a.owner_model_run_id "
                    "          UNION SELECT c.cid, a.rid FROM arts a JOIN calls c ON c.tool_call_id = a.tool_call_id) "
                    f"SELECT {cols}, p.cid AS graph_conversation_id FROM tool_artifacts t "
                    "JOIN pairs p ON p.rid = t.rowid"
                )
                params = [export_id, ids, export_id, ids, export_id, export_id]
            out[name] = self._arrow(
                f"{sql} ORDER BY graph_conversation_id, "
                + ", ".join(f"t.{q(c)}" for c in TABLES[name].primary_key),
                params,
            )
        return out


def _as_filter(flt: AssemblyFilter | str | None) -> AssemblyFilter | None:
    if isinstance(flt, str):
        return parse_filter(flt)
    return flt


# Provenance also walks through model runs, which are not assembly records.
_LINK_TABLES: dict[str, tuple[str, str]] = {**RECORD_TABLES, "model_run": ("model_runs", "model_run_id")}


def _record_table(kind: str) -> tuple[str, str]:
    try:
        return _LINK_TABLES[kind]
    except KeyError:
        raise ContextlensError(
            f"unknown record kind '{kind}' (known: {', '.join(_LINK_TABLES)})"
        ) from None


def _edges(kind: str, row: dict[str, Any], is_root: bool) -> list[tuple[str, str | None, str, bool]]:
    """(target kind, target id, via column, follow further) for one provenance step."""
    if kind == "tool_memory":
        out = [("tool_artifact", a, "source_artifact_ids", True) for a in row.get("source_artifact_ids") or []]
        if row.get("superseded_by"):
            out.append(("tool_memory", row["superseded_by"], "superseded_by", False))
        out += [("tool_memory", m, "supersedes", False) for m in row.get("supersedes") or []]
        return out
    if kind == "tool_artifact":
        return [("tool_call", row.get("tool_call_id"), "tool_call_id", True)]
    if kind in ("tool_call", "skill_state", "checkpoint"):
        return [("model_run", row.get("model_run_id"), "model_run_id", True)]
    if kind == "model_run":
        return [("message", row.get("trigger_message_id"), "trigger_message_id", False)]
    if kind == "message" and is_root:
        return [("model_run", row.get("model_run_id"), "model_run_id", True)]
    return []
