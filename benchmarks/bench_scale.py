"""Scale benchmarks over faithful synthetic stores (``contextlens sample --scale N``).

    python benchmarks/bench_scale.py --scales 10000 200000 --verify-at 200000

For each scale: generation (``contextlens sample --scale N``: wall, CPU, peak RSS), ingest,
``contextlens list --json | head`` and ``list | head`` (wall and peak RSS of contextlens)
against a process that prints the same columns in the same order straight from DuckDB, and
the first page (``ReadModel.requests``) against the same columns, order, limit and count
from DuckDB in the same process. At ``--verify-at``: ``replay.verify.verify`` over the whole
store in a fresh process (verdict counts, which must equal the drift injected on purpose;
records/s against ``SELECT assembly_id, count(*) FROM assembly_records GROUP BY
assembly_id`` in the same process; peak RSS). Then a replay + diff of one 2,000-record
assembly through the read model against an Arrow reference over the same rows.

Everything is called through the public functions (the CLI, ``ReadModel``,
``replay.verify.verify``), so the figures follow whatever main does later. Data goes to
``--work`` (default ``benchmarks/out``, not tracked); existing exports and stores are reused.
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

from bench_replay import big_replay
from timing import cpu_timed, timed

HERE = Path(__file__).resolve().parent


def run_timed(argv: list[str]) -> dict[str, float]:
    """Run a command under /usr/bin/time: wall seconds, CPU seconds, peak RSS (MiB)."""
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-scale-time-{os.getpid()}"
    subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", "-o", str(out), *argv], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    e, u, s, m = out.read_text().split()[-4:]
    out.unlink()
    return {"wall": float(e), "cpu": float(u) + float(s), "rss": int(m) / 1024}


def head_time(command: str, repeat: int = 3) -> dict[str, float]:
    """``command | head -3``: median wall seconds of the pipeline, median CPU seconds and
    peak RSS (MiB) of ``command`` (on a shared machine, CPU time is the steadier figure)."""
    walls, cpus, rss = [], [], 0.0
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-scale-head-{os.getpid()}"
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(f"/usr/bin/time -f '%U %S %M' -o {out} {command} | head -3 > /dev/null",
                       shell=True, check=True)
        walls.append(time.perf_counter() - t0)
        u, s, m = out.read_text().split()[-3:]
        cpus.append(float(u) + float(s))
        rss = max(rss, int(m) / 1024)
    out.unlink(missing_ok=True)
    return {"wall": statistics.median(walls), "cpu": statistics.median(cpus), "rss": rss}


BASELINE_LIST = r"""
import json, sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
cur = con.execute("SELECT " + sys.argv[2] + " FROM assembly_summary "
                  "ORDER BY assembled_at, assembly_id, export_id")
names = [d[0] for d in cur.description]
try:
    while rows := cur.fetchmany(1000):
        for r in rows:
            sys.stdout.write(json.dumps(dict(zip(names, r)), default=str) + "\n")
except BrokenPipeError:
    pass
