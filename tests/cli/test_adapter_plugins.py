"""Adapter plugins: the registry behind detect_format / adapt, the built-ins registered as
entry points, broken plugins as one clear error, and the third-party example of
docs/transcripts.md really installed with pip and used through the command line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from support.cli import run
from ingest.adapters import (
    ENTRY_POINT_GROUP,
    FORMATS,
    Adapter,
    adapt,
    available_adapters,
    detect_format,
    format_names,
    get_adapter,
)
from ingest.adapters.registry import BUILTIN
from ingest.errors import ContextlensError
from ingest.store import Store

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path(__file__).parents[1] / "adapter_plugin_example"
FIX = Path(__file__).parents[1] / "adapter_fixtures"
MINI = {"mini_chat": [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "6"},
]}


def test_builtins_are_registered_as_entry_points_of_the_installed_package() -> None:
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert {k: eps.get(k) for k in BUILTIN} == BUILTIN
    adapters = available_adapters()
    assert list(adapters) == ["claude-code", "openai-chat", "anthropic-messages", "gemini-cli", "codex",
                     "inspect-ai", "letta", "esaa", "otel"]
    for name, adapter in adapters.items():
        assert isinstance(adapter, Adapter)
        assert adapter.name == name and adapter.description and "\n" not in adapter.description


def test_format_names_lists_builtins_then_export() -> None:
    assert format_names() == ["claude-code", "openai-chat", "anthropic-messages", "gemini-cli", "codex",
                     "inspect-ai", "letta", "esaa", "otel", "export"]
    assert FORMATS == tuple(format_names())


# --------------------------------------------------------------------------- fake plugins


class Shouty:
    """A plugin for files whose first line is SHOUT (not JSON at all)."""

    name = "shout"
    description = "a file that starts with SHOUT"

    def sniff(self, sample):
        return None if sample.head.startswith(b"SHOUT") else "does not start with SHOUT"

    def adapt(self, path, out_dir, estimator):
        raise RuntimeError("the plugin's own bug")


class NoAdapt:
    name = "no-adapt"
    description = "lacks adapt"

    def sniff(self, sample):
        return "never"


def _with_plugins(monkeypatch: pytest.MonkeyPatch, **plugins: str) -> None:
    """Entry points of the group as if these packages were installed (name -> value)."""
    import importlib.metadata as md

    real = md.entry_points
    fakes = [EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in plugins.items()]

    def entry_points(**kw):
        found = real(**kw)
        return [*found, *fakes] if kw.get("group") == ENTRY_POINT_GROUP else found

    monkeypatch.setattr(md, "entry_points", entry_points)


def test_a_plugin_is_listed_detected_and_its_failure_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _with_plugins(monkeypatch, shout=f"{__name__}:Shouty")
    assert format_names()[-2:] == ["export", "shout"]
    path = tmp_path / "loud.txt"
    path.write_text("SHOUT hello\n")
    assert detect_format(path) == "shout"
    with pytest.raises(ContextlensError, match=r"adapter plugin 'shout' failed on .*loud.txt: RuntimeError: the plugin's own bug"):
        adapt(path, tmp_path / "out")
    # the built-ins still come first: a Claude Code session is never asked of the plugin
    assert detect_format(FIX / "compaction.jsonl") == "claude-code"
    # and a file no one reads names every format, the plugin's reason included
    with pytest.raises(ContextlensError, match="shout: does not start with SHOUT"):
        detect_format(FIX / "unknown.json")


@pytest.mark.parametrize(
    "value,message",
    [
        ("no_such_contextlens_plugin_module:Thing",
         "adapter plugin 'broken' (no_such_contextlens_plugin_module:Thing) failed to load: ModuleNotFoundError"),
        (f"{__name__}:NoAdapt", "adapter plugin 'broken' (" + __name__ + ":NoAdapt) is not an adapter: it lacks adapt"),
        (f"{__name__}:Shouty", "calls itself 'shout'"),
    ],
)
def test_a_broken_plugin_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path, value: str, message: str
) -> None:
    _with_plugins(monkeypatch, broken=value)
    assert "broken" in format_names()  # listed from metadata alone: nothing imported yet
    with pytest.raises(ContextlensError) as err:
        get_adapter("broken")
    assert message in str(err.value)
    # detection of a built-in format does not need the broken plugin
    assert detect_format(FIX / "compaction.jsonl") == "claude-code"
    # a file only a plugin could read: the command line says it in one line, exit 2
    code, out, err_text = run(capsys, "ingest", str(FIX / "unknown.json"), "--db", str(tmp_path / "s.duckdb"))
    assert code == 2 and out == ""
    assert err_text.count("\n") == 1 and message in err_text and "Traceback" not in err_text
    assert not (tmp_path / "s.duckdb").exists()


def test_a_plugin_may_not_take_a_builtin_name(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_plugins(monkeypatch, **{"openai-chat": f"{__name__}:Shouty", "shout": f"{__name__}:Shouty"})
    with pytest.raises(ContextlensError, match="'openai-chat' .* takes the name of a built-in format"):
        available_adapters()
    assert format_names() == ["claude-code", "openai-chat", "anthropic-messages", "gemini-cli", "codex",
                     "inspect-ai", "letta", "esaa", "otel", "export", "shout"]
    assert type(get_adapter("openai-chat")).__name__ == "OpenAIChatAdapter"


def test_unknown_format_lists_every_known_one(tmp_path: Path) -> None:
    with pytest.raises(ContextlensError, match=r"unknown format 'nope' \(known: claude-code, openai-chat, anthropic-messages, gemini-cli, codex, inspect-ai, letta, esaa, otel, export\)"):
        adapt(FIX / "compaction.jsonl", tmp_path / "x", fmt="nope")


# --------------------------------------------------------------------------- the documented example


def _doc_block(after: str, lang: str) -> str:
    """The first ``lang`` code block after the line ``after`` of docs/transcripts.md."""
    text = (ROOT / "docs" / "transcripts.md").read_text(encoding="utf-8")
    start = text.index(after)
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert m, f"no {lang} block after {after!r}"
    return m.group(1)


def test_the_documented_example_is_the_tested_package() -> None:
    assert _doc_block("`contextlens_minichat.py`", "python") == (
        EXAMPLE / "contextlens_minichat.py"
    ).read_text(encoding="utf-8")
    assert _doc_block("`pyproject.toml` of the plugin", "toml") == (
        EXAMPLE / "pyproject.toml"
    ).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin installed by pip into a folder of its own (offline, no build
    isolation: the test environment's setuptools builds it)."""
    root = tmp_path_factory.mktemp("plugin")
    src = root / "src"
    shutil.copytree(EXAMPLE, src)  # the build writes beside the sources: not in the repo
    target = root / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (target / "contextlens_minichat.py").is_file()
    return target


