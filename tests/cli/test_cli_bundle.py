"""`contextlens bundle`: an incident request written as an export folder that list, verify,
diff and open read, with a report a person reads; masked unless --reveal."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.cli import run, run_json
from support.secrets import SECRETS, leaked

from sample_data import SAMPLE_DIR

INCIDENT = "asm-033"  # the sample's calendar-freshness incident, recorded under v5


@pytest.fixture(scope="module")
def incident_bundle(sample_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from inspector.cli import main

    out = tmp_path_factory.mktemp("bundles") / "incident"
    try:
        main(["bundle", INCIDENT, "--out", str(out), "--policy", "v6", "--db", str(sample_db)])
    except SystemExit as exc:
        assert not exc.code
    return out


def _all_text(folder: Path) -> str:
    """Every value of every table, every blob and the report, as one text."""
    parts = []
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".parquet":
            parts.append(json.dumps(pq.read_table(path).to_pylist(), default=str))
        elif path.is_file():
            parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


def test_the_bundle_of_a_v5_incident_is_listed_and_holds_a_readable_report(
        capsys: pytest.CaptureFixture[str], incident_bundle: Path) -> None:
    rows = run_json(capsys, "list", "--db", str(incident_bundle))
    assert [(r["assembly_id"], r["policy_version"]) for r in rows] == [(INCIDENT, "v5")]
    report = (incident_bundle / "report.md").read_text(encoding="utf-8")
    assert report.startswith(f"# Incident bundle: request {INCIDENT}\n")
    for heading in ("## Reproduce", "## The request", "## Safety findings in the recording",
                    "## Sent (23 records, in prompt order)", "## Omitted (18 records), by reason",
                    "## Why (recorded, policy v5)", "## Replay under v6", "### The diff",
                    "### Why, on both sides"):
        assert f"\n{heading}\n" in report, heading
    # the incident: stale calendar facts sent as current, which v6 marks stale
    assert "| stale_as_current | tool_memory mem-014 |" in report
    assert "| rendering_changed | tool_memory mem-014 | included / compact_memory | " \
           "included / stale_marker |" in report
    assert "  - v6: Included ToolMemory mem-014 as a stale marker" in report
    assert "contextlens diff asm-033 --policy v6 --db incident --policies incident/policies" \
        in report


def test_the_bundle_replays_and_diffs_as_the_store_does(
        capsys: pytest.CaptureFixture[str], incident_bundle: Path, sample_db: Path) -> None:
    policies = str(incident_bundle / "policies")
    code, out, err = run(capsys, "verify", "--db", str(incident_bundle), "--policies", policies)
    assert (code, err) == (0, "")
    assert "checked 1: 1 faithful" in out
    in_bundle = run_json(capsys, "diff", INCIDENT, "--policy", "v6", "--db", str(incident_bundle),
                         "--policies", policies)
    in_store = run_json(capsys, "diff", INCIDENT, "--policy", "v6", "--db", str(sample_db))
    assert in_bundle == in_store
    assert sorted(p.name for p in (incident_bundle / "policies").iterdir()) == sorted(
        p.name for p in (SAMPLE_DIR / "policies").iterdir())


def test_restricted_content_is_withheld_unless_revealed(
        capsys: pytest.CaptureFixture[str], incident_bundle: Path, sample_db: Path,
        tmp_path: Path) -> None:
    memories = {m["memory_id"]: m for m in pq.read_table(
        incident_bundle / "tool_memories.parquet").to_pylist()}
    assert memories["mem-014"]["summary"] == "[masked: oauth_derived content; reveal to show]"
    blobs = {p.name for p in (incident_bundle / "blobs").iterdir()}
    arts = pq.read_table(incident_bundle / "tool_artifacts.parquet").to_pylist()
    restricted = [a for a in arts if a["privacy_class"] == "secret_adjacent"]
    assert restricted and all(a["storage_ref"] is None for a in restricted)
    assert "OPENAI_API_KEY" not in _all_text(incident_bundle)

    code, out, err = run(capsys, "bundle", INCIDENT, "--out", str(tmp_path / "open"),
                         "--db", str(sample_db), "--reveal")
    assert code == 0, err
    assert "revealed" in out
    revealed = tmp_path / "open"
    memories = {m["memory_id"]: m for m in pq.read_table(
        revealed / "tool_memories.parquet").to_pylist()}
    assert "masked" not in memories["mem-014"]["summary"]
    assert "OPENAI_API_KEY" in _all_text(revealed)
    assert len({p.name for p in (revealed / "blobs").iterdir()}) > len(blobs)



def test_secrets_in_tool_arguments_and_results_never_leave_unless_revealed(
        capsys: pytest.CaptureFixture[str], secret_db: Path, tmp_path: Path) -> None:
    rows = run_json(capsys, "list", "--db", str(secret_db))
    last = rows[-1]["assembly_id"]
    for reveal in (False, True):
        out = tmp_path / f"bundle-{reveal}"
        code, _, err = run(capsys, "bundle", last, "--out", str(out), "--db", str(secret_db),
                           *(["--reveal"] if reveal else []))
        assert code == 0, err
        found = leaked(_all_text(out))
        assert found == (list(SECRETS) if reveal else []), found


def test_masked_tool_arguments_keep_their_length_so_the_bundle_replays_faithfully(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A tool call's tokens are counted from the length of its arguments: masking a password
    there must not change them (else verify calls the bundle drifted)."""
    import shutil

    from ingest.store import ingest
    from support.stores import read_table, set_value

    export = tmp_path / "export"
    shutil.copytree(SAMPLE_DIR, export)
    calls = read_table(export, "tool_calls").to_pylist()
    row = next(i for i, c in enumerate(calls) if c["tool_call_id"] == "call-014")
    secret = '{"password": "hunt3r2"}'
    assert len(secret) // 4 == len(calls[row]["arguments_json"]) // 4  # same recorded tokens
    set_value(export, "tool_calls", "arguments_json", row, secret)
    db = tmp_path / "store.duckdb"
    ingest(export, db)
    out = tmp_path / "bundle"
    code, _, err = run(capsys, "bundle", INCIDENT, "--out", str(out), "--db", str(db))
    assert code == 0, err
    assert "hunt3r2" not in _all_text(out)
    args = {c["tool_call_id"]: c["arguments_json"]
            for c in pq.read_table(out / "tool_calls.parquet").to_pylist()}
    assert len(args["call-014"]) == len(secret) and json.loads(args["call-014"])
    code, text, err = run(capsys, "verify", "--db", str(out), "--policies", str(out / "policies"))
    assert (code, err) == (0, "")
    assert "checked 1: 1 faithful" in text


