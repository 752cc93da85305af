"""Foundation benchmarks: ingest, the request list's first page, opening a big assembly.

Each figure is a ratio against a DuckDB baseline run in the same process on the same data,
so the numbers travel between machines. Run:

    python benchmarks/bench_foundation.py --scale 1000000 --work DIR

(--scale 100000 takes about a minute; the default work folder is a temporary one). The
results are printed as a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import shutil
import tempfile
import time
from pathlib import Path

import duckdb

from ingest.contract import TABLES
from ingest.store import LIST_COLUMNS, Store, ingest
from ingest.writer import ExportWriter
from readmodel import ReadModel
from timing import timed
from replay.sample_export import write_sample




def parquet_glob(export: Path, table: str) -> str:
    single = export / f"{table}.parquet"
    return str(single) if single.exists() else str(export / table / "**" / "*.parquet")


def baseline_ingest(export: Path, db: Path) -> None:
    """DuckDB's own CREATE TABLE AS SELECT * FROM read_parquet(...) of the same files."""
    con = duckdb.connect(str(db))
    for table in TABLES:
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{parquet_glob(export, table)}')")
    con.close()


def big_assembly_export(out: Path, records: int = 2000) -> str:
    """A one-assembly export whose assembly considered ``records`` candidates."""
    utc = dt.timezone.utc
    t = dt.datetime(2026, 1, 1, tzinfo=utc)
    aid = "bench-big-assembly"
    with ExportWriter(out, export_id="bench-big", producer="benchmarks", created_at=t) as w:
        w.write("conversations", [dict(conversation_id="bench-c", title="big", owner_id="u", created_at=t)])
        w.write("branches", [dict(branch_id="bench-b", conversation_id="bench-c", parent_branch_id=None, fork_message_id=None, name="main", created_at=t)])
        w.write("participants", [dict(participant_id="bench-p", conversation_id="bench-c", label="model", kind="model", provider="x", model="y")])
        w.write("model_runs", [dict(model_run_id="bench-r", conversation_id="bench-c", branch_id="bench-b", participant_id="bench-p", trigger_message_id=None, runtime_kind="chat", parent_model_run_id=None, subagent_batch_id=None, provider="x", model="y", status="succeeded", started_at=t, ended_at=t)])
        w.write("messages", [dict(message_id=f"bench-m{i}", conversation_id="bench-c", branch_id="bench-b", parent_message_id=None, role="user", participant_id=None, model_run_id=None, speaker_label=None, content=f"message {i}", content_tokens=10, visibility_scope="conversation", created_at=t) for i in range(records)])
        half = records // 2
        w.write("context_assemblies", [dict(assembly_id=aid, model_run_id="bench-r", conversation_id="bench-c", branch_id="bench-b", participant_id="bench-p", runtime_kind="chat", provider="x", model="y", policy_version="v1", assembler_version="bench", assembled_at=t, token_budget=100000, byte_budget=0, exact_evidence_ids=[], baseline_tokens=10 * records, assembled_tokens=10 * half, baseline_message_count=records, assembled_message_count=half, raw_artifact_count=0, selected_memory_count=0, rehydrated_artifact_count=0, graph_query_ms=1.0, policy_eval_ms=1.0, serialization_ms=1.0, selection_hash="0" * 64, payload_sha256=None, tags=["bench"])])
        w.write("assembly_records", [dict(assembly_id=aid, record_kind="message", record_id=f"bench-m{i}", decision="included" if i < half else "omitted", rendering="verbatim" if i < half else None, position=i if i < half else None, policy_family="window", reason_code="in_window" if i < half else "outside_window", detail="", tokens=10) for i in range(records)])
        w.write("policy_decisions", [dict(decision_id=f"bench-d{i}", assembly_id=aid, step=10, record_kind="message", record_id=f"bench-m{i}", policy_family="window", outcome="allow" if i < half else "deny", reason_code="in_window" if i < half else "outside_window", detail="") for i in range(records)])
    return aid


