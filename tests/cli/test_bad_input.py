"""Every case of the bad-input corpus (tests/support/bad_inputs.py) through the real command
line.

For each case: the exact exit code, ONE line on stderr naming the file, table, column, row
or key, no traceback, and a store that already held a valid export byte-identical
afterwards (no temporary file or lock left beside it either).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support.bad_inputs import CASES, CASES_BY_NAME, EXPORT_ID, Case
from support.cli import run
from support.stores import make_export


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store holding the valid base export under the same export id the cases use."""
    from ingest.store import ingest

    db = tmp_path / "store" / "store.duckdb"
    ingest(make_export(tmp_path / "valid", export_id=EXPORT_ID), db)
    return db


def _argv(case: Case, target: Path, db: Path) -> list[str]:
    if case.command == "policies":
        return ["policies", "--policies", str(target), *case.args]
    if case.command == "open":
        return ["open", str(target), *case.args]
    return ["ingest", str(target), "--db", str(db), *case.args]


def _check(case: Case, code: int, out: str, err: str) -> None:
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    if case.outcome == "error":
        assert code == 2, (code, err)
        assert len(lines) == 1, err
        assert lines[0].startswith("contextlens: error: "), err
        for part in case.expect:
            assert part in lines[0], (part, lines[0])
        assert out == ""
    elif case.outcome == "warning":
        assert code == 0, err
        warnings = [line for line in lines if line.startswith("warning: ")]
        assert any(all(p in w for p in case.expect) for w in warnings), err
    else:
        assert code == 0, err
        assert "error" not in err


IN_PROCESS = [c for c in CASES if not c.blocking]
BLOCKING = [c for c in CASES if c.blocking]


@pytest.mark.parametrize("case", IN_PROCESS, ids=[c.name for c in IN_PROCESS])
def test_case_through_the_command_line(case: Case, capsys, tmp_path: Path, store: Path) -> None:
    target = case.build(tmp_path / "case")
    before = _sha(store)
    siblings = sorted(p.name for p in store.parent.iterdir())
    code, out, err = run(capsys, *_argv(case, target, store))
    _check(case, code, out, err)
    if case.outcome == "error" or case.command == "policies":
        assert _sha(store) == before
    assert sorted(p.name for p in store.parent.iterdir()) == siblings  # no tmp, no lock


@pytest.fixture
def tmp_case_root(tmp_path: Path) -> Path:
    root = tmp_path / "case"
    root.mkdir()
    return root