def _contextlens(site: Path | None, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CONTEXTLENS_CACHE=str(tmp_path / "cache"))
    env.pop("CONTEXTLENS_DEBUG", None)
    env.pop("PYTHONPATH", None)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=env, timeout=120,
        cwd=tmp_path,
    )


def test_the_installed_example_plugin_detects_adapts_and_ingests(
    installed_example: Path, tmp_path: Path
) -> None:
    talk = tmp_path / "talk.json"
    talk.write_text(json.dumps(MINI), encoding="utf-8")
    db = tmp_path / "store.duckdb"

    # without the plugin, nobody reads the file
    proc = _contextlens(None, tmp_path, "-m", "inspector.cli", "ingest", str(talk), "--db", str(db))
    assert proc.returncode == 2 and "not a known transcript format" in proc.stderr
    assert "mini-chat" not in proc.stderr

    # with it installed: listed, detected, forced by name, ingested by the command line
    script = (
        "import json, sys\n"
        "from ingest.adapters import adapt, detect_format, format_names\n"
        "res = adapt(sys.argv[1], sys.argv[2], fmt='mini-chat')\n"
        "print(json.dumps([format_names(), detect_format(sys.argv[1]), res.format, res.stats]))\n"
    )
    proc = _contextlens(installed_example, tmp_path, "-c", script, str(talk), str(tmp_path / "exp"))
    assert proc.returncode == 0, proc.stderr
    names, detected, fmt, stats = json.loads(proc.stdout)
    assert names == ["claude-code", "openai-chat", "anthropic-messages", "gemini-cli", "codex",
                     "inspect-ai", "letta", "esaa", "otel", "export", "mini-chat"]
    assert detected == fmt == "mini-chat"
    assert stats["rows.messages"] == 4 and stats["requests"] == 2

    proc = _contextlens(installed_example, tmp_path, "-m", "inspector.cli", "ingest", str(talk), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    with Store.open(db) as s:
        rows = s.list_assemblies(sort="assembled_at").to_pylist()
    assert [r["included_count"] for r in rows] == [1, 3]  # each turn sees every turn before it
    assert all("source:mini-chat" in r["tags"] for r in rows)
