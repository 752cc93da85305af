"""Compare and verify on a Ray cluster, straight from Parquet exports (``--engine ray``).

(The only module that imports Ray, hence everything Ray-facing is here, over 500 lines.)

The local engine walks one DuckDB store chunk by chunk. Here the same walk is cut into
**partitions**, each a run of whole conversations of one export, and every partition runs
the local engine's own per-partition function (``replay.compare.compare_partition``,
``replay.verify.verify_chunks``) as a Ray task:

1. The driver reads each export's manifest and Parquet footers (``read_layout``: a file that
   is not Parquet fails here, named) and decides each column's cast once
   (``resolve_types``, as ingest does).
2. The driver counts requests per conversation from the ``conversation_id`` column of every
   ``context_assemblies`` file (DuckDB, one column), orders the conversations as the local
   walk does, (export id, conversation id), and cuts them into contiguous partitions of
   about equal request counts: one per CPU of the cluster, more when the data is large
   (``default_partitions``, ``partition_requests``).
3. One Ray task per partition (the job put in the object store once): it loads the
   partition's rows from the export's Parquet files into an in-memory DuckDB with the
   store's tables (a conversation's graph rows, its requests and their recorded records:
   the membership of ``Store.conversation_graphs``), reading only the row groups its keys'
   span touches, wraps it as a ``Store`` and runs the per-partition function on it. So a
   worker runs exactly the SQL and the replay the local engine runs.
4. The driver takes the partitions' results in partition order (holding back those that
   finish early) and merges them (``Comparison.merge``, ``merge_verify``): the merge is
   exact, so the JSON aggregates equal the local engine's. With ``out`` the per-request
   rows (Arrow, through the object store) are written, in the same order, to one Parquet
   file.

A task whose worker dies is retried by Ray (``MAX_RETRIES``); its result is the same, since a
partition is a pure function of its files. A file that cannot be read fails the run with one
``ContextlensError`` naming it.

Ray is an optional extra (``pip install 'contextlens[ray]'``), imported only here and only
when a distributed run starts.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.errors import ContextlensError
from ingest.exportdir import ExportLayout, read_layout
from ingest.loadtables import resolve_types, select_list
from ingest.sql import one_line_error, open_duckdb, q, show_value

from .assembler import get_assembler
from .compare import (RECORDED, TOP, Comparison, compare_partition, tally_in_recording)
from .engine import REQUESTS_PER_CHUNK
from .policy import PolicyRegistry
from .verify import AssemblyVerdict, VerifyResult, finish_verify, merge_verify, verify_chunks

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter
    from ingest.store import Store

__all__ = ["INSTALL", "MAX_RETRIES", "Partition", "RayJob", "compare_on_ray", "default_partitions",
           "find_exports", "object_store_size", "partition_requests", "partition_store",
           "plan_partitions", "ray_session", "verify_on_ray"]

INSTALL = "pip install 'contextlens[ray]'"
MAX_RETRIES = 3  # a partition whose worker dies is run again this many times at most
LOCAL_CPUS = 2  # the local Ray instance started without --address
OBJECT_STORE_BYTES = 256 * 1024 * 1024  # the local object store's least size (object_store_size)
ROW_BYTES = 256  # about what one request's compare row (REQUEST_SCHEMA) takes as Arrow
# a partition's share of the exports' tables (uncompressed): about 7,800 requests of the
# generated exports (3.2 KB each), fewer of larger ones (partition_requests)
PARTITION_BYTES = 24 * 1024 * 1024
# ... and none over one chunk of the local walk (engine.REQUESTS_PER_CHUNK): a worker holds
# what one local worker holds (docs/scaling.md), and no partition ends in a small last chunk
MAX_PARTITION_REQUESTS = REQUESTS_PER_CHUNK

Progress = Callable[[int, int], None]

# Which rows of each table a partition loads, in load order: a row belongs when one of its
# key columns is among the keys of a source, the partition's own conversations (None) or a
# column of a table loaded before it. That is the membership of
# ``Store.conversation_graphs`` (tool calls, skill states and checkpoints through their model
# run; artifacts through branch, owner run or tool call), plus the partition's requests and
# their recorded records and decisions.
_Key = tuple[str, "tuple[str, str] | None"]  # (column, (table, column) or None: the partition's)
_MEMBERSHIP: tuple[tuple[str, tuple[_Key, ...]], ...] = (
    ("conversations", (("conversation_id", None),)),
    ("branches", (("conversation_id", None),)),
    ("participants", (("conversation_id", None),)),
    ("messages", (("conversation_id", None),)),
    ("model_runs", (("conversation_id", None),)),
    ("tool_memories", (("conversation_id", None),)),
    ("context_assemblies", (("conversation_id", None),)),
    ("tool_calls", (("model_run_id", ("model_runs", "model_run_id")),)),
    ("skill_states", (("model_run_id", ("model_runs", "model_run_id")),)),
    ("checkpoints", (("model_run_id", ("model_runs", "model_run_id")),)),
    ("tool_artifacts", (("branch_id", ("branches", "branch_id")),
                        ("owner_model_run_id", ("model_runs", "model_run_id")),
                        ("tool_call_id", ("tool_calls", "tool_call_id")))),
    ("assembly_records", (("assembly_id", ("context_assemblies", "assembly_id")),)),
    ("policy_decisions", (("assembly_id", ("context_assemblies", "assembly_id")),)),
)
# Tables a partition store has, with their columns, but no rows: compare and verify never
# read them (they replay from the graph and compare with assembly_records; the recorded
# decisions are one request's trace, for show and explain). policy_decisions is the largest
# table of an export (about 40% of its bytes); the equality tests with the local engine hold
# this (tests/cli/test_ray_engine.py, tests/unit/test_distributed_merge.py).
_NOT_READ = frozenset({"policy_decisions"})


def require_ray() -> Any:
    """The ``ray`` module, or the one-line error that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ContextlensError(f"--engine ray needs Ray, which is not installed: {INSTALL}") from None
    return ray


