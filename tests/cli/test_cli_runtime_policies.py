"""Runtime policies on the command line: transcripts replay, verify, compare and explain
under the rule of the runtime that recorded them (replay/runtimes.py)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from ingest.contract import selection_hash
from replay.verify import stored_totals
from support import swe_trajectory
from support.cli import run, run_json

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
CLAUDE = sorted([*REALDATA.glob("claude-code-entire/*.jsonl"), *REALDATA.glob("claude-code-spotter/*.jsonl")])
SWE = sorted(REALDATA.glob("swe-agent/*.traj"))
SPOTTER = REALDATA / "claude-code-spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))


def _store(capsys, src: Path, tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    code, _out, err = run(capsys, "ingest", str(src), "--db", str(db))
    assert code == 0, err
    return db


def _verify(capsys, db: Path) -> dict:
    code, out, err = run(capsys, "verify", "--db", str(db), "--json")
    return {"code": code, "out": json.loads(out), "err": err}


# ---------------------------------------------------------------- SWE-agent, exact inputs


def test_swe_agent_steps_verify_against_their_recorded_inputs(capsys, tmp_path: Path) -> None:
    traj = swe_trajectory.write(tmp_path / "run.traj")
    db = _store(capsys, traj, tmp_path)
    rows = run_json(capsys, "list", "--db", str(db))
    assert len(rows) == swe_trajectory.STEPS
    assert all(r["policy_version"] == "swe-agent" and "input:exact" in r["tags"] for r in rows)
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 0, out + err
    assert f"checked {swe_trajectory.STEPS}: {swe_trajectory.STEPS} faithful, 0 drifted" in out

    # the last step shows exactly the observations SWE-agent elided, as it sent them
    last = rows[-1]  # the list is in the log's order (a trajectory records no times)
    shown = run_json(capsys, "show", last["assembly_id"], "--db", str(db))
    cleared = [r for r in shown["included"] if r["rendering"] == "cleared"]
    assert [r["reason_code"] for r in cleared] == ["elided"] * len(cleared)
    assert len(cleared) == len(swe_trajectory.expected_elided_last_step())
    detail = " ".join(run(capsys, "why", last["assembly_id"], r["record_id"], "--db", str(db))[1]
                      for r in cleared)
    for k in swe_trajectory.expected_elided_last_step():
        lines = k + 3
        assert f'sent as "Old environment output: ({lines} lines omitted)"' in detail


def test_a_step_whose_recorded_input_the_rule_does_not_give_is_drifted(capsys, tmp_path: Path) -> None:
    traj = swe_trajectory.build()
    last = traj["trajectory"][-1]["messages"]
    # someone (or another SWE-agent version) sent an old observation in full at the last step
    full = next(m for m in traj["history"] if str(m["content"]).startswith("obs0 line"))
    elided = next(i for i, m in enumerate(last) if str(m["content"]).startswith("Old environment output"))
    last[elided] = dict(full)
    db = _store(capsys, swe_trajectory.write(tmp_path / "run.traj", traj), tmp_path)
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 1
    assert f"checked {swe_trajectory.STEPS}: {swe_trajectory.STEPS - 1} faithful, 1 drifted" in out


def test_counterfactual_last_n_observations_reports_tokens_saved_and_records(capsys, tmp_path: Path) -> None:
    db = _store(capsys, swe_trajectory.write(tmp_path / "run.traj"), tmp_path)
    report = run_json(capsys, "compare", "swe-agent", "swe-agent:last_n_observations.n=1",
                      "--db", str(db))
    # with n=1 instead of 2, each step from the third on elides one more observation
    assert report["affected"] == swe_trajectory.STEPS - 2
    assert report["tokens"]["delta"] < 0 and report["tokens"]["b"] < report["tokens"]["a"]
    by = report["records"]["rerendered"]["by"]
    assert [(r["record_kind"], r["reason"]) for r in by] == [("tool_artifact", "elided")]
    assert report["records"]["rerendered"]["total"] == swe_trajectory.STEPS - 2
    assert report["most_changed"][0]["tokens_b"] < report["most_changed"][0]["tokens_a"]


@pytest.mark.skipif(not SWE, reason="shared/realdata is not beside this checkout")
def test_counterfactual_on_a_real_swe_agent_trajectory(capsys, tmp_path: Path) -> None:
    db = _store(capsys, SWE[0], tmp_path)
    assert _verify(capsys, db)["code"] == 0
    code, out, err = run(capsys, "compare", "swe-agent", "swe-agent:last_n_observations.n=1", "--db", str(db))
    assert code == 0, err
    assert "tool_artifact  elided" in out
    before, after = (int(x.replace(",", "")) for x in out.split("tokens: ")[1].split(" (")[0].split(" -> "))
    assert after < before


def test_bad_runtime_keys_are_one_line_errors(capsys, tmp_path: Path) -> None:
    db = _store(capsys, swe_trajectory.write(tmp_path / "run.traj"), tmp_path)
    for version, says in (("swe-agent:n=3", "unknown key 'n'"),
                          ("swe-agent:last_n_observations.n=three", "must be an integer"),
                          ("claude-code:compaction=maybe", "must be true or false")):
        code, out, err = run(capsys, "compare", "swe-agent", version, "--db", str(db))
        assert code == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_runtime_policy_on_an_export_s_request_is_a_clear_error(capsys) -> None:
    """The sample's requests replay under the registry's versions, not a runtime's: one line
    naming the versions that do apply, exit 2."""
    code, out, err = run(capsys, "replay", "asm-001", "--policy", "claude-code")
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1
    assert "does not apply to request 'asm-001'" in err and "v1, v2, v3, v4, v5, v6" in err


# ---------------------------------------------------------------- Claude Code


@pytest.mark.skipif(not CLAUDE, reason="shared/realdata is not beside this checkout")
@pytest.mark.parametrize("path", CLAUDE, ids=lambda p: p.name[:24])
def test_real_claude_code_sessions_verify_faithful(capsys, tmp_path: Path, path: Path) -> None:
    db = _store(capsys, path, tmp_path)
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 0, out + err
    checked = int(out.split("checked ")[1].split(":")[0])
    assert checked > 0 and f"checked {checked}: {checked} faithful" in out


@pytest.mark.skipif(not SPOTTER.exists(), reason="shared/realdata is not beside this checkout")
def test_summariser_replay_includes_the_parent_conversation(capsys, tmp_path: Path) -> None:
    db = _store(capsys, SPOTTER, tmp_path)
    rows = run_json(capsys, "list", "--db", str(db))
    summariser = next(r for r in rows if "compaction_summariser" in r["tags"])
    replayed = run_json(capsys, "replay", summariser["assembly_id"], "--policy", "claude-code", "--db", str(db))
    included = {r["record_id"] for r in replayed["included"]}
    # the parent's conversation up to the compaction: everything its last request before
    # the summariser was sent (but the thinking of its tool-use loop: the summariser's
    # request is a new user turn, which strips it), then the summariser's own prompt
    before = max((r for r in rows if r["assembled_at"] < summariser["assembled_at"]
                  and "compaction_summariser" not in r["tags"] and "subagent:" not in " ".join(r["tags"])),
                 key=lambda r: r["assembled_at"])
    parent = {r["record_id"] for r in run_json(capsys, "show", before["assembly_id"], "--db", str(db))["included"]}
    stripped = {r["record_id"] for r in replayed["omitted"] if r["reason_code"] == "outside_window"}
    assert len(parent) > 100 and parent - stripped <= included and len(included) > len(parent - stripped)
    assert replayed["selection_hash"] == run_json(capsys, "show", summariser["assembly_id"], "--db",
                                                  str(db))["assembly"]["selection_hash"]


@pytest.mark.skipif(not CLAUDE, reason="shared/realdata is not beside this checkout")
def test_tampered_claude_recording_is_not_faithful(capsys, tmp_path: Path) -> None:
    """A recording edited to say a compacted record was sent (with its hash recomputed, so it
    is self-consistent) is caught by the replay of the runtime's rule."""
    path = next(p for p in CLAUDE if "compact" in p.name)
    db = _store(capsys, path, tmp_path)
    con = duckdb.connect(str(db))
    aid, kind, rid = con.execute(
        "SELECT assembly_id, record_kind, record_id FROM assembly_records WHERE reason_code = 'compacted' "
        "ORDER BY assembly_id, record_id LIMIT 1").fetchone()
    n = con.execute("SELECT count(*) FROM assembly_records WHERE assembly_id = ? AND decision = 'included'",
                    [aid]).fetchone()[0]
    con.execute("UPDATE assembly_records SET decision = 'included', rendering = 'verbatim', position = ?, "
                "reason_code = 'in_window' WHERE assembly_id = ? AND record_kind = ? AND record_id = ?",
                [n, aid, kind, rid])
    rows = con.execute("SELECT record_kind, record_id, decision, rendering, position FROM assembly_records "
                       "WHERE assembly_id = ?", [aid]).fetchall()
    con.execute("UPDATE context_assemblies SET selection_hash = ? WHERE assembly_id = ?",
                [selection_hash(rows), aid])
    # and its stored totals (tokens, counts) to match the forged rows
    records = con.sql("SELECT * FROM assembly_records WHERE assembly_id = ?", params=[aid]).to_arrow_table()
    (tags,) = con.execute("SELECT tags FROM context_assemblies WHERE assembly_id = ?", [aid]).fetchone()
    for column, value in stored_totals(records.to_pylist(), tags).items():
        con.execute(f"UPDATE context_assemblies SET {column} = ? WHERE assembly_id = ?", [value, aid])
    con.close()
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 1
    assert "1 drifted" in out and aid in out


