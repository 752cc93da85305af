"""contextlens sample --scale N --drift FRACTION: says how much drift it injected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import run


def test_scale_sample_prints_and_lists_the_drift_it_injected(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    out = tmp_path / "s"
    code, stdout, err = run(capsys, "sample", "--out", str(out), "--scale", "40", "--drift", "0.1",
                            "--seed", "3")
    assert code == 0, err
    assert "drifted on purpose: 4 of 40 assemblies (10.00%" in stdout
    listed = json.loads((out / "drift.json").read_text())
    assert listed["drifted"] == 4 and len(set(listed["drifted_ids"])) == 4
    assert str(out / "drift.json") in stdout


def test_the_default_drift_is_one_percent(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, stdout, err = run(capsys, "sample", "--out", str(tmp_path / "s"), "--scale", "200")
    assert code == 0, err
    assert "drifted on purpose: 2 of 200 assemblies (1.00%; --drift 0.01)" in stdout


@pytest.mark.parametrize("argv", [["--drift", "0.1"], ["--scale", "10", "--drift", "1.5"]])
def test_bad_drift_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          argv: list[str]) -> None:
    out = tmp_path / "s"
    code, _, err = run(capsys, "sample", "--out", str(out), *argv)
    assert code == 2 and "Traceback" not in err
    assert "--drift" in err
    assert not (out / "manifest.json").exists()
