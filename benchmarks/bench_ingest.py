"""Ingest benchmark: adding a small export to an existing store.

Adding an export should cost what the export costs, whatever the size of the store it goes
into. For each store size this times ``ingest`` of the same small export into a copy of a
store of that many assemblies, and counts the bytes the process hands to write calls
(``wchar`` of /proc/self/io: the scratch database, the store's WAL and checkpoint, and any
copy of the store). The baseline, run in the same process on the same files, is DuckDB's own
``CREATE TABLE AS SELECT * FROM read_parquet(...)`` of the export into a new, empty
database: the least any load of it can cost. Run:

    python benchmarks/bench_ingest.py --stores 10000,100000 --export-scale 100 --work DIR

``--export-scale 100`` is an export of 100 assemblies and 2,000 assembly records. The
stores are built once per work folder (100,000 assemblies take about a minute). "reader
open" adds the export while this process holds the store open read-only, the case in which
ingest copies the store and renames the copy over it. The results are printed as a
Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import duckdb

from ingest.contract import TABLES
from ingest.store import Store, ingest
from replay.sample_export import write_sample


def written() -> int:
    """Bytes this process has passed to write calls so far (0 where /proc is missing)."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(fn: Callable[[], object], prepare: Callable[[], object], repeat: int) -> tuple[float, int]:
    """Median seconds and median bytes written of ``fn`` over ``repeat`` runs, each after an
    untimed ``prepare``."""
    times, sizes = [], []
    for _ in range(repeat):
        prepare()
        w0, t0 = written(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        sizes.append(written() - w0)
    return statistics.median(times), int(statistics.median(sizes))


def parquet_glob(export: Path, table: str) -> str:
    single = export / f"{table}.parquet"
    return str(single) if single.exists() else str(export / table / "**" / "*.parquet")


def baseline_load(export: Path, db: Path) -> None:
    """DuckDB's own CREATE TABLE AS SELECT * FROM read_parquet(...) of the same files."""
    con = duckdb.connect(str(db))
    for table in TABLES:
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{parquet_glob(export, table)}')")
    con.close()


def remove(db: Path) -> None:
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", default="10000,100000", help="store sizes, in assemblies")
    ap.add_argument("--export-scale", type=int, default=100, help="assemblies in the added export")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=None, help="folder for exports and stores")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    work.mkdir(parents=True, exist_ok=True)

    # another seed, so another export id than the stores' own export
    export = work / f"add-{args.export_scale}"
    if not (export / "manifest.json").exists():
        write_sample(export, scale=args.export_scale, seed=11)
    fresh = work / "baseline.duckdb"
    base_s, base_b = measure(lambda: baseline_load(export, fresh), lambda: remove(fresh), args.repeat)
    remove(fresh)

    print(f"export: {args.export_scale} assemblies; baseline (read_parquet into an empty "
          f"database): {base_s * 1000:.0f} ms, {mb(base_b)} written")
    print()
    print("| store | store file | in place | written | vs baseline | reader open (copy) | written | vs baseline |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.stores.split(",")):
        source = work / f"store-{n}"
        db = work / f"store-{n}.duckdb"
        if not db.exists():
            if not (source / "manifest.json").exists():
                write_sample(source, scale=n)
            ingest(source, db)
        trial = work / "trial.duckdb"

        def fresh_copy() -> None:
            remove(trial)
            shutil.copyfile(db, trial)

        def with_reader() -> None:
            with Store.open(trial):
                ingest(export, trial)

        in_s, in_b = measure(lambda: ingest(export, trial), fresh_copy, args.repeat)
        rd_s, rd_b = measure(with_reader, fresh_copy, args.repeat)
        remove(trial)
        print(
            f"| {n:,} assemblies | {mb(db.stat().st_size)} "
            f"| {in_s * 1000:.0f} ms | {mb(in_b)} | {in_s / base_s:.1f}x "
            f"| {rd_s * 1000:.0f} ms | {mb(rd_b)} | {rd_s / base_s:.1f}x |"
        )


if __name__ == "__main__":
    main()