@pytest.mark.skipif(not CLAUDE, reason="shared/realdata is not beside this checkout")
def test_why_on_claude_code_records_says_the_runtime_rule(capsys, tmp_path: Path) -> None:
    path = next(p for p in CLAUDE if "compact" in p.name)
    db = _store(capsys, path, tmp_path)
    rows = run_json(capsys, "list", "--db", str(db))
    last = max(rows, key=lambda r: r["assembled_at"])
    shown = run_json(capsys, "show", last["assembly_id"], "--db", str(db))
    inc = shown["included"][0]
    omitted = next(r for r in shown["omitted"] if r["reason_code"] == "compacted")
    code, said, err = run(capsys, "why", last["assembly_id"], inc["record_id"], "--db", str(db))
    assert "Claude Code sends the whole history since the last compaction" in said
    assert "runtime policy claude-code" in said and "window.max_messages" not in said
    code, said, err = run(capsys, "why", last["assembly_id"], omitted["record_id"], "--db", str(db))
    assert "compacted" in said and "its key compaction" in said


@pytest.mark.skipif(not CLAUDE, reason="shared/realdata is not beside this checkout")
def test_claude_code_without_compaction_sends_what_it_dropped(capsys, tmp_path: Path) -> None:
    path = next(p for p in CLAUDE if "compact" in p.name)
    db = _store(capsys, path, tmp_path)
    report = run_json(capsys, "compare", "recorded", "claude-code:compaction=false", "--db", str(db))
    assert report["records"]["newly_included"]["total"] > 0
    assert {r["reason"] for r in report["records"]["newly_included"]["by"]} == {"compacted"}
    assert report["tokens"]["b"] > report["tokens"]["a"]
    same = run_json(capsys, "compare", "recorded", "claude-code", "--db", str(db))
    assert same["affected"] == 0 and same["tokens"]["delta"] == 0


