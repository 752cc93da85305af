"""Opening a 2,000-record assembly in the app, against the read-model call alone.

    python benchmarks/bench_assembly_screen.py [--records 2000] [--repeat 7]

1. The read-model call the screen makes: ``ReadModel.assembly(id)`` (the request row, every
   record with its label and privacy class, the decision trace, masking, token
   accounting), timed in this process on the same store.
2. The screen: from pushing ``AssemblyScreen`` in a headless app to the moment its Context
   table, Trace table and Omitted tree are filled (the end of its ``RecordsLoaded``
   handler), timed in the same process. The screen does the read-model call itself, so the
   ratio says what the screen adds on top of it. Target: at most 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench_foundation import big_assembly_export
from ingest.store import Store, ingest
from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from readmodel import ReadModel


def time_read_model(db: Path, aid: str, repeat: int) -> float:
    times = []
    with Store.open(db) as store:
        model = ReadModel(store)
        model.assembly(aid)  # warm: first-touch of the file pages, as the app's call gets
        for _ in range(repeat):
            t0 = time.perf_counter()
            model.assembly(aid)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_screen(db: Path, aid: str, repeat: int) -> float:
    loaded: list[float] = []
    original = AssemblyScreen.on_records_loaded

    async def timed_handler(self: AssemblyScreen, message):  # type: ignore[no-untyped-def]
        await original(self, message)
        loaded.append(time.perf_counter())

    AssemblyScreen.on_records_loaded = timed_handler  # type: ignore[method-assign]

    async def run() -> list[float]:
        out = []
        app = ContextLensApp(db_path=db)
        async with app.run_test(size=(160, 45)) as pilot:
            for i in range(repeat + 1):
                loaded.clear()
                t0 = time.perf_counter()
                app.open_assembly(aid)
                while not loaded:
                    await pilot.pause(0.001)
                if i:  # the first opening warms the worker thread's store connection
                    out.append(loaded[0] - t0)
                await pilot.press("escape")
                await pilot.pause(0.05)
        return out

    try:
        return statistics.median(asyncio.run(run()))
    finally:
        AssemblyScreen.on_records_loaded = original  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="contextlens-bench-") as tmp:
        export = Path(tmp) / "big"
        aid = big_assembly_export(export, args.records)
        db = Path(tmp) / "big.duckdb"
        ingest(export, db)
        model = time_read_model(db, aid, args.repeat)
        screen = time_screen(db, aid, args.repeat)
    print(f"read model  ReadModel.assembly ({args.records} records): {model * 1000:.1f} ms")
    print(f"screen      push to tables and tree filled:            {screen * 1000:.1f} ms")
    print(f"ratio       {screen / model:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
