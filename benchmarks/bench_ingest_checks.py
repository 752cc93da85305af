"""What the ingest's store checks cost: the collision check (a semi join per table on the new
export's keys) and the integrity read (every column of every table hashed) when a small
export is added to a big store, against the same ingest with both checks switched off, in
one process, alternating.

    python benchmarks/bench_ingest_checks.py STORE.duckdb [EXPORT] [ROUNDS]

STORE is copied for each run (never written); EXPORT defaults to the bundled sample, whose
ids no scale sample shares.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import ingest.store.loading as loading
from ingest.store import ingest


def _run(store: Path, export: Path, work: Path, checks: bool) -> float:
    db = work / "store.duckdb"
    for p in work.iterdir():
        p.unlink()
    shutil.copyfile(store, db)
    saved = (loading.check_readable, loading.refuse_collisions)
    if not checks:
        loading.check_readable = lambda *a, **k: None
        loading.refuse_collisions = lambda *a, **k: None
    try:
        t0 = time.perf_counter()
        ingest(export, db)
        return time.perf_counter() - t0
    finally:
        loading.check_readable, loading.refuse_collisions = saved


def _timed(label: str, fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    took = time.perf_counter() - t0
    print(f"  {label}: {took:.3f} s  load {os.getloadavg()[0]:.1f}")
    return took


def main() -> None:
    store = Path(sys.argv[1])
    if len(sys.argv) > 2:
        export = Path(sys.argv[2])
    else:
        from sample_data import SAMPLE_DIR

        export = Path(SAMPLE_DIR)
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    print(f"store {store} ({store.stat().st_size / 1e6:.1f} MB), export {export}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        on, off = [], []
        for _ in range(rounds):
            off.append(_run(store, export, work, False))
            on.append(_run(store, export, work, True))
            print(f"  without checks {off[-1]:.2f} s, with {on[-1]:.2f} s  load {os.getloadavg()}")
        best_on, best_off = min(on), min(off)
        print(f"ingest into the store: {best_on:.2f} s with the checks, {best_off:.2f} s without "
              f"(best of {rounds}): {best_on / best_off:.2f}x  load {os.getloadavg()}")
        # the integrity read alone, on the store as it is
        from ingest.store.database import open_store
        from ingest.store.identity import check_readable

        con = open_store(store, read_only=True)
        try:
            _timed("integrity read alone", check_readable, con, store)
        finally:
            con.close()


if __name__ == "__main__":
    main()