def app_first_paint(db: Path) -> float:
    """Seconds from creating the app to the request table holding its first page, measured
    in a fresh process (as a user starting the inspector gets it; imports not counted)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, __file__, "--paint", str(db)], capture_output=True, text=True, check=True, timeout=120
    )
    return float(out.stdout.strip().splitlines()[-1])


def _paint_in_this_process(db: Path) -> float:
    import asyncio

    from inspector.app import ContextLensApp

    async def run() -> float:
        t0 = time.perf_counter()
        app = ContextLensApp(db_path=db)
        async with app.run_test(size=(140, 40)) as pilot:
            while not app.screen.query("#requests-table"):
                await pilot.pause(0.005)
            return time.perf_counter() - t0

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=100_000, help="assemblies in the large export")
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--paint", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.paint:
        print(_paint_in_this_process(args.paint))
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="contextlens-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    export = work / f"export-{args.scale}"
    rows: list[tuple[str, str, str, str]] = []
    try:
        if not (export / "manifest.json").exists():
            t_gen, _ = timed(lambda: write_sample(export, seed=1, scale=args.scale), repeat=1)
            print(f"generated {args.scale} assemblies in {t_gen:.1f}s")
        import json

        manifest = json.loads((export / "manifest.json").read_text())
        n_records = manifest["tables"]["assembly_records"]["rows"]
        print(f"export: {manifest['tables']['context_assemblies']['rows']} assemblies, {n_records} records")

        base_db, our_db = work / "baseline.duckdb", work / "store.duckdb"
        for p in (base_db, our_db):
            p.unlink(missing_ok=True)
        t_base, _ = timed(lambda: baseline_ingest(export, base_db), repeat=1)
        t_ours, _ = timed(lambda: ingest(export, our_db), repeat=1)
        rows.append(("ingest (validate + load + summary)", f"{t_ours:.2f} s", f"CTAS read_parquet {t_base:.2f} s", f"{t_ours / t_base:.2f}x"))

        big = work / "big-assembly"
        shutil.rmtree(big, ignore_errors=True)
        aid = big_assembly_export(big)
        ingest(big, our_db)

        def first_page():
            # what the app's list asks: the read model's first page (masked) and its counts
            with Store.open(our_db) as store:
                page = ReadModel(store).requests(None, sort="assembled_at", limit=200)
            return page.rows.num_rows, page.total

        def first_page_baseline():
            # the same columns, order, limit and count, straight from DuckDB
            con = duckdb.connect(str(our_db), read_only=True)
            t = con.sql(
                f"SELECT {', '.join(LIST_COLUMNS)} FROM assembly_summary "
                "ORDER BY assembled_at, assembly_id, export_id LIMIT 200"
            ).to_arrow_table()
            total = con.sql("SELECT count(*) FROM assembly_summary").fetchall()[0][0]
            con.close()
            return t.num_rows, total

        t_page, _ = timed(first_page, repeat=5)
        t_page_base, _ = timed(first_page_baseline, repeat=5)
        rows.append(("request list first page (open + 200 rows + count)", f"{t_page * 1000:.1f} ms", f"to_arrow_table {t_page_base * 1000:.1f} ms", f"{t_page / t_page_base:.2f}x"))

        t_paint = app_first_paint(our_db)
        rows.append(("inspector first paint (app start to first page shown, headless)", f"{t_paint * 1000:.0f} ms", "", "target < 1 s"))

        store = Store.open(our_db)

        def open_assembly():
            store.assembly(aid)
            recs = store.assembly_records(aid)
            store.policy_decisions(aid)
            return recs.num_rows

        con = duckdb.connect(str(our_db), read_only=True)

        def open_assembly_baseline():
            return con.sql("SELECT * FROM assembly_records WHERE assembly_id = ?", params=[aid]).to_arrow_table().num_rows

        t_open, n = timed(open_assembly, repeat=5)
        t_open_base, _ = timed(open_assembly_baseline, repeat=5)
        assert n == 2000, n
        rows.append(("open a 2,000-record assembly (row + records + trace)", f"{t_open * 1000:.1f} ms", f"records to_arrow_table {t_open_base * 1000:.1f} ms", f"{t_open / t_open_base:.2f}x"))
        store.close()
        con.close()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print()
        print(f"scale {args.scale} assemblies, {n_records} records; peak RSS {peak:.0f} MiB")
        print("| measure | contextlens | baseline | ratio |")
        print("|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
