"""Compare throughput and memory: two policy versions over a whole synthetic store.

    contextlens sample --scale 10000 --out DIR && contextlens ingest DIR --db X.duckdb
    python benchmarks/bench_compare.py --db X.duckdb [--a v4 --b v5] [--workers 2]
    python benchmarks/bench_compare.py --scale 10000      # builds the store in a temp dir

Reports, in one process:

1. the baseline: ``SELECT assembly_id, count(*) FROM assembly_records GROUP BY assembly_id``
   over the same store (median of 3), in records per second;
2. ``replay.compare`` of A against B over every request (both sides replayed, paired,
   aggregated, safety judged on the changed requests), in records per second, where the
   records are the store's assembly_records rows (one side's worth);
3. the process's peak RSS (``ru_maxrss``) after the compare, and the growth of the peak
   during it: compare keeps aggregates only, so the growth should not follow the store's
   size;
4. with ``--read-floor``, a second baseline: reading the rows compare reads (every chunk's
   requests and conversation graph, straight from DuckDB into Arrow by the same queries,
   in one process) and nothing else. The GROUP BY reads one column of assembly_records;
   compare must read the graph the records come from, so this is the floor of any replay
   of the store;
5. with ``--floors``, DuckDB alone doing one step that any record-by-record compare needs,
   each on the whole store in one query (no chunks, no Python), as a multiple of the
   GROUP BY's time: reading the graph (every graph table and the requests, every contract
   column but the free-text bodies no replay reads, into Arrow); telling the records apart
   (GROUP BY the record key); pairing two sides (the recorded rows joined to themselves on
   the record key); a budget pass in its simplest form (a running token sum per assembly,
   a window). The issue's target (0.1x the GROUP BY's throughput) is 10x its time.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from ingest.store import Store, ingest
from replay.compare import compare
from replay.policy import load_registry
from replay.sample_export import write_sample


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_peak_mb() -> float:
    """The largest peak RSS of a finished worker process (``--workers`` > 1)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def read_floor(store: Store) -> float:
    """Seconds to read every chunk's requests and graph, as compare's walk does, and no more."""
    from replay.engine import chunks

    t0 = time.perf_counter()
    for chunk in chunks(store, None):
        store.conversation_graphs(list(chunk.conversation_ids), chunk.export_id)
    return time.perf_counter() - t0


# the free-text bodies of the graph: shown and masked, never read by a replay
BODIES = {"messages": {"content"}, "tool_artifacts": {"result_preview"},
          "tool_memories": {"summary"}}


def _median_seconds(store: Store, sql: str, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        store._arrow(sql)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def duckdb_floors(store: Store) -> dict[str, float]:
    """Seconds (median of 3) DuckDB takes for each step of ``--floors`` on the whole store."""
    from ingest.contract import TABLES
    from ingest.store.graph import GRAPH_TABLES

    def graph_read() -> float:
        t0 = time.perf_counter()
        for name in (*GRAPH_TABLES, "context_assemblies"):
            cols = [c for c in TABLES[name].column_names if c not in BODIES.get(name, ())]
            store._arrow(f"SELECT {', '.join(cols)} FROM {name}")
        return time.perf_counter() - t0

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


def bench(db: Path, a: str, b: str, workers: int = 1, floor: bool = False,
          floors: bool = False) -> None:
    registry = load_registry(None)
    with Store.open(db) as store:
        requests = store.count_assemblies()
        records = store._rows("SELECT count(*) FROM assembly_records")[0][0]
        baseline = _median_seconds(
            store, "SELECT assembly_id, count(*) FROM assembly_records GROUP BY assembly_id")
        before = peak_mb()
        t0 = time.perf_counter()

        def progress(done: int, total: int) -> None:
            # per chunk: a run too long to wait for still shows whether memory stays flat
            print(f"  {done:,} of {total:,} requests, {time.perf_counter() - t0:.0f} s, "
                  f"peak RSS {peak_mb():,.0f} MB", flush=True)

        result = compare(store, registry, a, b, progress=progress, workers=workers)
        elapsed = time.perf_counter() - t0
        after = peak_mb()
        t_floor = read_floor(store) if floor else None
        # after the compare: the peak RSS figures above are the compare's own
        steps = duckdb_floors(store) if floors else {}
    print(f"store: {db.name}: {requests:,} requests, {records:,} assembly_records rows")
    print(f"GROUP BY baseline: {baseline * 1000:.1f} ms, {records / baseline:,.0f} records/s")
    pairs = sum(result.counts.values())
    procs = f"{workers} process{'es' if workers > 1 else ''}"
    print(f"compare {a} -> {b} ({procs}): {elapsed:.2f} s, {records / elapsed:,.0f} records/s "
          f"({elapsed / baseline:,.0f}x the GROUP BY's time), {pairs:,} record pairs, "
          f"{pairs / elapsed:,.0f} pairs/s; {result.affected:,} affected, "
          f"{sum(t.findings for t in result.safety['regressions'].values()):,} safety regressions")
    print(f"peak RSS: {after:,.0f} MB (before the compare {before:,.0f} MB, "
          f"+{after - before:,.0f} MB during it)"
          + (f"; each worker process at most {worker_peak_mb():,.0f} MB" if workers > 1 else ""))
    if steps:
        print(f"DuckDB alone, one step of a compare, whole store (the target, 0.1x the "
              f"GROUP BY's throughput, is 10x its time: {baseline * 10 * 1000:,.0f} ms):")
        for step, seconds in steps.items():
            print(f"  {step}: {seconds * 1000:,.0f} ms, {seconds / baseline:.1f}x the GROUP BY's time")
    if t_floor is not None:
        print(f"read floor (every chunk's requests and graph into Arrow, 1 process): "
              f"{t_floor:.2f} s; compare takes {elapsed / t_floor:.1f}x that")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="an ingested store")
    parser.add_argument("--scale", type=int, help="build a synthetic store of N assemblies")
    parser.add_argument("--a", default="v4")
    parser.add_argument("--b", default="v5")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes comparing at once (the CLI's default is one per CPU)")
    parser.add_argument("--read-floor", action="store_true",
                        help="also time reading the rows compare reads, and nothing else")
    parser.add_argument("--floors", action="store_true",
                        help="also time DuckDB alone doing single steps of a compare")
    args = parser.parse_args()
    if args.db is not None:
        bench(args.db, args.a, args.b, args.workers, args.read_floor, args.floors)
        return
    with tempfile.TemporaryDirectory() as tmp:
        export = write_sample(Path(tmp) / "export", scale=args.scale or 10_000)
        db = Path(tmp) / "store.duckdb"
        ingest(export, db)
        bench(db, args.a, args.b, args.workers, args.read_floor, args.floors)


if __name__ == "__main__":
    main()
