"""The replay engine: many assemblies replayed at once, Arrow in and Arrow out.

Verify, compare and bisect replay whole stores, so they do not call the assembler one
request at a time through Python rows: they walk the store in **chunks** (the requests of a
bounded number of conversations of one export, streamed from the store in
(export, conversation, time, id) order, so memory does not grow with the store) and ask
``replay_chunk`` for every request of a chunk at once.

``replay_chunk`` returns a ``Replayed``: two Arrow tables, one row per (assembly, record)
with the columns of ``REPLAY_COLUMNS`` ordered by (assembly_id, record_kind, record_id), and
one row per replayed assembly (``ASSEMBLY_COLUMNS``).

The reference assembler (``replay.assembler``) is the oracle: whatever path computes a
chunk must give exactly its decision, reason, rendering, position, tokens and selection
hash for every record (tests/unit/test_engine_differential.py). For the built-in reference
assembler ``replay_chunk`` takes the columnar path (``replay.columnar``: every request of
the chunk at once, in DuckDB and numpy). Any other assembler (a plugin, or a variant of the reference) takes
the oracle path, ``replay_chunk_oracle``: the assembler itself, one assembly at a time.

The columnar path reads a chunk's graph in one query per table and runs a few small SQL
queries per chunk, so a chunk should hold thousands of assemblies: a chunk closes at
``CONVERSATIONS_PER_CHUNK`` conversations or, at the next conversation boundary, once it
holds ``REQUESTS_PER_CHUNK`` requests (the first chunks fewer: ``FIRST_CHUNK_REQUESTS``,
doubling, so that progress, reported per chunk, moves from the start). Its memory is a few
dozen numpy columns of the chunk's (assembly x candidate) rows, so it follows the chunk,
never the store. Measured on
the 200k scale store (benchmarks/bench_compare.py): 256 conversations a chunk took 107 s
and peaked at 651 MB, 2,048 took 41 s at 919 MB, 4,096 took 37 s at 1.27 GB.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

import pyarrow as pa


from .assembler import AssemblerPlugin, ReferenceAssembler, get_assembler
from .columnar import (
    ColumnarFacts, columnar_facts, graphs_from_snapshots, replay_columnar, selection_hashes,
)
from .policy import Policy, PolicyRegistry, RuntimePolicy
from .runtimes import assemble_runtime
from .snapshot import Snapshot, load_snapshots, request_from_row, snapshots_from_graphs

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter
    from ingest.store import Store

__all__ = ["ASSEMBLY_COLUMNS", "REPLAY_COLUMNS", "Chunk", "Replayed", "chunk_facts", "chunks",
           "cpu_load", "free_cpus", "has_columnar_form", "in_processes", "replay_chunk",
           "replay_chunk_oracle", "worker_count"]

CONVERSATIONS_PER_CHUNK = 2048
REQUESTS_PER_CHUNK = 8192  # a chunk of long conversations stops here (at their boundary)
FIRST_CHUNK_REQUESTS = 512  # the first chunk's bound, doubled chunk by chunk (``_ramp``)

REPLAY_SCHEMA = pa.schema([
    ("assembly_id", pa.string()), ("record_kind", pa.string()), ("record_id", pa.string()),
    ("decision", pa.string()), ("rendering", pa.string()), ("position", pa.int64()),
    ("policy_family", pa.string()), ("reason_code", pa.string()), ("tokens", pa.int64()),
])
REPLAY_COLUMNS = tuple(REPLAY_SCHEMA.names)

ASSEMBLY_SCHEMA = pa.schema([
    ("assembly_id", pa.string()), ("policy_version", pa.string()),
    ("selection_hash", pa.string()), ("assembled_tokens", pa.int64()),
    ("baseline_tokens", pa.int64()), ("included_count", pa.int64()),
    ("omitted_count", pa.int64()),
])
ASSEMBLY_COLUMNS = tuple(ASSEMBLY_SCHEMA.names)


@dataclass(frozen=True)
class Chunk:
    """The requests (context_assemblies rows with export_id, as Arrow, in (conversation,
    time, id) order) of a few conversations of one export."""

    export_id: str
    conversation_ids: tuple[str, ...]
    requests: pa.Table

    def snapshots(self, store: "Store") -> dict[str, Snapshot]:
        """Every graph row of the chunk's conversations (one store query per graph table)."""
        return load_snapshots(store, list(self.conversation_ids), self.export_id)


