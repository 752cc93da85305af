"""`contextlens serve` refuses what it cannot serve with one line, before or instead of
listening (the browser test, tests/browser, drives a running one)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


def _serve(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inspector.cli", "serve", *argv],
                          capture_output=True, text=True, timeout=120)


def test_a_port_in_use_is_one_line(sample_db: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve(str(sample_db), "--port", str(port), "--host", "127.0.0.1")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"contextlens: error: cannot serve on 127.0.0.1:{port}: "), done.stderr
    assert "address already in use" in lines[0]


def test_a_missing_path_is_one_line_before_anything_listens(tmp_path: Path) -> None:
    done = _serve(str(tmp_path / "nope"), "--port", "1")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"contextlens: error: {tmp_path / 'nope'}: no such file or folder"], done.stderr
    assert done.stdout == ""
