"""`contextlens serve` refuses what it cannot serve with one line, before or instead of
listening (the browser test, tests/browser, drives a running one)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from support.serving import serving, tab_screen, token_of



def _serve(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inspector.cli", "serve", *argv],
                          capture_output=True, text=True, timeout=120)


def test_a_port_in_use_is_one_line_and_no_banner(sample_db: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve(str(sample_db), "--port", str(port), "--host", "127.0.0.1")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"contextlens: error: cannot serve on 127.0.0.1:{port}: address already in use"
    ], done.stderr
    assert done.stdout == ""  # no "serving on" banner for a server that never listened


def test_a_missing_path_is_one_line_before_anything_listens(tmp_path: Path) -> None:
    done = _serve(str(tmp_path / "nope"), "--port", "1")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"contextlens: error: {tmp_path / 'nope'}: no such file or folder"], done.stderr
    assert done.stdout == ""


def test_each_tab_runs_an_isolated_interpreter_whatever_the_working_folder(
        sample_db: Path, tmp_path: Path) -> None:
    """A click.py in the folder serve was started from broke every session: the tab's
    `python -m inspector.cli` imported it instead of click. The tab's app comes up and
    draws the request list all the same."""
    (tmp_path / "click.py").write_text(
        'raise RuntimeError("click.py from the working folder was imported")\n')
    (tmp_path / "inspector").mkdir()  # nor a package of the app's name
    (tmp_path / "inspector" / "__init__.py").write_text('raise RuntimeError("shadowed")\n')
    log = tmp_path / "serve.log"
    # -P: serve itself does not look in the working folder (only what it runs is tested)
    with serving(sample_db, log, "--host", "127.0.0.1", cwd=tmp_path,
                 python=(sys.executable, "-P")) as url:
        # textual-serve writes a tab app's start-up failure (its stderr) to its own output
        port = urlsplit(url).port
        shown = asyncio.run(tab_screen(
            f"ws://127.0.0.1:{port}/ws?token={token_of(url)}&width=120&height=30",
            lambda text: "asm-0" in text, failed=lambda: "Traceback" in log.read_text()))
        assert "asm-0" in shown, log.read_text()[-3000:]
        assert "RuntimeError" not in log.read_text()
