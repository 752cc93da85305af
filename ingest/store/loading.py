"""Loading an export into a store: validation, the writer's lock, the DDL, and the atomic
write of the store.

``ingest(export_dir, db_path)`` validates and loads an export into a single DuckDB file,
atomically and idempotently (the same manifest is not loaded twice). The export is first
loaded and validated in a scratch database of its own (``<db>.tmp-<pid>``), so nothing of
the store is written before the export is known to be good. A new store is that scratch
database, renamed into place. An existing store gets the export in place, in one DuckDB
transaction (its WAL makes a killed writer's work all there or absent), so the cost grows
with the export, not with the store. Only when a reader holds the store open (DuckDB lets
no process write a file another one reads) is the store copied, the copy written, and
renamed over it, so the reader keeps answering from the version it opened.

(A little over 500 lines: the lock, the DDL and the atomic write are one procedure, and
splitting it would scatter the crash-safety argument above across modules.)
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
from ..interrupts import IngestInterrupted, WriteFailed, disk_full
from ..loadtables import create_or_insert, memory_held, resolve_types
from ..safe_files import require_not_special
from ..sql import fetch_one, one_line_error as _one_line, q, sql_str
from ..validate import CHECK_STEPS, check_loaded
from .database import STORE_FORMAT, STORE_VERSION, connect, open_store
from .identity import check_readable, refuse_collisions
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
        # a damaged store is refused before the export is even loaded, so nothing is added
        # to a file that reads back broken
        check_readable(con, db_path)
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
    ``db_path`` that is not a store. On any failure the existing store's content is left
    untouched; a failure before the export is validated does not write the store at all.
    """
    export_dir = Path(export_dir)
    db_path = Path(db_path)
    report = progress or (lambda _label, _done, _total: None)
    report("reading manifest", 0, 1)
    # a folder, FIFO or device named as the store is said to be one, before anything reads it
    require_not_special(db_path, "store file")
    layout = read_layout(export_dir)
    export_id = layout.manifest.export_id
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ContextlensError(
            f"cannot write the store {db_path}: {err.strerror or err}"
        ) from None

    with _TermAsError(db_path, export_id) as term, StoreLock(db_path) as lock:
        if lock.previous_pid is not None:
            # a writer killed mid-ingest left its scratch files behind; never the store's
            # own .wal, which may hold its committed export
            remove_quietly(*_scratch_files(db_path, lock.previous_pid))
        exists = db_path.exists()
        if exists:
            prev = _previous_ingest(db_path, export_id)
            if prev is not None and manifest_digest(prev[0]) == manifest_digest(
                layout.manifest_json
            ):
                report("already ingested", 1, 1)
                return IngestResult(
                    export_id, db_path, False, json.loads(prev[1]), json.loads(prev[2])
                )
        scratch = _scratch_files(db_path, os.getpid())
        stage = scratch[0]
        remove_quietly(*scratch)
        steps = _Steps(report, 1 + len(TABLES) + CHECK_STEPS + 1 + (_merge_steps() if exists else 1))
        try:
            rows, warnings = _build(stage, layout, steps, clustered=not exists)
            if not exists:
                steps.tick("writing the store")
                _commit_by_rename(stage, db_path, term)
            else:
                _add_to_store(db_path, stage, layout, steps, term)
            steps.done()
        except BaseException as exc:
            if term.error is not None and exc is not term.error:
                # SIGTERM raised inside a DuckDB query comes back as DuckDB's own error
                raise term.error from None
            if disk_full(exc) and not str(exc).startswith("cannot write "):
                # a load that failed for room, named by the store rather than by the
                # scratch file DuckDB names (our "cannot write" errors name the file already)
                raise WriteFailed(db_path, exc) from None
            raise
        finally:
            remove_quietly(*scratch)
    return IngestResult(export_id, db_path, True, rows, warnings)


def _scratch_files(db_path: Path, pid: int) -> tuple[Path, ...]:
    """The files a writer of ``pid`` makes next to the store: the scratch database the export
    is validated in (first), and the copy of the store written while a reader holds it."""
    stage = db_path.with_name(f"{db_path.name}.tmp-{pid}")
    copy = db_path.with_name(f"{db_path.name}.tmp-{pid}.copy")
    return tuple(p for f in (stage, copy) for p in (f, f.with_name(f.name + ".wal")))


class _Steps:
    """Progress as (label, done, total): each ``tick`` reports a step about to start."""

    def __init__(self, report: Progress, total: int) -> None:
        self.report = report
        self.total = total
        self.count = 0

    def tick(self, label: str) -> None:
        self.report(label, min(self.count, self.total), self.total)
        self.count += 1

    def done(self) -> None:
        self.report("done", self.total, self.total)


