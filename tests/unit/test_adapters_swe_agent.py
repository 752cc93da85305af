"""SWE-agent trajectories: each request is recorded as SWE-agent sent it after its history
processors (replay_config.agent.history_processors), here last_n_observations."""

from __future__ import annotations

import json
from pathlib import Path

from support.sql import sql

from ingest.adapters import adapt
from ingest.store import ingest


def _trajectory(steps: int, processors: list[dict]) -> dict:
    """A function-calling SWE-agent trajectory in its documented shape: system prompt, the
    instance template (the first observation), then action / tool observation pairs."""
    history = [
        {"role": "system", "content": "You are an autonomous programmer.", "message_type": "system_prompt"},
        {"role": "user", "content": "<uploaded_files>/repo</uploaded_files>\nFix the bug.",
         "message_type": "observation"},
    ]
    for k in range(steps):
        history.append({"role": "assistant", "content": f"step {k}", "message_type": "action",
                        "thought": f"step {k}", "action": f"cat f{k}.py",
                        "tool_calls": [{"id": f"call_{k}", "type": "function",
                                        "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{k}.py"})}}]})
        body = "\n".join(f"line {j} of f{k}.py" for j in range(k + 2))
        history.append({"role": "tool", "content": body, "tool_call_ids": [f"call_{k}"],
                        "message_type": "observation"})
    history.append({"role": "assistant", "content": "submit", "message_type": "action",
                    "thought": "done", "action": "submit"})
    config = {"agent": {"model": {"name": "gpt-4o"}, "history_processors": processors}}
    return {"environment": "swe_main", "history": history, "trajectory": [],
            "info": {"exit_status": "submitted"}, "replay_config": json.dumps(config)}


def _store(tmp_path: Path, traj: dict) -> tuple[Path, list[str]]:
    path = tmp_path / "run.traj"
    path.write_text(json.dumps(traj))
    res = adapt(path, tmp_path / "export")
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    return db, res.warnings


def _observations(db: Path, aid: str) -> list[tuple[str, str, str]]:
    """(preview, rendering, detail) of the tool results sent with one request, in order."""
    return sql(db, "SELECT a.result_preview, r.rendering, r.detail FROM assembly_records r "
                   "JOIN tool_artifacts a ON a.artifact_id = r.record_id "
                   f"WHERE r.assembly_id = '{aid}' AND r.decision = 'included' ORDER BY r.position")


def test_last_n_observations_elides_all_but_the_last_n(tmp_path: Path) -> None:
    db, warnings = _store(tmp_path, _trajectory(7, [{"type": "last_n_observations", "n": 3}]))
    assert warnings == []
    runs = [a for (a,) in sql(db, "SELECT assembly_id FROM context_assemblies ORDER BY assembled_at")]
    last = _observations(db, runs[-1])  # 8 observations: the template and 7 tool results
    shown = [rendering for _, rendering, _ in last]
    # the template is never elided (it is a user message); of the 7 results, 8 - 3 - 1 = 4 go
    assert shown == ["cleared"] * 4 + ["verbatim"] * 3
    for k, (_, _, detail) in enumerate(last[:4]):
        assert f'sent as "Old environment output: ({k + 2} lines omitted)"' in detail
        assert "last_n_observations (n=3)" in detail
    # an early request had nothing to elide yet
    assert {r for _, r, _ in _observations(db, runs[2])} == {"verbatim"}
    # the prompt as sent shows SWE-agent's placeholder, not the output
    from ingest.store import Store
    from replay.render import render_prompt
    with Store.open(db) as store:
        bodies = [p.body for p in render_prompt(store, runs[-1]) if p.record_kind == "tool_artifact"]
    assert bodies[0] == "Old environment output: (2 lines omitted)"
    assert "line 0 of f6.py" in bodies[-1]


def test_without_processors_every_observation_is_sent(tmp_path: Path) -> None:
    db, _ = _store(tmp_path, _trajectory(7, []))
    runs = [a for (a,) in sql(db, "SELECT assembly_id FROM context_assemblies ORDER BY assembled_at")]
    assert {r for _, r, _ in _observations(db, runs[-1])} == {"verbatim"}


def test_an_unmodelled_processor_is_a_warning(tmp_path: Path) -> None:
    _, warnings = _store(tmp_path, _trajectory(2, [{"type": "closed_window"}]))
    assert any("'closed_window' is not modelled" in w for w in warnings)


BROKEN = {  # processors SWE-agent's own configuration would have refused to run
    "n is a word": ([{"type": "last_n_observations", "n": "two"}],
                    'history_processors[0].n is "two", not a whole number of at least 0'),
    "n is infinite": ([{"type": "last_n_observations", "n": 1e400}],
                      "history_processors[0].n is inf, not a whole number"),
    "n is missing": ([{"type": "last_n_observations"}],
                     "history_processors[0] (last_n_observations) has no n"),
    "polling is 0": ([{"type": "last_n_observations", "n": 2, "polling": 0}],
                     "history_processors[0].polling is 0, not a whole number of at least 1"),
    "a tag list is a string": ([{"type": "last_n_observations", "n": 2,
                                 "always_keep_output_for_tags": "keep"}],
                               'history_processors[0].always_keep_output_for_tags is "keep", not a list of strings'),
    "the list is a string": ("last_n_observations",
                             'history_processors is "last_n_observations", not a list'),
    "an entry is a number": ([5], "history_processors[0] is 5, not a processor"),
}


