"""Hostile inputs (issue 27, items 4, 7 and 8): every file a command reads is refused by its
type before it is read (a FIFO never blocks, ``/dev/zero`` never fills memory) and capped;
zip members by declared and actual size, ratio and encryption; numbers, dates and the
``extends`` chain bounded; a store is one only if its tables match, and an ingest never
writes one that does not.

Each case: one line on stderr, the documented exit code, no traceback. Inputs that would
block or grow forever run in their own process with a timeout, so a regression fails
instead of hanging the suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import duckdb
import pytest

from sample_data import SAMPLE_DIR
from support.cli import run
from support.stores import make_export


def _process(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    env = dict(os.environ, CONTEXTLENS_CACHE=str(tmp_path / "cache"))
    env.pop("CONTEXTLENS_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "inspector.cli", *argv], capture_output=True, text=True,
        env=env, timeout=120, stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _one_error(code: int, out: str, err: str, *expect: str) -> str:
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("contextlens: error: "), err
    for part in expect:
        assert part in lines[0], (part, lines[0])
    return lines[0]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- policy files


def _policies(tmp_path: Path) -> Path:
    folder = tmp_path / "policies"
    shutil.copytree(SAMPLE_DIR / "policies", folder)
    return folder


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _zero(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


@pytest.mark.parametrize("make, kind", [(_fifo, "a FIFO"), (_zero, "a character device")])
def test_a_policy_folder_holding_a_fifo_or_dev_zero_is_refused(make, kind: str, tmp_path: Path) -> None:
    folder = _policies(tmp_path)
    make(folder / "v3.toml")
    code, out, err = _process(tmp_path, "policies", "--policies", str(folder))
    _one_error(code, out, err, "v3.toml", kind, "not a regular file")


@pytest.mark.parametrize("make, kind", [(_fifo, "a FIFO"), (_zero, "a character device")])
def test_a_bundle_whose_policy_is_a_fifo_or_dev_zero_does_not_hang_verify(
        make, kind: str, capsys, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    code, _out, err = run(capsys, "bundle", "asm-003", "--out", str(bundle))
    assert code == 0, err
    make(bundle / "policies" / "v3.toml")
    # the command the bundle's report.md tells its recipient to run
    code, out, err = _process(tmp_path, "verify", "--db", str(bundle), "--policies",
                              str(bundle / "policies"))
    _one_error(code, out, err, "v3.toml", kind)


def test_a_policy_file_given_by_path_is_refused_when_it_is_a_fifo(tmp_path: Path) -> None:
    folder = _policies(tmp_path)
    _fifo(folder / "v3.toml")
    code, out, err = _process(tmp_path, "replay", "asm-003", "--policy", str(folder / "v4.toml"))
    _one_error(code, out, err, "v3.toml", "a FIFO")


def test_a_policy_file_over_the_cap_is_refused(capsys, tmp_path: Path) -> None:
    folder = _policies(tmp_path)
    text = (folder / "v3.toml").read_text()
    (folder / "v3.toml").write_text(text + "#" * (1 << 20) + "\n")
    code, out, err = run(capsys, "policies", "--policies", str(folder))
    _one_error(code, out, err, "v3.toml", "over 1 MB")


def _chain(folder: Path, depth: int) -> Path:
    folder.mkdir()
    base = (SAMPLE_DIR / "policies" / "v1.toml").read_text().replace('version = "v1"', 'version = "p0"')
    (folder / "p0.toml").write_text(base)
    for i in range(1, depth + 1):
        (folder / f"p{i}.toml").write_text(f'version = "p{i}"\ndescription = "d"\nextends = "p{i - 1}"\n')
    return folder / f"p{depth}.toml"


def test_an_extends_chain_of_a_thousand_is_refused_naming_the_limit(capsys, tmp_path: Path) -> None:
    last = _chain(tmp_path / "deep", 1000)
    code, out, err = run(capsys, "replay", "asm-003", "--policy", str(last))
    _one_error(code, out, err, "extends", "more than 64", "depth limit")
    code, out, err = run(capsys, "policies", "--policies", str(last.parent))
    _one_error(code, out, err, "extends", "more than 64", "depth limit")


def test_an_extends_chain_within_the_limit_still_replays(capsys, tmp_path: Path) -> None:
    last = _chain(tmp_path / "chain", 40)
    code, out, err = run(capsys, "replay", "asm-003", "--policy", str(last))
    assert code == 0, err


# --------------------------------------------------------------------------- export files


def _bundle_copy(tmp_path: Path) -> Path:
    export = tmp_path / "export"
    shutil.copytree(SAMPLE_DIR, export, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return export


@pytest.mark.parametrize("make, kind", [(_fifo, "a FIFO"), (_zero, "a character device")])
def test_a_manifest_that_is_a_fifo_or_dev_zero_is_refused(make, kind: str, tmp_path: Path) -> None:
    export = _bundle_copy(tmp_path)
    make(export / "manifest.json")
    code, out, err = _process(tmp_path, "list", "--db", str(export))
    _one_error(code, out, err, "manifest.json", kind)


def test_a_manifest_created_in_year_9999_is_accepted(capsys, tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp")
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["created_at"] = "9999-12-31T23:59:59"
    (export / "manifest.json").write_text(json.dumps(manifest))
    code, _out, err = run(capsys, "ingest", str(export), "--db", str(tmp_path / "s.duckdb"))
    assert code == 0, err
    assert "Traceback" not in err and "internal error" not in err


# --------------------------------------------------------------------------- .eval archives


def _header() -> str:
    return json.dumps({"version": 2, "status": "success",
                       "eval": {"task": "t", "model": "m/x", "created": "2026-01-01T10:00:00Z"}})


def _eval(path: Path, sample: bytes) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.json", _header())
        z.writestr("samples/1_epoch_1.json", sample)
    return path


def _flag_encrypted(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for sig, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        i = data.find(sig)
        while i >= 0:
            data[i + at] |= 1
            i = data.find(sig, i + 4)
    path.write_bytes(bytes(data))


def _declare_size(path: Path, name: str, size: int) -> None:
    """Rewrite the central directory's uncompressed size of ``name`` (a lying archive)."""
    data = bytearray(path.read_bytes())
    i = data.find(b"PK\x01\x02")
    while i >= 0:
        n = int.from_bytes(data[i + 28:i + 30], "little")
        if data[i + 46:i + 46 + n] == name.encode():
            data[i + 24:i + 28] = size.to_bytes(4, "little")
        i = data.find(b"PK\x01\x02", i + 4)
    path.write_bytes(bytes(data))