@dataclass(frozen=True)
class Replayed:
    """A chunk replayed: ``records`` (REPLAY_COLUMNS, by assembly, kind, id) and
    ``assemblies`` (ASSEMBLY_COLUMNS, one row per replayed assembly; an assembly with no
    policy to replay it has no row and no records)."""

    records: pa.Table
    assemblies: pa.Table


def chunks(store: "Store", flt: "AssemblyFilter | str | None" = None,
           conversations_per_chunk: int = CONVERSATIONS_PER_CHUNK,
           requests_per_chunk: int = REQUESTS_PER_CHUNK) -> Iterator[Chunk]:
    """The requests matching ``flt`` in chunks of whole conversations of one export, at
    most ``conversations_per_chunk`` of them and, unless one conversation is longer, about
    ``requests_per_chunk`` requests; read from the store as they are needed (the plan, one
    row per conversation, streams on a cursor of its own, so the store answers other
    queries, such as a chunk's requests and graph, meanwhile)."""
    with store.cursor() as reader:
        yield from _chunks(reader, store, flt, conversations_per_chunk, requests_per_chunk)


def _chunks(planner: "Store", store: "Store", flt: "AssemblyFilter | str | None",
            conversations_per_chunk: int, requests_per_chunk: int) -> Iterator[Chunk]:
    """The walk's plan is one small row per conversation (its requests matching ``flt``),
    streamed from ``planner``; each chunk's requests are read from ``store`` when it is
    due, so only one chunk's are held (and sorted) at a time."""
    export: str | None = None
    conversations: list[str] = []
    held = 0  # requests in ``conversations``
    bounds = _ramp(requests_per_chunk)
    bound = next(bounds)
    for batch in planner.iter_conversation_sizes(flt):
        for e, c, n in zip(*(batch.column(name).to_pylist()
                             for name in ("export_id", "conversation_id", "requests"))):
            if conversations and (e != export or len(conversations) >= conversations_per_chunk
                                  or held >= bound):
                yield _chunk(store, export, conversations, flt)
                conversations, held = [], 0
                bound = next(bounds)
            export = e
            conversations.append(c)
            held += n
    if conversations:
        yield _chunk(store, export, conversations, flt)


def _ramp(requests_per_chunk: int) -> Iterator[int]:
    """The request bound of each chunk in turn: ``FIRST_CHUNK_REQUESTS``, doubling up to
    ``requests_per_chunk``. A run's progress (reported per chunk) then moves early and
    often while the rate is measured, and every worker has a chunk soon; a big store is
    still walked in chunks of the efficient size (a 10,000-request compare in chunks of
    8,192 reported 0/10000 for 11 s, then 10000/10000)."""
    bound = min(FIRST_CHUNK_REQUESTS, requests_per_chunk)
    while True:
        yield bound
        bound = min(2 * bound, requests_per_chunk)


def _chunk(store: "Store", export: str | None, conversations: list[str],
           flt: "AssemblyFilter | str | None") -> Chunk:
    requests = store.conversation_requests(str(export), conversations, flt)
    return Chunk(str(export), tuple(conversations), requests)


