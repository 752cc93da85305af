"""Ctrl+C and SIGTERM as documented (docs/cli.md, exit codes): one line and exit 130 or 143
in every command, an ingest saying whether its export was stored, worker processes that
end with the command however it ends, and no scratch file left for good.

Each signal is sent when the command says it reached the point (support.interrupts: a
marker line on stderr; at an ingest step the command waits there for the signal)."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from support.interrupts import Interrupted, signal_at, wait_gone


def _export_id(export: Path) -> str:
    import json

    return str(json.loads((export / "manifest.json").read_text())["export_id"])


def _stored_exports(db: Path) -> list[str]:
    from ingest.store import Store

    with Store.open(db) as store:
        return [e["export_id"] for e in store.exports()]


def _one_line(run: Interrupted, code: int, line: str) -> None:
    assert run.code == code, run.stderr_lines
    assert run.stderr_lines == [line]  # one line: no traceback from any process


# ----------------------------------------------------------------------------- ingest

SIGNALS = [pytest.param(signal.SIGINT, 130, id="ctrl-c"),
           pytest.param(signal.SIGTERM, 143, id="sigterm")]


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_a_signal_while_an_ingest_loads_stores_nothing_and_says_so(
        sample_export: Path, tmp_path: Path, signum: int, code: int) -> None:
    stores = tmp_path / "stores"
    stores.mkdir()
    db = stores / "new.duckdb"
    run = signal_at(tmp_path / "hook", "step loading context_assemblies", "ingest",
                    str(sample_export), "--db", str(db), signum=signum, pause=True)
    _one_line(run, code, f"interrupted: nothing of export {_export_id(sample_export)} "
                         f"stored in {db}")
    assert [p.name for p in stores.iterdir()] == []  # no store, no scratch, no lock


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_a_signal_while_an_ingest_queries_is_one_line_not_duckdbs_error(
        sample_export: Path, tmp_path: Path, signum: int, code: int) -> None:
    """Inside a DuckDB query the signal comes back as DuckDB's "Query interrupted" (exit 1,
    'internal error', before): the step that validates runs queries from its start."""
    db = tmp_path / "new.duckdb"
    run = signal_at(tmp_path / "hook", "step reading column types", "ingest",
                    str(sample_export), "--db", str(db), signum=signum, group=False)
    _one_line(run, code, f"interrupted: nothing of export {_export_id(sample_export)} "
                         f"stored in {db}")
    assert not db.exists()


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_a_signal_once_a_new_store_is_in_place_says_the_export_was_stored(
        sample_export: Path, tmp_path: Path, signum: int, code: int) -> None:
    db = tmp_path / "new.duckdb"
    run = signal_at(tmp_path / "hook", "step done", "ingest", str(sample_export),
                    "--db", str(db), signum=signum, group=False, pause=True)
    export_id = _export_id(sample_export)
    _one_line(run, code, f"interrupted after export {export_id} was stored in {db}")
    assert _stored_exports(db) == [export_id]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hook", "new.duckdb"]


def test_sigterm_once_an_export_is_committed_into_a_store_says_it_was_stored(
        sample_export: Path, tmp_path: Path) -> None:
    """The report: SIGTERM right after the commit died silently (rc -15)."""
    from replay.sample_export import write_sample

    db = tmp_path / "store.duckdb"
    other = write_sample(tmp_path / "other", scale=20)  # ids of its own: the story's would collide
    from ingest.store import ingest

    ingest(sample_export, db)
    run = signal_at(tmp_path / "hook", "step checkpointing", "ingest", str(other),
                    "--db", str(db), signum=signal.SIGTERM, group=False, pause=True)
    _one_line(run, 143, f"interrupted after export {_export_id(other)} was stored in {db}")
    assert sorted(_stored_exports(db)) == sorted([_export_id(sample_export), _export_id(other)])


# ----------------------------------------------------------------------------- SIGTERM


@pytest.mark.parametrize("argv", [("verify", "--workers", "1"),
                                  ("compare", "recorded", "v4", "--workers", "1"),
                                  ("list",)],
                         ids=lambda argv: argv[0])
def test_sigterm_in_any_command_is_one_line_and_143(sample_db: Path, tmp_path: Path,
                                                    argv: tuple[str, ...]) -> None:
    run = signal_at(tmp_path / "hook", "connected", *argv, "--db", str(sample_db),
                    signum=signal.SIGTERM, group=False)
    _one_line(run, 143, "terminated")


def test_sigterm_on_compare_out_stops_its_workers_and_leaves_no_file(
        scale_db: Path, tmp_path: Path) -> None:
    """The report: the workers were orphaned (they kept the store open 98 s later) and
    ``.rows.parquet.<pid>.tmp`` stayed."""
    out = tmp_path / "out"
    out.mkdir()
    run = signal_at(tmp_path / "hook", "connected-in-worker", "compare", "recorded", "v4",
                    "--db", str(scale_db), "--workers", "2", "--out", str(out / "rows.parquet"),
                    signum=signal.SIGTERM, group=False)
    _one_line(run, 143, "terminated")
    assert run.workers
    assert all(wait_gone(pid) for pid in run.workers)
    assert list(out.iterdir()) == []


def test_workers_of_a_killed_compare_die_with_it_and_the_next_run_removes_its_scratch(
        scale_db: Path, tmp_path: Path) -> None:
    """SIGKILL: the command cannot stop its workers nor remove its temporary file; the
    kernel ends the workers (parent-death signal) and the next compare writing the same
    file removes the dead run's temporary."""
    out = tmp_path / "out"
    out.mkdir()
    target = out / "rows.parquet"
    run = signal_at(tmp_path / "hook", "connected-in-worker", "compare", "recorded", "v4",
                    "--db", str(scale_db), "--workers", "2", "--out", str(target),
                    signum=signal.SIGKILL, group=False)
    assert run.code == -signal.SIGKILL
    assert run.workers and all(wait_gone(pid) for pid in run.workers)
    left = [p.name for p in out.iterdir()]
    assert len(left) == 1 and left[0].startswith(".rows.parquet.") and left[0].endswith(".tmp")

    shutil.rmtree(tmp_path / "hook")
    from click.testing import CliRunner

    from inspector.cli import cli

    result = CliRunner().invoke(cli, ["compare", "recorded", "v4", "--db", str(scale_db),
                                      "--workers", "1", "--out", str(target)])
    assert result.exit_code == 0, result.output
    assert [p.name for p in out.iterdir()] == ["rows.parquet"]