def _ingest_eval(capsys, tmp_path: Path, path: Path) -> tuple[int, str, str]:
    return run(capsys, "ingest", str(path), "--db", str(tmp_path / "s.duckdb"))


def test_an_encrypted_archive_member_is_refused_by_name(capsys, tmp_path: Path) -> None:
    path = _eval(tmp_path / "enc.eval", b"{}")
    _flag_encrypted(path)
    _one_error(*_ingest_eval(capsys, tmp_path, path), "enc.eval", "header.json", "encrypted")


def test_a_member_that_inflates_too_many_times_is_refused(capsys, tmp_path: Path) -> None:
    # 2 MB of spaces deflate to about 2 KB: a thousand times, where a log is at most 100
    path = _eval(tmp_path / "bomb.eval", b'{"id": 1, "pad": "' + b" " * (2 << 20) + b'"}')
    _one_error(*_ingest_eval(capsys, tmp_path, path), "bomb.eval", "samples/1_epoch_1.json",
               "over 200 times")


def test_a_member_declaring_a_huge_size_is_refused(capsys, tmp_path: Path) -> None:
    path = _eval(tmp_path / "huge.eval", b'{"id": 1}')
    _declare_size(path, "samples/1_epoch_1.json", 0xFFFF_FFF0)
    _one_error(*_ingest_eval(capsys, tmp_path, path), "huge.eval", "samples/1_epoch_1.json")