# ----------------------------------------------------------------------------- exports


def find_exports(paths: Sequence[str | Path]) -> list[Path]:
    """The export folders named by ``paths``: each an export (a folder with manifest.json)
    or a folder whose subfolders are exports."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if (path / "manifest.json").is_file():
            found.append(path)
            continue
        if not path.is_dir():
            raise ContextlensError(f"{path}: no such export folder (--engine ray reads Parquet "
                                   "exports, not a store file)")
        inner = sorted(p for p in path.iterdir() if (p / "manifest.json").is_file())
        if not inner:
            raise ContextlensError(f"{path}: neither an export (no manifest.json) nor a folder "
                                   "of exports")
        found.extend(inner)
    if not found:
        raise ContextlensError("no export to read")
    return found


@dataclass(frozen=True)
class _Export:
    """What a worker needs of one export: its id and its layout with the casts decided."""

    export_id: str
    layout: ExportLayout


def _open_exports(paths: Sequence[str | Path]) -> list[_Export]:
    exports: list[_Export] = []
    seen: dict[str, Path] = {}
    con = open_duckdb()
    try:
        for folder in find_exports(paths):
            layout = read_layout(folder)
            resolve_types(con, layout)
            export_id = layout.manifest.export_id
            if export_id in seen:
                raise ContextlensError(f"{folder}: export {show_value(export_id)} is also "
                                       f"{seen[export_id]}; name each export once")
            seen[export_id] = folder
            exports.append(_Export(export_id, layout))
    finally:
        con.close()
    # the local walk's order: by export id
    return sorted(exports, key=lambda e: e.export_id.encode())


# ----------------------------------------------------------------------------- partitions


@dataclass(frozen=True)
class Partition:
    """Whole conversations of one export, a contiguous run of the walk order."""

    index: int
    export: int  # index into the job's exports
    conversation_ids: tuple[str, ...]
    requests: int


def plan_partitions(work: list[tuple[int, str, int]], partitions: int) -> list[Partition]:
    """``work`` ((export, conversation, requests), in walk order) cut into at most about
    ``partitions`` runs of whole conversations of one export, of about equal requests."""
    total = sum(n for _, _, n in work)
    if not work:
        return []
    size = max(1, math.ceil(total / max(1, partitions)))
    out: list[Partition] = []
    export, convs, count = work[0][0], [], 0

    def close() -> None:
        out.append(Partition(len(out), export, tuple(convs), count))

    for e, conversation, n in work:
        if convs and (e != export or count >= size):
            close()
            convs, count = [], 0
        export = e
        convs.append(conversation)
        count += n
    close()
    return out


def _work_list(exports: list[_Export]) -> list[tuple[int, str, int]]:
    """(export index, conversation id, requests) of every conversation with a request, in
    walk order: one column of the context_assemblies files, counted by DuckDB on the driver
    (the exports are folders every node mounts at the same path; the driver reads their
    footers already). One pass over ids is cheap next to the replay it plans, and costs no
    Ray job: Ray Data's read took seconds of fixed cost here (docs/scaling.md)."""
    work: list[tuple[int, str, int]] = []
    con = open_duckdb()
    try:
        for i, e in enumerate(exports):
            src = e.layout.tables["context_assemblies"]
            try:
                # the cast ingest makes (select_list), so the ids are the partitions' own;
                # ORDER BY a VARCHAR is byte order, as the local walk's
                counts = con.execute(
                    f"SELECT conversation_id, count(*) FROM (SELECT {select_list(src)} FROM "
                    f"{src.scan_sql()}) WHERE conversation_id IS NOT NULL GROUP BY ALL "
                    "ORDER BY conversation_id").fetchall()
            except duckdb.Error as err:
                _raise_unreadable(src.files, exports, err)
                raise ContextlensError(f"{e.layout.label}: table context_assemblies: cannot "
                                       f"be read ({one_line_error(err)})") from None
            work.extend((i, str(conversation), int(n)) for conversation, n in counts)
    finally:
        con.close()
    return work


