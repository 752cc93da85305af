"""A write that finds no room, on every write path of the command line: one line naming
what was being written, exit 2 (docs/cli.md, exit codes), and nothing left behind.

No root is needed to fill a disk: the command runs under a file size limit
(``RLIMIT_FSIZE``), so every write past it fails as a full disk's does, in Python, Arrow and
DuckDB alike (EFBIG, "File too large", where a full disk says ENOSPC, "No space left on
device"; Python ignores SIGXFSZ, so the write fails instead of the process)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

TOO_LARGE = os.strerror(27)  # EFBIG


def _run_with_file_limit(limit: int, *argv: str,
                         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "inspector.cli", *argv], preexec_fn=limited,
                          capture_output=True, text=True, env=env, timeout=300)


def _one_line(proc: subprocess.CompletedProcess[str], named: Path) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"contextlens: error: cannot write {named}: {TOO_LARGE}"]


def test_compare_out_on_a_full_disk(sample_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.parquet"
    proc = _run_with_file_limit(2048, "compare", "recorded", "v4", "--db", str(sample_db),
                                "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"contextlens: error: {out}: cannot write: {TOO_LARGE}"]
    assert list(tmp_path.iterdir()) == []


def test_sample_out_on_a_full_disk(tmp_path: Path) -> None:
    out = tmp_path / "export"
    _one_line(_run_with_file_limit(4096, "sample", "--out", str(out)), out)
    assert list(tmp_path.iterdir()) == []


def test_ingest_on_a_full_disk(sample_export: Path, tmp_path: Path) -> None:
    db = tmp_path / "new.duckdb"
    _one_line(_run_with_file_limit(65536, "ingest", str(sample_export), "--db", str(db)), db)
    assert list(tmp_path.iterdir()) == []  # no store, scratch database, WAL or lock


def test_adapting_a_transcript_on_a_full_disk_leaves_no_writing_folder(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "CONTEXTLENS_CACHE": str(cache)}
    transcript = Path(__file__).parents[1] / "adapter_fixtures" / "compaction.jsonl"
    proc = _run_with_file_limit(2048, "ingest", str(transcript), "--db",
                                str(tmp_path / "t.duckdb"), env=env)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith(f"contextlens: error: cannot write {cache / 'transcripts'}/")
    assert proc.stderr.rstrip().endswith(TOO_LARGE)
    assert [p for p in cache.rglob("*") if p.is_file() or p.name.endswith(".writing")] == []
    assert not (tmp_path / "t.duckdb").exists()


def test_bundle_on_a_full_disk(sample_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    _one_line(_run_with_file_limit(4096, "bundle", "asm-001", "--db", str(sample_db),
                                   "--out", str(out)), out)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EDQUOT"])
def test_a_full_disk_is_told_by_its_reason(errno_name: str) -> None:
    import errno

    from ingest.interrupts import WriteFailed, disk_full

    err = OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)))
    assert disk_full(err)
    assert str(WriteFailed(Path("/x/rows.parquet"), err)) == (
        f"cannot write /x/rows.parquet: {os.strerror(getattr(errno, errno_name))}")