def test_a_member_larger_than_it_declares_is_not_read_past_its_size(capsys, tmp_path: Path) -> None:
    path = _eval(tmp_path / "lying.eval", b'{"id": 1, "events": [], "pad": "' + b"x" * 5000 + b'"}')
    _declare_size(path, "samples/1_epoch_1.json", 10)
    _one_error(*_ingest_eval(capsys, tmp_path, path), "lying.eval", "samples/1_epoch_1.json")


def test_a_five_thousand_digit_number_is_one_line(capsys, tmp_path: Path) -> None:
    path = _eval(tmp_path / "num.eval", b'{"id": 1, "n": ' + b"9" * 5000 + b"}")
    _one_error(*_ingest_eval(capsys, tmp_path, path), "num.eval", "samples/1_epoch_1.json")


# --------------------------------------------------------------------------- store targets


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return make_export(tmp_path / "exp")


@pytest.mark.parametrize("make, kind", [
    (lambda p: p.mkdir(), "is a folder, not a store file"),
    (_fifo, "is a FIFO (named pipe), not a store file"),
    (_zero, "is a character device, not a store file"),
])
def test_an_ingest_into_a_folder_fifo_or_device_says_what_it_is(
        make, kind: str, tmp_path: Path, export: Path) -> None:
    target = tmp_path / "target.duckdb"
    make(target)
    code, out, err = _process(tmp_path, "ingest", str(export), "--db", str(target))
    _one_error(code, out, err, str(target), kind)
    assert not (tmp_path / "target.duckdb.lock").exists()


def test_a_store_whose_table_has_another_schema_is_refused_and_not_altered(
        capsys, tmp_path: Path, export: Path) -> None:
    db = tmp_path / "s.duckdb"
    assert run(capsys, "ingest", str(export), "--db", str(db))[0] == 0
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE messages")
    con.execute("CREATE TABLE messages (a INTEGER, b VARCHAR)")
    con.close()
    before = _sha(db)
    other = make_export(tmp_path / "other", export_id="exp-other")
    _one_error(*run(capsys, "ingest", str(other), "--db", str(db)),
               str(db), "table messages", "not a contextlens store")
    assert _sha(db) == before
    _one_error(*run(capsys, "list", "--db", str(db)), "table messages")


def test_a_store_column_of_another_type_is_refused(capsys, tmp_path: Path, export: Path) -> None:
    db = tmp_path / "s.duckdb"
    assert run(capsys, "ingest", str(export), "--db", str(db))[0] == 0
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE messages ALTER content_tokens TYPE VARCHAR")
    con.close()
    _one_error(*run(capsys, "list", "--db", str(db)), "table messages", "content_tokens",
               "VARCHAR")


def test_an_ingest_into_a_damaged_store_writes_nothing(capsys, tmp_path: Path, export: Path) -> None:
    db = tmp_path / "s.duckdb"
    assert run(capsys, "ingest", str(export), "--db", str(db))[0] == 0
    data = bytearray(db.read_bytes())
    for at in range(4096, 4096 + 64):  # the database header DuckDB reads on open
        data[at] ^= 0xFF
    db.write_bytes(bytes(data))
    before = _sha(db)
    other = make_export(tmp_path / "other", export_id="exp-other")
    _one_error(*run(capsys, "ingest", str(other), "--db", str(db)), str(db))
    assert _sha(db) == before


def test_a_transcript_past_the_cap_is_one_line_and_nothing_stored(
        capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An adapter parses its file whole, so a transcript is read up to a cap (1 GiB; here
    a few kilobytes, the same rule): past it, one line naming the file, exit 2, no store."""
    import ingest.adapters.files as files

    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(files, "TRANSCRIPT_CAP", 4096)
    session = tmp_path / "long.jsonl"
    line = json.dumps({"type": "user", "uuid": "u1", "sessionId": "s1",
                       "timestamp": "2026-10-20T09:00:00Z",
                       "message": {"role": "user", "content": "x" * 200}})
    session.write_text("\n".join([line] * 40) + "\n")
    db = tmp_path / "store.duckdb"
    code, out, err = run(capsys, "ingest", str(session), "--db", str(db), "--format", "claude-code")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(session) in err and "too large to be read" in err
    assert not db.exists()
