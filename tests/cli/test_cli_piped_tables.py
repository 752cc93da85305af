"""Tables piped to a file or a script: printed at their natural width, every id and name
whole (no terminal to fit, so nothing is cut at 80 columns or at a cell's cap)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.cli import run
from support.stores import make_export

# longer than a cell's cap on a terminal (48) and than an 80-column line
LONG_SCENARIO = "incident_" + "calendar_freshness_after_the_oauth_token_rotation_" * 2


@pytest.fixture(scope="module")
def long_names_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ingest.store import ingest

    def edit(rows: dict[str, list[dict[str, Any]]]) -> None:
        for row in rows["context_assemblies"]:
            row["tags"] = [f"scenario:{LONG_SCENARIO}"]

    root = tmp_path_factory.mktemp("long-names")
    db = root / "long.duckdb"
    ingest(make_export(root / "export", edit=edit), db)
    return db


def test_report_tokens_piped_keeps_every_scenario_name_whole(
        sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "report", "tokens", "--db", str(sample_db))
    assert code == 0, err
    # the sample's longest names, cut to 12 cells by an 80-column guess before
    for name in ("autonomous_discussion_attribution", "incident_calendar_freshness",
                 "participant_visibility"):
        assert any(line.split()[:1] == [name] for line in out.splitlines()), (name, out)
    assert max(len(line) for line in out.splitlines()) > 80
    assert "…" not in out


def test_report_tokens_piped_keeps_a_name_longer_than_a_line(
        long_names_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "report", "tokens", "--db", str(long_names_db))
    assert code == 0, err
    assert LONG_SCENARIO in out and "…" not in out


def test_list_piped_keeps_a_name_longer_than_a_cell(
        long_names_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "list", "--db", str(long_names_db))
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("as") and "assembly_id" not in line]
    assert rows and all(LONG_SCENARIO in line for line in rows), out
    assert "…" not in out