def test_a_configuration_swe_agent_would_refuse_is_named_and_not_replayed(capsys, tmp_path: Path) -> None:
    from support.cli import run_json

    for case, (processors, expected) in BROKEN.items():
        folder = tmp_path / case.replace(" ", "_")
        folder.mkdir()
        db, warnings = _store(folder, _trajectory(3, processors))
        assert any(f"replay_config.agent.{expected}" in w for w in warnings), (case, warnings)
        # its requests are kept as they were sent, counted and never judged against a
        # rule that did not run (it used to end in "internal error: ValueError")
        out = run_json(capsys, "verify", "--db", str(db))
        assert out["not_replayable"] == out["checked"] == 4, (case, out["checked"])

    folder = tmp_path / "not_json"
    folder.mkdir()
    traj = {**_trajectory(3, []), "replay_config": "{not json"}
    _, warnings = _store(folder, traj)
    assert any("replay_config is not JSON (Expecting property name enclosed in double quotes at "
               "line 1 column 2)" in w for w in warnings), warnings


def test_a_swe_agent_0x_history_elides_its_user_messages_as_0x_did(capsys, tmp_path: Path) -> None:
    """SWE-agent 0.x wrote no message_type: its last_n_history counts the non-demo user
    messages (the environment's outputs) as observations, keeps the first and the last n,
    and sends "Old output omitted (<lines> lines)" for the others."""
    from support.cli import run_json

    history = [{"role": "system", "content": "SETTING: you are an autonomous programmer.", "agent": "primary"},
               {"role": "user", "content": "A demo.", "agent": "primary", "is_demo": True},
               {"role": "user", "content": "Solve the issue.\nIt is in f.py.", "agent": "primary"}]
    for k in range(4):
        history.append({"role": "assistant", "content": f"step {k}", "agent": "primary"})
        history.append({"role": "user", "content": "\n".join(f"out {k}.{j}" for j in range(k + 2)),
                        "agent": "primary"})
    history.append({"role": "assistant", "content": "submit", "agent": "primary"})
    traj = {"environment": "swe_main", "history": history,
            "trajectory": [{"action": "x", "observation": "y", "response": "r", "thought": "t"}] * 5,
            "info": {"exit_status": "submitted"}}
    db, warnings = _store(tmp_path, traj)
    assert warnings == []
    assert run_json(capsys, "verify", "--db", str(db))["faithful"] == 5  # as recorded: no processor
    last = sql(db, "SELECT assembly_id FROM context_assemblies ORDER BY assembled_at DESC LIMIT 1")[0][0]
    diff = run_json(capsys, "diff", last, "--policy", "swe-agent:last_n_observations.n=1", "--db", str(db))
    cleared = [c for c in diff["changes"] if c["change"] == "rendering_changed"]
    # 5 outputs seen (the issue and 4 steps): the issue and the last one stay, 3 go
    assert len(cleared) == 3
    details = " ".join(c["b"]["detail"] for c in cleared)
    for k in range(3):
        assert f'sent as "Old output omitted ({k + 2} lines)"' in details


def test_a_step_swe_agent_asked_again_is_not_a_request_twice(tmp_path: Path) -> None:
    # a response SWE-agent could not parse is re-asked: the bad answer is a trajectory step
    # that never reaches the history, so the steps do not line up with the turns by count
    traj = _trajectory(2, [])
    traj["trajectory"] = [{"response": "step 0", "thought": "", "action": "cat f0.py"},
                          {"response": "I will look around.", "thought": "", "action": ""},
                          {"response": "step 1", "thought": "", "action": "cat f1.py"},
                          {"response": "submit", "thought": "done", "action": "submit"}]
    db, _ = _store(tmp_path, traj)
    assert sql(db, "SELECT count(*) FROM context_assemblies")[0][0] == 3  # step 0, step 1, submit
    # the run's last step, missing from the history, is one more request
    traj["history"] = traj["history"][:-1]
    folder = tmp_path / "without_submit"
    folder.mkdir()
    db, _ = _store(folder, traj)
    assert sql(db, "SELECT count(*) FROM context_assemblies")[0][0] == 3
    assert sql(db, "SELECT count(*) FROM messages WHERE content = 'submit'")[0][0] == 1


def test_requests_of_a_log_without_times_say_their_times_are_made_up(tmp_path: Path) -> None:
    """A SWE-agent trajectory records no times: its requests are dated from 2000-01-01 in
    order, and tagged so no screen shows that date as when they were made. A log with
    times is not tagged."""
    from support import swe_trajectory

    untimed = adapt(swe_trajectory.write(tmp_path / "run.traj"), tmp_path / "untimed")
    timed = adapt(Path(__file__).parents[1] / "adapter_fixtures" / "compaction.jsonl",
                  tmp_path / "timed")
    for res, made_up in ((untimed, True), (timed, False)):
        db = tmp_path / f"{res.export_dir.name}.duckdb"
        ingest(res.export_dir, db)
        tagged = sql(db, "SELECT bool_and(list_contains(tags, 'times:unrecorded')), "
                         "bool_or(list_contains(tags, 'times:unrecorded')) FROM context_assemblies")
        assert tagged == [(made_up, made_up)], res.export_dir
