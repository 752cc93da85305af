"""A long session's ingest holds DuckDB to a small cap in every step (issue 28): the
adapter's queries over the assembly rows, the store load and the store's checks, which
join and aggregate every row of assembly_records and policy_decisions. The checks ran at
DuckDB's default (most of the machine's memory): 400 MB of a 1,000-request ingest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.cli import run_json
from support.long_session import short_lines_session


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))


def _limit(con: Any) -> str:
    return str(con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0])


def test_the_store_checks_run_under_the_load_memory_cap(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import ingest.loadtables as loadtables
    import ingest.store.loading as loading

    monkeypatch.setattr(loadtables, "LOAD_MEMORY", "96MB")  # a cap no default rounds to
    seen: dict[str, str] = {}
    check_loaded = loading.check_loaded

    def checked(con: Any, *args: Any, **kwargs: Any) -> Any:
        seen["checks"] = _limit(con)
        return check_loaded(con, *args, **kwargs)

    monkeypatch.setattr(loading, "check_loaded", checked)
    session = tmp_path / "long.jsonl"
    short_lines_session(session, 20)
    out = run_json(capsys, "ingest", str(session), "--db", str(tmp_path / "s.duckdb"))
    assert out["rows"]["assembly_records"] == 20 ** 2
    import duckdb

    with duckdb.connect() as fresh:
        fresh.execute("SET memory_limit = '96MB'")
        capped = _limit(fresh)  # DuckDB's own spelling of the cap
    assert seen["checks"] == capped


def test_the_adapters_queries_run_under_their_cap(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import ingest.adapters.assembly_rows as assembly_rows
    from ingest.adapters import adapt

    monkeypatch.setattr(assembly_rows, "QUERY_MEMORY", "96MB")
    seen: list[tuple[str, bool]] = []
    sql = assembly_rows.AssemblyRows.sql

    def opened(self: Any) -> Any:
        fresh = self._con is None
        con = sql(self)
        if not fresh:
            return con
        order = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0]
        seen.append((_limit(con), bool(order)))
        return con

    monkeypatch.setattr(assembly_rows.AssemblyRows, "sql", opened)
    session = tmp_path / "long.jsonl"
    short_lines_session(session, 20)
    adapt(session, tmp_path / "export")
    import duckdb

    with duckdb.connect() as fresh:
        fresh.execute("SET memory_limit = '96MB'")
        capped = _limit(fresh)
    assert seen and set(seen) == {(capped, False)}
