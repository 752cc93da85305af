"""The local engine against the Ray engine on one generated export: time, ratio, peak memory.

    python benchmarks/bench_ray.py --scale 100000 [--repeat 2] [--partitions N] [--a v4 --b v5]
    python benchmarks/bench_ray.py --scale 100000 --address 127.0.0.1:6379   # a running cluster

Needs the Ray extra (``pip install 'contextlens[ray]'``). Generates the export (and its
store, for the local engine) under ``benchmarks/out/`` (gitignored) unless already there,
then in one process:

1. the local engine, ``replay.compare.compare`` on the ingested store, with 1 worker and with
   its default (one process per CPU), each the median of ``--repeat``, and the peak memory of
   this process and its workers (the sum of their proportional set sizes, sampled);
2. Ray started (a local instance of 2 CPUs, object store sized by ``object_store_size``), or
   connected to ``--address``: that cost alone;
3. ``compare_on_ray`` over the Parquet export, default partitions (from the data and the
   cluster's CPUs) unless ``--partitions``: the first run (workers importing contextlens)
   and the median of ``--repeat`` runs after it, the peak memory of every process of the
   run (this one, Ray's daemons and workers; with ``--address`` the cluster's processes are
   not this one's children: the workers' own peak RSS is shown instead);
4. the ratios, Ray over each local figure;
5. per partition: requests, the time to load its rows from Parquet, the time of the whole
   task, and the worker's peak RSS.

Every Ray result is checked equal to the local one before a figure is shown: the JSON
(``Comparison.to_json``, serialised) and the per-request rows (``--out``'s) byte for byte.
Each figure is printed with ``os.getloadavg()`` (the machine is shared). The figures are
written to ``benchmarks/out/bench_ray.json`` too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

OUT = Path(__file__).resolve().parent / "out"


def load() -> str:
    return "load " + "/".join(f"{x:.1f}" for x in os.getloadavg())


# ----------------------------------------------------------------------------- memory


def _tree(pid: int) -> list[int]:
    """``pid`` and every process under it (Ray's daemons and workers for a local instance)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


def _pss_mb(pids: list[int]) -> float:
    """The sum of the processes' proportional set sizes: shared pages (the object store,
    shared libraries) counted once over all of them, not once per process."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total / 1024


class PeakMemory:
    """The peak PSS of this process's tree while the block runs, sampled every 0.2 s."""

    def __init__(self) -> None:
        self.peak = 0.0
        self._stop = threading.Event()

    def __enter__(self) -> "PeakMemory":
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, _pss_mb(_tree(os.getpid())))
            if self._stop.wait(0.2):
                return

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (a local run's
    worker processes; not Ray's, which live on)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime


def measured(fn: Callable[[], Any], repeat: int) -> tuple[list[float], float, Any, float]:
    """(each run's seconds, the peak memory over all runs in MB, the last result, the
    median CPU seconds of a run (``_cpu_s``))."""
    times, cpus, result = [], [], None
    with PeakMemory() as memory:
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), _cpu_s()
            result = fn()
            times.append(time.perf_counter() - t0)
            cpus.append(_cpu_s() - c0)
    return times, memory.peak, result, statistics.median(cpus)


# ----------------------------------------------------------------------------- partitions