def test_an_existing_folder_is_kept_unless_forced(
        capsys: pytest.CaptureFixture[str], sample_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "b"
    assert run(capsys, "bundle", "asm-001", "--out", str(out), "--db", str(sample_db))[0] == 0
    code, _, err = run(capsys, "bundle", INCIDENT, "--out", str(out), "--db", str(sample_db))
    assert code == 2
    assert err.strip().splitlines() == [
        f"contextlens: error: {out} exists and is not empty (--force replaces it)"]
    assert run_json(capsys, "list", "--db", str(out))[0]["assembly_id"] == "asm-001"
    code, _, err = run(capsys, "bundle", INCIDENT, "--out", str(out), "--db", str(sample_db),
                       "--force")
    assert code == 0, err
    assert run_json(capsys, "list", "--db", str(out))[0]["assembly_id"] == INCIDENT

    # --force never removes a folder that is not an export
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("keep me")
    code, _, err = run(capsys, "bundle", INCIDENT, "--out", str(mine), "--db", str(sample_db),
                       "--force")
    assert code == 2
    assert "is not an export folder (no manifest.json): not replacing it" in err
    assert [p.name for p in mine.iterdir()] == ["todo.txt"]


@pytest.mark.parametrize("argv, message", [
    (["asm-nope"], "unknown assembly 'asm-nope'"),
    ([INCIDENT, "--policy", "v99"], "v99"),
])
def test_bad_input_is_one_line_and_writes_nothing(
        capsys: pytest.CaptureFixture[str], sample_db: Path, tmp_path: Path,
        argv: list[str], message: str) -> None:
    out = tmp_path / "never"
    code, stdout, err = run(capsys, "bundle", *argv, "--out", str(out), "--db", str(sample_db))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and message in err
    assert stdout == ""
    assert not out.exists()
    assert not out.with_name("never.writing").exists()