def _build(
    tmp: Path, layout: ExportLayout, steps: _Steps, clustered: bool
) -> tuple[dict[str, int], list[str]]:
    """Load and validate the export into a new database at ``tmp``, with the store's
    bookkeeping tables, so it is a complete store of this one export. ``clustered`` orders
    the record tables by assembly (when the database becomes the store as it is)."""
    export_id = layout.manifest.export_id
    tick = steps.tick
    con = connect(tmp, read_only=False)
    # Lookups never depend on row order (the record tables are clustered by assembly_id
    # below), and without the guarantee DuckDB writes a parallel load's row groups whole:
    # a smaller file and no rewrite at checkpoint.
    con.execute("SET preserve_insertion_order = false")
    try:
        for ddl in _META_DDL:
            con.execute(ddl)
        con.execute(_SUMMARY_DDL)
        con.execute(
            "INSERT INTO store_meta VALUES ('format', ?), ('version', ?)",
            [STORE_FORMAT, STORE_VERSION],
        )
        tick("reading column types")
        resolve_types(con, layout)

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256") as pool:
            hashes = start_hashing(layout, pool)
            try:
                for name, src in layout.tables.items():
                    tick(f"loading {name}")
                    order = ""
                    if (
                        clustered
                        and CLUSTER_ON_LOAD
                        and name in _CLUSTER_BY
                        and not _already_clustered(src, _CLUSTER_BY[name])
                    ):
                        order = f" ORDER BY {q(_CLUSTER_BY[name])}"
                    create_or_insert(con, src, export_id, False, order)
                with memory_held(con):  # its joins and aggregates spill, as the load does
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
        if clustered:
            con.execute("CHECKPOINT")
        else:
            # only read once, by the ingest that made it (attaching it replays its WAL):
            # writing it a second time into the database file would be wasted
            con.execute("PRAGMA disable_checkpoint_on_shutdown")
        return rows, warnings
    except duckdb.Error as err:
        if isinstance(err, duckdb.IOException) or _NO_SPACE in str(err):
            raise ContextlensError(f"cannot write {tmp}: {_one_line(err)}") from None
        raise ContextlensError(f"{layout.label}: {_one_line(err)}") from None
    finally:
        con.close()


# the tables an export adds rows to, in the order they are written
def _merged_tables() -> list[str]:
    return [*TABLES, "assembly_summary", "exports"]


def _merge_steps() -> int:
    return 1 + len(_merged_tables()) + 2


def _add_to_store(
    db_path: Path, stage: Path, layout: ExportLayout, steps: _Steps, term: "_TermAsError"
) -> None:
    """Add the validated export in ``stage`` to the existing store: in place, or through a
    copy renamed over the store when another process or connection is reading it."""
    steps.tick("writing the store")
    try:
        con = connect(db_path, read_only=False)
    except duckdb.Error as err:
        if not _held_by_a_reader(err):
            raise ContextlensError(f"cannot write {db_path}: {_one_line(err)}") from None
        con = None
    if con is not None:
        _merge(con, db_path, stage, layout, steps, term)
        return
    copy = _scratch_files(db_path, os.getpid())[2]
    try:
        shutil.copyfile(db_path, copy)
    except OSError as err:
        raise write_error(copy, err) from None
    try:
        copy_con = connect(copy, read_only=False)
    except duckdb.Error as err:
        raise ContextlensError(f"cannot write {copy}: {_one_line(err)}") from None
    _merge(copy_con, copy, stage, layout, steps, None, store=db_path)
    if copy.with_name(copy.name + ".wal").exists():
        raise ContextlensError(f"cannot write {copy}: its WAL was not checkpointed")
    _commit_by_rename(copy, db_path, term)


def _commit_by_rename(built: Path, db_path: Path, term: "_TermAsError") -> None:
    """Put a fully written store file in place: from here a signal waits for the rename."""
    term.committed = True
    try:
        os.replace(built, db_path)
    except OSError as err:
        term.committed = False
        raise write_error(db_path, err) from None


def _held_by_a_reader(err: duckdb.Error) -> bool:
    """True when DuckDB refused to open the store for writing because it is open for
    reading: by another process (its file lock), or in this one (another configuration)."""
    text = str(err)
    return "Conflicting lock" in text or "different configuration" in text


