"""Ctrl+C as a terminal sends it, at a moment the command itself signals: the command runs
in a process group of its own under a ``sitecustomize`` hook that writes a marker line on
stderr at that moment; on reading it, the test sends SIGINT to the whole group (the command
and every worker process it started), as the terminal does. No sleep: the marker says when.

Markers: ``MARK connected`` after each DuckDB connection is opened (``duckdb.connect``),
``MARK connected-in-worker`` in a worker process;
``MARK worker-starting`` from a worker process as it starts (spawned: it writes on the same
stderr, and goes on importing the command line while the signal comes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Interrupted", "interrupt_at"]

SITECUSTOMIZE = '''
import os
import sys

# the stderr the process started with: a worker sends its own to the null device
_MARKS = os.dup(2)
_WORKER = "--multiprocessing-fork" in sys.argv  # a spawned worker


def _mark(what):
    os.write(_MARKS, f"MARK {what}\\n".encode())


if _WORKER:  # before it imports anything
    _mark(f"worker-starting {os.getpid()}")

import duckdb

_connect = duckdb.connect


def _connect_marked(*args, **kwargs):
    con = _connect(*args, **kwargs)
    _mark("connected-in-worker" if _WORKER else "connected")
    return con


duckdb.connect = _connect_marked

'''


@dataclass
class Interrupted:
    code: int
    stdout: str
    stderr_lines: list[str]  # what the command wrote on stderr, the markers left out
    workers: list[int]  # the process ids of the workers it started


def interrupt_at(hook_dir: Path, marker: str, *argv: str, timeout: float = 300) -> Interrupted:
    """``contextlens *argv``, sent SIGINT (to its process group) once it has written
    ``MARK marker`` on stderr."""
    hook_dir.mkdir(parents=True, exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook_dir), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen([sys.executable, "-m", "inspector.cli", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        if line.strip() == f"MARK {marker}" or line.startswith(f"MARK {marker} "):
            os.killpg(proc.pid, signal.SIGINT)
            break
    else:
        proc.wait(timeout)
        raise AssertionError(f"the command ended before MARK {marker}: {''.join(lines)}")
    out, rest = proc.communicate(timeout=timeout)
    lines += rest.splitlines(keepends=True)
    workers = [int(ln.split()[-1]) for ln in lines if ln.startswith("MARK worker-starting ")]
    return Interrupted(proc.returncode, out,
                       [ln.rstrip("\n") for ln in lines if not ln.startswith("MARK ")], workers)
