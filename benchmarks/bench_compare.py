"""Compare throughput and memory: two policy versions over a whole synthetic store.

    contextlens sample --scale 10000 --out DIR && contextlens ingest DIR --db X.duckdb
    python benchmarks/bench_compare.py --db X.duckdb [--a v4 --b v5] [--workers 2]
    python benchmarks/bench_compare.py --scale 10000      # builds the store in a temp dir
    python benchmarks/bench_compare.py --scale 1000000 --cache benchmarks/out --read-floor --loaded

Reports, in one process:

1. the baseline: ``SELECT assembly_id, count(*) FROM assembly_records GROUP BY assembly_id``
   over the same store (median of 3), in records per second;
2. ``replay.compare`` of A against B over every request (both sides replayed, paired,
   aggregated, safety judged on the changed requests), in records per second, where the
   records are the store's assembly_records rows (one side's worth);
3. the process's peak RSS (``ru_maxrss``) after the compare, and the growth of the peak
   during it: compare keeps aggregates only, so the growth should not follow the store's
   size;
4. with ``--read-floor``, the read floor: the tables compare reads (every graph table and
   the requests, every column but the free-text bodies no replay reads) read whole, one
   query each, into Arrow; beside it compare's own reads of them (every chunk's requests
   and conversation graph, by the same queries, in one process) and nothing else, as a
   multiple of the floor. The GROUP BY reads one column of assembly_records; compare must
   read the graph the records come from, so this is the floor of any replay of the store;
5. with ``--floors``, DuckDB alone doing one step that any record-by-record compare needs,
   each on the whole store in one query (no chunks, no Python), as a multiple of the
   GROUP BY's time: reading the graph (every graph table and the requests, every contract
   column but the free-text bodies no replay reads, into Arrow); telling the records apart
   (GROUP BY the record key); pairing two sides (the recorded rows joined to themselves on
   the record key); a budget pass in its simplest form (a running token sum per assembly,
   a window). The issue's target (0.1x the GROUP BY's throughput) is 10x its time;
6. with ``--loaded``, the compare again twice while a busy loop keeps one core busy (a
   process of its own, started here and stopped after): with one process, and with the
   default worker count (``replay.engine.worker_count``, which counts the CPUs free), so
   the default is seen never slower than one process.

Every figure is printed with ``os.getloadavg()`` at its end: the machine may be shared.
``--scale N --cache DIR`` keeps the synthetic store it builds in DIR (``scale-N.duckdb``)
and reuses it on the next run (a store of 1,000,000 requests takes many minutes to build).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from ingest.store import Store, ingest
from replay.compare import compare
from replay.policy import load_registry
from replay.sample_export import write_sample


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_peak_mb() -> float:
    """The largest peak RSS of a finished worker process (``--workers`` > 1)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def load() -> str:
    """The machine's load averages (1, 5, 15 minutes), printed beside each figure."""
    return "load average " + " / ".join(f"{x:.1f}" for x in os.getloadavg())


def chunked_read(store: Store) -> tuple[float, float]:
    """Seconds (wall, CPU) to read every chunk's requests and graph, as compare's walk does
    (the graph without the bodies no replay reads, as compare reads it), and no more."""
    from replay.engine import chunks

    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    for chunk in chunks(store, None):
        store.conversation_graphs(list(chunk.conversation_ids), chunk.export_id, bodies=False)
    return time.perf_counter() - t0, _cpu_seconds() - cpu0


def whole_read(store: Store) -> float:
    """Seconds to read the tables compare reads whole, one query each (the read floor)."""
    return whole_read_cpu(store)[0]


def whole_read_cpu(store: Store) -> tuple[float, float]:
    """``whole_read``'s seconds, wall and CPU."""
    from ingest.contract import TABLES
    from ingest.store.graph import BODIES, GRAPH_TABLES

    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    for name in (*GRAPH_TABLES, "context_assemblies"):
        cols = [c for c in TABLES[name].column_names if c not in BODIES.get(name, ())]
        store._arrow(f"SELECT {', '.join(cols)} FROM {name}")
    return time.perf_counter() - t0, _cpu_seconds() - cpu0