# ----------------------------------------------------------------------------- one partition


def partition_store(export: _Export, conversation_ids: Sequence[str],
                    threads: int = 1) -> "Store":
    """An in-memory store holding the conversations ``conversation_ids`` of ``export``:
    the store's tables, loaded from the export's Parquet files with the casts ingest makes,
    and its request summary. Queries on it answer as on a store of the whole export, for
    these conversations."""
    from ingest.store import Store
    # the store's own DDL for its request summary (built at ingest from the same tables)
    from ingest.store.loading import _SUMMARY_DDL, _SUMMARY_INSERT

    con = open_duckdb()
    con.execute(f"SET threads = {int(threads)}")
    ids = sorted(conversation_ids)
    for name, keys in _MEMBERSHIP:
        src = export.layout.tables[name]
        try:
            _load_member_rows(con, export, src, name, keys, ids)
        except duckdb.Error as err:
            con.close()
            _raise_unreadable(src.files, [export], err)
            raise ContextlensError(f"{export.layout.label}: table {name}: cannot be read "
                                   f"({one_line_error(err)})") from None
    con.execute(_SUMMARY_DDL)
    con.execute(_SUMMARY_INSERT, [export.export_id, export.export_id])
    return Store(con, export.layout.root, True)


def _load_member_rows(con: duckdb.DuckDBPyConnection, export: _Export, src: Any, name: str,
                      keys: tuple[_Key, ...], ids: list[str]) -> None:
    """Table ``name`` of the partition store: the rows of ``src`` whose key is among its
    source's keys (``_MEMBERSHIP``), in file order.

    Each key comes with its span (the least and greatest of its source's keys, constants):
    it admits no row the list does not, but lets DuckDB skip the Parquet row groups outside
    it by their min/max, so a partition of an export written in conversation order reads
    its own row groups, not every file whole (which made each partition cost a scan of the
    whole export: partitions x export)."""
    params: dict[str, Any] = {"export": export.export_id}
    if name in _NOT_READ:
        con.execute(f"CREATE TABLE {q(name)} AS SELECT {select_list(src)}, $export AS export_id "
                    f"FROM {src.scan_sql()} LIMIT 0", params)
        return
    wheres: list[str] = []
    for i, (column, source) in enumerate(keys):
        if source is None:
            members = "SELECT unnest($ids::VARCHAR[])"
            params["ids"] = ids
            low, high = (ids[0], ids[-1]) if ids else (None, None)
        else:
            table, key = source
            members = f"SELECT {q(key)} FROM {q(table)}"
            low, high = con.execute(f"SELECT min({q(key)}), max({q(key)}) FROM {q(table)}").fetchone()
        params[f"low{i}"], params[f"high{i}"] = low, high
        wheres.append(f"{q(column)} BETWEEN $low{i} AND $high{i} AND {q(column)} IN ({members})")
    if len(wheres) == 1:
        con.execute(f"CREATE TABLE {q(name)} AS SELECT * FROM (SELECT {select_list(src)}, "
                    f"$export AS export_id FROM {src.scan_sql()}) WHERE {wheres[0]}", params)
        return
    # a row reached by several keys: one pruned scan per key, each row once (by its file and
    # row number), in file order as one scan would give them
    located = src.scan_sql(", filename='_member_file', file_row_number=true")
    scan = (f"SELECT {select_list(src)}, $export AS export_id, _member_file, file_row_number "
            f"FROM {located}")
    union = " UNION ALL ".join(f"SELECT * FROM ({scan}) WHERE {w}" for w in wheres)
    params["files"] = [str(f) for f in src.files]
    con.execute(f"CREATE TABLE {q(name)} AS SELECT * EXCLUDE (_member_file, file_row_number) "
                f"FROM ({union}) QUALIFY row_number() OVER (PARTITION BY _member_file, "
                "file_row_number) = 1 ORDER BY list_position($files::VARCHAR[], _member_file), "
                "file_row_number", params)