@pytest.mark.parametrize(
    "name",
    ["truncated_parquet", "unknown_enum", "invalid_utf8", "manifest_sha256_mismatch",
     "policy_extends_cycle"],
)
def test_case_through_a_real_process(name: str, tmp_path: Path, store: Path) -> None:
    """The same cases from a separate interpreter, as a user's shell would run them."""
    case = CASES_BY_NAME[name]
    target = case.build(tmp_path / "case")
    before = _sha(store)
    env = dict(os.environ, CONTEXTLENS_CACHE=str(tmp_path / "cache"))
    env.pop("CONTEXTLENS_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "inspector.cli", *_argv(case, target, store)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    _check(case, proc.returncode, proc.stdout, proc.stderr)
    assert _sha(store) == before


@pytest.mark.parametrize("case", BLOCKING, ids=[c.name for c in BLOCKING])
def test_blocking_case_is_refused_without_opening_it(case: Case, tmp_path: Path, store: Path) -> None:
    """A FIFO is refused by its type, before anything opens it: the command returns at once.
    It runs in its own process with a timeout, so that a regression (a read that blocks on
    the FIFO forever) fails this test instead of hanging the suite."""
    target = case.build(tmp_path / "case")
    before = _sha(store)
    env = dict(os.environ, CONTEXTLENS_CACHE=str(tmp_path / "cache"))
    env.pop("CONTEXTLENS_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "inspector.cli", *_argv(case, target, store)],
        capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL,
    )
    _check(case, proc.returncode, proc.stdout, proc.stderr)
    assert _sha(store) == before
    assert stat.S_ISFIFO(os.stat(target).st_mode)  # still the FIFO: not replaced, not read


def test_invalid_utf8_is_refused_before_it_reaches_the_store(tmp_path: Path) -> None:
    """The same export also fails on a first ingest, and leaves no store behind."""
    from ingest.errors import ValidationError
    from ingest.store import ingest

    target = CASES_BY_NAME["invalid_utf8"].build(tmp_path / "case")
    with pytest.raises(ValidationError, match="column content, row 1"):
        ingest(target, tmp_path / "fresh.duckdb")
    assert not (tmp_path / "fresh.duckdb").exists()


def test_50mb_content_is_stored_whole_and_shown_short(capsys, tmp_path: Path) -> None:
    """Accepted: the content is kept byte for byte, but a listing shows a one-line label;
    nothing prints 50 MB (how fast it answers is the benchmarks' to say, not a test's)."""
    from support.bad_inputs import BIG_CONTENT_BYTES
    from ingest.store import Store

    target = CASES_BY_NAME["content_50mb"].build(tmp_path / "case")
    db = tmp_path / "big.duckdb"
    code, _out, err = run(capsys, "ingest", str(target), "--db", str(db))
    assert code == 0, err
    with Store.open(db) as s:
        assert len(s.record("message", "msg1")["content"]) == BIG_CONTENT_BYTES
    for argv in (("show", "as1"), ("show", "as1", "--json"), ("list",)):
        code, out, err = run(capsys, *argv, "--db", str(db))
        assert code == 0, err
        assert len(out) < 20_000, (argv, len(out))
    labels = [r["label"] for r in json.loads(run(capsys, "show", "as1", "--db", str(db), "--json")[1])["included"]]
    assert any(label.startswith("user: AAAA") and len(label) <= 100 for label in labels)


def test_hostile_ids_are_printed_as_data(capsys, tmp_path: Path) -> None:
    target = CASES_BY_NAME["hostile_ids"].build(tmp_path / "case")
    db = tmp_path / "h.duckdb"
    assert run(capsys, "ingest", str(target), "--db", str(db))[0] == 0
    from ingest.store import Store

    with Store.open(db) as s:
        ids = s.conversations().column("conversation_id").to_pylist()
    assert "[bold red]c2\x1b[2J../../etc/passwd" in ids
    assert not (tmp_path / "etc").exists()


def test_every_case_of_the_issue_is_in_the_corpus() -> None:
    names = {c.name for c in CASES}
    assert {
        "truncated_parquet", "not_parquet", "table_missing", "column_missing", "wrong_type",
        "unknown_enum", "null_required", "duplicate_primary_key", "dangling_hard_fk",
        "branch_cycle", "supersession_cycle", "superseded_by_itself",
        "completed_before_requested", "far_future", "manifest_sha256_mismatch",
        "manifest_row_count_mismatch", "empty_export", "content_50mb", "invalid_utf8",
        "policy_unknown_key", "policy_wrong_type", "policy_extends_cycle",
        "transcript_fifo", "transcript_fifo_open", "transcript_char_device",
        "transcript_folder_as_file", "json_nested_100k", "jsonl_line_nested_100k",
        "jsonl_lone_surrogate", "json_lone_surrogate", "claude_code_first_line_over_8mb",
    } <= names
    assert all(c.blocking for c in CASES if c.name.startswith("transcript_fifo"))


SECRET = "Bearer abcdefghijklmnopqrstuvwxyz0123"


def _secret_export(rows) -> None:
    rows["messages"][0]["content"] = f"call the API with {SECRET} please"
    rows["tool_memories"][1]["privacy_class"] = "google_derived"  # m2, included in as1


def test_secrets_and_restricted_classes_are_masked_in_cli_output_unless_revealed(
    capsys, tmp_path: Path
) -> None:
    """Untrusted content that holds a credential, and a record of a restricted class: masked
    in show/why, text and --json; --reveal shows them for that one command only."""
    db = tmp_path / "s.duckdb"
    export = make_export(tmp_path / "exp", edit=_secret_export)
    assert run(capsys, "ingest", str(export), "--db", str(db))[0] == 0
    summary = "March expenses total 19.75 (two rows)"
    for argv in (("show", "as1"), ("show", "as1", "--json"), ("why", "as1", "m2", "--json"),
                 ("why", "as1", "msg1", "--json")):
        code, out, err = run(capsys, *argv, "--db", str(db))
        assert code == 0, err
        assert "abcdefghijklmnop" not in out and summary not in out, argv
    assert "masked" in run(capsys, "show", "as1", "--db", str(db), "--json")[1]
    code, out, _err = run(capsys, "show", "as1", "--db", str(db), "--json", "--reveal")
    assert SECRET in out and summary in out
    # the reveal is not remembered: the next command masks again
    assert "abcdefghijklmnop" not in run(capsys, "show", "as1", "--db", str(db), "--json")[1]
