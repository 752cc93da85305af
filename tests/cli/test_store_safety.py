"""The store under hostile or unlucky conditions: racing writers, signals, a full disk,
planted symlinks, stores of another version, and exports whose types would be silently
repaired. Each case and its behaviour is listed in docs/security.md."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from support.cli import run
from ingest.errors import ContextlensError, ValidationError
from ingest.store import STORE_VERSION, Store, ingest
from support.stores import make_export, prefixed_ids, read_table, rewrite_table, set_value

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CONTEXTLENS_DEBUG", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS), env.get("PYTHONPATH", "")])
    return env


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _dead_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


def _leftovers(folder: Path, db: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(db.name) and p != db)


# ---------------------------------------------------------------- 1. the lock

# Each process takes the lock, does a read-modify-write of a shared counter inside it, and
# on every other round leaves the lock file behind with its pid in it, the way a killed
# writer does; the other process then finds a stale lock. A lock two processes can both
# hold loses increments.
_COUNTER_CHILD = r"""
import os, sys, time
from pathlib import Path
from ingest.errors import StoreBusyError
from ingest.store.lock import StoreLock

db, counter, go, rounds = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
while not go.exists():
    time.sleep(0.001)
done = 0
while done < rounds:
    lock = StoreLock(db)
    try:
        lock.__enter__()
    except StoreBusyError:
        continue
    n = int(counter.read_text())
    time.sleep(0.0005)
    counter.write_text(str(n + 1))
    done += 1
    if done % 2:
        os.close(lock._fd)  # die holding it: the file and the pid stay, the OS lock goes
        lock._fd = None
    else:
        lock.__exit__(None, None, None)
print("ok")
"""


def test_two_processes_never_hold_the_lock_at_once_even_taking_over_stale_ones(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.duckdb"
    counter = tmp_path / "counter"
    counter.write_text("0")
    (tmp_path / "s.duckdb.lock").write_text(str(_dead_pid()))
    go = tmp_path / "go"
    rounds = 150
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _COUNTER_CHILD, str(db), str(counter), str(go), str(rounds)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )
        for _ in range(2)
    ]
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err
    assert int(counter.read_text()) == 2 * rounds


# Two processes ingest different exports into the same store, starting together, over a
# lock left by a dead writer; each retries while told the store is busy.
_INGEST_CHILD = r"""
import sys, time
from pathlib import Path
from ingest.errors import StoreBusyError
from ingest.store import ingest

export, sync, me, other = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
for db in sys.argv[5:]:
    (sync / f"{Path(db).name}-{me}").touch()
    while not (sync / f"{Path(db).name}-{other}").exists():
        time.sleep(0.0005)
    while True:
        try:
            ingest(export, Path(db))
            break
        except StoreBusyError:
            time.sleep(0.001)
