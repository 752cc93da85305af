"""Compare and verify on a Ray cluster, straight from Parquet exports (``--engine ray``).

(The only module that imports Ray, hence everything Ray-facing is here, over 500 lines.)

The local engine walks one DuckDB store chunk by chunk. Here the same walk is cut into
**partitions**, each a run of whole conversations of one export, and every partition runs
the local engine's own per-partition function (``replay.compare.compare_partition``,
``replay.verify.verify_chunks``) on a Ray worker:

1. The driver reads each export's manifest and Parquet footers (``read_layout``: a file that
   is not Parquet fails here, named) and decides each column's cast once
   (``resolve_types``, as ingest does).
2. Ray Data reads the work list, the ``conversation_id`` column of every
   ``context_assemblies`` file, and counts requests per conversation (``map_batches``); the
   driver orders the conversations as the local walk does, (export id, conversation id), and
   cuts them into contiguous partitions of about equal request counts.
3. ``map_batches`` runs one task per partition: it loads the partition's rows from the
   export's Parquet files into an in-memory DuckDB with the store's tables (a conversation's
   graph rows, its requests and their recorded records: the membership of
   ``Store.conversation_graphs``), wraps it as a ``Store`` and runs the per-partition
   function on it. So a worker runs exactly the SQL and the replay the local engine runs.
4. The driver takes the partitions' results in partition order (Ray Data's
   ``preserve_order``) and merges them (``Comparison.merge``, ``merge_verify``): the merge
   is exact, so the JSON aggregates equal the local engine's. With ``out`` the per-request
   rows are written, in the same order, to one Parquet file.

A task whose worker dies is retried by Ray (``MAX_RETRIES``); its result is the same, since a
partition is a pure function of its files. A file that cannot be read fails the run with one
``ContextlensError`` naming it.

Ray is an optional extra (``pip install 'contextlens[ray]'``), imported only here and only
when a distributed run starts.
"""

from __future__ import annotations

import math
import pickle
import re
import warnings
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
from .policy import PolicyRegistry
from .verify import AssemblyVerdict, VerifyResult, finish_verify, merge_verify, verify_chunks

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter
    from ingest.store import Store

__all__ = ["INSTALL", "MAX_RETRIES", "Partition", "RayJob", "compare_on_ray", "find_exports",
           "partition_store", "plan_partitions", "ray_session", "verify_on_ray"]

INSTALL = "pip install 'contextlens[ray]'"
MAX_RETRIES = 3  # a partition whose worker dies is run again this many times at most
LOCAL_CPUS = 2  # the local Ray instance started without --address
OBJECT_STORE_BYTES = 256 * 1024 * 1024  # partition results are small: a small store will do
PARTITIONS_PER_CPU = 2  # default partitions: enough to keep every worker busy to the end
MAX_PARTITION_REQUESTS = 10_000  # ... and none so large that a worker needs GBs (docs/scaling.md)

Progress = Callable[[int, int], None]

# Which rows of each table a partition loads, in load order (a table's condition may name the
# tables loaded before it): the membership of ``Store.conversation_graphs``, plus the
# partition's requests and their recorded records and decisions.
_BY_CONVERSATION = "conversation_id IN (SELECT unnest($ids::VARCHAR[]))"
_BY_RUN = "model_run_id IN (SELECT model_run_id FROM model_runs)"
_BY_ASSEMBLY = "assembly_id IN (SELECT assembly_id FROM context_assemblies)"
_MEMBERSHIP: tuple[tuple[str, str], ...] = (
    ("conversations", _BY_CONVERSATION),
    ("branches", _BY_CONVERSATION),
    ("participants", _BY_CONVERSATION),
    ("messages", _BY_CONVERSATION),
    ("model_runs", _BY_CONVERSATION),
    ("tool_memories", _BY_CONVERSATION),
    ("context_assemblies", _BY_CONVERSATION),
    ("tool_calls", _BY_RUN),
    ("skill_states", _BY_RUN),
    ("checkpoints", _BY_RUN),
    ("tool_artifacts", "branch_id IN (SELECT branch_id FROM branches) "
                       "OR owner_model_run_id IN (SELECT model_run_id FROM model_runs) "
                       "OR tool_call_id IN (SELECT tool_call_id FROM tool_calls)"),
    ("assembly_records", _BY_ASSEMBLY),
    ("policy_decisions", _BY_ASSEMBLY),
)