def available_cpus() -> int:
    """The CPUs this process may run on (a container's limit, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def cpu_load(interval: float = 0.25) -> float:
    """How many of this process's CPUs other work keeps busy: the larger of the machine's
    load average over the last minute, as a share of this process's CPUs (the machine's
    figure times ``available_cpus() / os.cpu_count()``: a container limited to 2 of 64
    CPUs sees the whole host's load; spread evenly, 2/64 of it falls on its CPUs), and the
    busy time of this process's CPUs over the next ``interval`` seconds (``_busy_cpus``:
    a program started a few seconds ago has not moved the load average yet)."""
    try:
        load = os.getloadavg()[0] * available_cpus() / max(os.cpu_count() or 1, 1)
    except (AttributeError, OSError):  # not on every platform
        load = 0.0
    return max(load, _busy_cpus(interval))


def _busy_cpus(interval: float) -> float:
    """The CPUs of this process's set busy over ``interval`` seconds, from their busy and
    idle times in /proc/stat (Linux; 0.0 elsewhere): 1.0 when another program keeps one
    core busy, whatever its age."""
    try:
        cpus = os.sched_getaffinity(0)
        first = _cpu_times(cpus)
        time.sleep(interval)
        second = _cpu_times(cpus)
    except (AttributeError, OSError, ValueError):
        return 0.0
    busy = 0.0
    for cpu in first.keys() & second.keys():
        (idle0, total0), (idle1, total1) = first[cpu], second[cpu]
        if total1 > total0:
            busy += 1.0 - (idle1 - idle0) / (total1 - total0)
    return busy


def _cpu_times(cpus: set[int]) -> dict[int, tuple[int, int]]:
    """(idle, total) clock ticks of each CPU of ``cpus`` so far (/proc/stat's cpuN lines:
    user nice system idle iowait irq softirq steal; idle counts idle and iowait)."""
    out: dict[int, tuple[int, int]] = {}
    with open("/proc/stat", encoding="ascii") as stat:
        for line in stat:
            name, _, rest = line.partition(" ")
            if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
                continue
            ticks = [int(v) for v in rest.split()[:8]]
            out[int(name[3:])] = (ticks[3] + (ticks[4] if len(ticks) > 4 else 0), sum(ticks))
    return out


def free_cpus(cpus: int | None = None, load: float | None = None) -> int:
    """How many of ``cpus`` (default ``available_cpus()``) are free: ``cpus`` less the
    ``load`` on them (default ``cpu_load()``), rounded half up, at least 1. On 2 CPUs
    under a load of 1 (another program keeps one core busy) one is free: a second worker
    would only share a core with the first (issue 28 measured two workers 1.3x slower
    than one then; ``benchmarks/bench_compare.py --loaded`` compares the two); under a
    load of 0.5 or less both are."""
    cpus = available_cpus() if cpus is None else cpus
    load = cpu_load() if load is None else load
    return max(1, min(cpus, int(cpus - max(load, 0.0) + 0.5)))


def worker_count(workers: int | None, requests: int, cpus: int | None = None,
                 load: float | None = None) -> int:
    """How many processes ``in_processes`` should use for ``requests``: ``workers``, or when
    None one per free CPU (``free_cpus(cpus, load)``: the CPUs this process may use, less
    the machine's load on them), so the default is never a second worker sharing a busy
    core; but 1 for at most one chunk's worth, where starting workers would cost more
    than they save."""
    if requests <= REQUESTS_PER_CHUNK:
        return 1
    return max(1, workers if workers is not None else free_cpus(cpus, load))


T = TypeVar("T")  # what a chunk's task returns to in_processes

# chunks a worker process reads before it reopens the store (see _worker_task)
CHUNKS_PER_CONNECTION = 2

# the store each worker process of ``in_processes`` opened (read-only), and its task
_WORKER: dict[str, Any] = {}


def _worker_start(path: str, task: Callable[..., Any], start: Callable[..., None] | None,
                  start_args: tuple[Any, ...], parent: int | None = None) -> None:
    # Ctrl+C reaches every process of the terminal's group: the caller stops the workers
    # (``_stop``), so a worker has nothing to say about it (it started with SIGINT held:
    # ``_sigint_held``; ignored from here on, a pending one is dropped)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        _die_with(parent)
    from ingest.store import Store

    # results and errors come back through the pool; anything a worker would print (a
    # library's warning) must not land in the caller's terminal, which the app draws on
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    _WORKER.update(store=Store.open(path), path=path, task=task)
    if start is not None:
        start(*start_args)


def _die_with(parent: int) -> None:
    """This worker killed when ``parent`` (the process that started it) ends, however it
    ends: a parent killed by SIGKILL, or by SIGTERM before its own handler ran, cannot stop
    its workers, which went on holding the store open (98 s after a SIGTERM, in one
    report). Linux: the parent-death signal (``prctl(PR_SET_PDEATHSIG)``); it is sent when
    the thread that started the worker ends, and every worker is started by the thread
    that walks the store, which outlives the pool (``in_processes``). A parent that ended
    before the call is caught by the check that follows it."""
    if not sys.platform.startswith("linux"):
        return  # elsewhere the parent's own clean-up (``_stop``) is all there is
    import ctypes

    pr_set_pdeathsig = 1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return
    if os.getppid() != parent:  # the parent is gone already: this worker is an orphan
        os._exit(1)


def _worker_task(chunk: Chunk) -> Any:
    try:
        return _WORKER["task"](_WORKER["store"], chunk)
    finally:
        # A worker must not grow with the store. Arrow's allocator (mimalloc) keeps freed
        # memory for reuse: handed back after each chunk (a worker's peak at 1,000,000
        # requests: 697 MB kept, 650 MB handed back). DuckDB keeps every table block a
        # process reads cached up to its memory limit (80% of the machine): 1,064 MB at
        # 1,000,000 requests against 576 MB at 100,000 when never dropped. Reopened, the
        # store starts with an empty cache: every CHUNKS_PER_CONNECTION chunks (the next
        # chunk's rows often share blocks with the last one's; reopening after every chunk
        # made a compare 5-7% slower). A lower memory limit would bound the cache too but
        # fail a chunk whose rows (long transcripts) outgrow it.
        from ingest.store import Store

        pa.default_memory_pool().release_unused()
        _WORKER["chunks"] = _WORKER.get("chunks", 0) + 1
        if _WORKER["chunks"] % CHUNKS_PER_CONNECTION == 0:
            _WORKER["store"].close()
            _WORKER["store"] = Store.open(_WORKER["path"])


def in_processes(store: "Store", walk: Callable[[Any], Iterator[Chunk]],
                 task: Callable[["Store", Chunk], T], workers: int,
                 cancelled: Callable[[], bool] | None = None,
                 start: Callable[..., None] | None = None,
                 start_args: tuple[Any, ...] = ()) -> Iterator[T]:
    """``task(store, chunk)`` for every chunk of ``walk(cursor)``, run by ``workers``
    processes, each with its own read-only connection to ``store`` (and ``start(*start_args)``
    run once in each): the results in walk order, so a caller merging them in order gets
    exactly what one process gets. This process only walks the store; at most
    ``2 * workers`` chunks are in flight, so memory stays that of a few chunks. ``task`` and
    ``start`` are module-level functions (they are sent to the workers by name). When
    ``cancelled()`` turns true, or on any failure, the workers are stopped at once."""
    context = multiprocessing.get_context("spawn")  # no fork of DuckDB's threads
    with _sigint_held():
        _start_resource_tracker()
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_start,
                               initargs=(str(store.path), task, start, start_args,
                                         os.getpid()))
    pending: deque[Any] = deque()
    walker = store.cursor()
    stop = cancelled if cancelled is not None else (lambda: False)

    def ready() -> bool:
        """Whether the oldest chunk's result is in; False once cancelled (asked every
        0.1 s while waiting, so a cancel stops the workers at once, not after a chunk)."""
        while True:
            if stop():
                return False
            try:
                pending[0].result(timeout=0.1)
                return True
            except FuturesTimeout:
                continue

    try:
        for chunk in walk(walker):
            if stop():
                break
            with _sigint_held():  # a submit may start a worker process
                pending.append(pool.submit(_worker_task, chunk))
            while len(pending) >= 2 * workers or (pending and pending[0].done()):
                if not ready():
                    return
                yield pending.popleft().result()
        while pending and ready():
            yield pending.popleft().result()
    except BaseException:
        _stop(pool)
        raise
    finally:
        walker.close()
        if pending:  # cancelled, or the caller stopped taking results
            _stop(pool)
        else:
            pool.shutdown()


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT held back from this thread for the block, and so from every process started in
    it (a process inherits its parent's signal mask, through the exec): a worker starting
    up (importing for a second or more before ``_worker_start`` runs) would otherwise print
    a KeyboardInterrupt traceback on Ctrl+C, which the terminal sends to every process of
    its group. A Ctrl+C meanwhile reaches this process when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not on every platform
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker, which the first worker would start: it
    hands ``sys.stderr``'s descriptor to its process, and in the app stderr is Textual's
    capture, whose descriptor is -1 (the start then fails with "bad value(s) in
    fds_to_keep"). Meanwhile stderr is the null device."""
    from multiprocessing import resource_tracker

    try:
        usable = sys.stderr.fileno() >= 0
    except (AttributeError, OSError, ValueError):
        usable = True  # no descriptor at all: the tracker leaves it out by itself
    if usable:
        resource_tracker.ensure_running()
        return
    saved = sys.stderr
    with open(os.devnull, "w") as null:
        sys.stderr = null
        try:
            resource_tracker.ensure_running()
        finally:
            sys.stderr = saved


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool``'s workers now, not after their queued chunks: the processes are taken
    before ``shutdown``, which forgets them (they went on with their chunk, and this
    process waited for them on its way out: 2-6 s after a Ctrl+C)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


