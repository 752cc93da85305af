"""The local engine against the Ray engine with 1 and 2 workers, on one generated export.

    python benchmarks/bench_ray.py --scale 20000 [--partitions 8] [--a v4 --b v5]

Needs the Ray extra (``pip install 'contextlens[ray]'``). Generates the export (and its
store, for the local engine) under ``benchmarks/out/`` (gitignored) unless already there,
starts one local Ray instance of 2 CPUs, then in one run:

1. the local engine: ``replay.compare.compare`` on the ingested store (median of ``--repeat``);
2. ``compare_on_ray`` over the Parquet export with 1 worker (one task at a time) and with
   2 workers, the same partitions (median of ``--repeat`` each);
3. the ratios: each Ray time over the local time, and 1 worker over 2 workers;
4. per partition (from the 2-worker run): requests, wall time of the task (load its rows
   from Parquet into its own DuckDB, then the compare), requests per second, and the
   worker's peak RSS;
5. the fixed cost of a Ray run: the work list (Ray Data reading the conversation ids) alone.

Every Ray result is checked equal to the local one (timing aside) before a figure is shown.
The figures are written to ``benchmarks/out/bench_ray.json`` too.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from timing import timed

OUT = Path(__file__).resolve().parent / "out"


def _timed_partition(job: Any, export: int, conversation_ids: Any) -> dict[str, Any]:
    """The partition function, with its wall time and the worker's peak RSS."""
    from replay.distributed import run_partition

    t0 = time.perf_counter()
    output = run_partition(job, export, conversation_ids)
    output["stats"] = {"seconds": time.perf_counter() - t0,
                       "requests": output["result"].requests,
                       "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    return output


def prepare(scale: int) -> tuple[Path, Path]:
    from ingest.store import ingest
    from replay.sample_export import write_scale

    export = OUT / f"ray-{scale}"
    db = OUT / f"ray-{scale}.duckdb"
    if not (export / "manifest.json").exists():
        t0 = time.perf_counter()
        write_scale(export, scale)
        print(f"generated {export.name} in {time.perf_counter() - t0:.1f} s", flush=True)
    if not db.exists():
        ingest(export, db)
    return export, db


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=20000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--a", default="v4")
    parser.add_argument("--b", default="v5")
    args = parser.parse_args()

    from ray import cloudpickle

    from ingest.store import Store
    from replay import distributed
    from replay.compare import compare
    from replay.policy import load_registry

    # the timed partition function goes to the workers by value: they need not import this
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    OUT.mkdir(exist_ok=True)
    export, db = prepare(args.scale)
    registry = load_registry(None)
    with Store.open(db) as store:
        records = store._rows("SELECT count(*) FROM assembly_records")[0][0]
        local_s, local = timed(lambda: compare(store, registry, args.a, args.b), args.repeat)
    expected = local.to_json()
    figures: dict[str, Any] = {"scale": args.scale, "assembly_records": records,
                               "partitions": args.partitions, "a": args.a, "b": args.b,
                               "local_s": local_s}
    print(f"export: {args.scale:,} requests, {records:,} assembly_records rows; "
          f"compare {args.a} -> {args.b}, {args.partitions} partitions")
    print(f"local engine: {local_s:.2f} s ({args.scale / local_s:,.0f} requests/s)", flush=True)

    with distributed.ray_session() as ray:
        t0 = time.perf_counter()
        distributed._work_list(ray, distributed._open_exports([export]))
        figures["work_list_s"] = time.perf_counter() - t0
        for workers in (1, 2):
            seconds, result = timed(lambda: distributed.compare_on_ray(
                [export], registry, args.a, args.b, partitions=args.partitions,
                workers=workers), args.repeat)
            if result.to_json() != expected:
                raise SystemExit(f"Ray with {workers} worker(s) disagrees with the local engine")
            figures[f"ray_{workers}_s"] = seconds
            print(f"ray, {workers} worker{'s' if workers > 1 else ''}: {seconds:.2f} s "
                  f"({args.scale / seconds:,.0f} requests/s; {seconds / local_s:.2f}x the local "
                  "time)", flush=True)
        stats = _partition_stats(distributed, export, registry, args)
    figures["ray_1_over_local"] = figures["ray_1_s"] / local_s
    figures["ray_2_over_local"] = figures["ray_2_s"] / local_s
    figures["speedup_2_over_1"] = figures["ray_1_s"] / figures["ray_2_s"]
    figures["per_partition"] = stats
    print(f"ratios: ray(1)/local {figures['ray_1_over_local']:.2f}x, ray(2)/local "
          f"{figures['ray_2_over_local']:.2f}x, ray(1)/ray(2) {figures['speedup_2_over_1']:.2f}x")
    print(f"fixed cost, the work list alone (Ray Data): {figures['work_list_s']:.2f} s")
    for s in stats:
        print(f"  partition {s['partition']}: {s['requests']:,} requests in {s['seconds']:.2f} s "
              f"({s['requests'] / s['seconds']:,.0f} requests/s), worker peak RSS "
              f"{s['rss_mb']:,.0f} MB")
    (OUT / "bench_ray.json").write_text(json.dumps(figures, indent=2))


def _partition_stats(distributed: Any, export: Path, registry: Any, args: Any) -> list[dict[str, Any]]:
    """One 2-worker run's per-partition stats, taken from the task outputs."""
    from ingest.filters import parse_filter

    opened = distributed._open_exports([export])
    with distributed.ray_session() as ray:
        plan = distributed.plan_partitions(distributed._work_list(ray, opened), args.partitions)
        job = distributed.RayJob(opened, registry, "compare", args.a, args.b, parse_filter(None))
        outputs = list(distributed._run(ray, job, plan, None, 2, _timed_partition))
    return [dict(o["stats"], partition=i) for i, o in enumerate(outputs)]


if __name__ == "__main__":
    main()
