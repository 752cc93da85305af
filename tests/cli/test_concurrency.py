"""The store under concurrent use, with real processes: an ingest killed at every step of
adding an export to a store, two ingests at once, and a reader that keeps working while
another process ingests.

The big export (``write_sample(scale=20000)``, about 540,000 rows) takes a second or two to
ingest, long enough to interfere with it. Opens that must see the file as it is now run in
a separate process: DuckDB shares one database instance per path within a process.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.cli import run
from ingest.store import Store, ingest
from support.stores import make_export, prefixed_ids

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


# Each table's rows of each export as (count, sum of row hashes), and each export's
# manifest: what a store holds, independent of how its file is laid out. Read in a process
# of its own, so a WAL left by a killed writer is replayed the way the next user's open does.
_CONTENT_CHILD = r"""
import json, sys
import duckdb
from ingest.store.database import STORE_TABLES
con = duckdb.connect(sys.argv[1], read_only=True)
out = {}
for t in STORE_TABLES:
    cols = "export_id, manifest_json" if t == "exports" else "count(*), sum(hash(x))::VARCHAR"
    group = "" if t == "exports" else " GROUP BY export_id"
    for row in con.execute(f"SELECT export_id, {cols} FROM {t} AS x{group}").fetchall():
        out.setdefault(row[0], {})[t] = list(row[1:])
print(json.dumps(out, sort_keys=True))
"""


def _content(db: Path, tmp_path: Path) -> dict[str, dict[str, list]]:
    out = subprocess.run(
        [sys.executable, "-c", _CONTENT_CHILD, str(db)], capture_output=True, text=True,
        env=_env(tmp_path), timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def big_content(big_export: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list]:
    """The big export's content in a store of its own."""
    folder = tmp_path_factory.mktemp("alone")
    db = folder / "alone.duckdb"
    ingest(big_export, db)
    (content,) = _content(db, folder).values()
    return content


# The ingest reports each step on stdout and, at the step named, waits there: a signal then
# lands exactly at that step of adding an export to the existing store. It waits in short
# sleeps, as a working ingest keeps running Python: the kernel may hand SIGTERM to one of
# DuckDB's threads, and Python then runs the handler when the main thread next runs code, which
# one long sleep would put off for its whole length (CI saw it once in some thousand runs).
_PAUSING_CHILD = r"""
import sys, time
from pathlib import Path
from ingest.errors import ContextlensError
from ingest.store import ingest

pause_at = sys.argv[3]

def progress(label, done, total):
    print(label, flush=True)
    if label == pause_at:
        for _ in range(1200):
            time.sleep(0.1)

try:
    ingest(Path(sys.argv[1]), Path(sys.argv[2]), progress=progress)
except ContextlensError as err:
    print(err, file=sys.stderr)
    sys.exit(err.exit_code)
print("finished", flush=True)
"""

# step -> whether a writer killed there has added the export
STEPS = {
    "loading assembly_records": False,  # loading and validating in its scratch database
    "writing the store": False,  # validated; the store not yet opened for writing
    "writing context_assemblies": False,  # in the transaction, some tables written
    "writing assembly_summary": False,  # every export table written, not the bookkeeping
    "committing": False,  # every row written, COMMIT not yet run
    "checkpointing": True,  # committed: the store's WAL holds the export
}


def _pause_at(step: str, export: Path, db: Path, tmp_path: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", _PAUSING_CHILD, str(export), str(db), step],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == step:
            return proc
    raise AssertionError(f"the ingest never reached {step!r}: {proc.communicate()}")


def _scratch(db: Path, pid: int) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir() if p.name.startswith(f"{db.name}.tmp-{pid}"))


@pytest.mark.parametrize("step", list(STEPS))
def test_an_ingest_killed_at_any_step_leaves_the_store_whole_and_the_next_ingest_takes_over(
    step: str, big_export: Path, big_content: dict, store: Path, tmp_path: Path
) -> None:
    before = _content(store, tmp_path)
    sha = _sha(store)
    proc = _pause_at(step, big_export, store, tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    lock = store.with_name(store.name + ".lock")
    assert lock.read_text().strip() == str(proc.pid)  # left behind by the dead writer

    # the previous exports are as they were; the new one is all there or not there at all
    after = _content(store, tmp_path)
    (big_id,) = set(after) - set(before) or {None}
    assert {k: v for k, v in after.items() if k != big_id} == before
    if STEPS[step]:
        assert after[big_id] == big_content
    else:
        assert big_id is None
    if step == "loading assembly_records":
        assert _sha(store) == sha  # not even opened for writing
    assert _count_in_new_process(store, tmp_path) == SMALL_ASSEMBLIES + (
        BIG_SCALE if STEPS[step] else 0
    )

    # the next ingest takes the dead writer's lock over, removes its scratch files, and
    # adds the export (or finds it already there)
    result = ingest(big_export, store)
    assert result.changed is not STEPS[step]
    assert not lock.exists() and _scratch(store, proc.pid) == []
    final = _content(store, tmp_path)
    assert {k: v for k, v in final.items() if k in before} == before
    (big_id,) = set(final) - set(before)
    assert final[big_id] == big_content


@pytest.mark.parametrize("step", [s for s, added in STEPS.items() if not added])
def test_sigterm_at_any_step_before_the_commit_cleans_up_like_an_error(
    step: str, big_export: Path, store: Path, tmp_path: Path
) -> None:
    before = _content(store, tmp_path)
    proc = _pause_at(step, big_export, store, tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    export_id = json.loads((big_export / "manifest.json").read_text())["export_id"]
    assert err.strip().splitlines() == [
        f"interrupted: nothing of export {export_id} stored in {store}"
    ]
    assert not store.with_name(store.name + ".lock").exists()
    assert _scratch(store, proc.pid) == []
    assert _content(store, tmp_path) == before


@pytest.mark.parametrize("step", ["writing assembly_summary", "committing"])
def test_a_replacement_killed_before_its_commit_leaves_the_old_rows(
    step: str, store: Path, tmp_path: Path
) -> None:
    """An export re-ingested with other content replaces its rows in the same transaction:
    killed before COMMIT, the store still holds the old version, whole."""

    def retitle(rows):
        rows["conversations"][0]["title"] = "Budget review, again"

    changed = make_export(tmp_path / "changed", edit=retitle)
    before = _content(store, tmp_path)
    proc = _pause_at(step, changed, store, tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert _content(store, tmp_path) == before
    assert ingest(changed, store).changed
    after = _content(store, tmp_path)
    assert set(after) == set(before) and after != before


def test_two_ingests_at_once_the_second_is_told_the_store_is_busy(
    capsys, big_export: Path, store: Path, tmp_path: Path
) -> None:
    other = make_export(tmp_path / "other", export_id="exp-other", edit=prefixed_ids("o-"))
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


def test_a_reader_opening_while_an_export_is_written_in_place_is_told_to_try_again(
    capsys, big_export: Path, store: Path, tmp_path: Path
) -> None:
    proc = _pause_at("writing assembly_records", big_export, store, tmp_path)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "inspector.cli", "list", "--db", str(store)],
            capture_output=True, text=True, env=_env(tmp_path), timeout=60,
        )
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.strip().splitlines() == [
            f"contextlens: error: store {store} is being written by another process "
            f"(pid {proc.pid}), such as an ingest; try again when it is done"
        ]
    finally:
        proc.kill()
        proc.wait()
    assert _count_in_new_process(store, tmp_path) == SMALL_ASSEMBLIES


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
