"""A long session ingests in bounded memory (issue 28): each request of a Claude Code session
carries the whole history before it, so a session of n requests has n²/2 assembly rows; they
go to disk in batches as they are made (ingest/adapters/assembly_rows.py), never held as one
Python structure, and the counts are those of the history."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from support.cli import run_json
from support.long_session import short_lines_session

REQUESTS = 200
# Python memory the adaptation of REQUESTS short turns may hold at its peak, beyond what it
# held before: the session's own records and lines (a few MB). Holding the n²/2 rows of its
# assemblies (40,000 here, as dicts) took 30 MB.
PEAK_BYTES = 12 << 20


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))


def test_a_long_session_adapts_in_bounded_memory(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest.adapters import adapt
    import ingest.adapters.assembly_rows as assembly_rows

    # rows spilled every 2,000 (a long session's batches, made small for a test)
    monkeypatch.setattr(assembly_rows, "SPILL_ROWS", 2_000)
    session = tmp_path / "long.jsonl"
    short_lines_session(session, REQUESTS)
    short_lines_session(tmp_path / "warm.jsonl", 3)
    adapt(tmp_path / "warm.jsonl", tmp_path / "warm")  # every module it uses imported first
    tracemalloc.start()
    try:
        result = adapt(session, tmp_path / "export")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # request k carries the k earlier turns (prompt and answer) and its own prompt
    assert result.stats["rows.assembly_records"] == REQUESTS ** 2
    assert peak < PEAK_BYTES, f"adapting held {peak / 1e6:.1f} MB of Python objects at its peak"


def test_a_long_session_ingests_with_the_counts_of_its_history(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    import ingest.adapters.assembly_rows as assembly_rows

    monkeypatch.setattr(assembly_rows, "SPILL_ROWS", 1_000)
    requests = 60
    session = tmp_path / "long.jsonl"
    short_lines_session(session, requests)
    db = tmp_path / "s.duckdb"
    out = run_json(capsys, "ingest", str(session), "--db", str(db))
    rows = out["rows"]
    assert rows["context_assemblies"] == rows["model_runs"] == requests
    # included rows = the sum over requests of the history each carried
    assert rows["assembly_records"] == rows["policy_decisions"] == sum(2 * k + 1 for k in range(requests))
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    per_request = con.execute(
        "SELECT count(*) FILTER (WHERE decision = 'included'), count(DISTINCT position), "
        "max(position) FROM assembly_records GROUP BY assembly_id ORDER BY 1").fetchall()
    assert [n for n, _, _ in per_request] == [2 * k + 1 for k in range(requests)]
    assert all(distinct == n and top == n - 1 for n, distinct, top in per_request)
    # every row has its decision, step for step
    assert con.execute(
        "SELECT count(*) FROM assembly_records r JOIN policy_decisions d "
        "ON d.assembly_id = r.assembly_id AND d.record_id = r.record_id "
        "AND d.outcome = CASE r.decision WHEN 'included' THEN 'allow' ELSE 'deny' END"
    ).fetchone()[0] == rows["assembly_records"]
    con.close()
    assert not list((tmp_path / "cache").rglob("*.writing-rows"))  # the scratch rows removed