def test_bisect_between_two_settings_of_a_runtime_names_the_key(capsys, tmp_path: Path) -> None:
    db = _store(capsys, swe_trajectory.write(tmp_path / "run.traj"), tmp_path)
    rows = run_json(capsys, "list", "--db", str(db))
    last = rows[-1]  # the list is in the log's order (a trajectory records no times)
    shown = run_json(capsys, "show", last["assembly_id"], "--db", str(db))
    elided = next(r for r in shown["included"] if r["rendering"] == "cleared")
    out = run_json(capsys, "bisect", last["assembly_id"], elided["record_id"],
                   "--good", "swe-agent:history_processors=false", "--bad", "swe-agent", "--db", str(db))
    assert out["version"] == "swe-agent" and [k["key"] for k in out["keys"]] == ["history_processors"]
    assert out["good_state"]["rendering"] == "verbatim" and out["bad_state"]["reason_code"] == "elided"
    code, _out, err = run(capsys, "bisect", last["assembly_id"], elided["record_id"], "--db", str(db))
    assert code == 2 and "--good" in err
    code, _out, err = run(capsys, "bisect", last["assembly_id"], elided["record_id"], "--good", "v1",
                          "--db", str(db))
    # v1 is a registry version: it does not replay a trajectory's request (one line naming
    # what does)
    assert code == 2 and "does not apply" in err and "under swe-agent" in err


