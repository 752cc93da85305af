"""Transcripts on the command line: open/ingest detect the format, show reports what the
transcript's recorded usage does not explain, replay shows what a policy would drop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import run, run_json

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
CLAUDE = REALDATA / "claude-code-spotter" / "tool_heavy.jsonl"

pytestmark = pytest.mark.skipif(not CLAUDE.exists(), reason="shared/realdata is not beside this checkout")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))


def _usage_totals(path: Path) -> list[int]:
    """Recorded input tokens per API request, read straight from the raw JSONL."""
    seen: dict[str, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("type") != "assistant" or obj.get("message", {}).get("model") == "<synthetic>":
            continue
        key = obj.get("requestId") or obj["message"].get("id")
        u = obj["message"].get("usage") or {}
        seen[key] = u.get("input_tokens", 0) + u.get("cache_creation_input_tokens", 0) + u.get("cache_read_input_tokens", 0)
    return list(seen.values())


def test_ingest_detects_claude_code_and_show_reports_unattributed(capsys, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    code, out, err = run(capsys, "ingest", str(CLAUDE), "--db", str(db))
    assert code == 0, err
    rows = run_json(capsys, "list", "--db", str(db))
    assert sorted(r["assembled_tokens"] for r in rows) == sorted(_usage_totals(CLAUDE))
    shown = run_json(capsys, "show", rows[-1]["assembly_id"], "--db", str(db))
    t = shown["tokens"]
    assert t["recorded"] is True
    assert t["unattributed_tokens"] == shown["assembly"]["assembled_tokens"] - t["included_estimate"]
    assert shown["unattributed_tokens"] == t["unattributed_tokens"]


def test_a_transcript_request_replays_under_its_runtime_not_the_sample_s_versions(
        capsys, tmp_path: Path) -> None:
    """v4 governs the sample's graph (memories, privacy classes, branches), not a Claude Code
    session: one line naming what applies, exit 2; its own runtime's family replays it."""
    rows = run_json(capsys, "list", "--db", str(CLAUDE))
    last = rows[-1]["assembly_id"]
    code, out, err = run(capsys, "diff", last, "--policy", "v4", "--db", str(CLAUDE))
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "policy v4 does not apply" in err and "claude-code:compact_at=100000" in err
    d = run_json(capsys, "diff", last, "--policy", "claude-code", "--db", str(CLAUDE))
    assert d["summary"]["tokens_b"] == d["summary"]["tokens_a"]  # as it ran: nothing changes


def test_unknown_format_names_what_was_tried(capsys, tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("just some notes\n")
    code, out, err = run(capsys, "ingest", str(f), "--db", str(tmp_path / "s.duckdb"))
    assert code == 2
    for fmt in ("claude-code", "openai-chat", "anthropic-messages", "gemini-cli", "export"):
        assert fmt in err
    assert len(err.strip().splitlines()) == 1


def test_verify_counts_a_runtime_s_requests_in_one_line_and_passes(capsys, tmp_path: Path) -> None:
    """Requests of a runtime whose rule is not modelled (policy observed: here a SWE-agent
    trajectory with a history processor we do not reproduce) are counted, in one line
    naming the runtime, not one line each, and not a failure; --json lists them."""
    from support import swe_trajectory

    traj = swe_trajectory.build()
    traj["replay_config"] = json.dumps({"agent": {"history_processors": [{"type": "closed_window"}]}})
    path = swe_trajectory.write(tmp_path / "run.traj", traj)
    requests = swe_trajectory.STEPS
    code, out, _ = run(capsys, "verify", "--db", str(path))
    assert code == 0
    lines = out.strip().splitlines()
    assert lines == [
        f"NOT REPLAYABLE {requests} requests recorded by a runtime (openai-chat-adapter/1, "
        "policy observed): its own policy is not modelled yet, so they are counted, not replayed",
        f"checked {requests}: 0 faithful, 0 drifted, 0 inconsistent, {requests} not replayable",
    ]
    shown = run_json(capsys, "verify", "--db", str(path))
    assert shown["not_replayable"] == requests and len(shown["results"]) == requests


def test_verify_replays_a_claude_code_session_under_its_runtime_policy(capsys) -> None:
    requests = len(_usage_totals(CLAUDE))
    code, out, _ = run(capsys, "verify", "--db", str(CLAUDE))
    assert code == 0
    assert out.strip().splitlines() == [
        f"checked {requests}: {requests} faithful, 0 drifted, 0 inconsistent, 0 not replayable"]
