"""Loading an export into a store: validation, the writer's lock, the DDL, and the atomic
replace of the store file.

``ingest(export_dir, db_path)`` validates and loads an export into a single DuckDB file,
atomically (a temporary copy replaced in one rename) and idempotently (the same manifest is
not loaded twice).
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import shutil
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import duckdb

from ..contract import TABLES
from ..errors import ContextlensError
from ..exportdir import ExportLayout, manifest_digest, read_layout, start_hashing
from ..loadtables import create_or_insert, resolve_types
from ..sql import fetch_one, one_line_error as _one_line, q
from ..validate import CHECK_STEPS, check_loaded
from .database import STORE_FORMAT, STORE_VERSION, connect, open_store
from .lock import StoreLock, remove_quietly, write_error

__all__ = ["IngestInterrupted", "IngestResult", "ingest"]

Progress = Callable[[str, int, int], None]

# Tables looked up by assembly_id are loaded in that order, so DuckDB's per-row-group
# min/max (zone maps) skip everything but the few row groups holding one assembly.
_CLUSTER_BY = {"assembly_records": "assembly_id", "policy_decisions": "assembly_id"}
CLUSTER_ON_LOAD = True
_MAX_UNSORTED_GROUP = 1_000_000

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


def _previous_ingest(db_path: Path, export_id: str) -> tuple[str, str, str] | None:
    """(manifest_json, rows_json, warnings_json) of export_id in the existing store, if any."""
    con = open_store(db_path, read_only=True)
    try:
        return fetch_one(con.execute(
            "SELECT manifest_json, rows_json, warnings_json FROM exports WHERE export_id = ?",
            [export_id],
        ))
    finally:
        con.close()


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

    with _TermAsError(db_path) as term, StoreLock(db_path) as lock:
        if lock.previous_pid is not None:
            # a writer killed mid-ingest left its half-built copy behind
            dead = db_path.with_name(f"{db_path.name}.tmp-{lock.previous_pid}")
            remove_quietly(dead, dead.with_name(dead.name + ".wal"))
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
        remove_quietly(tmp, tmp_wal)
        try:
            if db_path.exists():
                report("copying the existing store", 0, 1)
                try:
                    shutil.copyfile(db_path, tmp)
                except OSError as err:
                    raise write_error(tmp, err) from None
            rows, warnings = _build(tmp, layout, report)
            try:
                os.replace(tmp, db_path)
                term.committed = True
            except OSError as err:
                raise write_error(db_path, err) from None
        except BaseException as exc:
            remove_quietly(tmp, tmp_wal)
            if term.error is not None and exc is not term.error:
                # SIGTERM raised inside a DuckDB query comes back as DuckDB's own error
                raise term.error from None
            raise
        finally:
            remove_quietly(tmp_wal)
    return IngestResult(export_id, db_path, True, rows, warnings)


def _build(tmp: Path, layout: ExportLayout, report: Progress) -> tuple[dict[str, int], list[str]]:
    export_id = layout.manifest.export_id
    total = 1 + len(TABLES) + CHECK_STEPS + 2
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        report(label, done, total)
        done += 1

    con = connect(tmp, read_only=False)
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
        if isinstance(err, duckdb.IOException) or _NO_SPACE in str(err):
            raise ContextlensError(f"cannot write {tmp}: {_one_line(err)}") from None
        raise ContextlensError(f"{layout.label}: {_one_line(err)}") from None
    finally:
        con.close()


_NO_SPACE = os.strerror(errno.ENOSPC)


class IngestInterrupted(ContextlensError):
    """SIGTERM reached an ingest; it stopped and cleaned up like after any other error."""

    exit_code = 128 + signal.SIGTERM


class _TermAsError:
    """While an ingest runs in the main thread, SIGTERM raises ``IngestInterrupted`` there,
    so the temporary copy and the lock are cleaned up as after an exception (SIGINT already
    raises KeyboardInterrupt). A second signal during that cleanup is ignored."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._previous: Any = None
        self._installed = False
        self._fired = False
        self._late: int | None = None
        self.committed = False
        self.error: IngestInterrupted | None = None

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.committed:
            self._late = signum  # the store is already replaced: deliver it once we are done
            return
        if self._fired:
            return
        self._fired = True
        self.error = IngestInterrupted(
            f"ingest into {self.db_path} stopped by {signal.Signals(signum).name}; "
            "the store is unchanged"
        )
        raise self.error

    def __enter__(self) -> "_TermAsError":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def __exit__(self, *_: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False
        if self._late is not None:
            os.kill(os.getpid(), self._late)

