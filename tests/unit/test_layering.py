"""The layers are import-linter contracts (pyproject.toml): they hold on the real tree, and
they bite when someone adds a forbidden import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ingest", "replay", "readmodel", "inspector", "sample_data")


def _lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(exe)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_contracts_hold() -> None:
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 kept, 0 broken" in out.stdout


@pytest.fixture()
def tree_copy(tmp_path: Path) -> Path:
    """The packages and the contracts, copied where a test may break them."""
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.parquet", "blobs"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("ingest/_bad.py", "import rich.text\n", "is headless"),
        ("replay/_bad.py", "import inspector.app\n", "Layers"),
        ("ingest/adapters/_bad.py", "from readmodel import ReadModel\n", "Layers"),
        ("inspector/widgets/_bad.py", "import duckdb\n", "never talks to DuckDB"),
        ("inspector/screens/_bad.py", "from replay import service\n", "from the read model"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(tree_copy: Path, module: str, line: str,
                                              contract: str) -> None:
    (tree_copy / module).write_text(line, encoding="utf-8")
    out = _lint_imports(tree_copy, pythonpath=tree_copy)
    assert out.returncode != 0
    # "NAME BROKEN", or "NAME BROKEN (4 ignored imports)"
    broken = [ln for ln in out.stdout.splitlines() if " BROKEN" in ln]
    assert any(contract in ln for ln in broken), out.stdout