def _raise_unreadable(files: Sequence[Path], exports: list[_Export], err: BaseException) -> None:
    """Raise the one-line error naming the first of ``files`` that cannot be read whole (a
    damaged page, not only a damaged footer), if any is."""
    names = {f: (e.layout.label, rel) for e in exports for s in e.layout.tables.values()
             for f, rel in zip(s.files, s.rel_files)}
    for path in files:
        try:
            pq.read_table(path)
        except (pa.ArrowException, OSError) as bad:
            reason = str(bad).splitlines()[0] if str(bad) else type(bad).__name__
            label, rel = names.get(path, ("export", path.name))
            raise ContextlensError(f"{label}: file {show_value(rel)} is not a readable Parquet "
                                   f"file ({show_value(reason, 120)})") from None


@dataclass(frozen=True)
class RayJob:
    """What every partition task is given: the exports, the registry and the question."""

    exports: list[_Export]
    registry: PolicyRegistry
    command: str  # "compare" or "verify"
    a: str = ""
    b: str = ""
    filter: "AssemblyFilter | None" = None
    want_rows: bool = False
    top: int = TOP
    assembler: str = "reference"


def run_partition(job: RayJob, export: int, conversation_ids: Sequence[str]) -> dict[str, Any]:
    """One partition on a worker: its store loaded, the per-partition function run. Returns
    the partial result, the per-request rows (Arrow, when wanted) and extras (in_recording
    rows, verdicts, versions)."""
    store = partition_store(job.exports[export], conversation_ids)
    try:
        if job.command == "compare":
            rows: list[pa.Table] = []
            partial, recorded = compare_partition(
                store, job.registry, job.a, job.b, job.filter,
                rows.append if job.want_rows else (lambda _t: None), job.top)
            return {"result": partial, "in_recording": recorded,
                    "rows": pa.concat_tables(rows) if rows else None}
        result = VerifyResult()
        verdicts: list[AssemblyVerdict] = []
        versions: Counter = Counter()
        verify_chunks(store, job.registry, get_assembler(job.assembler), job.filter, result,
                      verdicts.append, versions)
        return {"result": result, "verdicts": verdicts, "versions": versions}
    finally:
        store.close()


def _task(job: RayJob, export: int, conversation_ids: Sequence[str],
          runner: Callable[[RayJob, int, Sequence[str]], dict[str, Any]]) -> dict[str, Any]:
    """One partition task (a Ray remote function): the runner's output as it is (its Arrow
    tables travel through the object store by their buffers, read back without a copy), or
    the bad input it met as one line."""
    try:
        return runner(job, export, conversation_ids)
    except ContextlensError as err:
        # bad input (a damaged file): the same on any retry, and Ray would reduce it to a
        # stack trace in text; the driver raises it as the one line it is
        return {"error": str(err), "exit_code": err.exit_code}


# ----------------------------------------------------------------------------- driver


@dataclass
class ray_session:
    """Ray for one run: connected to ``address`` (``auto``, ``ray://HOST:PORT``), or a local
    instance of ``LOCAL_CPUS`` started for the run, its object store of
    ``object_store_bytes`` (default: ``object_store_size()``); one already started in this
    process (a test's, an app's) is used as it is and left running."""

    address: str | None = None
    object_store_bytes: int | None = None
    started: bool = field(default=False, init=False)

    def __enter__(self) -> Any:
        import logging

        ray = require_ray()
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR,
                                      "configure_logging": True}
            try:
                if self.address is None:
                    # Ray runs its workers at nice 15 by default: on a machine shared with
                    # anything else they get a sliver of the CPU (the local engine runs at
                    # 0). A cluster's nodes take it at start: RAY_worker_niceness=0 ray start
                    ray.init(num_cpus=LOCAL_CPUS, include_dashboard=False,
                             object_store_memory=self.object_store_bytes or object_store_size(),
                             _system_config={"worker_niceness": 0}, **kwargs)
                else:
                    ray.init(address=self.address, **kwargs)
            except ContextlensError:
                raise
            except Exception as err:  # Ray's own: a bad address, no cluster there
                where = self.address or "a local instance"
                raise ContextlensError(f"cannot start Ray on {where}: "
                                       f"{one_line_error(err)}") from None
            self.started = True
        quiet()
        _cluster_messages_to_stderr()
        return ray

    def __exit__(self, *_: Any) -> None:
        if self.started:
            require_ray().shutdown()


def object_store_size(result_bytes: int = 0) -> int:
    """The local object store: what the run's results need (``result_bytes``; twice, for
    the ones held back until the partitions before them are in), at least
    ``OBJECT_STORE_BYTES``, at most Ray's own default share of this machine's memory (30%).
    The store holds only the partitions' results (the job goes in once, and every task
    reads its rows from the Parquet files itself); it is mapped, not filled, up front."""
    try:
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not on every platform
        machine = 4 * OBJECT_STORE_BYTES
    return int(min(max(2 * result_bytes, OBJECT_STORE_BYTES), max(0.3 * machine,
                                                                  OBJECT_STORE_BYTES)))


def _result_bytes(exports: list[_Export], want_rows: bool) -> int:
    """About what a run's results take in the object store: with ``--out`` the per-request
    rows of every request (the rest is small: counters, a few examples)."""
    requests = sum(sum(e.layout.tables["context_assemblies"].file_rows) for e in exports)
    return requests * (ROW_BYTES if want_rows else 0)


