"""Time-less requests show no invented time: a SWE-agent trajectory and a tau-bench file
record no times, so their requests' times are made up at ingest (2000-01-01 on, in the log's
order, tag ``times:unrecorded``). No output shows that date: the list's text says "not
recorded", JSON has null, show and the bundle's report say so too; and such requests are
listed in the log's order (by time: after the timed ones)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run, run_json
from support.sql import sql

from ingest.store import Store

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
SWE = REALDATA / "swe-agent" / "gpt4_fc__6e44b9__sweagenttestrepo-1c2844.traj"
TAU = REALDATA / "tau-bench" / "gpt-4o-airline.first3.json"
SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
MADE_UP_YEAR = "2000-01-01"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))


def _store(capsys, tmp_path: Path, *sources: Path) -> Path:
    for src in sources:
        if not src.exists():
            pytest.skip(f"shared/realdata is not beside this checkout ({src.name})")
    db = tmp_path / "s.duckdb"
    for src in sources:
        code, _out, err = run(capsys, "ingest", str(src), "--db", str(db))
        assert code == 0, err
    return db


def _log_order(db: Path) -> list[str]:
    """The requests in the log's order, read from the store: the made-up times count up
    from 2000-01-01 in the order the log holds them (ingest.tags, times:unrecorded)."""
    return [a for (a,) in sql(db, "SELECT assembly_id FROM context_assemblies "
                                  "WHERE list_contains(tags, 'times:unrecorded') "
                                  "ORDER BY export_id, assembled_at")]


@pytest.mark.parametrize("log", [SWE, TAU], ids=["swe-agent", "tau-bench"])
def test_a_log_without_times_shows_none(capsys, tmp_path: Path, log: Path) -> None:
    db = _store(capsys, tmp_path, log)
    order = _log_order(db)
    assert order, "the log records no times: every request's was made up"

    rows = run_json(capsys, "list", "--db", str(db))
    assert [r["assembly_id"] for r in rows] == order
    assert all(r["assembled_at"] is None for r in rows)
    newest = run_json(capsys, "list", "--db", str(db), "--desc")
    assert [r["assembly_id"] for r in newest] == order[::-1]

    code, out, err = run(capsys, "list", "--db", str(db))
    assert code == 0, err
    assert MADE_UP_YEAR not in out and "2000-" not in out
    table = out.splitlines()[1:len(order) + 1]
    assert all("not recorded" in line for line in table), table
    assert "time not recorded for all of them" in out and "in the log's order" in out

    shown = run_json(capsys, "show", order[-1], "--db", str(db))
    assert shown["assembly"]["assembled_at"] is None
    code, out, _err = run(capsys, "show", order[-1], "--db", str(db))
    assert code == 0 and "2000-" not in out

    code, _out, err = run(capsys, "bundle", order[0], "--out", str(tmp_path / "b"), "--db", str(db))
    assert code == 0, err
    report = (tmp_path / "b" / "report.md").read_text(encoding="utf-8")
    assert "| assembled at | not recorded" in report and "2000-" not in report


def test_by_time_the_untimed_come_after_the_timed_each_log_in_its_order(capsys, tmp_path: Path) -> None:
    """The sample (timed) with a trajectory and a tau-bench file (untimed), in one store:
    oldest first, the sample's requests by their times, then each log's in its order; the
    newest first is that order reversed, the untimed still after the timed (as nulls are)."""
    db = _store(capsys, tmp_path, SAMPLE, SWE, TAU)
    untimed = _log_order(db)
    timed = [a for (a,) in sql(db, "SELECT assembly_id FROM context_assemblies WHERE NOT "
                                   "list_contains(tags, 'times:unrecorded') ORDER BY assembled_at, assembly_id")]
    rows = run_json(capsys, "list", "--db", str(db))
    assert [r["assembly_id"] for r in rows] == timed + untimed
    newest = run_json(capsys, "list", "--db", str(db), "--desc")
    # within each log, newest first; the logs in the other order too
    assert [r["assembly_id"] for r in newest] == timed[::-1] + untimed[::-1]
    code, out, _err = run(capsys, "list", "--db", str(db))
    assert f"time not recorded for {len(untimed)} of them" in out and "after the timed ones" in out
    assert MADE_UP_YEAR not in out

    # the streamed list pages by key (4,096 rows a batch): small batches give the same order
    with Store.open(db) as store:
        for desc in (False, True):
            whole = store.list_assemblies(sort="assembled_at", descending=desc)["assembly_id"].to_pylist()
            paged = [a for b in store.iter_assemblies(sort="assembled_at", descending=desc, batch_rows=3)
                     for a in b.column("assembly_id").to_pylist()]
            assert paged == whole == ([r["assembly_id"] for r in newest] if desc else
                                      [r["assembly_id"] for r in rows])
