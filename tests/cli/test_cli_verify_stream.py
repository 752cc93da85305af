"""``contextlens verify`` prints as it goes: a JSON document whose results come before the
counts, and text whose verdict lines come before the summary."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run


def test_json_results_come_first_and_the_document_is_valid(capsys, sample_db: Path) -> None:
    code, out, err = run(capsys, "verify", "--db", str(sample_db), "--json")
    assert code == 1
    doc = json.loads(out)
    assert list(doc)[0] == "results" and list(doc)[1:] == [
        "checked", "faithful", "drifted", "inconsistent", "not_replayable", "missing_policies"]
    assert [r["assembly_id"] for r in doc["results"]] == ["asm-013", "asm-014", "asm-015"]


def test_json_with_nothing_to_report(capsys, sample_db: Path) -> None:
    code, out, err = run(capsys, "verify", "--db", str(sample_db), "--json",
                         "--filter", "scenario:incident_calendar_freshness")
    assert code == 0
    doc = json.loads(out)
    assert doc["results"] == [] and doc["checked"] == doc["faithful"] == 10


def test_text_prints_each_verdict_then_the_counts(capsys, sample_db: Path) -> None:
    code, out, err = run(capsys, "verify", "--db", str(sample_db))
    lines = out.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("DRIFTED ")]
    assert len(heads) == 3 and lines[-1].startswith("checked ") and heads[-1] < len(lines) - 1
    assert sum(1 for line in lines if line.startswith("checked ")) == 1


def test_json_output_is_empty_when_the_command_fails_before_any_result(capsys, tmp_path: Path) -> None:
    """A streamed JSON document is not begun before there is something to write: a missing
    store leaves stdout empty (one line on stderr, exit 2), not an unclosed JSON text."""
    missing = str(tmp_path / "nowhere.duckdb")
    for argv in (("verify", "--db", missing, "--json"), ("list", "--db", missing, "--json"),
                 ("lint", "--db", missing, "--json")):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, ""), argv
        assert err.count("\n") == 1 and "nowhere.duckdb" in err
