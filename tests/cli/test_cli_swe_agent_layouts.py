"""SWE-agent trajectories whose steps keep ``messages`` as the history after the step (the
versions whose ``add_step_to_trajectory`` reads ``self.messages`` after the step was added
to the history): step k's list is what step k+1 was sent, read without a warning."""

from __future__ import annotations

import json
from pathlib import Path

from support import swe_trajectory
from support.cli import run, run_json


def _after_step_layout(path: Path) -> Path:
    traj = swe_trajectory.build()
    steps = traj["trajectory"]
    # step k's history after it, processed as for the next request = step k+1's input
    for k in range(len(steps) - 1):
        steps[k]["messages"] = steps[k + 1]["messages"]
    del steps[-1]["messages"]  # the last step's list is not needed to read any input
    return swe_trajectory.write(path, traj)


def test_history_after_the_step_is_read_as_the_next_input(capsys, tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    code, out, err = run(capsys, "ingest", str(_after_step_layout(tmp_path / "run.traj")), "--db", str(db))
    assert code == 0 and "input messages for a history" not in out + err, out + err
    rows = sorted(run_json(capsys, "list", "--db", str(db)), key=lambda r: r["assembly_id"])
    exact = [r for r in rows if "input:exact" in r["tags"]]
    assert len(exact) == swe_trajectory.STEPS - 1  # every step but the first has its input
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 0 and f"{swe_trajectory.STEPS} faithful" in out, out + err
    last = max(rows, key=lambda r: int(r["assembly_id"].split(":r")[1].split(":")[0]))
    shown = run_json(capsys, "show", last["assembly_id"], "--db", str(db))
    elided = [r for r in shown["included"] if r["rendering"] == "cleared"]
    assert len(elided) == len(swe_trajectory.expected_elided_last_step())
