"""`contextlens diff` puts the safety findings first: regressions, fixes, in the recording,
or "safety: none"."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.cli import run, run_json

# the incident's calendar memory as every safety path words it (replay.findings_text)
STALE_020 = {"record_id": "mem-020", "record_kind": "tool_memory", "finding": "stale_as_current",
             "detail": "rendered compact_memory (a current fact) at 2026-10-29 17:00 UTC, "
                       "stale since 2026-10-27 15:00 UTC"}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_v5_incident_against_v4_is_a_regression(capsys, sample_db: Path) -> None:
    d = run_json(capsys, "diff", "asm-035", "--policy", "v5", "--against", "v4", "--db", str(sample_db))
    assert set(d["safety"]) == {"regressions", "fixes", "in_recording"}
    assert STALE_020 in d["safety"]["regressions"]
    assert d["safety"]["fixes"] == [] and d["safety"]["in_recording"] == []
    assert d["summary"]["safety"] == len(d["safety"]["regressions"])
    code, out, _ = run(capsys, "diff", "asm-035", "--policy", "v5", "--against", "v4", "--db", str(sample_db))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "safety:" and lines[1].startswith("  regressions (B has, A has not): ")
    assert "    stale_as_current  tool_memory mem-020" in lines
    assert out.index("mem-020") < out.index("replay v4 -> replay v5")


def test_against_the_recording_lists_what_was_sent(capsys, sample_db: Path) -> None:
    d = run_json(capsys, "diff", "asm-035", "--policy", "v4", "--db", str(sample_db))
    assert STALE_020 in d["safety"]["fixes"] and STALE_020 in d["safety"]["in_recording"]
    assert d["safety"]["regressions"] == []


def test_no_findings_says_safety_none(capsys, sample_db: Path) -> None:
    code, out, _ = run(capsys, "diff", "asm-031", "--policy", "v6", "--db", str(sample_db))
    assert code == 0
    assert out.splitlines()[0] == "safety: none"
    d = run_json(capsys, "diff", "asm-031", "--policy", "v6", "--db", str(sample_db))
    assert d["safety"] == {"regressions": [], "fixes": [], "in_recording": []}