"""


def first_page(db: Path) -> tuple[float, float, int, float, float]:
    import duckdb

    from ingest.store import LIST_COLUMNS, Store
    from readmodel import ReadModel

    def ours():
        with Store.open(db) as store:
            page = ReadModel(store).requests(None, sort="assembled_at", limit=200)
        return page.total

    def baseline():
        con = duckdb.connect(str(db), read_only=True)
        con.sql(f"SELECT {', '.join(LIST_COLUMNS)} FROM assembly_summary "
                "ORDER BY assembled_at, assembly_id, export_id LIMIT 200").to_arrow_table()
        total = con.sql("SELECT count(*) FROM assembly_summary").fetchall()[0][0]
        con.close()
        return total

    t_ours, total = timed(ours)
    t_base, total_b = timed(baseline)
    assert total == total_b, (total, total_b)
    return t_ours, t_base, total, cpu_timed(ours), cpu_timed(baseline)


def verify_child(db: Path) -> None:
    """In a fresh process: verify the whole store, then the GROUP BY baseline."""
    import duckdb

    from ingest.store import Store
    from replay.policy import load_registry
    from replay.verify import verify

    registry = load_registry(None)
    t0, c0 = time.perf_counter(), time.process_time()
    with Store.open(db) as store:
        result = verify(store, registry)
    t_verify, c_verify = time.perf_counter() - t0, time.process_time() - c0
    rss_verify = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    con = duckdb.connect(str(db), read_only=True)
    n_records = con.execute("SELECT count(*) FROM assembly_records").fetchall()[0][0]
    def group_by():
        return con.sql("SELECT assembly_id, count(*) FROM assembly_records GROUP BY assembly_id").to_arrow_table()

    t_group, _ = timed(group_by, repeat=3)
    c_group = cpu_timed(group_by, repeat=3)
    con.close()
    print(json.dumps({
        "checked": result.checked, "faithful": result.faithful, "drifted": result.drifted,
        "inconsistent": result.inconsistent, "not_replayable": result.not_replayable,
        "drifted_ids": sorted(v.assembly_id for v in result.of("drifted")),
        "records": n_records, "verify_s": t_verify, "verify_cpu_s": c_verify,
        "group_by_s": t_group, "group_by_cpu_s": c_group, "rss_mib": rss_verify}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[10_000, 200_000])
    ap.add_argument("--verify-at", type=int, default=200_000, help="the scale verify runs on (0: none)")
    ap.add_argument("--work", type=Path, default=HERE / "out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--drift", type=float, default=0.01)
    ap.add_argument("--verify-child", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.verify_child:
        verify_child(args.verify_child)
        return
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    exe = shutil.which("contextlens") or "contextlens"
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores)")
    for n in args.scales:
        export, db = work / f"scale-{n}", work / f"scale-{n}.duckdb"
        gen = None
        if not (export / "drift.json").exists():
            gen = run_timed([exe, "sample", "--scale", str(n), "--seed", str(args.seed),
                             "--drift", str(args.drift), "--out", str(export)])
        drift = json.loads((export / "drift.json").read_text())
        if not db.exists():
            ing = run_timed([exe, "ingest", str(export), "--db", str(db)])
        else:
            ing = None
        j = head_time(f"{exe} list --db {db} --json")
        t = head_time(f"{exe} list --db {db}")
        from ingest.store import LIST_COLUMNS

        b = head_time(f"{sys.executable} -c '{BASELINE_LIST}' {db} '{', '.join(LIST_COLUMNS)}'")
        t_page, t_page_b, total, c_page, c_page_b = first_page(db)
        print(f"\n## {n:,} assemblies ({total:,} in the store; {drift['drifted']} drifted on purpose)")
        if gen:
            print(f"generation: {gen['wall']:.1f} s wall, {gen['cpu']:.1f} s CPU, peak RSS {gen['rss']:.0f} MiB")
        if ing:
            print(f"ingest: {ing['wall']:.1f} s wall, {ing['cpu']:.1f} s CPU, peak RSS {ing['rss']:.0f} MiB")
        for label, m in (("list --json | head -3", j), ("list | head -3", t),
                         ("baseline process (DuckDB, same columns and order, JSON lines) | head -3", b)):
            print(f"{label}: {m['wall']:.2f} s wall, {m['cpu']:.2f} s CPU, {m['rss']:.0f} MiB")
        print(f"first page (ReadModel.requests, 200 rows + count): {t_page * 1000:.1f} ms wall, "
              f"{c_page * 1000:.1f} ms CPU; DuckDB same columns/order/limit/count: {t_page_b * 1000:.1f} ms "
              f"wall, {c_page_b * 1000:.1f} ms CPU; {t_page / t_page_b:.2f}x wall, {c_page / c_page_b:.2f}x CPU")
        if n == args.verify_at:
            out = subprocess.run([sys.executable, __file__, "--verify-child", str(db)], check=True,
                                 capture_output=True, text=True)
            v = json.loads(out.stdout.strip().splitlines()[-1])
            ok = v["drifted_ids"] == sorted(drift["drifted_ids"]) and v["inconsistent"] == 0
            rate, base = v["records"] / v["verify_s"], v["records"] / v["group_by_s"]
            print(f"verify: {v['checked']:,} checked, {v['faithful']:,} faithful, {v['drifted']:,} drifted, "
                  f"{v['inconsistent']} inconsistent (drifted ids equal the injected ones: {ok}); "
                  f"{v['records']:,} records in {v['verify_s']:.1f} s wall ({v['verify_cpu_s']:.1f} s CPU): "
                  f"{rate:,.0f} records/s ({v['records'] / v['verify_cpu_s']:,.0f} per CPU second); "
                  f"GROUP BY {base:,.0f} records/s ({v['records'] / v['group_by_cpu_s']:,.0f} per CPU second); "
                  f"{base / rate:,.0f}x slower wall, {v['verify_cpu_s'] / v['group_by_cpu_s']:,.0f}x CPU; "
                  f"peak RSS {v['rss_mib']:.0f} MiB")
            if not ok:
                raise SystemExit("verify did not report exactly the injected drift")
    r = big_replay(work)
    print(f"\nreplay + diff of a {r['records']:,}-record assembly (ReadModel.diff against the "
          f"recording, {r['changes']} records changed): {r['ours_wall'] * 1000:.1f} ms wall, "
          f"{r['ours_cpu'] * 1000:.1f} ms CPU; Arrow reference (read the same rows, window + "
          f"budget, join): {r['arrow_wall'] * 1000:.1f} ms wall, {r['arrow_cpu'] * 1000:.1f} ms CPU; "
          f"{r['ours_wall'] / r['arrow_wall']:.1f}x wall, {r['ours_cpu'] / r['arrow_cpu']:.1f}x CPU")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores)")


if __name__ == "__main__":
    main()
