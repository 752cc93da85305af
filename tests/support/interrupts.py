"""Ctrl+C as a terminal sends it, at a moment the command itself signals: the command runs
in a process group of its own under a ``sitecustomize`` hook that writes a marker line on
stderr at that moment; on reading it, the test sends SIGINT to the whole group (the command
and every worker process it started), as the terminal does. No sleep: the marker says when.

Markers: ``MARK connected`` after each DuckDB connection is opened (``duckdb.connect``),
``MARK connected-in-worker`` in a worker process;
``MARK worker-starting PID`` from a worker process as it starts (spawned: it writes on the
same stderr, and goes on importing the command line while the signal comes);
``MARK step LABEL`` as an ingest starts each step of its progress (``ingest.store.loading``:
``loading context_assemblies``, ``committing``, ``checkpointing``, ``done``, ...). With
``pause=True`` (``signal_at``) the process waits at the marker until a signal comes, so the
signal lands exactly there (the command's handler runs at the marker).

``signal_at`` sends any signal, to the group or to the command alone (``kill PID`` as a
service manager does); ``wait_gone`` waits, bounded, for a process to end (for the worker
processes of a command that was killed: the kernel ends them a moment after it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Interrupted", "interrupt_at", "signal_at", "wait_gone"]

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

_PAUSE_AT = os.environ.get("CONTEXTLENS_TEST_PAUSE_AT")
if os.environ.get("CONTEXTLENS_TEST_MARK_STEPS") and not _WORKER:
    import signal

    from ingest.store import loading

    _tick = loading._Steps.tick

    import select

    def _step(label):
        if label != _PAUSE_AT:
            _mark(f"step {label}")
            return
        # Waits until a signal comes, and its handler (the command's) runs here. Any thread
        # may take a signal sent to the process (DuckDB's, the hashing thread), which would
        # wake no wait of the main thread; the wakeup fd is written whichever takes it, and
        # the handler then runs in the main thread at once. Set before the marker, so a
        # signal sent right after it is not missed.
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        previous = signal.set_wakeup_fd(wake_w)
        try:
            _mark(f"step {label}")
            select.select([wake_r], [], [])
            os.read(wake_r, 16)  # (the handler runs here if it has not yet)
        finally:
            signal.set_wakeup_fd(previous)
            os.close(wake_r)
            os.close(wake_w)

    def _tick_marked(self, label):
        _step(label)
        return _tick(self, label)

    loading._Steps.tick = _tick_marked

    _done = loading._Steps.done

    def _done_marked(self):
        _step("done")
        return _done(self)

    loading._Steps.done = _done_marked
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
    return signal_at(hook_dir, marker, *argv, timeout=timeout)


def signal_at(hook_dir: Path, marker: str, *argv: str, signum: int = signal.SIGINT,
              group: bool = True, pause: bool = False, timeout: float = 300) -> Interrupted:
    """``contextlens *argv``, sent ``signum`` once it has written ``MARK marker`` on stderr:
    to its process group as a terminal sends Ctrl+C (``group``), or to the command alone as
    ``kill`` does. ``pause``: the command waits at the marker for the signal (step markers
    only)."""
    hook_dir.mkdir(parents=True, exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook_dir), env.get("PYTHONPATH", "")) if p)
    if marker.startswith("step "):
        env["CONTEXTLENS_TEST_MARK_STEPS"] = "1"
        if pause:
            env["CONTEXTLENS_TEST_PAUSE_AT"] = marker[len("step "):]
    proc = subprocess.Popen([sys.executable, "-m", "inspector.cli", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        if line.strip() == f"MARK {marker}" or line.startswith(f"MARK {marker} "):
            if group:
                os.killpg(proc.pid, signum)
            else:
                os.kill(proc.pid, signum)
            break
    else:
        proc.wait(timeout)
        raise AssertionError(f"the command ended before MARK {marker}: {''.join(lines)}")
    out, rest = proc.communicate(timeout=timeout)
    lines += rest.splitlines(keepends=True)
    workers = [int(ln.split()[-1]) for ln in lines if ln.startswith("MARK worker-starting ")]
    return Interrupted(proc.returncode, out,
                       [ln.rstrip("\n") for ln in lines if not ln.startswith("MARK ")], workers)


def wait_gone(pid: int, timeout: float = 60) -> bool:
    """Whether process ``pid`` has ended (or is gone) within ``timeout`` seconds: waits on
    its pidfd, which the kernel makes readable when the process ends, not on a clock."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)