def _merge(
    con: duckdb.DuckDBPyConnection, target: Path, stage: Path, layout: ExportLayout,
    steps: _Steps, term: "_TermAsError | None", store: Path | None = None,
) -> None:
    """One transaction on ``con`` (the store at ``target``, or with ``term`` None a copy of
    it): the rows of ``stage`` are added, replacing the export's old rows when it was
    ingested before with other content.
    DuckDB writes a transaction to the WAL only at COMMIT, so a process killed before that
    leaves the store's content as it was, and one killed after it leaves the whole export,
    replayed from the WAL by the next open. An export whose primary keys repeat another
    export's rows is refused before the transaction begins (``refuse_collisions``)."""
    export_id = layout.manifest.export_id
    table = ""
    committed = False
    try:
        con.execute("SET preserve_insertion_order = false")
        store_name = fetch_one(con.execute("SELECT current_database()"))[0]
        # the alias must differ from the store's own name (its file name without .duckdb)
        alias = "incoming" if store_name != "incoming" else "incoming_export"
        con.execute(f"ATTACH {sql_str(str(stage))} AS {q(alias)} (READ_ONLY)")
        staged = _tables(con, alias)
        refuse_collisions(con, alias, export_id, layout.label, store or target)
        con.execute("BEGIN TRANSACTION")
        have = _tables(con, store_name)
        for table in _merged_tables():
            steps.tick(f"writing {table}")
            if table not in staged:
                continue
            order = _store_order(table)
            if table not in have:
                con.execute(f"CREATE TABLE {q(table)} AS SELECT * FROM {q(alias)}.{q(table)}{order}")
                continue
            _add_missing_columns(con, table, alias)
            con.execute(f"DELETE FROM {q(table)} WHERE export_id = ?", [export_id])
            con.execute(
                f"INSERT INTO {q(table)} BY NAME SELECT * FROM {q(alias)}.{q(table)}{order}"
            )
        table = ""
        steps.tick("committing")
        if term is not None:
            term.committed = True  # a signal from here on waits until the ingest is done
        con.execute("COMMIT")
        committed = True
    except duckdb.Error as err:
        if term is not None:
            term.committed = False
        where = f" (table {table})" if table else ""
        raise ContextlensError(f"cannot write {target}{where}: {_one_line(err)}") from None
    finally:
        if not committed:
            con.close()  # rolls the transaction back
    try:
        steps.tick("checkpointing")
        # readers then open a store file that holds the export, with no WAL to replay
        con.execute("CHECKPOINT")
    except duckdb.Error as err:
        if term is None:  # a copy about to be renamed must hold everything in its file
            raise ContextlensError(f"cannot write {target}: {_one_line(err)}") from None
        # in place, the export is committed in the store's WAL; the next open replays it
    finally:
        con.close()


def _tables(con: duckdb.DuckDBPyConnection, database: str) -> set[str]:
    return {
        r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() "
            "WHERE database_name = ? AND schema_name = 'main'",
            [database],
        ).fetchall()
    }


def _store_order(name: str) -> str:
    if name == "assembly_summary":
        return " ORDER BY assembled_at, assembly_id"
    if CLUSTER_ON_LOAD and name in _CLUSTER_BY:
        return f" ORDER BY {q(_CLUSTER_BY[name])}"
    return ""


def _add_missing_columns(con: duckdb.DuckDBPyConnection, name: str, staged: str) -> None:
    """Columns of the staged table the store's table lacks (an export's extra columns),
    added with the staged type; the store's older rows read NULL there."""
    have = {r[0] for r in con.execute(f"DESCRIBE {q(name)}").fetchall()}
    for col, typ, *_ in con.execute(f"DESCRIBE {q(staged)}.{q(name)}").fetchall():
        if col not in have:
            con.execute(f"ALTER TABLE {q(name)} ADD COLUMN {q(col)} {typ}")


_NO_SPACE = os.strerror(errno.ENOSPC)


class _TermAsError:
    """While an ingest runs in the main thread, Ctrl+C and SIGTERM raise ``IngestInterrupted``
    there, so the transaction is rolled back and the scratch files and the lock are cleaned
    up as after an exception. A second signal during that cleanup is ignored; one that
    arrives once the export is being committed waits until the ingest is done, which then
    raises ``IngestInterrupted`` saying the export was stored (the commit is not undone)."""

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, db_path: Path, export_id: str = "") -> None:
        self.db_path = db_path
        self.export_id = export_id
        self._previous: dict[int, Any] = {}
        self._fired = False
        self._late: int | None = None
        self.committed = False
        self.error: IngestInterrupted | None = None

    def _interrupted(self, signum: int, stored: bool) -> IngestInterrupted:
        from ..errors import cut
        from ..interrupts import note_signal

        note_signal(signum)
        export = f"export {cut(self.export_id)}" if self.export_id else "the export"
        what = (f"interrupted after {export} was stored in {self.db_path}" if stored
                else f"interrupted: nothing of {export} stored in {self.db_path}")
        return IngestInterrupted(what, signum, stored)

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.committed:
            self._late = signum  # the export may already be in: said once we are done
            return
        if self._fired:
            return
        self._fired = True
        self.error = self._interrupted(signum, stored=False)
        raise self.error

    def __enter__(self) -> "_TermAsError":
        if threading.current_thread() is threading.main_thread():
            for signum in self._SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, _tb: Any) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        if self.error is not None and exc is not None and exc is not self.error:
            # a signal raised inside a DuckDB query comes back as DuckDB's own error
            raise self.error from None
        late = self._late
        if late is not None and exc_type is None and self.committed:
            raise self._interrupted(late, stored=True)
        if late is not None and exc_type is None:
            raise self._interrupted(late, stored=False)  # (a commit that then failed)
