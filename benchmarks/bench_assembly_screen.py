"""Opening a 2,000-record assembly in the app, against the read-model call alone.

    python benchmarks/bench_assembly_screen.py [--records 2000] [--repeat 7]

1. The read-model call the screen makes: ``ReadModel.assembly(id)`` (the request row, every
   record with its label and privacy class, the decision trace, masking, token
   accounting), timed in this process on the same store.
2. Opening it cold: ``app.open_assembly(id)`` for a request never looked at, timed from
   that call to the end of the screen's ``RecordsLoaded`` handler (the Context table filled,
   the header and panel updated). The screen makes the read-model call itself in a worker,
   while the main thread shows the screen.
3. Opening it as a user does: the cursor rests on the request in the list (the app loads the
   highlighted request's assembly ahead, after 0.15 s), then Enter; timed from the key to the
   same point. Target: at most 2x the read-model call.

4. The floor: pushing a trivial screen (a header, one line, a footer) in the same headless
   app, to the app's next idle moment: what any screen switch costs here.

The headless app renders like a terminal one (same compositor), without the terminal's I/O.
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


def _timed_handler() -> tuple[list[float], object]:
    loaded: list[float] = []
    original = AssemblyScreen.on_records_loaded

    async def timed(self: AssemblyScreen, message):  # type: ignore[no-untyped-def]
        await original(self, message)
        loaded.append(time.perf_counter())

    AssemblyScreen.on_records_loaded = timed  # type: ignore[method-assign]
    return loaded, original


def time_screen(db: Path, aid: str, repeat: int) -> tuple[float, float]:
    """(cold open, Enter on the rested request), medians in seconds."""
    loaded, original = _timed_handler()

    async def run() -> tuple[list[float], list[float]]:
        cold, rested = [], []
        app = ContextLensApp(db_path=db)
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.pause(0.5)
            for i in range(repeat + 1):
                app.views._items.clear()  # cold: nothing loaded ahead
                loaded.clear()
                t0 = time.perf_counter()
                app.open_assembly(aid)
                while not loaded:
                    await pilot.pause(0.001)
                if i:  # the first opening composes the screen once
                    cold.append(loaded[0] - t0)
                await pilot.press("escape")
                await pilot.pause(0.3)  # the cursor rests on the request: loaded ahead
                loaded.clear()
                t0 = time.perf_counter()
                await pilot.press("enter")
                while not loaded:
                    await pilot.pause(0.001)
                if i:
                    rested.append(loaded[0] - t0)
                await pilot.press("escape")
                await pilot.pause(0.05)
        return cold, rested

    try:
        cold, rested = asyncio.run(run())
        return statistics.median(cold), statistics.median(rested)
    finally:
        AssemblyScreen.on_records_loaded = original  # type: ignore[method-assign]


def time_trivial_screen(repeat: int) -> float:
    from textual.app import App
    from textual.screen import Screen
    from textual.widgets import Footer, Header, Static

    class Trivial(Screen[None]):
        def compose(self):  # type: ignore[no-untyped-def]
            yield Header()
            yield Static("one line")
            yield Footer()

    async def run() -> list[float]:
        out = []
        app: App[None] = App()
        async with app.run_test(size=(160, 45)) as pilot:
            app.install_screen(Trivial(), "trivial")
            for i in range(repeat + 1):
                t0 = time.perf_counter()
                app.push_screen("trivial")
                await pilot.pause()
                if i:
                    out.append(time.perf_counter() - t0)
                app.pop_screen()
                await pilot.pause(0.05)
        return out

    return statistics.median(asyncio.run(run()))


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
        cold, rested = time_screen(db, aid, args.repeat)
        floor = time_trivial_screen(args.repeat)
    print(f"read model   ReadModel.assembly ({args.records} records): {model * 1000:.1f} ms")
    print(f"cold open    open_assembly to the records on screen:  {cold * 1000:.1f} ms "
          f"({cold / model:.2f}x)")
    print(f"Enter        on the request the cursor rests on:      {rested * 1000:.1f} ms "
          f"({rested / model:.2f}x, target <= 2x)")
    print(f"floor        a trivial screen pushed, to idle:        {floor * 1000:.1f} ms "
          f"({floor / model:.2f}x)")


if __name__ == "__main__":
    main()