def replay_chunk(store: "Store", chunk: Chunk, registry: PolicyRegistry,
                 version: str | None = None,
                 assembler: str | AssemblerPlugin = "reference",
                 snapshots: dict[str, Snapshot] | None = None,
                 graphs: dict[str, pa.Table] | None = None,
                 facts: ColumnarFacts | None = None,
                 hashes: bool = True) -> Replayed:
    """Every request of ``chunk`` replayed under ``version`` (None: each request's own
    recorded version; a request whose version is not in ``registry`` is not replayed).
    ``graphs`` (``Store.conversation_graphs`` of the chunk, read once for several
    replays) or ``snapshots`` save reading the chunk's graph again; ``facts``
    (``chunk_facts``: the graph's policy-independent facts) save computing them again.
    ``hashes=False`` leaves the assemblies' selection hashes out (null) for a caller that
    compares records, not hashes.

    The built-in reference assembler takes the columnar path (``replay.columnar``: the
    oracle's stages over the whole chunk at once); any other assembler takes the oracle
    path (``replay_chunk_oracle``)."""
    plugin = get_assembler(assembler)
    requests, policies = _replayable(chunk.requests, registry, version)
    if not has_columnar_form(plugin) or any(isinstance(p, RuntimePolicy) for p in policies):
        # a plugin, or a runtime's rule (transcripts: small, replayed request by request)
        if snapshots is None:
            snapshots = (snapshots_from_graphs(graphs, list(chunk.conversation_ids))
                         if graphs is not None else chunk.snapshots(store))
        return _oracle(requests, policies, plugin, snapshots)
    if graphs is None:
        graphs = (graphs_from_snapshots(snapshots) if snapshots is not None
                  else store.conversation_graphs(list(chunk.conversation_ids), chunk.export_id))
    out = replay_columnar(graphs, requests, policies,
                          facts if facts is not None and requests.num_rows == chunk.requests.num_rows
                          else None)
    table, assemblies = out.records, out.assemblies
    ids = assemblies.column("assembly_id").to_pylist()
    hashed = selection_hashes(table, ids) if hashes else {}
    return Replayed(table, pa.table({
        "assembly_id": assemblies.column("assembly_id"),
        "policy_version": pa.array([p.version for p in policies], pa.string()),
        "selection_hash": pa.array([hashed.get(a) for a in ids], pa.string()),
        "assembled_tokens": assemblies.column("assembled_tokens"),
        "baseline_tokens": assemblies.column("baseline_tokens"),
        "included_count": assemblies.column("included_count"),
        "omitted_count": assemblies.column("omitted_count"),
    }, schema=ASSEMBLY_SCHEMA))


