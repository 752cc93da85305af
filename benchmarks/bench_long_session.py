"""Long-session benchmark: peak memory and time of `contextlens ingest` of one Claude Code
session as it grows, per row written.

Sessions of 200, 1,000 and 2,000 requests are made by extending a real dev-set session
(../shared/realdata/claude-code-entire/839b35f7-compact-microcompact.jsonl) with its own
turns, the way the runtime grows one (tests/support/long_session.py: fresh uuids chained by
parentUuid, fresh request and tool ids, later timestamps, growing recorded input; no
compaction, so request k carries the history of requests 1..k-1). A second kind of session is
many short lines: one short prompt and one short answer per request.

Each ingest runs in its own process (`contextlens ingest FILE --db STORE`, a fresh cache);
its peak resident memory is that child's ru_maxrss (os.wait4) and its time the wall clock.
Rows written are the store's rows reported by the ingest. The ratios printed are time per
row written (should stay flat: time linear in rows) and peak memory per length (should stay
flat: memory bounded, under 1 GB at 2,000 requests).

The honest baseline is the same command run from another checkout (``--before DIR``: a copy
of the project's source folders before the change, put first on PYTHONPATH), in the same
run, on the same files; its children are capped at ``--before-cap-gb`` of address space so a
quadratic baseline fails (MemoryError) instead of taking the shared machine down. Run:

    python benchmarks/bench_long_session.py [--lengths 200,1000,2000] [--kinds real,short]
        [--before DIR] [--before-cap-gb 6]

The figures print as a Markdown table, each with os.getloadavg().
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.long_session import extend_session, short_lines_session  # noqa: E402

_CHILD = "import sys; from inspector.cli import main; main(sys.argv[1:])"


def _cap(gb: float):
    def limit() -> None:
        n = int(gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    return limit


def ingest_once(session: Path, work: Path, before: Path | None, cap_gb: float | None) -> dict:
    """One `contextlens ingest` of ``session`` in a child process: seconds, peak MB (the
    child's own ru_maxrss, from os.wait4), rows, exit code and the last line it printed."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = dict(os.environ, CONTEXTLENS_CACHE=str(work / "cache"))
    if before is not None:
        env["PYTHONPATH"] = str(before) + os.pathsep + env.get("PYTHONPATH", "")
    out_path, err_path = work / "stdout", work / "stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, "ingest", str(session), "--db",
             str(work / "store.duckdb"), "--json"],
            stdout=out, stderr=err, env=env, cwd=str(work),
            preexec_fn=_cap(cap_gb) if cap_gb else None)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    rows = None
    try:
        text = out_path.read_text()
        # the JSON report is the last thing printed (a long ingest may print progress first)
        rows = sum(json.loads(text[text.rindex("\n{") + 1 if not text.startswith("{") else 0:])
                   .get("rows").values())
    except (ValueError, AttributeError):
        pass
    last = (err_path.read_text(errors="replace").strip().splitlines() or [""])[-1]
    return {"seconds": seconds, "peak_mb": usage.ru_maxrss / 1024, "rows": rows,
            "rc": rc, "error": last if rc else ""}


def make(kind: str, n: int, folder: Path) -> Path:
    path = folder / f"{kind}-{n}.jsonl"
    if not path.exists():
        (extend_session if kind == "real" else short_lines_session)(path, n)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="200,1000,2000")
    ap.add_argument("--kinds", default="real,short")
    ap.add_argument("--before", type=Path, default=None,
                    help="a copy of the source folders before the change (the baseline)")
    ap.add_argument("--before-cap-gb", type=float, default=6.0)
    ap.add_argument("--before-max", type=int, default=2000,
                    help="longest session the baseline is run on")
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-long-session-"))
    work.mkdir(parents=True, exist_ok=True)
    print("| session | requests | MB file | code | rows written | seconds | µs / row | peak MB "
          "| load avg |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---|")
    for kind in args.kinds.split(","):
        for n in lengths:
            session = make(kind, n, work)
            mb = session.stat().st_size / 1e6
            runs = [("after", None, None)]
            if args.before is not None and n <= args.before_max:
                runs.insert(0, ("before", args.before, args.before_cap_gb))
            for label, tree, cap in runs:
                r = ingest_once(session, work / f"run-{label}", tree, cap)
                load = "/".join(f"{x:.1f}" for x in os.getloadavg())
                rows = r["rows"]
                per_row = f"{r['seconds'] / rows * 1e6:.2f}" if rows else "-"
                outcome = "" if not r["rc"] else f" (exit {r['rc']}: {r['error'][:60]})"
                print(f"| {kind} | {n:,} | {mb:.1f} | {label}{outcome} | "
                      f"{rows if rows is None else f'{rows:,}'} | {r['seconds']:.1f} | {per_row} | "
                      f"{r['peak_mb']:.0f} | {load} |", flush=True)


if __name__ == "__main__":
    main()
