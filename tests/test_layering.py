"""The headless core stays headless: ingest/ and replay/ never load Textual or rich, and
the inspector never talks to DuckDB directly."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules(package: str) -> list[str]:
    return [package] + [
        f"{package}.{m.name}" for m in pkgutil.walk_packages([str(ROOT / package)])
    ]


def test_ingest_and_replay_import_neither_textual_nor_rich() -> None:
    modules = _modules("ingest") + _modules("replay")
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'inspector', 'textual_fastdatatable'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"headless packages loaded: {out.stdout.strip()}"


def test_inspector_never_imports_duckdb() -> None:
    offenders = []
    for path in (ROOT / "inspector").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "duckdb" for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