def _cluster_messages_to_stderr() -> None:
    """Ray's driver prints the cluster's warnings (its worker pool growing, a worker killed
    for memory) on stdout, where they would corrupt ``--json``: they go to stderr instead."""
    from ray._private import worker

    printer = getattr(worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "to_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        printer(dict(data, is_err=True), ignore_prefix)

    to_stderr.to_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def quiet() -> None:
    """Ray's own error logs off: a failed run is reported as one line by the driver, they
    would repeat it as stack traces."""
    import logging

    logging.getLogger("ray").setLevel(logging.CRITICAL)


def partition_requests(exports: list[_Export]) -> int:
    """Requests per partition, from the data: ``PARTITION_BYTES`` of the exports' tables
    (uncompressed, as their Parquet footers say) per partition, at most
    ``MAX_PARTITION_REQUESTS``. A worker's memory grows with its partition's rows, so
    exports of larger requests (long histories, real content) get smaller partitions."""
    requests = sum(sum(e.layout.tables["context_assemblies"].file_rows) for e in exports)
    if not requests:
        return MAX_PARTITION_REQUESTS
    data = sum(_uncompressed_bytes(src) for e in exports for src in e.layout.tables.values())
    per_request = max(1, data // requests)
    return max(1, min(MAX_PARTITION_REQUESTS, PARTITION_BYTES // per_request))


def _uncompressed_bytes(src: Any) -> int:
    total = 0
    for path in src.files:
        try:
            meta = pq.read_metadata(path)
        except (pa.ArrowException, OSError):  # named by the partition that reads it
            continue
        total += sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
    return total


def default_partitions(cpus: int, total_requests: int, per_partition: int) -> int:
    """As few partitions as keep every CPU busy (one each) and each partition within
    ``per_partition`` requests, rounded up to a whole number of waves over the CPUs, so the
    last wave does not leave CPUs idle. Fewer, larger partitions read less: each reads the
    row groups its span touches, the first and last of them shared with its neighbours."""
    cpus = max(1, cpus)
    needed = max(cpus, math.ceil(total_requests / max(1, per_partition)))
    return cpus * math.ceil(needed / cpus)


def _plan(ray: Any, exports: list[_Export], partitions: int | None,
          workers: int | None) -> list[Partition]:
    work = _work_list(exports)
    if not partitions:
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        partitions = default_partitions(min(cpus, workers or cpus), sum(n for _, _, n in work),
                                        partition_requests(exports))
    return plan_partitions(work, partitions)


def _run(ray: Any, job: RayJob, partitions: list[Partition], progress: Progress | None,
         workers: int | None, runner: Callable[..., dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every partition's output, in partition order, as the tasks finish: one Ray task per
    partition (retried alone if its worker dies), at most ``workers`` at once (default: two
    per CPU of the cluster), the job put in the object store once for all of them."""
    report = progress or (lambda _d, _t: None)
    total = len(partitions)
    report(0, total)
    if not partitions:
        return
    task = ray.remote(_task).options(num_cpus=1, max_retries=MAX_RETRIES)
    job_ref = ray.put(job)
    # tasks in flight: every CPU busy and one more each queued, not every partition at once
    # (waiting on 100,000 of them would cost the driver more than the merge)
    limit = workers or 2 * max(1, int(ray.cluster_resources().get("CPU", 1)))
    pending: dict[Any, int] = {}  # running task -> its partition
    finished: dict[int, dict[str, Any]] = {}  # outputs waiting for the partitions before them
    submitted = done = 0
    try:
        while done < total:
            while submitted < total and len(pending) < limit:
                p = partitions[submitted]
                pending[task.remote(job_ref, p.export, list(p.conversation_ids), runner)] = submitted
                submitted += 1
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                finished[pending.pop(ref)] = ray.get(ref)
            while done in finished:
                output = finished.pop(done)
                if "error" in output:
                    failed = ContextlensError(output["error"])
                    failed.exit_code = output["exit_code"]
                    raise failed
                yield output
                done += 1
                report(done, total)
    except ContextlensError:
        raise
    except Exception as err:
        raise _task_error(err) from None
    finally:
        for ref in pending:  # a failed or abandoned run leaves no task running
            ray.cancel(ref)


def _task_error(err: BaseException) -> ContextlensError:
    """A failure of Ray itself (a task out of retries, a lost cluster) as one line."""
    lines = [line.strip() for line in _ANSI.sub("", str(err)).splitlines() if line.strip()]
    return ContextlensError(f"the Ray run failed: {lines[-1] if lines else type(err).__name__}")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _check_versions(registry: PolicyRegistry, a: str, b: str) -> None:
    registry.get(b)
    if a != RECORDED:
        registry.get(a)


def compare_on_ray(exports: Sequence[str | Path], registry: PolicyRegistry, a: str, b: str,
                   flt: "AssemblyFilter | str | None" = None, *,
                   address: str | None = None, progress: Progress | None = None,
                   out: Callable[[pa.Table], None] | None = None, top: int = TOP,
                   partitions: int | None = None, workers: int | None = None,
                   runner: Callable[..., dict[str, Any]] = run_partition) -> Comparison:
    """``replay.compare.compare`` over the Parquet ``exports`` on Ray (see the module
    docstring): the same ``Comparison``. ``progress(done, total)`` counts partitions;
    ``out`` takes the per-request rows in the local engine's order. ``partitions`` (default:
    ``default_partitions``, from the cluster's CPUs and the data) and ``workers`` (tasks at
    once; default all CPUs) shape the run; ``runner`` is the partition function (a test's
    wraps it to kill its worker)."""
    from ingest.filters import parse_filter

    _check_versions(registry, a, b)
    parsed = parse_filter(flt) if isinstance(flt, str) or flt is None else flt
    opened = _open_exports(exports)
    store_bytes = object_store_size(_result_bytes(opened, out is not None))
    with ray_session(address, store_bytes) as ray:
        plan = _plan(ray, opened, partitions, workers)
        job = RayJob(opened, registry, "compare", a, b, parsed, out is not None, top)
        result = Comparison(a, b, parsed.text)
        recorded: list[pa.Table] = []
        for output in _run(ray, job, plan, progress, workers, runner):
            result.merge(output["result"], top)
            if output["in_recording"] is not None:
                recorded.append(output["in_recording"])
            if out is not None and output["rows"] is not None:
                out(output["rows"])
    if a == RECORDED:
        tally_in_recording(result, pa.concat_tables(recorded) if recorded else _NO_FINDINGS)
    return result


_NO_FINDINGS = pa.table({name: pa.array([], pa.string())
                         for name in ("invariant", "assembly_id", "record_kind", "record_id")})


def verify_on_ray(exports: Sequence[str | Path], registry: PolicyRegistry,
                  flt: "AssemblyFilter | str | None" = None, *,
                  address: str | None = None, progress: Progress | None = None,
                  on_verdict: Callable[[AssemblyVerdict], None] | None = None,
                  assembler: str = "reference", partitions: int | None = None,
                  workers: int | None = None,
                  runner: Callable[..., dict[str, Any]] = run_partition) -> VerifyResult:
    """``replay.verify.verify`` over the Parquet ``exports`` on Ray: the same counts and
    verdicts (handed to ``on_verdict`` in the local engine's order, or kept and sorted by
    assembly id); ``progress`` counts partitions."""
    from ingest.filters import parse_filter

    get_assembler(assembler)
    parsed = parse_filter(flt) if isinstance(flt, str) else flt
    opened = _open_exports(exports)
    result = VerifyResult()
    emit = on_verdict if on_verdict is not None else result.results.append
    versions: Counter = Counter()
    with ray_session(address) as ray:
        plan = _plan(ray, opened, partitions, workers)
        job = RayJob(opened, registry, "verify", filter=parsed, assembler=assembler)
        for output in _run(ray, job, plan, progress, workers, runner):
            merge_verify(result, output["result"])
            versions.update(output["versions"])
            for verdict in output["verdicts"]:
                emit(verdict)
    finish_verify(result, registry, versions)
    return result

