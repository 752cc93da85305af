"""Verify benchmark: throughput and peak memory of verify on stores of growing size.

    python benchmarks/bench_verify.py --scale 10000 --scale 100000 --work DIR

For each scale, the store is built as a user would (``contextlens sample --scale N --out
DIR`` then ``contextlens ingest DIR --db X``; kept in --work and reused), then:

1. verify in this process (``replay.verify.verify`` streaming its verdicts to a counter, as
   the CLI does), in records per second, against
   ``SELECT assembly_id, count(*) FROM assembly_records GROUP BY assembly_id`` over the same
   store in the same process;
2. peak RSS (and wall time) of ``contextlens verify --db X > /dev/null`` and of
   ``contextlens verify --db X --json > /dev/null``, each in a child process of its own
   (``os.wait4``'s ``ru_maxrss``).

Prints one Markdown table row per scale.
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

import duckdb

from ingest.store import Store
from replay.policy import load_registry
from replay.verify import verify

CLI = [sys.executable, "-m", "inspector.cli"]


def store_for(scale: int, work: Path) -> Path:
    export, db = work / f"scale-{scale}", work / f"scale-{scale}.duckdb"
    if not db.exists():
        subprocess.run([*CLI, "sample", "--scale", str(scale), "--out", str(export)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([*CLI, "ingest", str(export), "--db", str(db)], check=True,
                       stdout=subprocess.DEVNULL)
    return db


def in_process(db: Path) -> tuple[float, float, int, dict[str, int]]:
    """(verify seconds, GROUP BY seconds, records, verdict counts)."""
    registry = load_registry(None)
    reported = [0]
    with Store.open(db) as store:
        t0 = time.perf_counter()
        result = verify(store, registry, on_verdict=lambda _v: reported.__setitem__(0, reported[0] + 1))
        t_verify = time.perf_counter() - t0
    assert reported[0] == result.checked - result.faithful
    con = duckdb.connect(str(db), read_only=True)
    n_records = con.execute("SELECT count(*) FROM assembly_records").fetchall()[0][0]
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        con.sql("SELECT assembly_id, count(*) FROM assembly_records GROUP BY assembly_id").to_arrow_table()
        times.append(time.perf_counter() - t0)
    con.close()
    counts = {k: getattr(result, k) for k in ("checked", "faithful", "drifted", "inconsistent",
                                              "not_replayable")}
    return t_verify, statistics.median(times), n_records, counts


def start(argv: list[str]) -> tuple[subprocess.Popen, float]:
    """One command started, its stdout to /dev/null."""
    with open(os.devnull, "wb") as null:
        return subprocess.Popen(argv, stdout=null, stderr=subprocess.DEVNULL), time.perf_counter()


def finish(started: tuple[subprocess.Popen, float]) -> tuple[float, int]:
    """(wall seconds, peak RSS in MB) of a started command, once it ends."""
    proc, t0 = started
    _pid, _status, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped above
    return time.perf_counter() - t0, usage.ru_maxrss // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, action="append", help="assemblies (repeatable)")
    ap.add_argument("--work", type=Path, default=None, help="where the stores are kept")
    ap.add_argument("--concurrent", action="store_true",
                    help="run the two commands at the same time as the in-process verify "
                         "(peak RSS is per process either way; times are slower)")
    args = ap.parse_args()
    scales = args.scale or [10_000, 100_000]
    work = args.work or Path(tempfile.mkdtemp(prefix="contextlens-bench-verify-"))
    work.mkdir(parents=True, exist_ok=True)
    print("| assemblies | records | verdicts | verify (in process) | GROUP BY | ratio "
          "| `verify > /dev/null` | `verify --json > /dev/null` |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for scale in scales:
            db = store_for(scale, work)
            text = [*CLI, "verify", "--db", str(db)]
            if args.concurrent:
                runs = [start(text), start([*text, "--json"])]
                t_verify, t_group, n, counts = in_process(db)
                (t_text, rss_text), (t_json, rss_json) = (finish(r) for r in runs)
            else:
                t_verify, t_group, n, counts = in_process(db)
                t_text, rss_text = finish(start(text))
                t_json, rss_json = finish(start([*text, "--json"]))
            verdicts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items()
                                 if k != "checked" and v)
            print(f"| {counts['checked']:,} | {n:,} | {verdicts} "
                  f"| {n / t_verify:,.0f} records/s ({t_verify:.1f} s) "
                  f"| {n / t_group:,.0f} records/s ({t_group * 1000:.0f} ms) "
                  f"| {t_verify / t_group:,.0f}x slower "
                  f"| {t_text:.1f} s, {rss_text} MB | {t_json:.1f} s, {rss_json} MB |", flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
