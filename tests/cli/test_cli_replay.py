"""Replay, diff, verify, policies and the tokens report on the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import run, run_json


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_policies_lists_versions_with_changes(capsys) -> None:
    out = run_json(capsys, "policies")
    versions = [p["version"] for p in out]
    assert versions[:6] == ["v1", "v2", "v3", "v4", "v5", "v6"]
    v5 = next(p for p in out if p["version"] == "v5")
    assert v5["extends"] == "v4" and v5["description"]
    keys = {c["key"]: (c["parent"], c["value"]) for c in v5["changes"]}
    assert keys["freshness.volatile"][1] > keys["freshness.volatile"][0], "v5 widened the window"


def _incident_v5(capsys, db: Path) -> str:
    rows = run_json(capsys, "list", "--db", str(db), "--filter", "scenario:incident_calendar_freshness policy:v5")
    assert rows
    return rows[0]["assembly_id"]


def test_replay_json_matches_show_shape_and_hash(capsys, sample_db: Path) -> None:
    aid = _incident_v5(capsys, sample_db)
    recorded = run_json(capsys, "show", aid, "--db", str(sample_db))
    replayed = run_json(capsys, "replay", aid, "--policy", "v5", "--db", str(sample_db))
    assert replayed["selection_hash"] == recorded["assembly"]["selection_hash"], "replay under the recorded policy is faithful"
    assert [r["record_id"] for r in replayed["included"]] == [r["record_id"] for r in recorded["included"]]
    assert {"record_kind", "record_id", "position", "rendering", "reason_code", "policy_family", "tokens"} <= set(replayed["included"][0])


def test_incident_diff_under_v4_marks_the_calendar_memory_stale(capsys, sample_db: Path) -> None:
    aid = _incident_v5(capsys, sample_db)
    d = run_json(capsys, "diff", aid, "--policy", "v4", "--db", str(sample_db))
    assert set(d["summary"]["counts"]) >= {"newly_included", "newly_omitted", "rendering_changed", "reason_changed", "moved", "unchanged"}
    changed = {c["record_id"]: c for c in d["changes"] if c["change"] != "unchanged"}
    calendar = [c for c in changed.values() if c["a"] and c["a"]["rendering"] == "compact_memory" and c["b"] and c["b"]["rendering"] == "stale_marker"]
    assert calendar, "a memory recorded as current fact under v5 becomes a stale marker under v4"
    for c in d["changes"]:
        assert {"record_kind", "record_id", "change", "a", "b"} <= set(c)
    # against another version instead of the recording
    d2 = run_json(capsys, "diff", aid, "--policy", "v6", "--against", "v5", "--db", str(sample_db))
    assert "v5" in d2["a_label"] and "v6" in d2["b_label"]


def test_verify_finds_exactly_the_drifted_assemblies(capsys, sample_db: Path, sample_export: Path) -> None:
    import pyarrow.parquet as pq

    rows = pq.read_table(sample_export / "context_assemblies.parquet").to_pylist()
    expected = sorted(r["assembly_id"] for r in rows if "scenario:drift_supersession" in r["tags"])
    assert expected == ["asm-013", "asm-014", "asm-015"]
    code, out, err = run(capsys, "verify", "--db", str(sample_db), "--json")
    assert code == 1, "any drift exits 1"
    result = json.loads(out)
    assert result["checked"] == len(rows)
    assert (result["faithful"], result["drifted"], result["inconsistent"], result["not_replayable"]) == (
        len(rows) - len(expected), len(expected), 0, 0)
    assert [d["assembly_id"] for d in result["results"]] == expected
    for d in result["results"]:
        assert d["verdict"] == "drifted" and d["policy_version"] == "v4"
        assert d["recorded_hash"] == d["recomputed_hash"] != d["replay_hash"]
        flips = {(f["recorded"], f["replayed"]) for r in d["records"] for f in r["fields"]
                 if f["field"] == "decision"}
        assert flips == {("included", "omitted"), ("omitted", "included")}
    code, out, err = run(capsys, "verify", "--db", str(sample_db))
    assert code == 1
    lines = out.splitlines()
    # the verdicts are printed as they are found, the counts last
    assert lines[-1] == f"checked {len(rows)}: {len(rows) - 3} faithful, 3 drifted, 0 inconsistent, 0 not replayable"
    assert [l.split()[1] for l in lines if l.startswith("DRIFTED ")] == expected
    assert any("decision included → omitted" in l for l in lines)
    # records that only moved (another went in or out before them) are counted apart:
    # the diff the app opens from here counts them as unchanged
    head = next(l for l in lines if l.startswith("DRIFTED asm-013 "))
    moved = [r for r in result["results"][0]["records"]
             if [f["field"] for f in r["fields"]] == ["position"]]
    differ = len(result["results"][0]["records"]) - len(moved)
    assert moved and head.endswith(
        f": {differ} records differ, {len(moved)} more only shifted in position")
    code, out, err = run(capsys, "verify", "--db", str(sample_db), "--filter", "-scenario:drift_supersession")
    assert code == 0 and "0 drifted" in out


def test_verify_missing_policy_is_one_line_and_fails_only_when_strict(
        capsys, sample_db: Path, tmp_path: Path) -> None:
    from replay.policy import bundled_policies_dir
    import shutil

    folder = tmp_path / "policies"
    shutil.copytree(bundled_policies_dir(), folder)
    (folder / "v6.toml").unlink()
    args = ("verify", "--db", str(sample_db), "--policies", str(folder), "--filter", "policy:v6")
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, "not replayable alone is not a failure"
    result = json.loads(out)
    assert (result["checked"], result["not_replayable"], result["faithful"]) == (2, 2, 0)
    assert {r["verdict"] for r in result["results"]} == {"not_replayable"}
    assert len(err.strip().splitlines()) == 1 and "v6" in err and "2 requests" in err
    code, out, err = run(capsys, *args, "--strict")
    assert code == 1 and "2 not replayable" in out and len(err.strip().splitlines()) == 1


def test_report_tokens_per_scenario(capsys, sample_db: Path) -> None:
    rows = run_json(capsys, "report", "tokens", "--db", str(sample_db))
    by = {r["scenario"]: r for r in rows}
    assert "incident_calendar_freshness" in by
    for r in rows:
        assert r["assembled_tokens"] <= r["baseline_tokens"]
        assert 0 <= r["reduction"] <= 1


def test_unknown_policy_version_is_one_line_exit_2(capsys, sample_db: Path) -> None:
    code, out, err = run(capsys, "replay", "asm-001", "--policy", "v99", "--db", str(sample_db))
    assert code == 2 and "v99" in err and len(err.strip().splitlines()) == 1


def test_bad_policy_file_names_file_and_key(capsys, tmp_path: Path, sample_db: Path) -> None:
    (tmp_path / "v1.toml").write_text('version = "v1"\ndescription = "x"\n[window]\nmax_mesages = 3\n')
    code, out, err = run(capsys, "policies", "--policies", str(tmp_path))
    assert code == 2
    assert "v1.toml" in err and "max_mesages" in err and "Traceback" not in err


def test_lint_flags_the_incident_and_the_drift_and_exits_1(capsys, sample_db: Path, sample_export: Path) -> None:
    import pyarrow.parquet as pq

    rows = pq.read_table(sample_export / "context_assemblies.parquet").to_pylist()
    drift = sorted(r["assembly_id"] for r in rows if "scenario:drift_supersession" in r["tags"])
    code, out, err = run(capsys, "lint", "--db", str(sample_db), "--json")
    assert code == 1, "error-level findings exit 1"
    findings = json.loads(out)
    assert sorted({f["assembly_id"] for f in findings if f["rule"] == "superseded_included"}) == drift
    stale = {f["assembly_id"] for f in findings if f["rule"] == "stale_as_current"}
    v5 = {r["assembly_id"] for r in rows if r["policy_version"] == "v5" and "scenario:incident_calendar_freshness" in r["tags"]}
    assert v5 <= stale
    for f in findings:
        assert {"rule", "severity", "assembly_id", "message_id", "detail"} <= set(f)
    # the faithful requests of the other policy versions are clean
    code, out, err = run(capsys, "lint", "--db", str(sample_db), "--filter", "-scenario:drift_supersession -policy:v5")
    assert code == 0, out
