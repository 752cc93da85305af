"""The effective token budget (the policy's budget, capped by the model's context limit, less
the reserve) on the command line: diff, replay, show and compare say which budget each side
was assembled under, in text and in JSON. The expected numbers come from the policy files and
the request rows, never from the output."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from ingest.store import Store
from replay.policy import load_registry
from support import swe_trajectory
from support.cli import run, run_json


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _rows(db: Path) -> list[dict]:
    with Store.open(db) as store:
        return store.assembly_requests().to_pylist()


def _expected(version: str, limit: int | None) -> dict:
    """The budget the assembler's rule gives, from the policy file."""
    policy = load_registry(None).get(version)
    tokens, reserve = policy.budget.token_budget, policy.budget.reserve_tokens
    budget = tokens if limit is None or limit >= tokens else limit
    return {"policy_version": version, "context_limit": limit, "policy_budget": tokens,
            "reserve_tokens": reserve, "budget": budget, "available": budget - reserve,
            "capped_by": "policy" if budget == tokens else "context_limit"}


def _capped(db: Path) -> dict:
    """A request whose model limit is below the budget of every sample policy version."""
    registry = load_registry(None)
    lowest = min(registry.get(v).budget.token_budget for v in registry.versions())
    rows = [r for r in _rows(db) if r["context_limit"] is not None and r["context_limit"] < lowest]
    assert rows, "the sample has a request its runtime capped below every policy's budget"
    return rows[0]


def test_diff_shows_the_models_limit_capping_both_sides(capsys, sample_db: Path) -> None:
    row = _capped(sample_db)
    aid, limit = row["assembly_id"], row["context_limit"]
    d = run_json(capsys, "diff", aid, "--policy", "v1", "--db", str(sample_db))
    assert d["budget"]["a"] == _expected(row["policy_version"], limit)
    assert d["budget"]["b"] == _expected("v1", limit)
    assert d["budget"]["b"]["capped_by"] == "context_limit"
    code, out, _ = run(capsys, "diff", aid, "--policy", "v1", "--db", str(sample_db))
    assert code == 0 and "\x1b" not in out
    a_line = next(line for line in out.splitlines() if line.startswith("  A: "))
    b_line = next(line for line in out.splitlines() if line.startswith("  B: "))
    assert a_line.startswith(f"  A: token budget {limit:,}: the model's context limit")
    assert f"below policy v1's {load_registry(None).get('v1').budget.token_budget:,}" in b_line
    assert b_line.endswith(f"{_expected('v1', limit)['available']:,} available")


def test_diff_against_another_version_shows_each_sides_policy_budget(capsys, sample_db: Path) -> None:
    registry = load_registry(None)
    row = next(r for r in _rows(sample_db) if r["context_limit"] is not None
               and r["context_limit"] >= max(registry.get(v).budget.token_budget
                                             for v in registry.versions()))
    d = run_json(capsys, "diff", row["assembly_id"], "--policy", "v4", "--against", "v1",
                 "--db", str(sample_db))
    assert d["budget"] == {"a": _expected("v1", row["context_limit"]),
                           "b": _expected("v4", row["context_limit"])}
    assert {d["budget"][s]["capped_by"] for s in "ab"} == {"policy"}


def test_replay_and_show_give_the_budget_they_were_assembled_under(capsys, sample_db: Path) -> None:
    row = _capped(sample_db)
    aid, limit = row["assembly_id"], row["context_limit"]
    replayed = run_json(capsys, "replay", aid, "--policy", "v4", "--db", str(sample_db))
    assert replayed["budget"] == _expected("v4", limit)
    shown = run_json(capsys, "show", aid, "--db", str(sample_db))
    assert shown["budget"] == _expected(row["policy_version"], limit)
    assert shown["assembly"]["context_limit"] == limit
    for argv in (("replay", aid, "--policy", "v4"), ("show", aid)):
        code, out, _ = run(capsys, *argv, "--db", str(sample_db))
        assert code == 0 and "\x1b" not in out
        assert f"token budget {limit:,}: the model's context limit" in out


