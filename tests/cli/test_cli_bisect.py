"""``contextlens bisect`` on the sample: the v5 incident, its text and JSON, and bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import run, run_json

CALENDAR = "mem-020"  # Dana's availability, shown as current by the v5 incident requests


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _incident_requests(capsys, db: Path) -> list[str]:
    rows = run_json(capsys, "list", "--db", str(db), "--filter",
                    "scenario:incident_calendar_freshness policy:v5")
    return [r["assembly_id"] for r in rows]


def test_the_v5_incident_bisects_to_v5_and_the_volatile_window(capsys, sample_db: Path) -> None:
    requests = _incident_requests(capsys, sample_db)
    assert {"asm-033", "asm-034", "asm-035", "asm-036"} <= set(requests)
    for aid in ("asm-033", "asm-036"):
        out = run_json(capsys, "bisect", aid, CALENDAR, "--good", "v4", "--bad", "v5",
                       "--db", str(sample_db))
        assert out["version"] == "v5" and out["previous"] == "v4"
        assert out["keys"] == [{"key": "freshness.volatile", "before": 6, "after": 168}]
        assert out["alone"] is True
        assert out["good_state"] == {"decision": "included", "rendering": "stale_marker",
                                     "reason_code": "stale_marker"}
        assert out["bad_state"] == {"decision": "included", "rendering": "compact_memory",
                                    "reason_code": "compact_memory"}
        assert [t["version"] for t in out["tried"]] == ["v4", "v5"]
        assert {c["key"] for c in out["changed"]} == {
            "freshness.volatile", "freshness.session", "freshness.bounded"}


def test_text_names_the_first_bad_version_and_the_key_with_its_values(capsys, sample_db: Path) -> None:
    code, out, err = run(capsys, "bisect", "asm-035", CALENDAR, "--db", str(sample_db))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "bisect tool_memory mem-020 of asm-035, v1 .. v5 (registry order)"
    tried = [line.split()[0] for line in lines[1:6]]
    assert tried == ["v1", "v2", "v3", "v4", "v5"]  # the defaults: first version .. recorded
    assert "omitted (stale)" in lines[1]
    assert lines[5].endswith("<- first bad")
    assert "first bad version: v5 (after v4)" in out
    assert "flipped by freshness.volatile: 6 -> 168 (alone)" in out
    assert "also changed, not flipping it alone: freshness.bounded 72 -> 720, " \
           "freshness.session 24 -> 168" in out


def test_a_policies_folder_is_bisected_in_its_own_order(capsys, sample_db: Path, tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "v1.toml").write_text('version = "v1"\ndescription = "base"\n')
    (folder / "v2.toml").write_text('version = "v2"\nextends = "v1"\ndescription = "marks"\n'
                                    '[freshness]\nstale_action = "mark"\nsession = 48\n')
    out = run_json(capsys, "bisect", "asm-035", CALENDAR, "--bad", "v2", "--db", str(sample_db),
                   "--policies", str(folder))
    assert out["version"] == "v2"
    assert out["keys"] == [{"key": "freshness.stale_action", "before": "omit", "after": "mark"}]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["asm-035", "mem-nope"], "record 'mem-nope' is not in assembly 'asm-035'"),
        (["asm-nope", CALENDAR], "unknown assembly 'asm-nope'"),
        (["asm-035", CALENDAR, "--good", "v9"],
         "--good: unknown policy version 'v9' (known: v1, v2, v3, v4, v5, v6)"),
        (["asm-035", CALENDAR, "--bad", "v0"], "--bad: unknown policy version 'v0' (known: v1, v2, v3, v4, v5, v6)"),
        (["asm-035", CALENDAR, "--good", "v5", "--bad", "v4"],
         "--good v5 comes after --bad v4 in the registry order (v1, v2, v3, v4, v5, v6)"),
        (["asm-035", CALENDAR, "--good", "v5"],
         "nothing to bisect: tool_memory mem-020 is already included as compact_memory "
         "(compact_memory) under --good v5, as under --bad v5"),
        (["asm-035", CALENDAR, "--kind", "message"], "message 'mem-020' is not in assembly 'asm-035'"),
    ],
    ids=["record", "assembly", "good-unknown", "bad-unknown", "reversed", "same-state", "kind"],
)
def test_bad_input_is_one_line_and_exit_2(capsys, sample_db: Path, argv: list[str], message: str) -> None:
    for as_json in ([], ["--json"]):
        code, out, err = run(capsys, "bisect", *argv, "--db", str(sample_db), *as_json)
        assert code == 2
        assert out == ""
        assert err.strip().splitlines() == [f"contextlens: error: {message}"]


def test_bad_input_through_a_real_process(sample_db: Path, tmp_path: Path) -> None:
    env = dict(os.environ, CONTEXTLENS_CACHE=str(tmp_path / "cache"))
    env.pop("CONTEXTLENS_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "inspector.cli", "bisect", "asm-035", CALENDAR, "--good", "v6",
         "--bad", "v5", "--db", str(sample_db)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip() == ("contextlens: error: --good v6 comes after --bad v5 in the "
                                   "registry order (v1, v2, v3, v4, v5, v6)")


def test_an_unknown_kind_is_named_with_the_known_ones(capsys) -> None:
    # it said "[red]x 'mem-020' is not in assembly 'asm-035'", as if the record were missing
    code, _out, err = run(capsys, "bisect", "asm-035", "mem-020", "--kind", "[red]x")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "Invalid value for '--kind': '[red]x' is not one of 'message'," in err
    assert "is not in assembly" not in err
