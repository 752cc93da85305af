"""Follow benchmark: what one appended line costs a followed session, as the session grows.

For prefixes of a real Claude Code session (by default the development data's 1,863-line
session with its subagents), a :class:`ingest.follow.Follower` reads the prefix, then one
more line is appended and ``update()`` is timed: reading what was appended, adapting the
session, ingesting it into a new store. The bytes read from the transcript by that update
are counted too. The baseline, in the same process on the same file, is the plain way to
get the same store: a one-shot ``adapt`` + ``ingest`` of the whole file (what
``contextlens ingest`` does).

``--app`` also measures, in the app (headless, Textual's Pilot), the time from a line's
flush to its request showing in the open request list: the poll interval
(``ingest.follow.POLL_SECONDS``), the update, and the list's reload. Run:

    python benchmarks/bench_follow.py [--session FILE] [--sizes 50,200,800,1863] [--app]

Results print as a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from ingest.adapters import adapt
from ingest.follow import Follower
from ingest.store import ingest

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "claude-code-spotter"
SESSION = REALDATA / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"


def one_shot(path: Path, work: Path) -> float:
    """Seconds to adapt and ingest the whole file into a new store."""
    export, store = work / "one-shot-export", work / "one-shot.duckdb"
    for p in (export, store):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    t0 = time.perf_counter()
    adapt(path, export, None)
    ingest(export, store)
    return time.perf_counter() - t0


def follow_step(lines: list[bytes], n: int, work: Path, session: Path) -> tuple[float, int, float]:
    """(seconds of the update after line n+1 is appended, bytes it read, one-shot seconds)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    f = work / session.name
    f.write_bytes(b"".join(lines[:n]))
    sub = session.parent / session.stem
    if sub.is_dir():  # the session's subagent folder, as it lies beside it
        shutil.copytree(sub, work / session.stem)
    follower = Follower(f, work / "follow")
    follower.update()
    with open(f, "ab") as h:
        h.write(lines[n])
    t0 = time.perf_counter()
    update = follower.update()
    seconds = time.perf_counter() - t0
    assert update is not None
    return seconds, update.read_bytes, one_shot(f, work)


def next_request_line(lines: list[bytes], n: int) -> int:
    """The index of the first line from ``n`` on that starts a new request: an assistant
    message whose id no earlier line had (Claude Code writes one line per content block,
    each with the message's id and usage)."""
    def message_id(line: bytes) -> str | None:
        try:
            d = json.loads(line)
        except ValueError:
            return None
        m = d.get("message") if isinstance(d, dict) and d.get("type") == "assistant" else None
        return m.get("id") if isinstance(m, dict) else None

    seen = {message_id(line) for line in lines[:n]}
    return next(i for i in range(n, len(lines)) if message_id(lines[i]) not in seen)


def app_latency(lines: list[bytes], n: int, work: Path, session: Path) -> float:
    """Seconds from appending one line (a new request) to the list showing one more row."""
    from inspector.app import ContextLensApp

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    f = work / session.name
    f.write_bytes(b"".join(lines[:n]))
    follower = Follower(f, work / "follow")
    first = follower.update()
    assert first is not None
    app = ContextLensApp(db_path=first.store, source_path=f, follower=follower)

    async def measure() -> float:
        async with app.run_test(size=(160, 40)) as pilot:
            screen = app.screen
            while not getattr(screen, "_total", 0):
                await pilot.pause(0.01)
            before = screen._total
            extra = next_request_line(lines, n)
            t0 = time.perf_counter()
            with open(f, "ab") as h:
                h.writelines(lines[n: extra + 1])
            while screen._total <= before:
                await pilot.pause(0.01)
            return time.perf_counter() - t0

    return asyncio.run(measure())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--session", type=Path, default=SESSION)
    ap.add_argument("--sizes", default="50,200,800,1862")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--app", action="store_true", help="also the app's flush-to-row time")
    args = ap.parse_args()
    lines = args.session.read_bytes().splitlines(keepends=True)
    sizes = [min(int(s), len(lines) - 1) for s in args.sizes.split(",")]
    print("| lines read before | update after one appended line | bytes read by it | "
          "one-shot adapt + ingest (baseline) | update / baseline |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            runs = [follow_step(lines, n, Path(tmp) / "w", args.session) for _ in range(args.repeat)]
            upd = statistics.median(r[0] for r in runs)
            base = statistics.median(r[2] for r in runs)
            print(f"| {n:,} | {upd:.2f} s | {runs[0][1]:,} | {base:.2f} s | {upd / base:.2f}x |")
        if args.app:
            print()
            print("| lines read before | flush to row in the app (median) |")
            print("|---|---|")
            for n in sizes[:2]:
                runs = [app_latency(lines, n, Path(tmp) / "a", args.session)
                        for _ in range(args.repeat)]
                print(f"| {n:,} | {statistics.median(runs):.2f} s |")


if __name__ == "__main__":
    main()