@pytest.mark.skipif(not SPOTTER.exists(), reason="shared/realdata is not beside this checkout")
def test_compacting_earlier_drops_history_and_saves_tokens(capsys, tmp_path: Path) -> None:
    """compact_at: Claude Code compacting at 60k instead of its recorded point drops what the
    earlier compactions would have; a threshold it never reaches changes nothing."""
    db = _store(capsys, SPOTTER, tmp_path)
    earlier = run_json(capsys, "compare", "recorded", "claude-code:compact_at=60000", "--db", str(db))
    assert earlier["affected"] > 0 and earlier["tokens"]["delta"] < 0
    assert earlier["records"]["newly_included"]["total"] == 0
    assert {r["reason"] for r in earlier["records"]["newly_omitted"]["by"]} == {"compacted"}
    never = run_json(capsys, "compare", "recorded", "claude-code:compact_at=100000000", "--db", str(db))
    assert never["affected"] == 0 and never["tokens"]["delta"] == 0


CODEX = sorted(REALDATA.glob("codex-localpush/*.jsonl"))
GEMINI = sorted([*REALDATA.glob("gemini-cli-entire/*.json"), *REALDATA.glob("codemie-code/*.json")])


@pytest.mark.skipif(not CODEX or not GEMINI, reason="shared/realdata is not beside this checkout")
@pytest.mark.parametrize("path", [*CODEX, *GEMINI], ids=lambda p: p.name[:24])
def test_real_codex_and_gemini_sessions_verify_faithful_under_their_runtime(capsys, tmp_path: Path,
                                                                           path: Path) -> None:
    db = _store(capsys, path, tmp_path)
    rows = run_json(capsys, "list", "--db", str(db))
    assert {r["policy_version"] for r in rows} == {"codex" if "rollout" in path.name else "gemini-cli"}
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 0, out + err
    assert f"checked {len(rows)}: {len(rows)} faithful" in out


@pytest.mark.skipif(not CODEX, reason="shared/realdata is not beside this checkout")
def test_codex_without_compaction_resends_what_it_replaced(capsys, tmp_path: Path) -> None:
    db = _store(capsys, CODEX[0], tmp_path)
    report = run_json(capsys, "compare", "codex", "codex:compaction=false", "--db", str(db))
    assert report["affected"] > 0 and report["tokens"]["delta"] > 0
    assert {r["reason"] for r in report["records"]["newly_included"]["by"]} == {"compacted"}


def test_a_transcript_request_s_bundle_and_a_re_export_still_replay(capsys, tmp_path: Path) -> None:
    """The runtime facts travel with the rows: an incident bundle of a transcript request,
    and the store exported again, verify faithful under the runtime policy."""
    from ingest.reexport import export_store

    db = _store(capsys, swe_trajectory.write(tmp_path / "run.traj"), tmp_path)
    last = run_json(capsys, "list", "--db", str(db))[-1]  # the log's order: no times
    code, _out, err = run(capsys, "bundle", last["assembly_id"], "--out", str(tmp_path / "b"), "--db", str(db))
    assert code == 0, err
    code, out, err = run(capsys, "verify", "--db", str(tmp_path / "b"))
    assert code == 0 and "checked 1: 1 faithful" in out, out + err
    again = export_store(db, tmp_path / "again")
    code, out, err = run(capsys, "verify", "--db", str(again))
    assert code == 0 and f"{swe_trajectory.STEPS} faithful" in out, out + err


