"""What-ifs on transcripts measured on the size a request really had (replay/runtimes.py):
a compaction threshold is checked against the recorded size plus or minus what the what-if
changes, a summariser follows its parent's compaction, a log that starts mid-session holds a
record for the history it lacks, and a request pushed past the model's window is marked."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from support.claude_sessions import PRIOR, session
from support.cli import run, run_json

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
CLAUDE = sorted([*REALDATA.glob("claude-code-entire/*.jsonl"),
                 REALDATA / "claude-code-spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"])


def _store(capsys, path: Path, tmp_path: Path) -> Path:
    db = tmp_path / "store.duckdb"
    code, out, err = run(capsys, "ingest", str(path), "--db", str(db))
    assert code == 0, out + err
    return db


def _per_request(capsys, db: Path, version: str, tmp_path: Path) -> tuple[dict, list[dict]]:
    out = tmp_path / f"{version.replace(':', '_')}.parquet"
    report = run_json(capsys, "compare", "recorded", version, "--db", str(db), "--out", str(out),
                      "--force")
    return report, pq.read_table(out).to_pylist()


def test_a_mid_session_log_holds_the_history_it_lacks_as_a_record(capsys, tmp_path: Path) -> None:
    """The first requests carried PRIOR tokens of history the file does not hold: a record
    stands for it (sized from the recording, not from the file), the compaction drops it."""
    db = _store(capsys, session(tmp_path / "s.jsonl", 6, 3, mid_session=True), tmp_path)
    rows = sorted(run_json(capsys, "list", "--db", str(db)), key=lambda r: r["assembled_at"])
    first = run_json(capsys, "show", rows[0]["assembly_id"], "--db", str(db))
    history = first["included"][0]
    # the recorded size less the records and the overhead every request carries
    assert abs(history["tokens"] - PRIOR) < 0.02 * PRIOR, history
    after = run_json(capsys, "show", rows[-1]["assembly_id"], "--db", str(db))
    dropped = [r for r in after["omitted"] if r["record_id"] == history["record_id"]]
    assert dropped and dropped[0]["reason_code"] == "compacted"
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 0 and "6 faithful" in out, out + err


def test_compacting_earlier_drops_the_unknown_history_too(capsys, tmp_path: Path) -> None:
    """compact_at=100000 on a log whose first request already carried 130,000: the session
    compacted before the file began, so no request stays above 100,000 plus one turn."""
    db = _store(capsys, session(tmp_path / "s.jsonl", 6, 3, mid_session=True), tmp_path)
    report, rows = _per_request(capsys, db, "claude-code:compact_at=100000", tmp_path)
    turn = 2 * 40_000 // 4 + 100  # one step's recorded growth
    assert all(r["tokens_b"] <= 100_000 + turn for r in rows), rows
    # every request before the recorded compaction lost the unknown history at least
    assert report["tokens"]["delta"] < -3 * PRIOR * 0.9, report["tokens"]
    assert report["over_context_window"]["requests"] == 0


def test_a_growing_session_compacts_again_on_its_real_size(capsys, tmp_path: Path) -> None:
    """No recorded compaction; requests grow by 20,000 a turn to 180,000: compact_at=60000
    keeps compacting as the real size passes it, not only once."""
    db = _store(capsys, session(tmp_path / "s.jsonl", 9, None, mid_session=False), tmp_path)
    report, rows = _per_request(capsys, db, "claude-code:compact_at=60000", tmp_path)
    assert max(r["tokens_a"] for r in rows) > 180_000
    turn = 2 * 40_000 // 4 + 100
    assert all(r["tokens_b"] <= 60_000 + turn for r in rows), [r["tokens_b"] for r in rows]
    shown = run_json(capsys, "diff", max(rows, key=lambda r: r["tokens_a"])["assembly_id"],
                     "--policy", "claude-code:compact_at=60000", "--db", str(db))
    assert shown["summary"]["tokens_b"] <= 60_000 + turn


def test_undoing_a_compaction_marks_the_requests_past_the_window(capsys, tmp_path: Path) -> None:
    """compaction=false brings back what the compaction dropped, the unknown history too:
    the requests after it would have carried more than the model's 200,000 and failed."""
    db = _store(capsys, session(tmp_path / "s.jsonl", 6, 3, mid_session=True), tmp_path)
    report, rows = _per_request(capsys, db, "claude-code:compaction=false", tmp_path)
    over = [r["assembly_id"] for r in rows if r["tokens_b"] > 200_000]
    assert over and report["over_context_window"]["requests"] == len(over)
    assert {e["assembly_id"] for e in report["over_context_window"]["examples"]} <= set(over)
    diff = run_json(capsys, "diff", over[0], "--policy", "claude-code:compaction=false", "--db", str(db))
    assert diff["summary"]["over_context_window"] is True
    code, out, _err = run(capsys, "compare", "recorded", "claude-code:compaction=false", "--db", str(db))
    assert f"over_context_window: {len(over)} request" in out
    # the recording itself is never marked
    same = run_json(capsys, "diff", over[0], "--policy", "claude-code", "--db", str(db))
    assert same["summary"]["over_context_window"] is False


def test_without_compaction_the_summary_it_wrote_is_not_sent(capsys, tmp_path: Path) -> None:
    """compaction=false: the session never compacts, so the summary message the recorded
    compaction wrote is not in the what-if's requests (it is in the recording's)."""
    db = _store(capsys, session(tmp_path / "s.jsonl", 6, 3, mid_session=True), tmp_path)
    last = run_json(capsys, "list", "--db", str(db))[-1]["assembly_id"]
    recorded = run_json(capsys, "show", last, "--db", str(db))
    summary = [r["record_id"] for r in recorded["included"]
               if r["label"].startswith("user: Summary: the work so far")]  # the helper's summary
    assert len(summary) == 1, recorded["included"]
    diff = run_json(capsys, "diff", last, "--policy", "claude-code:compaction=false", "--db", str(db))
    change = [c for c in diff["changes"] if c["record_id"] == summary[0]]
    assert change and change[0]["change"] == "newly_omitted", change
    assert change[0]["b"]["reason_code"] == "not_yet_created", change


@pytest.mark.parametrize("path", CLAUDE, ids=lambda p: p.name[:24])
def test_real_sessions_compacting_at_100k_stay_under_it(capsys, tmp_path: Path, path: Path) -> None:
    """On real Claude Code sessions compact_at=100000 leaves no main-thread request (the
    compaction summariser included) above 100,000 plus the largest growth of one turn."""
    if not path.exists():
        pytest.skip(f"{path} is not beside this checkout")
    db = _store(capsys, path, tmp_path)
    listed = {r["assembly_id"]: r for r in run_json(capsys, "list", "--db", str(db))}
    _report, rows = _per_request(capsys, db, "claude-code:compact_at=100000", tmp_path)
    main = sorted((r for r in listed.values() if r["runtime_kind"] == "chat"
                   or "compaction_summariser" in r["tags"]), key=lambda r: r["assembled_at"])
    recorded = [r["assembled_tokens"] for r in main if r["runtime_kind"] == "chat"]
    turn = max((b - a for a, b in zip(recorded, recorded[1:])), default=0)
    ids = {r["assembly_id"] for r in main}
    over = [(r["assembly_id"], r["tokens_b"]) for r in rows
            if r["assembly_id"] in ids and r["tokens_b"] > 100_000 + turn]
    assert not over, (turn, over)
