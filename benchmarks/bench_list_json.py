"""Whole-list output against a plain dump (issue 28, point 3).

    python benchmarks/bench_list_json.py --scales 200000 [1000000] [--repeat 3]

For each scale, over a faithful synthetic store (``contextlens sample --scale N``, then
``contextlens ingest``; both kept under ``--work``, default benchmarks/out/list-json (gitignored),
and reused):

- ``contextlens list --json --db STORE > FILE``: the whole list, masked, as a program reads it
  (stdout a file: compact JSON);
- the plain dump: a Python process that reads the same columns in the same order straight
  from DuckDB (``fetchmany``) and writes them as one JSON array (``json.dumps`` per row),
  nothing masked, to a file: what any script would write; its content is checked equal to
  ours (parsed) once per scale;
- ``contextlens list --db STORE > FILE`` (the text table, whole) and the time to the first
  lines of ``list | head -3`` and ``list --json | head -3``.

Each command runs ``--repeat`` times, alternating with the baseline; printed: median wall
and CPU seconds (the children's user + system time: on a shared machine the steadier
figure), the ratios to the baseline (median of the per-round ratios), and the load average
at each figure. Goal: ``list --json`` within 1.5x of the dump.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

DUMP = r"""
import json, sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
con.execute("SET enable_progress_bar = false")  # it would write to stdout
cols = sys.argv[2]
cur = con.execute(f"SELECT {cols} FROM assembly_summary "
                  "ORDER BY assembled_at, assembly_id, export_id")
names = [d[0] for d in cur.description]
out = sys.stdout
default = lambda v: v.isoformat()
n = 0
out.write("[")
while rows := cur.fetchmany(4096):
    out.write(("," if n else "") + "\n" + ",\n".join(
        json.dumps(dict(zip(names, r)), ensure_ascii=False, separators=(",", ":"),
                   default=default) for r in rows))
    n += len(rows)
out.write("\n]\n")
"""


def contextlens() -> list[str]:
    exe = shutil.which("contextlens")
    return [exe] if exe else [sys.executable, "-m", "inspector.cli"]


def run_to_file(argv: list[str], out: Path) -> dict[str, float]:
    """``argv`` with stdout to ``out``: wall seconds and CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with out.open("wb") as f:
        subprocess.run(argv, check=True, stdout=f, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "load": os.getloadavg()[0]}


def first_lines(argv: list[str], lines: int = 3) -> float:
    """Seconds until ``argv`` has written ``lines`` lines (``| head``), then it is stopped."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    for _ in range(lines):
        if not proc.stdout.readline():
            break
    took = time.perf_counter() - t0
    proc.stdout.close()  # as head does: the writer sees a closed pipe
    proc.wait()
    return took


def make_store(work: Path, n: int) -> Path:
    db = work / f"s{n}.duckdb"
    if db.exists():
        return db
    export = work / f"s{n}"
    t0 = time.perf_counter()
    subprocess.run([*contextlens(), "sample", "--scale", str(n), "--out", str(export), "--force"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*contextlens(), "ingest", str(export), "--db", str(db)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"  store of {n:,} requests made in {time.perf_counter() - t0:.0f} s "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    shutil.rmtree(export, ignore_errors=True)
    return db


def same_content(ours: Path, dump: Path) -> bool:
    with ours.open() as a, dump.open() as b:
        return json.load(a) == json.load(b)


def med(values: list[float]) -> float:
    return statistics.median(values)


def bench(db: Path, work: Path, repeat: int) -> None:
    from ingest.store import LIST_COLUMNS

    cols = ", ".join(LIST_COLUMNS)
    cl = [*contextlens(), "list", "--db", str(db)]
    ours_file, dump_file, text_file = (work / f"{db.stem}.{k}" for k in ("list.json", "dump.json",
                                                                        "list.txt"))
    env_note = f"(cpus {os.cpu_count()})"
    rounds: list[tuple[dict[str, float], dict[str, float], dict[str, float]]] = []
    for i in range(repeat):
        ours = run_to_file([*cl, "--json"], ours_file)
        dump = run_to_file([sys.executable, "-c", DUMP, str(db), cols], dump_file)
        text = run_to_file(cl, text_file)
        rounds.append((ours, dump, text))
        print(f"  round {i + 1}: list --json {ours['wall']:.1f} s wall / {ours['cpu']:.1f} s CPU "
              f"(load {ours['load']:.1f}); dump {dump['wall']:.1f} / {dump['cpu']:.1f} "
              f"(load {dump['load']:.1f}); list (text) {text['wall']:.1f} / {text['cpu']:.1f} "
              f"(load {text['load']:.1f})", flush=True)
    print(f"  content equal to the dump's: {same_content(ours_file, dump_file)}")
    for label, k in (("wall", "wall"), ("CPU", "cpu")):
        o, d, t = (med([r[j][k] for r in rounds]) for j in range(3))
        ratio = med([r[0][k] / r[1][k] for r in rounds])
        tratio = med([r[2][k] / r[1][k] for r in rounds])
        print(f"  {label:>4}: list --json {o:.2f} s, dump {d:.2f} s, ratio {ratio:.2f}x; "
              f"list (text) {t:.2f} s, {tratio:.2f}x the dump  {env_note}")
    heads_json = [first_lines([*cl, "--json"]) for _ in range(repeat)]
    heads_text = [first_lines(cl) for _ in range(repeat)]
    print(f"  first 3 lines: list --json | head {med(heads_json):.2f} s, list | head "
          f"{med(heads_text):.2f} s (load {os.getloadavg()[0]:.1f})")
    for f in (ours_file, dump_file, text_file):
        f.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[200_000])
    ap.add_argument("--work", type=Path, default=Path(__file__).resolve().parent / "out" / "list-json")
    ap.add_argument("--db", type=Path, default=None, help="an existing store (one scale)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    for n in ([0] if args.db else args.scales):
        db = args.db or make_store(args.work, n)
        print(f"{db} (load {os.getloadavg()[0]:.1f}):", flush=True)
        bench(db, args.work, args.repeat)


if __name__ == "__main__":
    main()
