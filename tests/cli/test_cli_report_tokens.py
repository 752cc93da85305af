"""`contextlens report tokens` as people read it: separators, bars, whole numbers."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from inspector.cli import cli


def test_report_tokens_is_a_table_with_separators_and_bars(sample_db: Path) -> None:
    out = CliRunner().invoke(cli, ["report", "tokens", "--db", str(sample_db)],
                             env={"COLUMNS": "70"})
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    total = next(line for line in lines if line.strip().startswith("(all)"))
    # thousands separators, a bar, and the reduction whole even in 70 columns
    assert "157,244" in total and "25,550" in total and "█" in total and "83.8%" in total
    header = next(line for line in lines if "scenario" in line)
    assert "assembled of baseline" in header and "reduction" in header
