"""The store under concurrent use, with real processes: a killed ingest, two ingests at once,
and a reader that keeps working while another process replaces the store.

The big export (``write_sample(scale=20000)``, about 540,000 rows) takes a second or two to
ingest, long enough to interfere with it. Opens that must see the file as it is now run in
a separate process: DuckDB shares one database instance per path within a process.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.cli import run
from ingest.store import Store, ingest
from support.stores import make_export

SMALL_ASSEMBLIES = 2
BIG_SCALE = 20000


@pytest.fixture(scope="module")
def big_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from replay.sample_export import write_sample

    return write_sample(tmp_path_factory.mktemp("big") / "big", scale=BIG_SCALE)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    db = tmp_path / "store.duckdb"
    ingest(make_export(tmp_path / "small"), db)
    return db


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, CONTEXTLENS_CACHE=str(tmp_path / "cache"))
    env.pop("CONTEXTLENS_DEBUG", None)
    return env


def _start_ingest(export: Path, db: Path, tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "inspector.cli", "ingest", str(export), "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
    )


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"ingest ended before {path.name} appeared: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.002)


def _count_in_new_process(db: Path, tmp_path: Path) -> int:
    code = (
        "import sys; from ingest.store import Store\n"
        "with Store.open(sys.argv[1]) as s: print(s.count_assemblies())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(db)], capture_output=True, text=True,
        env=_env(tmp_path), timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
@pytest.mark.parametrize("when", ["copying", "building"])
def test_killed_ingest_leaves_the_store_unchanged_and_the_next_ingest_takes_over(
    when: str, sig: int, big_export: Path, store: Path, tmp_path: Path
) -> None:
    before = _sha(store)
    proc = _start_ingest(big_export, store, tmp_path)
    tmp = store.with_name(f"{store.name}.tmp-{proc.pid}")
    _wait_for(tmp if when == "copying" else tmp.with_name(tmp.name + ".wal"), proc)
    if when == "building":
        time.sleep(0.3)  # well inside loading and checking
    assert proc.poll() is None, "the ingest finished before it could be killed"
    proc.send_signal(sig)
    proc.wait(timeout=30)
    lock = store.with_name(store.name + ".lock")
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        assert lock.read_text().strip() == str(proc.pid)  # left behind by the dead writer
    else:  # SIGTERM cleans up like an error: one line, exit 143, no copy, no lock
        assert proc.returncode == 143
        assert not lock.exists()
        assert not tmp.exists() and not tmp.with_name(tmp.name + ".wal").exists()

    # the previous store: same bytes, still a store, still answering
    assert _sha(store) == before
    assert _count_in_new_process(store, tmp_path) == SMALL_ASSEMBLIES

    # the next ingest takes the dead pid's lock over and cleans its half-built copy
    result = ingest(big_export, store)
    assert result.changed
    assert not lock.exists()
    assert not tmp.exists() and not tmp.with_name(tmp.name + ".wal").exists()
    assert _count_in_new_process(store, tmp_path) == SMALL_ASSEMBLIES + BIG_SCALE


def test_two_ingests_at_once_the_second_is_told_the_store_is_busy(
    capsys, big_export: Path, store: Path, tmp_path: Path
) -> None:
    other = make_export(tmp_path / "other", export_id="exp-other")
    proc = _start_ingest(big_export, store, tmp_path)
    lock = store.with_name(store.name + ".lock")
    _wait_for(store.with_name(f"{store.name}.tmp-{proc.pid}"), proc)
    code, out, err = run(capsys, "ingest", str(other), "--db", str(store))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0] == (
        f"contextlens: error: store {store} is busy: another ingest (pid {proc.pid}) is writing it"
    )
    assert lock.read_text().strip() == str(proc.pid)  # the loser did not touch the lock
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert not lock.exists()
    assert _count_in_new_process(store, tmp_path) == SMALL_ASSEMBLIES + BIG_SCALE
    # the second ingest, retried once the first is done, succeeds
    code, out, err = run(capsys, "ingest", str(other), "--db", str(store))
    assert code == 0, err
    assert _count_in_new_process(store, tmp_path) == SMALL_ASSEMBLIES * 2 + BIG_SCALE


def test_a_reader_keeps_working_while_another_process_replaces_the_store(
    big_export: Path, store: Path, tmp_path: Path
) -> None:
    reader = Store.open(store)  # read-only, the way the inspector opens it
    try:
        first = reader.list_assemblies().column("assembly_id").to_pylist()
        proc = _start_ingest(big_export, store, tmp_path)
        answered = 0
        while proc.poll() is None:
            assert reader.count_assemblies() == SMALL_ASSEMBLIES
            assert reader.list_assemblies().column("assembly_id").to_pylist() == first
            assert reader.assembly_records("as1").num_rows == 9
            answered += 1
        assert proc.returncode == 0, proc.communicate()
        assert answered > 10
        # the open reader still sees the version it opened (its file was replaced, not changed)
        assert reader.count_assemblies() == SMALL_ASSEMBLIES
        assert reader.prompt_records("as1").num_rows == 6
        # a new open, in a process of its own, sees the new version
        assert _count_in_new_process(store, tmp_path) == SMALL_ASSEMBLIES + BIG_SCALE
    finally:
        reader.close()
    with Store.open(store) as fresh:  # once the old instance is closed, here too
        assert fresh.count_assemblies() == SMALL_ASSEMBLIES + BIG_SCALE


def test_a_failed_ingest_in_another_process_leaves_no_lock_and_no_copy(
    store: Path, tmp_path: Path
) -> None:
    bad = make_export(tmp_path / "bad", edit=lambda rows: rows["messages"][0].update(role="x"))
    before = _sha(store)
    proc = _start_ingest(bad, store, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1
    assert "column role, row 0" in err
    assert _sha(store) == before
    assert sorted(p.name for p in store.parent.iterdir() if p.name.startswith(store.name)) == [
        store.name
    ]