def test_compare_counts_the_requests_the_models_limit_capped(capsys, sample_db: Path,
                                                            tmp_path: Path) -> None:
    rows = _rows(sample_db)
    out_file = tmp_path / "rows.parquet"
    code, text, err = run(capsys, "compare", "v1", "v4", "--db", str(sample_db),
                          "--out", str(out_file))
    assert code == 0, err
    d = run_json(capsys, "compare", "v1", "v4", "--db", str(sample_db))
    for side, version in (("a", "v1"), ("b", "v4")):
        expected = [_expected(version, r["context_limit"]) for r in rows]
        capped = [e["budget"] for e in expected if e["capped_by"] == "context_limit"]
        (entry,) = d["budget"][side]
        assert entry["policy_version"] == version and entry["requests"] == len(rows)
        assert entry["policy_budget"] == expected[0]["policy_budget"]
        assert entry["reserve_tokens"] == expected[0]["reserve_tokens"]
        assert entry["capped"] == len(capped) > 0
        assert entry["lowest_budget"] == min(e["budget"] for e in expected)
        line = next(t for t in text.splitlines() if t.startswith(f"budget {side.upper()} {version}: "))
        assert f"token budget {entry['policy_budget']:,}" in line
        assert f"below it in {len(capped)}, down to {min(capped):,}" in line
    # each request's row carries each side's budget, as the rule gives it for that request
    written = {r[0]: r[1:] for r in duckdb.sql(
        f"SELECT assembly_id, budget_a, budget_b FROM '{out_file}'").fetchall()}
    assert written == {r["assembly_id"]: (_expected("v1", r["context_limit"])["budget"],
                                          _expected("v4", r["context_limit"])["budget"])
                       for r in rows}


def test_compare_against_the_recording_lists_each_recorded_version(capsys, sample_db: Path) -> None:
    rows = _rows(sample_db)
    d = run_json(capsys, "compare", "recorded", "v4", "--db", str(sample_db))
    by_version = {e["policy_version"]: e for e in d["budget"]["a"]}
    assert set(by_version) == {r["policy_version"] for r in rows}
    for version, entry in by_version.items():
        mine = [r for r in rows if r["policy_version"] == version]
        assert entry["requests"] == len(mine)
        assert entry["capped"] == sum(_expected(version, r["context_limit"])["capped_by"]
                                      == "context_limit" for r in mine)


def test_a_runtime_policy_says_it_keeps_no_budget(capsys, tmp_path: Path) -> None:
    """A transcript request replays under its runtime's rule: no budget is invented, the
    model's recorded window is what is shown."""
    db = tmp_path / "s.duckdb"
    code, _out, err = run(capsys, "ingest", str(swe_trajectory.write(tmp_path / "run.traj")),
                          "--db", str(db))
    assert code == 0, err
    row = _rows(db)[-1]
    aid, window = row["assembly_id"], row["context_limit"]
    assert window is not None, "the trajectory's model has a known context window"
    none = {"policy_version": "swe-agent", "context_limit": window, "policy_budget": None,
            "reserve_tokens": None, "budget": None, "available": None, "capped_by": None}
    assert run_json(capsys, "show", aid, "--db", str(db))["budget"] == none
    assert run_json(capsys, "replay", aid, "--policy", "swe-agent", "--db", str(db))["budget"] == none
    d = run_json(capsys, "diff", aid, "--policy", "swe-agent:history_processors=false",
                 "--db", str(db))
    assert d["budget"]["a"] == none
    assert d["budget"]["b"] == {**none, "policy_version": "swe-agent:history_processors=false"}
    code, out, _ = run(capsys, "show", aid, "--db", str(db))
    assert code == 0
    assert f"no token budget under swe-agent (a runtime policy); the model's context window is {window:,}" in out
    assert "of budget" not in out
    c = run_json(capsys, "compare", "recorded", "swe-agent:history_processors=false", "--db", str(db))
    assert [(e["policy_budget"], e["context_limit_min"]) for e in c["budget"]["b"]] == [(None, window)]