INSPECT = sorted([*REALDATA.glob("inspect-ai/*.json"), *REALDATA.glob("inspect-ai/*.eval")])
ESAA = sorted(REALDATA.glob("conversation-esaa/*.jsonl"))


@pytest.mark.skipif(not INSPECT or not ESAA, reason="shared/realdata is not beside this checkout")
@pytest.mark.parametrize("path", [*INSPECT, *ESAA], ids=lambda p: p.name[:24])
def test_inspect_ai_inputs_and_esaa_contexts_verify_faithful(capsys, tmp_path: Path, path: Path) -> None:
    """inspect_ai records each model call's exact input: the chat loop's rule reproduces it;
    ESAA's context rule reproduces each agent event's context."""
    db = _store(capsys, path, tmp_path)
    rows = run_json(capsys, "list", "--db", str(db))
    exact = path.suffix in (".json", ".eval")
    assert {r["policy_version"] for r in rows} == {"chat-full-history" if exact else "esaa"}
    if exact:
        assert all("input:exact" in r["tags"] for r in rows)
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 0 and f"checked {len(rows)}: {len(rows)} faithful" in out, out + err


@pytest.mark.skipif(not ESAA, reason="shared/realdata is not beside this checkout")
def test_esaa_with_a_shorter_window_leaves_older_events_out(capsys, tmp_path: Path) -> None:
    db = _store(capsys, ESAA[-1], tmp_path)
    report = run_json(capsys, "compare", "esaa", "esaa:last_n=5", "--db", str(db))
    assert report["affected"] > 0 and report["records"]["newly_included"]["total"] == 0
    assert {r["reason"] for r in report["records"]["newly_omitted"]["by"]} == {"outside_window"}


# ---------------------------------------------------------------- tokens outside the records


def _without_usage(src: Path, out: Path) -> Path:
    """The Anthropic log with its responses' usage taken out: its counts are estimates."""
    lines = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    for line in lines:
        if isinstance(line.get("response"), dict):
            line["response"].pop("usage", None)
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


@pytest.mark.parametrize(("fixture", "version"), [
    ("compaction.jsonl", "claude-code:compaction=false"),
    ("codex_rollout.jsonl", "codex:compaction=false"),
    ("anthropic_log.jsonl (no usage)", "chat-full-history"),  # estimated system and tools
])
def test_list_diff_replay_and_compare_count_a_requests_tokens_alike(
        capsys, tmp_path: Path, fixture: str, version: str) -> None:
    """A transcript's request also sends what no record holds (its system prompt and tool
    definitions, recorded or estimated): the list's total, the diff's A and B, the replay's
    total and the compare's rows are the same figures, whatever the policy (the records'
    own share is named in the diff beside them)."""
    src = Path(__file__).resolve().parents[1] / "adapter_fixtures" / fixture.split()[0]
    if fixture.endswith("(no usage)"):
        src = _without_usage(src, tmp_path / src.name)
    db = _store(capsys, src, tmp_path)
    rows = run_json(capsys, "list", "--db", str(db))
    out = tmp_path / "rows.parquet"
    code, _out, err = run(capsys, "compare", "recorded", version, "--db", str(db),
                          "--out", str(out))
    assert code == 0, err
    compared = {r["assembly_id"]: r for r in
                duckdb.sql(f"SELECT * FROM '{out}'").to_arrow_table().to_pylist()}
    outside = 0
    for row in rows:
        aid = row["assembly_id"]
        # a registry version (the sample's v4) does not apply to a transcript's request
        code, _out, err = run(capsys, "diff", aid, "--policy", "v4", "--db", str(db))
        assert code == 2 and "does not apply" in err and err.count("\n") == 1, err
        for policy in (version,):  # the runtime's rule
            diff = run_json(capsys, "diff", aid, "--policy", policy, "--db", str(db))["summary"]
            replay = run_json(capsys, "replay", aid, "--policy", policy, "--db", str(db))
            assert diff["tokens_a"] == row["assembled_tokens"], (aid, policy)
            assert diff["tokens_b"] == replay["assembled_tokens"], (aid, policy)
            outside += diff["tokens_a"] - diff["record_tokens_a"]
            if policy == version:
                assert (compared[aid]["tokens_a"], compared[aid]["tokens_b"]) == (
                    diff["tokens_a"], diff["tokens_b"]), aid
    assert outside > 0  # the fixture's requests do send tokens no record holds