def require_ray() -> Any:
    """The ``ray`` module, or the one-line error that says how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
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


def _count_conversations(batch: pa.Table) -> pa.Table:
    # one thread: Acero's threaded group-by can fail with "thread index N is out of range"
    # when the thread pool is resized under it, as in a Ray worker (apache/arrow#46227)
    return batch.group_by(["path", "conversation_id"], use_threads=False).aggregate(
        [([], "count_all")])


def _work_list(ray: Any, exports: list[_Export]) -> list[tuple[int, str, int]]:
    """(export index, conversation id, requests) of every conversation with a request, in
    walk order, read by Ray Data from the context_assemblies files."""
    owner: dict[str, int] = {}
    files: list[str] = []
    for i, e in enumerate(exports):
        for f in e.layout.tables["context_assemblies"].files:
            owner[str(f.resolve())] = i
            files.append(str(f.resolve()))
    try:
        import pyarrow.fs

        # the exports are folders on a filesystem every node mounts at the same path (the
        # partitions read them there too); naming it spares Ray Data guessing it per path
        ds = ray.data.read_parquet(files, include_paths=True,
                                   filesystem=pyarrow.fs.LocalFileSystem()).select_columns(
            ["path", "conversation_id"])
        counted = ds.map_batches(_count_conversations, batch_format="pyarrow", batch_size=None)
        tables = [t for t in (pa.Table.from_batches(b.to_batches()) if isinstance(b, pa.Table)
                              else b for b in ray.get(counted.to_arrow_refs())) if t.num_rows]
    except Exception as err:  # Ray wraps a reader's error in its own types
        _raise_unreadable([Path(f) for f in files], exports, err)
        raise
    if not tables:
        return []
    counts = pa.concat_tables([t.select(["path", "conversation_id", "count_all"]) for t in tables])
    path_export = pa.array([owner.get(_local_path(p), -1) for p in counts["path"].to_pylist()],
                           pa.int64())
    ids = pa.array([exports[i].export_id if i >= 0 else "" for i in path_export.to_pylist()])
    grouped = pa.table({"export": path_export, "export_id": ids,
                        "conversation_id": counts["conversation_id"].cast(pa.string()),
                        "n": counts["count_all"]}).group_by(
        ["export", "export_id", "conversation_id"], use_threads=False).aggregate([("n", "sum")])
    # byte order, as DuckDB orders VARCHAR in the local walk
    ordered = grouped.sort_by([("export_id", "ascending"), ("conversation_id", "ascending")])
    return list(zip(ordered["export"].to_pylist(), ordered["conversation_id"].to_pylist(),
                    ordered["n_sum"].to_pylist()))


def _local_path(path: str) -> str:
    """A path as Ray Data reports it (the local filesystem drops the leading slash)."""
    return str(Path(path if path.startswith("/") else "/" + path).resolve())


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
    ids = list(conversation_ids)
    for name, condition in _MEMBERSHIP:
        src = export.layout.tables[name]
        sql = (f"CREATE TABLE {q(name)} AS SELECT * FROM (SELECT {select_list(src)}, "
               f"$export AS export_id FROM {src.scan_sql()}) WHERE {condition}")
        params: dict[str, Any] = {"export": export.export_id}
        if "$ids" in condition:
            params["ids"] = ids
        try:
            con.execute(sql, params)
        except duckdb.Error as err:
            con.close()
            _raise_unreadable(src.files, [export], err)
            raise ContextlensError(f"{export.layout.label}: table {name}: cannot be read "
                                   f"({one_line_error(err)})") from None
    con.execute(_SUMMARY_DDL)
    con.execute(_SUMMARY_INSERT, [export.export_id, export.export_id])
    return Store(con, export.layout.root, True)


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
    the partial result (pickled), the per-request rows (Arrow IPC, when wanted) and extras
    (in_recording rows, verdicts, versions)."""
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


