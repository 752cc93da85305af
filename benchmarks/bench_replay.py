"""Replay benchmarks: one replay + diff of a 2,000-record assembly, and verify throughput.

    python benchmarks/bench_replay.py --scale 20000

1. Replay + diff of a 2,000-candidate assembly (the reference assembler over the
   conversation snapshot, then the recorded-vs-replay diff) against an Arrow reference
   computation on the same records: the same window selection done with pyarrow compute
   (sort by time, keep the newest N, cumulative token sum under the budget) and the same
   recorded-vs-replay pairing done with an Arrow join.
2. verify over a synthetic store of --scale assemblies (about 20 records each), in records
   per second, against a DuckDB `GROUP BY assembly_id` over the same assembly_records rows.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from bench_foundation import big_assembly_export
from ingest.store import Store, ingest
from timing import timed
from replay import service
from replay.policy import load_registry
from replay.sample_export import write_sample




def arrow_reference(messages: pa.Table, recorded: pa.Table, max_messages: int, budget: int) -> pa.Table:
    """The window + budget selection of the same messages, and its pairing with the
    recording, computed column-wise with Arrow: the floor a replay could be compared to."""
    newest = messages.sort_by([("created_at", "descending"), ("message_id", "descending")])
    n = newest.num_rows
    rank = pa.array(range(n))
    in_window = pc.less(rank, max_messages)
    tokens = pc.if_else(in_window, newest["content_tokens"], 0)
    running = pc.cumulative_sum(tokens)
    included = pc.and_(in_window, pc.less_equal(running, budget))
    replay = pa.table({
        "record_id": newest["message_id"],
        "decision_b": pc.if_else(included, "included", "omitted"),
    })
    paired = recorded.select(["record_id", "decision"]).join(replay, "record_id")
    changed = pc.not_equal(paired["decision"], paired["decision_b"])
    return paired.filter(changed)


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
        big = work / "big"
        shutil.rmtree(big, ignore_errors=True)
        aid = big_assembly_export(big)
        db = work / "big.duckdb"
        db.unlink(missing_ok=True)
        ingest(big, db)
        store = Store.open(db)
        t_replay, d = timed(lambda: service.diff(store, aid, "v1", registry=registry))
        graph = store.conversation_graph(store.assembly(aid)["conversation_id"])
        messages = graph["messages"]
        recorded = store.assembly_records(aid)
        policy = registry.get("v1")
        budget = policy.budget.token_budget - policy.budget.reserve_tokens
        t_arrow, _ = timed(lambda: arrow_reference(messages, recorded, policy.window.max_messages, budget))
        store.close()
        n_changes = len(d.changes)
        rows.append((f"replay + diff, 2,000-record assembly ({n_changes} paired records)",
                     f"{t_replay * 1000:.1f} ms", f"Arrow window/budget + join {t_arrow * 1000:.1f} ms",
                     f"{t_replay / t_arrow:.1f}x"))

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