def _timed_partition(job: Any, export: int, conversation_ids: Any) -> dict[str, Any]:
    """The partition function, with its wall time, the share spent loading its rows, and
    the worker's peak RSS."""
    from replay import distributed

    loading = [0.0]
    load_rows = distributed.partition_store

    def timed_load(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return load_rows(*args, **kwargs)
        finally:
            loading[0] += time.perf_counter() - t

    distributed.partition_store = timed_load
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        output = distributed.run_partition(job, export, conversation_ids)
    finally:
        distributed.partition_store = load_rows
    output["stats"] = {"seconds": time.perf_counter() - t0, "load_s": loading[0],
                       "cpu_s": time.process_time() - c0,
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


def _save_answer(path: Path, answer: tuple[dict, Any]) -> None:
    """The local answer, for ``--skip-local`` runs: the rows as Arrow IPC, the JSON in their
    schema's metadata."""
    import pyarrow as pa

    rows = answer[1].replace_schema_metadata({"json": json.dumps(answer[0])})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    path.write_bytes(sink.getvalue().to_pybytes())


def _same_bytes(local: tuple[dict, Any], ray: tuple[dict, Any]) -> bool:
    """The JSON serialised, and the per-request rows as Arrow IPC, equal byte for byte."""
    import pyarrow as pa

    def ipc(table: Any) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema.remove_metadata()) as writer:
            writer.write_table(table.replace_schema_metadata(None).combine_chunks())
        return sink.getvalue().to_pybytes()

    return (json.dumps(local[0], sort_keys=True) == json.dumps(ray[0], sort_keys=True)
            and ipc(local[1]) == ipc(ray[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=None,
                        help="default: from the data and the cluster's CPUs")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--address", default=None,
                        help="a running Ray cluster (HOST:PORT, auto); default: a local instance")
    parser.add_argument("--skip-local", action="store_true",
                        help="the Ray figures only: the local figures and answer are the last "
                             "full run's at this scale (benchmarks/out/bench_ray-SCALE.*)")
    parser.add_argument("--no-partition-stats", action="store_true",
                        help="skip the run that times each partition")
    parser.add_argument("--a", default="v4")
    parser.add_argument("--b", default="v5")
    args = parser.parse_args()

    import pyarrow as pa
    from ray import cloudpickle

    from ingest.store import Store
    from replay import distributed
    from replay.compare import compare
    from replay.engine import available_cpus
    from replay.policy import load_registry

    # the timed partition function goes to the workers by value: they need not import this
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    OUT.mkdir(exist_ok=True)
    export, db = prepare(args.scale)
    registry = load_registry(None)
    figures: dict[str, Any] = {"scale": args.scale, "a": args.a, "b": args.b,
                               "address": args.address, "cpus": available_cpus()}
    saved = OUT / f"bench_ray-{args.scale}.json"

    def local_run(workers: int | None) -> tuple[dict, Any]:
        rows: list[Any] = []
        with Store.open(db) as store:
            result = compare(store, registry, args.a, args.b, out=rows.append, workers=workers)
        return result.to_json(), pa.concat_tables(rows)

    print(f"export: {args.scale:,} requests; compare {args.a} -> {args.b}; "
          f"{available_cpus()} CPUs here", flush=True)
    answer_file = OUT / f"bench_ray-{args.scale}-{args.a}-{args.b}.arrow"
    if args.skip_local:
        previous = json.loads(saved.read_text()) if saved.exists() else {}
        for key in ("local_1", "local_default"):
            figures[key] = previous.get(key, {"seconds": float("nan"), "load": "not run"})
        if answer_file.exists():
            with pa.ipc.open_stream(answer_file.read_bytes()) as reader:
                rows = reader.read_all()
            expected = (json.loads(rows.schema.metadata[b"json"]), rows)
        else:
            expected = local_run(1)  # the answer to check against (not timed)
            _save_answer(answer_file, expected)
        print(f"local figures of the last full run ({figures['local_1']['load']}): 1 worker "
              f"{figures['local_1']['seconds']:.2f} s, default workers "
              f"{figures['local_default']['seconds']:.2f} s", flush=True)
    else:
        for key, workers in (("local_1", 1), ("local_default", None)):
            times, peak, expected, cpu = measured(lambda: local_run(workers), args.repeat)
            figures[key] = {"seconds": statistics.median(times), "peak_mb": peak, "cpu_s": cpu,
                            "load": load()}
            print(f"local engine, {'1 worker' if workers else 'default workers'}: "
                  f"{figures[key]['seconds']:.2f} s (median of {args.repeat}), {cpu:.1f} CPU s, "
                  f"peak memory {peak:,.0f} MB [{load()}]", flush=True)
        _save_answer(answer_file, expected)
    best_local = min(figures["local_1"]["seconds"], figures["local_default"]["seconds"])

    t0 = time.perf_counter()
    session = distributed.ray_session(args.address, distributed.object_store_size(
        args.scale * distributed.ROW_BYTES))
    with PeakMemory() as idle:
        ray = session.__enter__()
    try:
        figures["ray_start_s"] = time.perf_counter() - t0
        cpus = int(ray.cluster_resources().get("CPU", 1))
        nodes = len([n for n in ray.nodes() if n.get("Alive")])
        figures.update(ray_cpus=cpus, ray_nodes=nodes, ray_idle_peak_mb=idle.peak)
        opened = distributed._open_exports([export])
        partitions = args.partitions or distributed.default_partitions(
            cpus, args.scale, distributed.partition_requests(opened))
        figures["partitions"] = partitions
        print(f"Ray {'connected to ' + args.address if args.address else 'started'} in "
              f"{figures['ray_start_s']:.2f} s ({nodes} node(s), {cpus} CPUs); "
              f"{partitions} partitions [{load()}]", flush=True)

        def ray_run() -> tuple[dict, Any]:
            rows: list[Any] = []
            result = distributed.compare_on_ray([export], registry, args.a, args.b,
                                                partitions=args.partitions, out=rows.append)
            return result.to_json(), pa.concat_tables(rows)

        first, first_peak, answer, _ = measured(ray_run, 1)
        if not _same_bytes(expected, answer):
            raise SystemExit("Ray disagrees with the local engine")
        times, peak, answer, driver_cpu = measured(ray_run, args.repeat)
        if not _same_bytes(expected, answer):
            raise SystemExit("Ray disagrees with the local engine")
        ray_s = statistics.median(times)
        figures["ray"] = {"first_s": first[0], "seconds": ray_s, "load": load(),
                          "peak_mb": max(first_peak, peak)}
        memory = (f"peak memory {figures['ray']['peak_mb']:,.0f} MB (Ray idle: {idle.peak:,.0f} MB)"
                  if args.address is None else "memory: see the workers below")
        print(f"ray: first run {first[0]:.2f} s, then {ray_s:.2f} s (median of {args.repeat}); "
              f"{memory}; answers equal byte for byte [{load()}]", flush=True)
        stats = ([] if args.no_partition_stats else
                 _partition_stats(distributed, ray, opened, registry, args, partitions))
        if stats:
            figures["ray"]["cpu_s"] = driver_cpu + sum(s["cpu_s"] for s in stats)
    finally:
        session.__exit__(None, None, None)
    figures["per_partition"] = stats
    for key in ("local_1", "local_default"):
        figures[f"ray_over_{key}"] = ray_s / figures[key]["seconds"]
    figures["ray_over_best_local"] = ray_s / best_local
    print(f"ratios: ray / local (1 worker) {figures['ray_over_local_1']:.2f}x, ray / local "
          f"(default workers) {figures['ray_over_local_default']:.2f}x; first run with Ray's "
          f"start / best local {(first[0] + figures['ray_start_s']) / best_local:.2f}x")
    if "cpu_s" in figures["local_1"] and "cpu_s" in figures["ray"]:
        print(f"CPU: ray {figures['ray']['cpu_s']:.1f} s (driver and tasks) / local (1 worker) "
              f"{figures['local_1']['cpu_s']:.1f} s = "
              f"{figures['ray']['cpu_s'] / figures['local_1']['cpu_s']:.2f}x (less sensitive to "
              "the load than wall time)")
    for s in stats:
        print(f"  partition {s['partition']}: {s['requests']:,} requests, load {s['load_s']:.2f} s "
              f"of {s['seconds']:.2f} s, worker peak RSS {s['rss_mb']:,.0f} MB")
    if args.address is None and not args.skip_local:
        saved.write_text(json.dumps(figures, indent=2))
    (OUT / "bench_ray.json").write_text(json.dumps(figures, indent=2))


def _partition_stats(distributed: Any, ray: Any, opened: Any, registry: Any, args: Any,
                     partitions: int) -> list[dict[str, Any]]:
    """One run's per-partition stats, taken from the task outputs."""
    from ingest.filters import parse_filter

    plan = distributed.plan_partitions(distributed._work_list(opened), partitions)
    job = distributed.RayJob(opened, registry, "compare", args.a, args.b, parse_filter(None))
    outputs = list(distributed._run(ray, job, plan, None, None, _timed_partition))
    return [dict(o["stats"], partition=i) for i, o in enumerate(outputs)]


if __name__ == "__main__":
    main()
