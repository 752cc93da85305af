"""The app's first page against a minimal Textual app on the same query, both as processes.

    python benchmarks/bench_first_page.py [--runs 7] [--db STORE.duckdb] [--size 140x40]

Each run launches ``contextlens open STORE`` and ``first_page_baseline.py STORE`` (a header,
a Textual DataTable filled by the request list's first-page query, a footer), interleaved,
each in a fresh process under its own pseudo-terminal of the same size (TERM=xterm-256color).
The clock runs from just before the process is started to the moment the terminal receives
the first frame that shows rows: the first request's time (``%Y-%m-%d %H:%M:%S``, UTC, read
from the store beforehand) in the bytes written to the terminal, escape sequences removed.
Nothing is asked of the processes (no marker, no environment variable): the terminal is
what a user sees. The process's RSS is read at that moment and its peak RSS (VmHWM) two
seconds later (the app's lint markers and loading ahead have run by then), then it is
ended. Figures: medians of the runs, ratios to the baseline, and the load average.

Default store: the bundled sample (52 requests), built in a cache folder of the benchmark's
own. ``--db`` for any other store (e.g. one made with ``contextlens sample --scale``).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# CSI (cursor moves, colours), OSC (titles) and the other two-byte escapes
_ESCAPES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def _contextlens() -> list[str]:
    script = Path(sys.executable).with_name("contextlens")
    return [str(script)] if script.exists() else [sys.executable, "-m", "inspector.cli"]


def _rss_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def first_rows(argv: list[str], sentinel: bytes, env: dict[str, str], cols: int, lines: int,
               settle: float = 2.0, timeout: float = 120.0) -> tuple[float, int, int]:
    """(seconds to the first frame showing ``sentinel``, RSS then in KB, peak RSS in KB
    ``settle`` seconds later) of ``argv`` run under a pseudo-terminal of cols x lines."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, cols, 0, 0))
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True, close_fds=True)
    os.close(slave)
    seen = b""
    elapsed = rss = 0.0
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, t0 + timeout - time.perf_counter()))
            if not ready:
                raise TimeoutError(f"{argv[0]}: no rows after {timeout:.0f} s")
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the process ended before showing rows
                raise RuntimeError(f"{argv}: ended before showing rows: {seen[-400:]!r}")
            seen += chunk
            if sentinel in _ESCAPES.sub(b"", seen):
                elapsed = time.perf_counter() - t0
                rss = _rss_kb(proc.pid, "VmRSS")
                break
        # keep draining the terminal while the app settles (a full pty would block it)
        end = time.perf_counter() + settle
        while (left := end - time.perf_counter()) > 0:
            if select.select([master], [], [], left)[0]:
                try:
                    os.read(master, 1 << 16)
                except OSError:
                    break
        peak = _rss_kb(proc.pid, "VmHWM")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
    return elapsed, int(rss), peak


def sample_store(cache: Path) -> Path:
    env = dict(os.environ, CONTEXTLENS_CACHE=str(cache))
    subprocess.run([*_contextlens(), "list"], env=env, check=True, stdout=subprocess.DEVNULL)
    return next(cache.glob("*.duckdb"))


def first_time(db: Path) -> bytes:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    (at,) = con.sql("SELECT assembled_at FROM assembly_summary "
                    "ORDER BY assembled_at, assembly_id, export_id LIMIT 1").fetchall()[0]
    con.close()
    return at.strftime("%Y-%m-%d %H:%M:%S").encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--db", type=Path, default=None, help="store (default: the bundled sample)")
    ap.add_argument("--size", default="140x40", help="terminal columns x lines")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds before the peak RSS is read")
    args = ap.parse_args()
    cols, lines = (int(v) for v in args.size.split("x"))
    cache = Path(tempfile.mkdtemp(prefix="bench-first-page-"))
    env = dict(os.environ, CONTEXTLENS_CACHE=str(cache), TERM="xterm-256color",
               COLUMNS=str(cols), LINES=str(lines))
    env.pop("TEXTUAL", None)
    try:
        db = args.db or sample_store(cache)
        sentinel = first_time(db)
        cmds = {
            "minimal Textual app": [sys.executable, str(HERE / "first_page_baseline.py"), str(db)],
            "contextlens open": [*_contextlens(), "open", str(db)],
        }
        for argv in cmds.values():  # warm: the OS's file cache, compiled bytecode
            first_rows(argv, sentinel, env, cols, lines, settle=0.2)
        results: dict[str, list[tuple[float, int, int]]] = {name: [] for name in cmds}
        loads = []
        for _ in range(args.runs):
            for name, argv in cmds.items():
                loads.append(os.getloadavg()[0])
                results[name].append(first_rows(argv, sentinel, env, cols, lines, args.settle))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    base = {k: statistics.median(r[k] for r in results["minimal Textual app"]) for k in range(3)}
    print(f"store {db.name}, terminal {cols}x{lines}, {args.runs} runs interleaved; "
          f"load average (1 min) {min(loads):.1f}-{max(loads):.1f}, now {os.getloadavg()}")
    print("| process | first rows on screen (median) | ratio | RSS then | ratio | peak RSS "
          f"{args.settle:.0f} s later | ratio | each run's time ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, runs in results.items():
        t, rss, peak = (statistics.median(r[k] for r in runs) for k in range(3))
        each = ", ".join(f"{ours[0] / theirs[0]:.2f}"
                         for ours, theirs in zip(runs, results["minimal Textual app"]))
        print(f"| `{name}` | {t * 1000:.0f} ms | {t / base[0]:.2f}x | {rss / 1024:.0f} MB | "
              f"{rss / base[1]:.2f}x | {peak / 1024:.0f} MB | {peak / base[2]:.2f}x | {each} |")


if __name__ == "__main__":
    main()