@contextlib.contextmanager
def busy_core() -> Iterator[None]:
    """A process keeping one core busy (pinned to the first CPU this one may use) for the
    block: the loaded run's other program."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(spin.pid, {min(os.sched_getaffinity(0))})
        time.sleep(1.0)  # running, and seen by /proc/stat, before the compare starts
        yield
    finally:
        spin.kill()
        spin.wait()


def _median_seconds(store: Store, sql: str, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        store._arrow(sql)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def duckdb_floors(store: Store) -> dict[str, float]:
    """Seconds (median of 3) DuckDB takes for each step of ``--floors`` on the whole store."""
    def graph_read() -> float:
        return whole_read(store)

    key = "assembly_id, record_kind, record_id"
    return {
        "read the graph into Arrow": statistics.median(graph_read() for _ in range(3)),
        "tell the records apart (GROUP BY the record key)": _median_seconds(
            store, f"SELECT {key}, count(*) FROM assembly_records GROUP BY ALL"),
        "pair two sides (join on the record key)": _median_seconds(
            store, "SELECT a.assembly_id, count(*) FROM assembly_records a "
                   f"JOIN assembly_records b USING ({key}) GROUP BY 1"),
        "one budget pass (running token sum per assembly)": _median_seconds(
            store, "SELECT assembly_id, max(used) FROM (SELECT assembly_id, sum(tokens) OVER "
                   "(PARTITION BY assembly_id ORDER BY position) AS used FROM assembly_records) "
                   "GROUP BY 1"),
    }


def _procs(workers: int | None) -> str:
    if workers is None:
        from replay.engine import cpu_load, free_cpus

        busy = cpu_load()
        return f"default: {free_cpus(load=busy)} of {os.cpu_count()} (busy {busy:.1f})"
    return f"{workers} process{'es' if workers > 1 else ''}"


def bench(db: Path, a: str, b: str, workers: int | None = 1, floor: bool = False,
          floors: bool = False, loaded: bool = False) -> None:
    registry = load_registry(None)
    with Store.open(db) as store:
        requests = store.count_assemblies()
        records = store._rows("SELECT count(*) FROM assembly_records")[0][0]
        baseline = _median_seconds(
            store, "SELECT assembly_id, count(*) FROM assembly_records GROUP BY assembly_id")
        print(f"store: {db.name}: {requests:,} requests, {records:,} assembly_records rows")
        print(f"GROUP BY baseline: {baseline * 1000:.1f} ms, {records / baseline:,.0f} "
              f"records/s; {load()}", flush=True)
        before = peak_mb()
        t0 = time.perf_counter()

        def progress(done: int, total: int) -> None:
            # per chunk: a run too long to wait for still shows whether memory stays flat
            print(f"  {done:,} of {total:,} requests, {time.perf_counter() - t0:.0f} s, "
                  f"peak RSS {peak_mb():,.0f} MB", flush=True)

        procs = _procs(workers)
        cpu0 = _cpu_seconds()
        result = compare(store, registry, a, b, progress=progress, workers=workers)
        elapsed = time.perf_counter() - t0
        cpu = _cpu_seconds() - cpu0
        after = peak_mb()
        pairs = sum(result.counts.values())
        print(f"compare {a} -> {b} ({procs}): {elapsed:.2f} s ({cpu:.1f} s CPU), "
              f"{records / elapsed:,.0f} records/s ({elapsed / baseline:,.0f}x the GROUP BY's "
              f"time), {pairs:,} record pairs, {pairs / elapsed:,.0f} pairs/s; "
              f"{result.affected:,} affected, "
              f"{sum(t.findings for t in result.safety['regressions'].values()):,} safety "
              f"regressions; {load()}")
        print(f"peak RSS: {after:,.0f} MB (before the compare {before:,.0f} MB, "
              f"+{after - before:,.0f} MB during it)"
              + (f"; each worker process at most {worker_peak_mb():,.0f} MB"
                 if worker_peak_mb() else ""), flush=True)
        if floor:
            # after the compare: the peak RSS figures above are the compare's own
            reads = [whole_read_cpu(store) for _ in range(3)]
            whole = statistics.median(r[0] for r in reads)
            whole_cpu = statistics.median(r[1] for r in reads)
            print(f"read floor (the tables compare reads, whole, into Arrow): {whole:.2f} s "
                  f"({whole_cpu:.2f} s CPU); {load()}")
            chunked, chunked_cpu = chunked_read(store)
            print(f"compare's own reads (every chunk's requests and graph, 1 process): "
                  f"{chunked:.2f} s ({chunked_cpu:.2f} s CPU), {chunked / whole:.1f}x the "
                  f"floor ({chunked_cpu / whole_cpu:.1f}x in CPU); compare takes "
                  f"{elapsed / whole:.1f}x the floor ({cpu / whole_cpu:.1f}x in CPU); {load()}",
                  flush=True)
        if floors:
            steps = duckdb_floors(store)
            print(f"DuckDB alone, one step of a compare, whole store (the target, 0.1x the "
                  f"GROUP BY's throughput, is 10x its time: {baseline * 10 * 1000:,.0f} ms); "
                  f"{load()}:")
            for step, seconds in steps.items():
                print(f"  {step}: {seconds * 1000:,.0f} ms, {seconds / baseline:.1f}x the "
                      f"GROUP BY's time")
        if loaded:
            with busy_core():
                times, cpus = {}, {}
                for each in (1, None):
                    procs = _procs(each)
                    t1, cpu0 = time.perf_counter(), _cpu_seconds()
                    compare(store, registry, a, b, workers=each)
                    times[each], cpus[each] = time.perf_counter() - t1, _cpu_seconds() - cpu0
                    print(f"loaded (one core kept busy): compare {a} -> {b} ({procs}): "
                          f"{times[each]:.2f} s ({cpus[each]:.1f} s CPU); {load()}", flush=True)
            print(f"loaded: the default takes {times[None] / times[1]:.2f}x one process's time "
                  f"and {cpus[None] / cpus[1]:.2f}x its CPU")


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (the worker processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="an ingested store")
    parser.add_argument("--scale", type=int, help="build a synthetic store of N assemblies")
    parser.add_argument("--cache", type=Path,
                        help="with --scale: keep the built store in this folder, and reuse it")
    parser.add_argument("--a", default="v4")
    parser.add_argument("--b", default="v5")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes comparing at once; 0: the CLI's default (one per "
                             "free CPU)")
    parser.add_argument("--read-floor", action="store_true",
                        help="also time the read floor and compare's own reads")
    parser.add_argument("--floors", action="store_true",
                        help="also time DuckDB alone doing single steps of a compare")
    parser.add_argument("--loaded", action="store_true",
                        help="also compare with one process and with the default worker "
                             "count while one core is kept busy")
    args = parser.parse_args()
    options = (args.a, args.b, args.workers or None, args.read_floor, args.floors, args.loaded)
    if args.db is not None:
        bench(args.db, *options)
        return
    scale = args.scale or 10_000
    if args.cache is not None:
        db = args.cache / f"scale-{scale}.duckdb"
        if not db.exists():
            args.cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
                built = Path(tmp) / db.name  # renamed when whole: a failed build is not reused
                ingest(write_sample(Path(tmp) / "export", scale=scale), built)
                built.rename(db)
        bench(db, *options)
        return
    with tempfile.TemporaryDirectory() as tmp:
        export = write_sample(Path(tmp) / "export", scale=scale)
        db = Path(tmp) / "store.duckdb"
        ingest(export, db)
        bench(db, *options)


if __name__ == "__main__":
    main()