def chunk_facts(chunk: Chunk, graphs: dict[str, pa.Table]) -> ColumnarFacts:
    """The policy-independent facts of ``chunk``'s graph (``replay.columnar.columnar_facts``),
    for several ``replay_chunk`` calls under different versions (compare's two sides)."""
    return columnar_facts(graphs, chunk.requests)


def has_columnar_form(plugin: AssemblerPlugin) -> bool:
    """Whether ``plugin`` is the built-in reference assembler (``replay.columnar`` computes
    exactly its answers); a plugin or a variant of it is replayed by itself."""
    return type(plugin) is ReferenceAssembler and not plugin.invert_supersession


def replay_chunk_oracle(store: "Store", chunk: Chunk, registry: PolicyRegistry,
                        version: str | None = None,
                        assembler: str | AssemblerPlugin = "reference",
                        snapshots: dict[str, Snapshot] | None = None) -> Replayed:
    """``replay_chunk`` through the assembler itself, one assembly at a time (the oracle
    path: what the columnar path is checked against, and the path of any plugin)."""
    plugin = get_assembler(assembler)
    snaps = snapshots if snapshots is not None else chunk.snapshots(store)
    requests, policies = _replayable(chunk.requests, registry, version)
    return _oracle(requests, policies, plugin, snaps)


