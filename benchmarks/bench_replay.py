"""Replay benchmarks: one replay + diff of a 2,000-record assembly, and verify throughput.

    python benchmarks/bench_replay.py --scale 5000

1. Replay + diff of a 1,980-record assembly of every kind (``write_big_assembly``: one
   conversation of 370 turns with messages, tool calls, artifacts and memories) through the
   read model, as ``contextlens diff`` and the app ask it (``ReadModel.diff`` against the
   recording, a fresh read model each time: nothing cached), against an Arrow reference
   over the same rows: the same conversation graph and recorded records read from the
   store, the window and budget selection in Arrow compute, paired with the recording by an
   Arrow join on (record_kind, record_id). Also the reference's compute alone, on rows
   already in memory (the baseline the issue first measured against: it reads nothing).
2. verify over a synthetic store of --scale assemblies (about 20 records each), in records
   per second, against a DuckDB `GROUP BY assembly_id` over the same assembly_records rows.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ingest.store import Store, ingest
from timing import cpu_timed, timed
from replay import service
from replay.policy import load_registry
from replay.sample_export import write_big_assembly, write_sample


def big_replay(work: Path) -> dict[str, Any]:
    """Replay + diff of one 1,980-record assembly through the read model against the Arrow
    reference (module docstring, 1): medians of wall and CPU seconds of each."""
    from readmodel import ReadModel

    export, db = work / "big-2000", work / "big-2000.duckdb"
    if not db.exists():
        write_big_assembly(export, candidates=2000)
        ingest(export, db)
    registry = load_registry(None)
    with Store.open(db) as store:
        aid = store.assembly_requests(None).column("assembly_id")[0].as_py()
        row = store.assembly(aid)
        version = row["policy_version"]
        n_records = store.assembly_records(aid).num_rows

        def ours():
            # a fresh read model each time: nothing cached between runs
            return ReadModel(store, registry).diff(aid, version)

        policy = registry.get(version)
        budget = min(policy.budget.token_budget, row["context_limit"] or 10**12) - policy.budget.reserve_tokens

        def read():
            return store.conversation_graph(row["conversation_id"]), store.assembly_records(aid)

        def compute(graph: dict[str, pa.Table], recorded: pa.Table) -> int:
            at = pa.scalar(row["assembled_at"], graph["messages"]["created_at"].type)
            parts = []
            for kind, table, key, tokens in (
                    ("message", "messages", "message_id", "content_tokens"),
                    ("tool_artifact", "tool_artifacts", "artifact_id", "content_tokens"),
                    ("tool_memory", "tool_memories", "memory_id", "content_tokens")):
                t = graph[table]
                t = t.filter(pc.less_equal(t["created_at"], at))
                parts.append(pa.table({
                    "record_kind": pa.repeat(pa.scalar(kind), t.num_rows),
                    "record_id": t[key], "created_at": t["created_at"],
                    "tokens": pc.cast(t[tokens], pa.int64())}))
            cands = pa.concat_tables(parts).sort_by([("created_at", "descending"), ("record_id", "descending")])
            is_msg = pc.equal(cands["record_kind"], "message")
            msg_rank = pc.subtract(pc.cumulative_sum(pc.cast(is_msg, pa.int64())), 1)
            in_window = pc.or_(pc.invert(is_msg), pc.less(msg_rank, policy.window.max_messages))
            running = pc.cumulative_sum(pc.if_else(in_window, cands["tokens"], 0))
            included = pc.and_(in_window, pc.less_equal(running, budget))
            replay = pa.table({"record_kind": cands["record_kind"], "record_id": cands["record_id"],
                               "decision_b": pc.if_else(included, "included", "omitted")})
            paired = recorded.select(["record_kind", "record_id", "decision"]).join(
                replay, ["record_kind", "record_id"])
            return paired.filter(pc.not_equal(paired["decision"], paired["decision_b"])).num_rows

        def arrow():
            return compute(*read())

        loaded = read()
        ours(), arrow()  # first calls load what a process loads once (the secret detectors)
        n = 11  # medians of 11: a shared 2-core machine's noise is larger than one run
        t_ours, view = timed(ours, n)
        t_arrow, _ = timed(arrow, n)
        t_compute, _ = timed(lambda: compute(*loaded), n)
        return {"records": n_records, "changes": len(view.changed),
                "ours_wall": t_ours, "ours_cpu": cpu_timed(ours, n),
                "arrow_wall": t_arrow, "arrow_cpu": cpu_timed(arrow, n),
                "compute_wall": t_compute, "compute_cpu": cpu_timed(lambda: compute(*loaded), n)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20_000, help="assemblies in the verify store")
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="contextlens-bench-replay-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    registry = load_registry(None)
    try:
        # 1. replay + diff of a 2,000-record assembly
        r = big_replay(work)
        rows.append((f"replay + diff, {r['records']:,}-record assembly ({r['changes']} changed; "
                     "ReadModel.diff)",
                     f"{r['ours_wall'] * 1000:.1f} ms wall, {r['ours_cpu'] * 1000:.1f} ms CPU",
                     f"read the same rows + Arrow window/budget + join: {r['arrow_wall'] * 1000:.1f} "
                     f"ms wall, {r['arrow_cpu'] * 1000:.1f} ms CPU",
                     f"{r['ours_wall'] / r['arrow_wall']:.2f}x wall, "
                     f"{r['ours_cpu'] / r['arrow_cpu']:.2f}x CPU"))
        rows.append(("(the same)", "",
                     f"the Arrow compute alone, rows already in memory: "
                     f"{r['compute_wall'] * 1000:.1f} ms wall, {r['compute_cpu'] * 1000:.1f} ms CPU",
                     f"{r['ours_wall'] / r['compute_wall']:.0f}x wall"))

        # 2. verify throughput
        export = work / f"scale-{args.scale}"
        if not (export / "manifest.json").exists():
            write_sample(export, seed=1, scale=args.scale)
        vdb = work / f"scale-{args.scale}.duckdb"
        if not vdb.exists():
            ingest(export, vdb)
        with Store.open(vdb) as store:
            t0 = time.perf_counter()
            result = service.verify(store, registry)
            t_verify = time.perf_counter() - t0
        con = duckdb.connect(str(vdb), read_only=True)
        n_records = con.execute("SELECT count(*) FROM assembly_records").fetchall()[0][0]
        t_group, _ = timed(lambda: con.sql(
            "SELECT assembly_id, count(*), sum(tokens), "
            "sum(CASE WHEN decision = 'included' THEN tokens ELSE 0 END) "
            "FROM assembly_records GROUP BY assembly_id").to_arrow_table(), repeat=3)
        con.close()
        rows.append((f"verify, {result.checked} assemblies / {n_records} records",
                     f"{n_records / t_verify:,.0f} records/s ({t_verify:.1f} s)",
                     f"GROUP BY assembly_id {n_records / t_group:,.0f} records/s",
                     f"{t_verify / t_group:.0f}x slower"))
        print("| measure | contextlens | baseline | ratio |")
        print("|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