print("ok")
"""


def test_racing_ingests_over_a_stale_lock_never_lose_an_export(tmp_path: Path) -> None:
    exports = [make_export(tmp_path / n, export_id=f"exp-{n}", edit=prefixed_ids(n)) for n in ("a", "b")]
    sync = tmp_path / "sync"
    sync.mkdir()
    dbs = [tmp_path / f"s{i}.duckdb" for i in range(2)]
    for db in dbs:
        db.with_name(db.name + ".lock").write_text(str(_dead_pid()))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _INGEST_CHILD, str(exports[i]), str(sync), me, other,
             *map(str, dbs)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )
        for i, (me, other) in enumerate((("a", "b"), ("b", "a")))
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err
    for db in dbs:
        with Store.open(db) as s:
            assert [e["export_id"] for e in s.exports()] == ["exp-a", "exp-b"]
        assert _leftovers(tmp_path, db) == []


@pytest.fixture(scope="module")
def big_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from replay.sample_export import write_sample

    return write_sample(tmp_path_factory.mktemp("big") / "big", scale=20000)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_ingest_cleans_up_like_an_error(
    sig: signal.Signals, big_export: Path, tmp_path: Path
) -> None:
    db = tmp_path / "store.duckdb"
    ingest(make_export(tmp_path / "small"), db)
    before = _sha(db)
    proc = subprocess.Popen(
        [sys.executable, "-m", "inspector.cli", "ingest", str(big_export), "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )
    wal = db.with_name(f"{db.name}.tmp-{proc.pid}.wal")
    deadline = time.monotonic() + 60
    while not wal.exists():  # the copy is being built
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.002)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and proc.returncode != -sig  # it handled the signal
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1
    assert _leftovers(tmp_path, db) == []  # no copy, no .wal, no lock
    assert _sha(db) == before
    assert ingest(make_export(tmp_path / "other", export_id="exp-other", edit=prefixed_ids("o-")), db).changed


# ---------------------------------------------------------------- 1. a full disk


def _no_space(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _one_error_line(capsys, *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_no_space_while_copying_the_store(capsys, monkeypatch, tmp_path: Path) -> None:
    """The store is copied only while a reader holds it open (DuckDB lets no process write
    a file another one reads)."""
    db = tmp_path / "s.duckdb"
    ingest(make_export(tmp_path / "a"), db)
    before = _sha(db)
    monkeypatch.setattr("shutil.copyfile", _no_space)
    with Store.open(db):
        line = _one_error_line(
            capsys, "ingest", str(make_export(tmp_path / "b", export_id="b")), "--db", str(db)
        )
    copy = db.with_name(f"{db.name}.tmp-{os.getpid()}.copy")
    assert line == f"contextlens: error: cannot write {copy}: No space left on device"
    assert _leftovers(tmp_path, db) == [] and _sha(db) == before


def test_no_space_while_adding_an_export_in_place(capsys, monkeypatch, tmp_path: Path) -> None:
    import ingest.store.loading as loading

    db = tmp_path / "s.duckdb"
    ingest(make_export(tmp_path / "a"), db)
    with Store.open(db) as s:
        before = (s.exports(), s.count_assemblies())

    def full(con, name, staged):
        if name == "tool_calls":
            raise duckdb.IOException("Could not write file: No space left on device")

    monkeypatch.setattr(loading, "_add_missing_columns", full)
    line = _one_error_line(capsys, "ingest", str(make_export(tmp_path / "b", export_id="b", edit=prefixed_ids("b-"))),
                           "--db", str(db))
    assert line == (
        f"contextlens: error: cannot write {db} (table tool_calls): "
        "Could not write file: No space left on device"
    )
    assert _leftovers(tmp_path, db) == []
    with Store.open(db) as s:  # the tables written before it were rolled back
        assert (s.exports(), s.count_assemblies()) == before


def test_no_space_while_writing_the_lock(capsys, monkeypatch, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    monkeypatch.setattr("ingest.store.lock.os.pwrite", _no_space)
    line = _one_error_line(capsys, "ingest", str(make_export(tmp_path / "a")), "--db", str(db))
    assert line == f"contextlens: error: cannot write {db}.lock: No space left on device"
    assert _leftovers(tmp_path, db) == [] and not db.exists()  # no empty lock left behind


def test_no_space_while_duckdb_writes_the_copy(capsys, monkeypatch, tmp_path: Path) -> None:
    import ingest.store.loading as loading

    db = tmp_path / "s.duckdb"

    def full(con, *a, **k):
        raise duckdb.IOException("Could not write file: No space left on device")

    monkeypatch.setattr(loading, "resolve_types", full)
    line = _one_error_line(capsys, "ingest", str(make_export(tmp_path / "a")), "--db", str(db))
    tmp = db.with_name(f"{db.name}.tmp-{os.getpid()}")
    assert line.startswith(f"contextlens: error: cannot write {tmp}: ")
    assert line.endswith("No space left on device")
    assert _leftovers(tmp_path, db) == [] and not db.exists()


def test_no_space_while_writing_parquet_on_reexport(monkeypatch, tmp_path: Path) -> None:
    from ingest.reexport import export_store
    from ingest.writer import ExportWriter

    db = tmp_path / "s.duckdb"
    ingest(make_export(tmp_path / "a"), db)

    def full(self, name, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "out" / name))

    monkeypatch.setattr(ExportWriter, "write", full)
    with pytest.raises(ContextlensError) as info:
        export_store(db, tmp_path / "out")
    assert str(info.value) == (
        f"cannot write {tmp_path / 'out' / 'conversations'}: No space left on device"
    )


# ---------------------------------------------------------------- 2. blobs


def test_an_export_whose_blobs_folder_is_a_symlink_is_refused(tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp")
    real = tmp_path / "elsewhere"
    (export / "blobs").rename(real)
    os.symlink(real, export / "blobs")
    with pytest.raises(ValidationError) as info:
        ingest(export, tmp_path / "s.duckdb")
    assert str(info.value) == (
        "export exp: blobs/ is a symbolic link; blob bodies must be files in the export"
    )
    assert not (tmp_path / "s.duckdb").exists()


def test_an_export_with_a_symlinked_blob_is_refused(tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp")
    (tmp_path / "secret").write_text("not yours")
    (export / "blobs" / "nested").mkdir()
    os.symlink(tmp_path / "secret", export / "blobs" / "nested" / ("0" * 64))
    with pytest.raises(ValidationError) as info:
        ingest(export, tmp_path / "s.duckdb")
    assert str(info.value) == (
        f"export exp: blob blobs/nested/{'0' * 64} is a symbolic link; "
        "blob bodies must be files in the export"
    )


# ---------------------------------------------------------------- 3. versions


@pytest.fixture
def store_db(tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    ingest(make_export(tmp_path / "exp"), db)
    return db


def _sql(db: Path, *statements: str) -> None:
    con = duckdb.connect(str(db))
    try:
        for s in statements:
            con.execute(s)
    finally:
        con.close()


def test_a_store_of_a_newer_version_is_refused(capsys, store_db: Path, tmp_path: Path) -> None:
    newer = int(STORE_VERSION) + 1
    _sql(store_db, f"UPDATE store_meta SET value = '{newer}' WHERE key = 'version'")
    expected = (
        f"{store_db} was made by a newer contextlens (store version {newer}, this one reads "
        f"{STORE_VERSION}); upgrade contextlens"
    )
    assert _one_error_line(capsys, "list", "--db", str(store_db)) == f"contextlens: error: {expected}"
    before = _sha(store_db)
    with pytest.raises(ContextlensError) as info:  # and ingest does not touch it
        ingest(make_export(tmp_path / "b", export_id="b"), store_db)
    assert str(info.value) == expected and _sha(store_db) == before


def test_a_store_of_an_older_version_names_the_rebuild(capsys, store_db: Path) -> None:
    _sql(store_db, "UPDATE store_meta SET value = '0' WHERE key = 'version'")
    assert _one_error_line(capsys, "list", "--db", str(store_db)) == (
        f"contextlens: error: {store_db} is a store of an older contextlens (store version 0, "
        f"this one reads {STORE_VERSION}); rebuild it: move it aside and run "
        f"`contextlens ingest EXPORT --db {store_db}` for each of its exports"
    )


def test_a_store_with_metadata_but_no_tables_is_one_line(capsys, tmp_path: Path) -> None:
    db = tmp_path / "bare.duckdb"
    _sql(db, "CREATE TABLE store_meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
         f"INSERT INTO store_meta VALUES ('format', 'contextlens-store'), ('version', '{STORE_VERSION}')")
    line = _one_error_line(capsys, "list", "--db", str(db))
    assert line.startswith(
        f"contextlens: error: {db} is an incomplete contextlens store (table exports is missing)"
    )


def test_a_damaged_table_is_one_line_not_a_duckdb_report(store_db: Path) -> None:
    _sql(store_db, "ALTER TABLE assembly_summary DROP COLUMN scenario")
    with Store.open(store_db) as s, pytest.raises(ContextlensError) as info:
        s.list_assemblies()
    message = str(info.value)
    assert message.startswith(f"store {store_db}: ") and "scenario" in message
    assert "\n" not in message


# ---------------------------------------------------------------- 4. no silent repair


def _fails(export: Path, tmp_path: Path) -> str:
    with pytest.raises(ValidationError) as info:
        ingest(export, tmp_path / "s.duckdb")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "s.duckdb").exists()
    return str(info.value)


def test_a_fraction_in_an_integer_column_is_not_rounded(tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp")
    data = read_table(export, "messages")
    tokens = pa.array([12.0, 1.5], pa.float64())
    rewrite_table(export, "messages", data.set_column(
        data.schema.get_field_index("content_tokens"), "content_tokens", tokens))
    assert _fails(export, tmp_path) == (
        "export exp: table messages, column content_tokens, row 1: expected BIGINT, "
        "found DOUBLE value '1.5' that is not a whole number"
    )


def test_whole_floats_in_an_integer_column_still_convert(tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp")
    data = read_table(export, "messages")
    tokens = pa.array([12.0, 6.0], pa.float64())
    rewrite_table(export, "messages", data.set_column(
        data.schema.get_field_index("content_tokens"), "content_tokens", tokens))
    ingest(export, tmp_path / "s.duckdb")
    with Store.open(tmp_path / "s.duckdb") as s:
        assert s.record("message", "msg2")["content_tokens"] == 6


def test_a_fraction_written_as_text_is_not_rounded_either(tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp")
    set_value(export, "messages", "content_tokens", 0, "2.5", pa.string())
    assert _fails(export, tmp_path) == (
        "export exp: table messages, column content_tokens, row 0: expected BIGINT, "
        "found VARCHAR value '2.5' that is not a whole number"
    )


def test_a_list_in_a_string_column_is_not_flattened(tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp")
    data = read_table(export, "messages")
    content = pa.array([None, ["The total", "is 19.75."]], pa.list_(pa.string()))
    rewrite_table(export, "messages", data.set_column(
        data.schema.get_field_index("content"), "content", content))
    assert _fails(export, tmp_path) == (
        "export exp: table messages, column content, row 1: expected VARCHAR, found nested "
        "VARCHAR[] value '[The total, is 19.75.]' (not flattened into text)"
    )


def test_a_struct_in_a_string_column_is_not_flattened(tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp")
    data = read_table(export, "tool_calls")
    args = pa.array([{"path": "march.csv"}], pa.struct([("path", pa.string())]))
    rewrite_table(export, "tool_calls", data.set_column(
        data.schema.get_field_index("arguments_json"), "arguments_json", args))
    message = _fails(export, tmp_path)
    assert message.startswith(
        "export exp: table tool_calls, column arguments_json, row 0: expected VARCHAR, "
        "found nested STRUCT("
    )


def test_nested_lists_in_tags_are_not_flattened(tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp")
    data = read_table(export, "context_assemblies")
    tags = pa.array([[["scenario:budget"]]] * data.num_rows, pa.list_(pa.list_(pa.string())))
    rewrite_table(export, "context_assemblies", data.set_column(
        data.schema.get_field_index("tags"), "tags", tags))
    assert _fails(export, tmp_path) == (
        "export exp: table context_assemblies, column tags, row 0: expected VARCHAR[], found "
        "nested VARCHAR[][] value '[['scenario:budget']]' (not flattened into text)"
    )


def test_a_megabyte_id_is_cut_in_errors_and_warnings(tmp_path: Path) -> None:
    long_id = "m" * 1_000_000

    def self_superseding(rows):
        rows["tool_memories"][0].update(memory_id=long_id, superseded_by=long_id)

    message = _fails(make_export(tmp_path / "exp", edit=self_superseding), tmp_path)
    assert message.startswith("export exp: table tool_memories: memory mmm")
    assert len(message) < 200 and "…" in message

    def dangling(rows):
        rows["tool_memories"][0]["source_artifact_ids"] = [long_id]

    result = ingest(make_export(tmp_path / "exp2", edit=dangling), tmp_path / "ok.duckdb")
    assert result.warnings and all(len(w) < 300 for w in result.warnings)
    assert any("…" in w for w in result.warnings)


def test_a_megabyte_export_id_is_cut_in_reexport_errors(store_db: Path, tmp_path: Path) -> None:
    from ingest.reexport import export_store

    with pytest.raises(ContextlensError) as info:
        export_store(store_db, tmp_path / "out", "x" * 1_000_000)
    assert len(str(info.value)) < 300 and "…" in str(info.value)
