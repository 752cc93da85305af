"""Start-up benchmark: how long `contextlens --help` and `contextlens list` (on the bundled
52-request sample) take, as ratios to `python -c 'import duckdb'` on the same machine at the
same moment (DuckDB is what any contextlens command that reads a store must import, so it is
the floor; the ratio is steadier than seconds on a loaded machine).

Each command runs in a fresh process, the three interleaved, ``--runs`` times; the figure is
each command's median wall time. The sample's store is built once before timing (in a cache
folder of the benchmark's own), so `list` times reading it, not ingesting it. Run:

    python benchmarks/bench_startup.py [--runs 9]

To time other code with the same interpreter (e.g. the previous commit, for a "before"),
put its checkout first on the path: ``PYTHONPATH=BEFORE_DIR python benchmarks/...``
(the console script then imports that checkout's packages).

Goal (issue 26): `--help` within 1.5x of importing DuckDB, `list` within 2x.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _contextlens() -> list[str]:
    """The console script next to this interpreter (what a user runs), else the module."""
    script = Path(sys.executable).with_name("contextlens")
    return [str(script)] if script.exists() else [sys.executable, "-m", "inspector.cli"]


def _wall(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    env = dict(os.environ, CONTEXTLENS_CACHE=str(cache))
    cmds = {
        "python -c 'import duckdb'": [sys.executable, "-c", "import duckdb"],
        "contextlens --help": [*_contextlens(), "--help"],
        "contextlens list (sample)": [*_contextlens(), "list"],
    }
    try:
        for argv in cmds.values():  # warm: the sample's store, the OS's file cache
            _wall(argv, env)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(args.runs):
            for name, argv in cmds.items():
                times[name].append(_wall(argv, env))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    base = statistics.median(times["python -c 'import duckdb'"])
    print(f"| command | median wall (s), {args.runs} runs | ratio to importing duckdb |")
    print("|---|---:|---:|")
    for name, walls in times.items():
        median = statistics.median(walls)
        print(f"| `{name}` | {median:.3f} | {median / base:.2f}x |")


if __name__ == "__main__":
    main()