_ORDER = [("assembly_id", "ascending"), ("record_kind", "ascending"), ("record_id", "ascending")]


def _replayable(requests: pa.Table, registry: PolicyRegistry,
                version: str | None) -> tuple[pa.Table, list[Policy]]:
    """The requests that have a policy to replay them, and that policy (one per request)."""
    if version is not None:
        fixed = registry.get(version)
        return requests, [fixed] * requests.num_rows
    recorded = requests.column("policy_version").to_pylist()
    keep = [v in registry for v in recorded]
    if not all(keep):
        requests = requests.filter(pa.array(keep))
    cache: dict[str, Policy] = {}
    policies = []
    for v in recorded:
        if v in registry:
            if v not in cache:
                cache[v] = registry.get(v)
            policies.append(cache[v])
    return requests, policies


def _oracle(requests: pa.Table, policies: list[Policy], plugin: AssemblerPlugin,
            snaps: dict[str, Snapshot]) -> Replayed:
    records: dict[str, list[Any]] = {name: [] for name in REPLAY_COLUMNS}
    assemblies: dict[str, list[Any]] = {name: [] for name in ASSEMBLY_COLUMNS}
    for row, policy in zip(requests.to_pylist(), policies):
        snapshot, request = snaps[row["conversation_id"]], request_from_row(row)
        out = (assemble_runtime(snapshot, request, policy) if isinstance(policy, RuntimePolicy)
               else plugin.assemble(snapshot, request, policy))
        for rec in sorted(out.records, key=lambda r: (r["record_kind"], r["record_id"])):
            for name in REPLAY_COLUMNS:
                records[name].append(rec[name])
        for name, value in (("assembly_id", out.assembly_id),
                            ("policy_version", policy.version),
                            ("selection_hash", out.selection_hash),
                            ("assembled_tokens", out.assembled_tokens),
                            ("baseline_tokens", out.baseline_tokens),
                            ("included_count", out.included_count),
                            ("omitted_count", out.omitted_count)):
            assemblies[name].append(value)
    table = pa.table(records, schema=REPLAY_SCHEMA)
    return Replayed(table.sort_by(_ORDER), pa.table(assemblies, schema=ASSEMBLY_SCHEMA))
