"""`contextlens compare A B`: safety regressions first, the aggregates, --json keys, the
per-request Parquet file, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from support.cli import run, run_json
from support.hostile import RAW, build_hostile_db
from support.progress_bar import run_with_every_query_drawing_progress

CALENDAR = {"mem-014", "mem-015", "mem-016", "mem-020"}  # the v5 incident's calendar memories


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_v4_v5_json_lists_the_incident_as_stale_shown_as_current(capsys, sample_db: Path) -> None:
    d = run_json(capsys, "compare", "v4", "v5", "--db", str(sample_db))
    assert {"requests", "affected", "records", "tokens", "safety", "most_changed"} <= set(d)
    assert set(d["safety"]) == {"regressions", "fixes", "in_recording"}
    assert d["safety"]["in_recording"] is None  # neither side is the recording
    stale = [g for g in d["safety"]["regressions"] if g["finding"] == "stale_as_current"]
    assert stale, d["safety"]
    assert CALENDAR <= {r["record_id"] for r in stale[0]["records"]}
    assert d["requests"] == 52 and 0 < d["affected"] <= 52
    assert d["records"]["rerendered"]["total"] > 0
    assert {"a", "b", "delta", "per_request"} <= set(d["tokens"])
    assert {"asm-033", "asm-034", "asm-035", "asm-036"} <= {r["assembly_id"] for r in d["most_changed"]}


def test_text_puts_safety_regressions_first(capsys, sample_db: Path) -> None:
    code, out, _ = run(capsys, "compare", "v4", "v5", "--db", str(sample_db))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "compare v4 -> v5 over 52 requests"
    assert lines[1] == "safety:" and lines[2].startswith("  regressions (B has, A has not): ")
    assert lines[3].startswith("    stale_as_current: ")
    assert out.index("mem-020") < out.index("requests: 52 compared")
    assert out.index("requests: 52 compared") < out.index("most changed:")


def test_against_the_recording_reports_what_was_sent(capsys, sample_db: Path) -> None:
    d = run_json(capsys, "compare", "recorded", "v4", "--db", str(sample_db),
                 "--filter", "scenario:incident_calendar_freshness")
    sent = {g["finding"]: g for g in d["safety"]["in_recording"]}
    assert CALENDAR <= {r["record_id"] for r in sent["stale_as_current"]["records"]}
    fixed = {g["finding"] for g in d["safety"]["fixes"]}
    assert "stale_as_current" in fixed and d["safety"]["regressions"] == []
    assert d["filter"] == "scenario:incident_calendar_freshness" and d["requests"] < 52


def test_out_writes_one_row_per_request_and_keeps_an_existing_file(capsys, sample_db: Path,
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "compare.parquet"
    code, text, _ = run(capsys, "compare", "v4", "v5", "--db", str(sample_db), "--out", str(out))
    assert code == 0 and f"to {out}" in text
    rows = duckdb.sql(f"SELECT assembly_id, delta, safety_regressions, changed FROM '{out}' "
                      "ORDER BY assembly_id").fetchall()
    assert len(rows) == 52
    (incident,) = [r for r in rows if r[0] == "asm-035"]
    # v5 sends the calendar memories bare: fewer tokens than v4's stale markers
    assert incident[1] < 0 and incident[2:] == (4, True)
    before = out.read_bytes()
    code, _, err = run(capsys, "compare", "v4", "v6", "--db", str(sample_db), "--out", str(out))
    assert code == 2 and "already exists" in err and "--force" in err and len(err.splitlines()) == 1
    assert out.read_bytes() == before
    code, _, _ = run(capsys, "compare", "v4", "v6", "--db", str(sample_db), "--out", str(out), "--force")
    assert code == 0 and out.read_bytes() != before


@pytest.mark.parametrize("argv", [
    ("compare", "v9", "v5"),
    ("compare", "v4", "recorded"),
    ("compare", "v4", "v5", "--filter", "nokey:x"),
    ("compare", "v4", "v5", "--out", "no-such-folder/x.parquet"),
])
def test_bad_input_is_one_line_exit_2(capsys, sample_db: Path, argv, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv, "--db", str(sample_db))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("contextlens: error: ")
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_hostile_ids_are_printed_escaped(capsys, tmp_path: Path) -> None:
    db = build_hostile_db(tmp_path)
    code, out, err = run(capsys, "compare", "recorded", "v6", "--db", str(db))
    assert code == 0, err
    assert "as1[bold red]MARKUP[/]" in out  # a hostile assembly id, shown as text
    for raw in RAW:
        assert raw not in out


def test_strict_fails_a_version_that_regresses_safety_and_passes_one_that_does_not(
        capsys, sample_db: Path) -> None:
    code, out, err = run(capsys, "compare", "v4", "v5", "--strict", "--db", str(sample_db))
    assert code == 1 and "--strict: 74 safety regressions under v5" in err
    assert out.splitlines()[0] == "compare v4 -> v5 over 52 requests"  # the report is printed
    code, _, _ = run(capsys, "compare", "v4", "v5", "--db", str(sample_db))
    assert code == 0  # without --strict a regression is reported, not a failure
    code, _, _ = run(capsys, "compare", "v5", "v6", "--strict", "--db", str(sample_db))
    assert code == 0  # v6 fixes the incident and regresses nothing


# Every query of every DuckDB connection and cursor in the child process (and its workers)
# would draw DuckDB's progress bar on standard output (support.progress_bar), unless the
# connection turned it off first: a query slower than DuckDB's 2 s does in a real run.
@pytest.mark.parametrize("argv", [("compare", "recorded", "v4", "--workers", "1"),
                                  ("verify", "--workers", "1")])
def test_json_output_is_json_alone_however_long_the_queries(sample_db: Path, tmp_path: Path,
                                                            argv) -> None:
    proc = run_with_every_query_drawing_progress(tmp_path, *argv, "--db", str(sample_db),
                                                 "--json", timeout=120)
    assert proc.returncode in (0, 1), proc.stderr  # verify exits 1 on drift
    assert "▕" not in proc.stdout
    assert json.loads(proc.stdout)["requests" if argv[0] == "compare" else "checked"] > 0


# ---------------------------------------------------------------- issue 26: histogram (the
# "compare" engineer's section; the bins are replay.compare.histogram_bins, the app's too)

def test_the_text_histogram_has_the_json_bins_each_labelled_and_zero_marked(
        capsys, sample_db: Path) -> None:
    d = run_json(capsys, "compare", "v4", "v5", "--db", str(sample_db))
    bins = d["tokens"]["per_request"]["histogram"]
    assert 2 <= len(bins) <= 12 and (0, 1) in [(b["lo"], b["hi"]) for b in bins]
    code, out, _ = run(capsys, "compare", "v4", "v5", "--db", str(sample_db))
    assert code == 0
    lines = out.split("  per request delta: ")[1].split("\n")[1:len(bins) + 1]
    assert len(lines) == len(bins)
    for line, b in zip(lines, bins):
        label, axis, count = line.split()[:3]
        assert int(count) == b["count"]
        if (b["lo"], b["hi"]) == (0, 1):
            assert (label, axis) == ("0", "┼")
        else:
            assert axis == "│" and label == (f"{b['lo']:+d}" if b["hi"] - b["lo"] == 1
                                             else f"{b['lo']:+d}..{b['hi'] - 1:+d}")
    assert "most changed:" in out.split(lines[-1])[1]  # nothing else among the bins
