"""Opening an assembly in the app (Enter on a request), against the read-model call alone.

    python benchmarks/bench_assembly_screen.py [--records 2000] [--repeat 9]

Two requests, in one store built from the bundled sample plus a one-assembly export whose
assembly weighed ``--records`` records: the sample's newest request (the list's first row)
and the big assembly.

1. The read-model call that answers the screen: ``ReadModel.assembly(id)`` (the request row,
   every record with its label and privacy class, the decision trace, masking, token
   accounting), timed in this process on the same store, without any cache.
2. Enter on a request the cursor rests on, as a user does it: the cursor moves onto the
   request (a key), rests 0.5 s, then Enter. Timed from the key to
   - "records": the end of the first frame that shows the assembly's records (the Context
     table laid out with every included record, the header with the included and omitted
     counts);
   - "complete": the end of the first frame that also shows the record panel explaining the
     first record (its why-sentence and trace): the screen as the user reads it. The lint of
     the request comes after a deliberate pause (``FINDINGS_PAUSE``, so paging through
     requests never waits for it) and is not part of opening.
   Two cases: the request list loaded the request ahead while the cursor rested (what the
   app does), and the same with everything it loaded ahead dropped just before Enter (the
   screen then asks the read model itself).
3. The floor: a trivial screen (a header, one line, a footer) pushed in a bare Textual app,
   to the end of its first frame: what showing any screen costs here.

Frames are timed where Textual composes them (``Screen._compositor_refresh``, wrapped here):
the headless app renders every frame like a terminal one (same compositor, same widgets),
without writing it to a terminal. A frame counts as showing the records only if it rendered
the Context table's lines while the table held them (a frame may compose a layout change
alone, the table's rows arriving in a later one). Medians of ``--repeat`` runs; beside each
wall time, the process CPU time of the same runs (the app's threads included), which load
from other processes on the machine does not inflate.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_foundation import big_assembly_export
from ingest.store import Store, ingest
from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from readmodel import ReadModel
from textual.screen import Screen
from textual_fastdatatable import DataTable

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
QUIET = 0.25  # seconds without a frame or a worker: the app is idle

# (end time, screen, what it showed) of every frame composed, by the wrapper below;
# _watch is the (assembly, included count) whose records a frame may show
_frames: list[tuple[float, Screen[Any], bool, bool]] = []
_cpu: list[float] = []  # process CPU time at each frame's end (load-independent cross-check)
_watch: list[tuple[str, int]] = []
_compositor_refresh = Screen._compositor_refresh


def _timed_refresh(self: Screen[Any]) -> None:
    _rendered.clear()
    _compositor_refresh(self)
    if self is self.app.screen:
        # the frame shows the records if it rendered the Context table's lines while the
        # table held them (a frame may well compose other widgets only)
        shown = bool(_watch) and bool(_rendered) and _shows_records(self, *_watch[0])
        complete = bool(_watch) and isinstance(self, AssemblyScreen) \
            and self.assembly_id == _watch[0][0] and _panel_filled(self)
        _frames.append((time.perf_counter(), self, shown, complete))
        _cpu.append(time.process_time())


_rendered: list[bool] = []
_render_lines = DataTable.render_lines


def _timed_render_lines(self: DataTable, crop: Any) -> Any:
    if self.id == "context-table" and _watch and self.row_count == _watch[0][1]:
        _rendered.append(True)
    return _render_lines(self, crop)


def time_read_model(db: Path, aid: str, repeat: int) -> tuple[float, float]:
    """(wall, CPU) medians in seconds."""
    times, cpu = [], []
    with Store.open(db) as store:
        model = ReadModel(store)  # no views cache: every call asks the store
        model.assembly(aid)  # warm: first-touch of the file pages, as the app's call gets
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            model.assembly(aid)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return statistics.median(times), statistics.median(cpu)


def _shows_records(screen: Screen[Any], aid: str, included: int) -> bool:
    if not isinstance(screen, AssemblyScreen) or screen.assembly_id != aid:
        return False
    tables = list(screen.query("#context-table"))
    header = str(screen.query_one("#assembly-header").render())
    return bool(tables) and tables[0].row_count == included and tables[0].region.height > 0 \
        and " included, " in header


def _panel_filled(screen: Screen[Any]) -> bool:
    title = str(screen.query_one("#record-title").render())
    return not title.startswith(("Loading", "Highlight"))


async def _quiet(app: ContextLensApp, pilot: Any) -> None:
    """Wait until no worker runs and no frame was composed for QUIET seconds."""
    while True:
        await pilot.pause(0.02)
        busy = any(w.is_running or w.state.name == "PENDING" for w in app.workers)
        if not busy and (not _frames or time.perf_counter() - _frames[-1][0] > QUIET):
            return


def _row_of(app: ContextLensApp, aid: str) -> int:
    screen = app.screen
    for row in range(screen.query_one("#requests-table").row_count):
        keys = screen._row_keys(row)  # noqa: SLF001 - the benchmark finds its request's row
        if keys is not None and keys[0] == aid:
            return row
    raise SystemExit(f"{aid} is not in the request list")


def _drop_loaded_ahead(app: ContextLensApp) -> None:
    for cache in (getattr(app, "contents", None), app.views):
        if cache is not None:
            cache._items.clear()  # noqa: SLF001 - the benchmark empties the app's caches


async def _open_once(app: ContextLensApp, pilot: Any, aid: str, included: int,
                     loaded_ahead: bool) -> tuple[float, float, float, float]:
    """Enter on ``aid`` after the cursor rests on it: seconds to records, to complete, and the
    process CPU seconds spent by then."""
    table = app.screen.query_one("#requests-table")
    row = _row_of(app, aid)
    _drop_loaded_ahead(app)  # nothing loaded ahead from a previous run
    # the cursor comes from the next row (or the previous one), as a key moves it
    table.move_cursor(row=row + 1 if row + 1 < table.row_count else row - 1, animate=False)
    await pilot.pause(0.05)
    await pilot.press("up" if row + 1 < table.row_count else "down")
    await pilot.pause(0.5)  # rests: the list loads the request ahead
    await _quiet(app, pilot)
    if not loaded_ahead:
        _drop_loaded_ahead(app)
    _frames.clear()
    _cpu.clear()
    _watch[:] = [(aid, included)]
    t0, c0 = time.perf_counter(), time.process_time()
    await pilot.press("enter")
    await _quiet(app, pilot)
    _watch.clear()
    first = next(i for i, frame in enumerate(_frames) if frame[2])
    # records stay on screen once shown; the panel may be filled in that frame or a later one
    complete = next(i for i, frame in enumerate(_frames) if frame[3] and i >= first)
    screen = app.screen
    assert isinstance(screen, AssemblyScreen) and _panel_filled(screen), "panel not filled"
    out = (_frames[first][0] - t0, _frames[complete][0] - t0, _cpu[first] - c0,
           _cpu[complete] - c0)
    await pilot.press("escape")
    await _quiet(app, pilot)
    return out


Timings = tuple[float, float, float, float]


def time_enter(db: Path, requests: list[tuple[str, int]], repeat: int) -> dict[tuple[str, bool], Timings]:
    """{(assembly, loaded ahead): medians of (to records, to complete, CPU to records, CPU to
    complete)}."""

    async def run() -> dict[tuple[str, bool], Timings]:
        out: dict[tuple[str, bool], list[Timings]] = {}
        app = ContextLensApp(db_path=db)
        async with app.run_test(size=(160, 45)) as pilot:
            while not app.screen.query("#requests-table"):
                await pilot.pause(0.05)
            await _quiet(app, pilot)
            for aid, included in requests:  # the first opening composes the screen once
                await _open_once(app, pilot, aid, included, True)
            for _ in range(repeat):
                for aid, included in requests:
                    for ahead in (True, False):
                        out.setdefault((aid, ahead), []).append(
                            await _open_once(app, pilot, aid, included, ahead))
        return {
            key: tuple(statistics.median(run[k] for run in runs) for k in range(4))  # type: ignore[misc]
            for key, runs in out.items()
        }

    Screen._compositor_refresh = _timed_refresh  # type: ignore[method-assign]
    DataTable.render_lines = _timed_render_lines  # type: ignore[method-assign]
    try:
        return asyncio.run(run())
    finally:
        Screen._compositor_refresh = _compositor_refresh  # type: ignore[method-assign]
        DataTable.render_lines = _render_lines  # type: ignore[method-assign]


def time_trivial_screen(repeat: int) -> float:
    from textual.app import App
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
                _frames.clear()
                t0 = time.perf_counter()
                app.push_screen("trivial")
                while not any(isinstance(frame[1], Trivial) for frame in _frames):
                    await pilot.pause(0.001)
                if i:
                    out.append(next(frame[0] for frame in _frames
                                    if isinstance(frame[1], Trivial)) - t0)
                await pilot.pause(0.1)
                app.pop_screen()
                await pilot.pause(0.2)
        return out

    Screen._compositor_refresh = _timed_refresh  # type: ignore[method-assign]
    try:
        return statistics.median(asyncio.run(run()))
    finally:
        Screen._compositor_refresh = _compositor_refresh  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="contextlens-bench-") as tmp:
        db = Path(tmp) / "bench.duckdb"
        ingest(SAMPLE, db)
        big = big_assembly_export(Path(tmp) / "big", args.records)
        ingest(Path(tmp) / "big", db)
        with Store.open(db) as store:
            model = ReadModel(store)
            newest = model.requests(None, descending=True, limit=1).keys.column("assembly_id")[0].as_py()
            requests = []
            for aid in (newest, big):
                view = model.assembly(aid)
                requests.append((aid, int(view.request["included_count"]),
                                 view.records.num_rows))
        baseline = {aid: time_read_model(db, aid, args.repeat) for aid, _, _ in requests}
        enter = time_enter(db, [(aid, n) for aid, n, _ in requests], args.repeat)
        floor = time_trivial_screen(args.repeat)

    print("wall time, medians; [process CPU time, the same runs: what load on the machine "
          "does not change]")
    for aid, _, weighed in requests:
        model_s, model_cpu = baseline[aid]
        print(f"{aid} ({weighed} records)  read model {model_s * 1000:.1f} ms "
              f"[{model_cpu * 1000:.1f} ms]")
        for ahead, label in ((True, "loaded ahead"), (False, "not loaded ahead")):
            shown, done, shown_cpu, done_cpu = enter[(aid, ahead)]
            print(f"  Enter, {label:<17} to records {shown * 1000:6.1f} ms "
                  f"({shown / model_s:4.2f}x) [{shown_cpu * 1000:5.1f} ms, "
                  f"{shown_cpu / model_cpu:4.2f}x]   to complete {done * 1000:6.1f} ms "
                  f"({done / model_s:4.2f}x) [{done_cpu * 1000:5.1f} ms, "
                  f"{done_cpu / model_cpu:4.2f}x]")
    print(f"floor: a trivial screen pushed, to its first frame: {floor * 1000:.1f} ms "
          "(target: Enter to records and to complete <= 2x the read model)")


if __name__ == "__main__":
    main()