def _task(batch: dict[str, Any], job: RayJob,
          runner: Callable[[RayJob, int, Sequence[str]], dict[str, Any]]) -> dict[str, Any]:
    """The ``map_batches`` function: each partition of the batch run, its output pickled
    into one row (index, payload)."""
    indices, payloads = [], []
    for index, export, convs in zip(batch["partition"], batch["export"], batch["conversations"]):
        indices.append(int(index))
        try:
            output = runner(job, int(export), [str(c) for c in convs])
        except ContextlensError as err:
            # bad input (a damaged file): the same on any retry, and Ray would reduce it to
            # a stack trace in text; the driver raises it as the one line it is
            output = {"error": str(err), "exit_code": err.exit_code}
        payloads.append(pickle.dumps(output, protocol=pickle.HIGHEST_PROTOCOL))
    import numpy as np

    return {"partition": np.array(indices, dtype=np.int64),
            "payload": np.array(payloads, dtype=object)}


# ----------------------------------------------------------------------------- driver


@dataclass
class ray_session:
    """Ray for one run: connected to ``address`` (``auto``, ``ray://HOST:PORT``), or a local
    instance of ``LOCAL_CPUS`` started for the run; one already started in this process
    (a test's, an app's) is used as it is and left running."""

    address: str | None = None
    started: bool = field(default=False, init=False)

    def __enter__(self) -> Any:
        import logging

        ray = require_ray()
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR,
                                      "configure_logging": True}
            try:
                if self.address is None:
                    ray.init(num_cpus=LOCAL_CPUS, include_dashboard=False,
                             object_store_memory=OBJECT_STORE_BYTES, **kwargs)
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
    """Ray Data's progress bars and per-run log lines off: the CLI prints its own progress."""
    import logging

    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    ctx.execution_options.preserve_order = True
    # a failed run is reported as one line by the driver: Ray's own error logs would
    # repeat it as stack traces
    for name in ("ray.data", "ray"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _default_partitions(ray: Any, total_requests: int) -> int:
    cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
    return max(cpus * PARTITIONS_PER_CPU, math.ceil(total_requests / MAX_PARTITION_REQUESTS))


def _run(ray: Any, job: RayJob, partitions: list[Partition], progress: Progress | None,
         workers: int | None, runner: Callable[..., dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every partition's output, in partition order, as the tasks finish."""
    report = progress or (lambda _d, _t: None)
    total = len(partitions)
    report(0, total)
    if not partitions:
        return
    items = pa.table({
        "partition": pa.array([p.index for p in partitions], pa.int64()),
        "export": pa.array([p.export for p in partitions], pa.int64()),
        "conversations": pa.array([list(p.conversation_ids) for p in partitions],
                                  pa.list_(pa.string())),
    })
    # one block per partition: one task each, retried alone
    ds = ray.data.from_arrow([items.slice(i, 1) for i in range(total)])
    with warnings.catch_warnings():
        # Ray Data retries a task whose worker died without end unless told otherwise, and
        # this is the one way to tell it (deprecated in Ray 2.60, hence the extra's bound)
        warnings.simplefilter("ignore", DeprecationWarning)
        mapped = ds.map_batches(
            _task, batch_size=1, batch_format="numpy", zero_copy_batch=True,
            fn_kwargs={"job": job, "runner": runner}, num_cpus=1, concurrency=workers,
            max_retries=MAX_RETRIES)
    done = 0
    try:
        for batch in mapped.iter_batches(batch_size=None, batch_format="numpy"):
            for payload in batch["payload"]:
                output = pickle.loads(payload)
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
    ``PARTITIONS_PER_CPU`` per CPU of the cluster, more for a large export) and ``workers``
    (tasks at once; default all CPUs) shape the run; ``runner`` is the partition function
    (a test's wraps it to kill its worker)."""
    from ingest.filters import parse_filter

    _check_versions(registry, a, b)
    parsed = parse_filter(flt) if isinstance(flt, str) or flt is None else flt
    opened = _open_exports(exports)
    with ray_session(address) as ray:
        work = _work_list(ray, opened)
        plan = plan_partitions(work, partitions or _default_partitions(
            ray, sum(n for _, _, n in work)))
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
        work = _work_list(ray, opened)
        plan = plan_partitions(work, partitions or _default_partitions(
            ray, sum(n for _, _, n in work)))
        job = RayJob(opened, registry, "verify", filter=parsed, assembler=assembler)
        for output in _run(ray, job, plan, progress, workers, runner):
            merge_verify(result, output["result"])
            versions.update(output["versions"])
            for verdict in output["verdicts"]:
                emit(verdict)
    finish_verify(result, registry, versions)
    return result

