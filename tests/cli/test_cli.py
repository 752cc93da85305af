"""The command line as a script or a person meets it: JSON shapes, exit codes, one-line
errors with no traceback, escaped log content, masking."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import run, run_json


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_list_json_has_the_documented_fields(capsys, sample_db: Path) -> None:
    rows = run_json(capsys, "list", "--db", str(sample_db))
    assert len(rows) >= 40
    required = {
        "assembly_id", "conversation_id", "branch_id", "participant_id", "runtime_kind",
        "policy_version", "assembler_version", "assembled_at", "included_count",
        "omitted_count", "assembled_tokens", "baseline_tokens", "tags",
    }
    for row in rows:
        assert required <= set(row)
        assert isinstance(row["tags"], list)
    times = [r["assembled_at"] for r in rows]
    assert times == sorted(times)


def test_list_filter_narrows_and_unknown_key_fails(capsys, sample_db: Path) -> None:
    all_rows = run_json(capsys, "list", "--db", str(sample_db))
    v5 = run_json(capsys, "list", "--db", str(sample_db), "--filter", "policy:v5")
    assert 0 < len(v5) < len(all_rows)
    assert {r["policy_version"] for r in v5} == {"v5"}
    code, out, err = run(capsys, "list", "--db", str(sample_db), "--filter", "colour:red")
    assert code == 2 and "colour" in err and "Traceback" not in err
    injected = run_json(capsys, "list", "--db", str(sample_db), "--filter", "x' OR 1=1 --")
    assert injected == []
    # a scenario is found by the beginning of its name too
    incident = run_json(capsys, "list", "--db", str(sample_db), "--filter", "scenario:incident")
    assert incident and {r["scenario"] for r in incident} == {"incident_calendar_freshness"}


def _first(rows, **match):
    return next(r for r in rows if all(r.get(k) == v for k, v in match.items()))


def test_show_json_orders_included_and_lists_omitted(capsys, sample_db: Path) -> None:
    rows = run_json(capsys, "list", "--db", str(sample_db))
    target = max(rows, key=lambda r: r["omitted_count"])
    shown = run_json(capsys, "show", target["assembly_id"], "--db", str(sample_db))
    assert shown["assembly"]["assembly_id"] == target["assembly_id"]
    positions = [r["position"] for r in shown["included"]]
    assert positions == list(range(len(positions)))
    assert len(shown["included"]) == target["included_count"]
    assert len(shown["omitted"]) == target["omitted_count"] > 0
    for r in shown["omitted"]:
        assert {"record_kind", "record_id", "reason_code", "policy_family", "detail", "tokens"} <= set(r)
    assert sum(r["tokens"] for r in shown["included"]) == shown["assembly"]["assembled_tokens"]


def test_why_explains_broken_provenance_without_inventing_ids(capsys, sample_db: Path, sample_export: Path) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rows = run_json(capsys, "list", "--db", str(sample_db), "--filter", "scenario:broken_provenance")
    assert rows, "the sample tells the broken provenance story"
    aid = rows[0]["assembly_id"]
    artifact_ids = set(pq.read_table(sample_export / "tool_artifacts.parquet")["artifact_id"].to_pylist())
    memories = pq.read_table(sample_export / "tool_memories.parquet").to_pylist()
    dangling = {m["memory_id"]: [a for a in m["source_artifact_ids"] if a not in artifact_ids] for m in memories}
    dangling = {k: v for k, v in dangling.items() if v}
    shown = run_json(capsys, "show", aid, "--db", str(sample_db))
    rec = next(r for r in shown["omitted"] + shown["included"] if r["record_id"] in dangling)
    why = run_json(capsys, "why", aid, rec["record_id"], "--db", str(sample_db))
    assert rec["record_id"] in why["explanation"]
    assert "broken provenance" in why["explanation"]
    if why["decision"] == "included":
        assert why["rendering"] in ("stale_marker", "revalidation_hint"), "never presented as current fact"
    broken = [l for l in why["provenance"] if l["broken"]]
    # the missing artifact appears under its real id: nothing is invented in its place
    assert sorted(l["id"] for l in broken) == sorted(dangling[rec["record_id"]])
    assert why["decisions"], "the trace for the record is returned"


def test_why_included_memory_says_where_it_came_from(capsys, sample_db: Path) -> None:
    rows = run_json(capsys, "list", "--db", str(sample_db), "--filter", "reason:compact_memory")
    aid = rows[0]["assembly_id"]
    shown = run_json(capsys, "show", aid, "--db", str(sample_db))
    rec = _first(shown["included"], reason_code="compact_memory")
    why = run_json(capsys, "why", aid, rec["record_id"], "--db", str(sample_db))
    assert why["explanation"].startswith("Included ")
    assert "compact memory" in why["explanation"]
    assert f"policy {shown['assembly']['policy_version']}" in why["explanation"]
    kinds = [l["kind"] for l in why["provenance"]]
    assert "tool_artifact" in kinds


@pytest.mark.parametrize(
    "argv",
    [
        ("show", "no-such-assembly"),
        ("why", "no-such-assembly", "m-1"),
    ],
)
def test_unknown_ids_exit_2_with_one_line(capsys, sample_db: Path, argv) -> None:
    code, out, err = run(capsys, *argv, "--db", str(sample_db), "--json")
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and "no-such-assembly" in err


def test_why_unknown_record_in_known_assembly(capsys, sample_db: Path) -> None:
    aid = run_json(capsys, "list", "--db", str(sample_db))[0]["assembly_id"]
    code, out, err = run(capsys, "why", aid, "no-such-record", "--db", str(sample_db))
    assert code == 2 and "no-such-record" in err


def test_markup_and_escapes_are_printed_as_data(capsys, sample_db: Path) -> None:
    """Log content that looks like markup or carries ANSI escapes is never obeyed."""
    for row in run_json(capsys, "list", "--db", str(sample_db)):
        code, out, err = run(capsys, "show", row["assembly_id"], "--db", str(sample_db))
        assert "\x1b" not in out
    code, out, err = run(capsys, "show", row["assembly_id"], "--db", str(sample_db), "--json")
    assert "\x1b" not in out


def test_real_console_script_bad_store_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-store.duckdb"
    bogus.write_bytes(b"this is not a database")
    env = dict(os.environ, CONTEXTLENS_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "inspector.cli", "list", "--db", str(bogus)],
        capture_output=True, text=True, env=env,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(bogus.name) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_app_that_ends_on_an_error_is_not_a_success(capsys, monkeypatch) -> None:
    """Textual prints the error when the app ends on one; the command's exit code says so
    too, so a script (or serve) does not take it for a normal quit."""
    from inspector.app import ContextLensApp

    def crash(self, *args, **kwargs) -> None:
        self._return_code = 1  # what Textual sets when an exception ends the app

    monkeypatch.setattr(ContextLensApp, "run", crash)
    code, _out, _err = run(capsys, "open")
    assert code == 1


def test_a_sqlite_file_named_as_the_store_is_refused_without_fetching_anything(
        capsys, tmp_path: Path) -> None:
    """DuckDB reads a SQLite file through an extension it would download: a file handed to
    us never makes it go to the network (nor load anything on its own)."""
    import sqlite3

    db = tmp_path / "other.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (a)")
    before = db.read_bytes()
    fixture = Path(__file__).resolve().parents[1] / "adapter_fixtures" / "compaction.jsonl"
    code, _out, err = run(capsys, "ingest", str(fixture), "--db", str(db))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "not a contextlens store" in err and "http" not in err and "download" not in err.lower()
    assert db.read_bytes() == before


def test_a_transcript_named_with_backslashes_and_escapes_is_cached_inside_the_cache(
        capsys, tmp_path: Path, monkeypatch) -> None:
    """DuckDB reads a backslash in a file name as a folder separator: a transcript named
    '..\\..\\x.jsonl' put its cache store (and its scratch files) two folders up."""
    cache = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(cache))
    fixture = Path(__file__).resolve().parents[1] / "adapter_fixtures" / "compaction.jsonl"
    hostile = tmp_path / "in" / "..\\..\\esc\x1b[31m.jsonl"
    hostile.parent.mkdir()
    hostile.write_bytes(fixture.read_bytes())
    code, out, err = run(capsys, "list", "--db", str(hostile))
    assert code == 0, err
    made = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                  if p.is_file() and "esc" in p.name)
    assert made and all(p.startswith(("a/b/cache/", "in/")) for p in made), made
    assert all("\x1b" not in p and "\\" not in p for p in made if p.startswith("a/")), made


@pytest.mark.parametrize("argv", [
    ["show", "asm-001", "--bogus"], ["list", "--limit", "0"], ["verify", "--workers", "0"],
    ["bogus"], ["show", "a\nb\x1b[31m"], ["show", "x" * 100_000],
])
def test_every_error_is_one_short_line(capsys, argv: list[str]) -> None:
    """A usage error, a newline in an argument, a 100,000-character id: one line, the
    argument escaped and cut, exit 2."""
    code, _out, err = run(capsys, *argv)
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("contextlens: error: "), err
    assert "\x1b" not in err and len(err) < 1000, err[:300]


def test_a_file_name_that_is_not_utf8_is_named_not_an_internal_error(
        capsys, tmp_path: Path) -> None:
    import os

    fixture = Path(__file__).resolve().parents[1] / "adapter_fixtures" / "compaction.jsonl"
    name = os.fsdecode(bytes(tmp_path / "tt") + b"\xff.jsonl")
    Path(name).write_bytes(fixture.read_bytes())
    for argv in (["list", "--db", name], ["compare", "v4", "v5", "--out", name + ".parquet"]):
        code, _out, err = run(capsys, *argv)
        assert code == 2, err
        assert err.strip() == ("contextlens: error: a file or folder name that is not valid "
                               "UTF-8 (byte ff): rename it"), err


def test_a_runtime_key_without_a_value_says_so(capsys) -> None:
    code, _out, err = run(capsys, "replay", "asm-035", "--policy", "claude-code:compaction")
    assert code == 2 and "compaction needs a value (claude-code:compaction=VALUE)" in err, err


def test_compare_out_does_not_replace_a_dangling_link_unless_forced(capsys, tmp_path: Path) -> None:
    link = tmp_path / "rows.parquet"
    link.symlink_to(tmp_path / "nowhere" / "x.parquet")
    code, _out, err = run(capsys, "compare", "v4", "v5", "--out", str(link))
    assert code == 2 and "already exists (use --force to replace it)" in err, err
    assert link.is_symlink()
