"""Running the command line in a child process where DuckDB would draw its progress bar on
every query of every connection and cursor (and of the worker processes it starts), to
check that a command's standard output holds its answer alone.

DuckDB draws its bar on the process's standard output once a query runs longer than
``progress_bar_time`` ms, and setting that threshold turns the bar back on. Here it is 0 ms
on every connection (``duckdb.connect``), every cursor (``.cursor()``) and the module's
default connection from the moment each is made, and it is set again after every setting
the product itself makes: whatever the product's settings are and in whatever order it
makes them, the bar is on, at 0 ms, for every statement after them. What keeps the output
clean must be a setting the threshold does not undo (the bar's printing turned off), not
the order of two statements.

The hook is a ``sitecustomize`` module on PYTHONPATH, so the worker processes a compare or
verify starts (spawned: fresh interpreters) run it too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["run_with_every_query_drawing_progress"]

SITECUSTOMIZE = '''
import ctypes, os, sys
import duckdb

_libc = ctypes.CDLL(None)


def _silenced(run):
    """``run()`` with the process's standard output (the descriptor DuckDB prints on) null."""
    sys.stdout.flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    try:
        return run()
    finally:
        _libc.fflush(None)
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def _every_query_draws(con):
    _silenced(lambda: con.execute("SET progress_bar_time = 0"))
    return con


_connect = duckdb.connect
_cursor = duckdb.DuckDBPyConnection.cursor
_execute = duckdb.DuckDBPyConnection.execute


def _execute_drawing(self, query, *args, **kwargs):
    if isinstance(query, str) and query.lstrip()[:4].lower() == "set ":
        # One of the product's own settings: not drawn (no SET takes DuckDB's default 2 s
        # in a real run), and the bar back on at 0 ms after it.
        def setting_then_threshold():
            result = _execute(self, query, *args, **kwargs)
            _execute(self, "SET progress_bar_time = 0")
            return result
        return _silenced(setting_then_threshold)
    return _execute(self, query, *args, **kwargs)


duckdb.connect = lambda *a, **k: _every_query_draws(_connect(*a, **k))
duckdb.DuckDBPyConnection.cursor = lambda self: _every_query_draws(_cursor(self))
duckdb.DuckDBPyConnection.execute = _execute_drawing
_every_query_draws(duckdb.default_connection())
'''


def run_with_every_query_drawing_progress(hook_dir: Path, *argv: str,
                                          env: dict[str, str] | None = None,
                                          timeout: float = 300) -> subprocess.CompletedProcess:
    """``contextlens *argv`` in a child process under the hook (written to ``hook_dir``)."""
    hook_dir.mkdir(parents=True, exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    child = dict(os.environ if env is None else env)
    child["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(hook_dir), child.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "inspector.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, env=child)
