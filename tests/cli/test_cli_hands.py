"""The command line under a script's and a person's hands: ``--json`` output is the JSON
alone whatever DuckDB would draw, Ctrl+C stops a command cleanly, progress says something,
and the command starts without importing what it does not need."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.interrupts import Interrupted, interrupt_at
from support.progress_bar import run_with_every_query_drawing_progress
from support.stores import SCALE_REQUESTS

# Every command that takes --json, with arguments the sample answers ({db}: the store;
# {tmp}: a folder of the test's own)
JSON_COMMANDS = [
    ("list",),
    ("show", "asm-030"),
    ("diff", "asm-035", "--policy", "v4"),
    ("why", "asm-029", "art-019"),
    ("replay", "asm-035", "--policy", "v4"),
    ("bisect", "asm-035", "mem-020"),
    ("verify", "--workers", "1"),
    ("compare", "recorded", "v4", "--workers", "1"),
    ("report", "tokens"),
    ("lint",),
    ("policies",),
    ("bundle", "asm-001", "--out", "{tmp}/bundle"),
]


@pytest.mark.parametrize("argv", JSON_COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_every_json_command_prints_json_alone_when_every_query_would_draw_progress(
        sample_db: Path, tmp_path: Path, argv: tuple[str, ...]) -> None:
    argv = tuple(a.replace("{tmp}", str(tmp_path)) for a in argv)
    proc = run_with_every_query_drawing_progress(tmp_path / "hook", *argv, "--db",
                                                 str(sample_db), "--json")
    assert proc.returncode in (0, 1), proc.stderr  # verify and lint exit 1 on findings
    assert "▕" not in proc.stdout
    json.loads(proc.stdout)


def test_ingest_json_is_json_alone_when_every_query_would_draw_progress(
        sample_export: Path, tmp_path: Path) -> None:
    proc = run_with_every_query_drawing_progress(
        tmp_path / "hook", "ingest", str(sample_export), "--db", str(tmp_path / "new.duckdb"),
        "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)


def test_sessions_json_is_json_alone_when_every_query_would_draw_progress(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "INSPECT_LOG_DIR",
                        "MSWEA_GLOBAL_CONFIG_DIR", "XDG_CONFIG_HOME")}
    env["HOME"] = str(home)
    proc = run_with_every_query_drawing_progress(tmp_path / "hook", "sessions", "--json",
                                                 env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


# ----------------------------------------------------------------------------- Ctrl+C


def _aborted_cleanly(run: Interrupted) -> None:
    assert run.code == 130, run.stderr_lines
    assert run.stderr_lines == ["aborted"]  # one line: no traceback from any process


def test_ctrl_c_while_compare_workers_start_stops_everything_in_one_line(
        scale_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run = interrupt_at(tmp_path / "hook", "worker-starting", "compare", "recorded", "v4",
                       "--db", str(scale_db), "--workers", "2",
                       "--out", str(out / "rows.parquet"))
    _aborted_cleanly(run)
    assert run.workers  # it was interrupted while they started
    assert list(out.iterdir()) == []  # no --out file, whole or partial


def test_ctrl_c_while_verify_workers_start_stops_everything_in_one_line(
        scale_db: Path, tmp_path: Path) -> None:
    run = interrupt_at(tmp_path / "hook", "worker-starting", "verify",
                       "--db", str(scale_db), "--workers", "2", "--json")
    _aborted_cleanly(run)
    assert run.workers


def test_ctrl_c_while_compare_workers_work_stops_them_at_once(scale_db: Path,
                                                               tmp_path: Path) -> None:
    """Interrupted once its workers have opened the store and take chunks."""
    run = interrupt_at(tmp_path / "hook", "connected-in-worker", "compare", "recorded", "v4",
                       "--db", str(scale_db), "--workers", "2")
    _aborted_cleanly(run)


@pytest.mark.parametrize("argv", [("compare", "recorded", "v4", "--workers", "1"),
                                  ("verify", "--workers", "1")])
def test_ctrl_c_in_a_compare_or_verify_in_this_process_is_one_line(
        scale_db: Path, tmp_path: Path, argv: tuple[str, ...]) -> None:
    _aborted_cleanly(interrupt_at(tmp_path / "hook", "connected", *argv, "--db", str(scale_db)))


def test_ctrl_c_during_ingest_is_one_line_and_leaves_no_store(
        sample_export: Path, tmp_path: Path) -> None:
    stores = tmp_path / "stores"
    stores.mkdir()
    run = interrupt_at(tmp_path / "hook", "connected", "ingest", str(sample_export),
                       "--db", str(stores / "new.duckdb"))
    # an ingest says whether its export was stored (tests/cli/test_signals.py)
    assert run.code == 130, run.stderr_lines
    assert len(run.stderr_lines) == 1 and run.stderr_lines[0].startswith("interrupted: nothing of")
    assert [p.name for p in stores.iterdir() if not p.name.endswith(".lock")] == []


# ----------------------------------------------------------------------------- progress


def test_a_compare_of_10000_requests_reports_progress_several_times(scale_db: Path) -> None:
    from ingest.store import Store
    from replay.compare import compare
    from replay.policy import load_registry

    reports: list[tuple[int, int]] = []
    with Store.open(scale_db) as store:
        compare(store, load_registry(None), "recorded", "v4",
                progress=lambda done, total: reports.append((done, total)))
    between = sorted({done for done, total in reports if 0 < done < total})
    assert reports[0] == (0, SCALE_REQUESTS) and reports[-1] == (SCALE_REQUESTS, SCALE_REQUESTS)
    assert len(between) >= 3, reports  # it moves while it works, not only at the end


def _stderr_on_a_terminal(*argv: str) -> tuple[int, str, str]:
    """``contextlens *argv`` with stderr on a pseudo-terminal (progress is drawn only on a
    terminal) and stdout piped: the exit code, stdout, and what the terminal received."""
    import pty
    import subprocess
    import sys

    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "inspector.cli", *argv],
                            stdout=subprocess.PIPE, stderr=follower, text=True)
    os.close(follower)
    drawn = bytearray()
    while True:  # until the command's end closes the terminal (EIO)
        try:
            piece = os.read(leader, 4096)
        except OSError:
            break
        if not piece:
            break
        drawn += piece
    out = proc.stdout.read() if proc.stdout else ""
    proc.wait()
    os.close(leader)
    return proc.returncode, out, drawn.decode("utf-8", "replace")


def test_compare_on_a_terminal_says_count_rate_and_time_left(scale_db: Path) -> None:
    code, out, drawn = _stderr_on_a_terminal("compare", "recorded", "v4", "--db", str(scale_db),
                                             "--workers", "1", "--json")
    assert code == 0, drawn
    assert json.loads(out)["requests"] == SCALE_REQUESTS  # stdout: the answer alone
    lines = [ln.split("\x1b[K")[0] for ln in drawn.replace("\r\n", "\r").split("\r") if ln]
    moving = [ln for ln in lines if "requests/s" in ln]
    assert moving, drawn
    assert all(" of 10,000 requests · " in ln and " left" in ln for ln in moving)
    assert any(ln.rstrip().endswith(" s") and "10,000 of 10,000 requests in " in ln
               for ln in lines), lines


# ----------------------------------------------------------------------------- start-up

# What `contextlens --help` (and a typo's one-line error) must not wait for: a command
# imports what it needs in its body
HEAVY = ("textual", "pyarrow", "duckdb", "pydantic", "numpy", "rich", "detect_secrets",
         "inspector.app", "readmodel", "replay")


def test_the_command_line_starts_without_importing_what_its_commands_need() -> None:
    import subprocess
    import sys

    probe = ("import sys, inspector.cli; "
             f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == []
