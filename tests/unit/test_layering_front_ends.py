"""The read model is the only door for every front end: the CLI, the palette's commands and
the bundle's report, like the screens, break the import-linter contract (pyproject.toml) when
they import the replay engine or the store themselves; the contract's named exceptions do not
widen to the rest of their module's imports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ingest", "replay", "readmodel", "inspector", "sample_data")
CONTRACT = "Front ends get their answers from the read model"


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages and the contracts, copied where a test may break them."""
    root = tmp_path_factory.mktemp("tree")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.parquet", "blobs"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _broken_contracts(root: Path) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(root))
    exe = Path(sys.executable).with_name("lint-imports")
    # no cache: the same copy is edited and restored between the cases
    out = subprocess.run([str(exe), "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                         timeout=120)
    # "NAME BROKEN", or "NAME BROKEN (4 ignored imports)"
    return [ln for ln in out.stdout.splitlines() if " BROKEN" in ln]


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("inspector/cli/browse.py", "from ingest.store import Store\n"),
        ("inspector/cli/replays.py", "from replay import service\n"),
        ("inspector/commands.py", "from replay.safety import LINT_RULES\n"),
        ("readmodel/bundle_report.py", "from replay import service\n"),
        # data.py may write the store and the sample; reading through replay is still barred
        ("inspector/cli/data.py", "from replay import explain\n"),
    ],
)
def test_a_front_end_reaching_around_the_read_model_breaks_the_contract(
        tree_copy: Path, module: str, line: str) -> None:
    target = tree_copy / module
    original = target.read_text(encoding="utf-8")
    target.write_text(original + line, encoding="utf-8")
    try:
        broken = _broken_contracts(tree_copy)
    finally:
        target.write_text(original, encoding="utf-8")
    assert any(CONTRACT in ln for ln in broken), broken