def _claude_session(path: Path, carried: list[int]) -> Path:
    """A Claude Code session of len(carried) requests, each a user turn and a short answer
    whose usage recorded ``carried[i]`` input tokens, compacted once after the second: the
    first requests carried far more than their few records (history the file lacks)."""
    lines: list[dict] = []
    parent = None

    def add(kind: str, minute: int, **extra) -> None:
        nonlocal parent
        uuid = f"{kind[0]}{len(lines)}"
        lines.append({"type": kind, "sessionId": "s", "uuid": uuid, "parentUuid": parent,
                      "timestamp": f"2025-06-01T09:{minute:02d}:00Z", **extra})
        parent = uuid

    for i, tokens in enumerate(carried):
        if i == 2:
            add("system", 3 * i, subtype="compact_boundary",
                compactMetadata={"trigger": "auto", "preTokens": carried[1]})
            add("user", 3 * i, isCompactSummary=True,
                message={"role": "user", "content": "Summary: the work so far."})
        add("user", 3 * i + 1, message={"role": "user", "content": f"step {i}: go on"})
        add("assistant", 3 * i + 2, requestId=f"r{i}", message={
            "id": f"msg_{i}", "model": "claude-sonnet-4-5", "role": "assistant",
            "content": [{"type": "text", "text": f"done with step {i}"}],
            "usage": {"input_tokens": tokens, "output_tokens": 5}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_history_replay_sends_what_the_request_sent_and_what_it_left_out(
        capsys, tmp_path: Path) -> None:
    """The baseline (history replay) of a transcript's request is never below what it sent:
    what no record explains is sent by both, so report tokens' savings are the records a
    request left out, not a negative figure."""
    db = _store(capsys, _claude_session(tmp_path / "s.jsonl", [150_000, 150_500, 20_000, 20_400]),
                tmp_path)
    for row in run_json(capsys, "list", "--db", str(db)):
        shown = run_json(capsys, "show", row["assembly_id"], "--db", str(db))
        left_out = sum(r["tokens"] for r in shown["omitted"])
        assert row["baseline_tokens"] == row["assembled_tokens"] + left_out, row
        replay = run_json(capsys, "replay", row["assembly_id"], "--policy", "claude-code",
                          "--db", str(db))
        assert replay["baseline_tokens"] == row["baseline_tokens"]
    (total,) = [r for r in run_json(capsys, "report", "tokens", "--db", str(db))
                if r["scenario"] == "(all)"]
    assert total["reduction"] > 0, total  # the compaction left records out


def test_a_compaction_threshold_is_measured_against_what_a_request_carried(
        capsys, tmp_path: Path) -> None:
    """Before its first compaction a session's requests carried 150,000 tokens, most of them
    in no record: compact_at=100000 compacts there (it measured the records and the
    overhead the compacted requests left, some 20,000, and changed nothing)."""
    db = _store(capsys, _claude_session(tmp_path / "s.jsonl", [150_000, 150_500, 20_000, 20_400]),
                tmp_path)
    report = run_json(capsys, "compare", "recorded", "claude-code:compact_at=100000",
                      "--db", str(db))
    assert report["affected"] == 1, report
    (changed,) = report["most_changed"]
    second = sorted(r["assembly_id"] for r in run_json(capsys, "list", "--db", str(db)))[1]
    assert changed["assembly_id"] == second and changed["newly_omitted"] > 0
