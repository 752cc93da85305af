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


@pytest.mark.parametrize("argv", [["--drift", "0.1"], ["--scale", "10", "--drift", "1.5"],
                                  ["--scale", "10", "--drift", "nan"]])
def test_bad_drift_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          argv: list[str]) -> None:
    out = tmp_path / "s"
    code, _, err = run(capsys, "sample", "--out", str(out), *argv)
    assert code == 2 and "Traceback" not in err
    assert "--drift" in err
    assert not (out / "manifest.json").exists()


def test_sample_out_does_not_replace_what_is_there_unless_forced(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "messages.parquet").write_text("my data")
    code, _, err = run(capsys, "sample", "--out", str(mine))
    assert code == 2 and err.strip() == (
        f"contextlens: error: {mine}: folder exists and is not empty (--force replaces it)")
    assert (mine / "messages.parquet").read_text() == "my data"
    afile, link = tmp_path / "afile", tmp_path / "link"
    afile.write_text("x")
    link.symlink_to(tmp_path / "nowhere")
    for target in (afile, link):
        code, _, err = run(capsys, "sample", "--out", str(target), "--force")
        assert code == 2 and "exists and is not a folder" in err, err
    assert run(capsys, "sample", "--out", str(mine), "--force")[0] == 0
    assert (mine / "manifest.json").exists()


def test_a_bundle_to_a_dangling_link_leaves_nothing_behind(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    code, _, err = run(capsys, "bundle", "asm-001", "--out", str(link))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling"]
