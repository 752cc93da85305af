"""Issue 27: a Claude Code session whose Bash commands, tool results and user turns hold every
secret shape of ``support.secrets.SHAPES`` (a call's keyword argument, a value holding "key",
a space before the colon, ``redis://:pw@``, ``curl -u``, ``mysql -p``, ``sshpass -p``, XML,
``?key=``, a token after ``https://``): no output of ``list``, ``show``, ``why`` or ``diff``,
text or ``--json``, shows one of them unless ``--reveal``; with it they are all there (so the
test would see a leak)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run
from support.secrets import SHAPE_SECRETS, write_claude_transcript

# a cut label could show the start of an unmasked secret: look for its first characters
PREFIX = 6


def _shown(text: str) -> list[str]:
    return [s for s in SHAPE_SECRETS if s[:PREFIX] in text]


@pytest.fixture(scope="module")
def shapes_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ingest.adapters import adapt
    from ingest.store import ingest

    root = tmp_path_factory.mktemp("shapes")
    db = root / "shapes.duckdb"
    ingest(adapt(write_claude_transcript(root / "shapes.jsonl"), root / "export").export_dir, db)
    return db


def _last_request(capsys: pytest.CaptureFixture[str], db: Path) -> str:
    code, out, err = run(capsys, "list", "--db", str(db), "--json")
    assert code == 0, err
    # each request sends the whole history: the last one holds every shape
    return max(json.loads(out), key=lambda row: row["assembled_at"])["assembly_id"]


def _artifacts(capsys: pytest.CaptureFixture[str], db: Path, aid: str) -> list[str]:
    code, out, err = run(capsys, "show", aid, "--db", str(db), "--json", "--reveal")
    assert code == 0, err
    data = json.loads(out)
    # a tool result's provenance names its tool call and the user turn before it: ``why``
    # of each shows all three places a shape was written
    return [r["record_id"] for r in data["included"] + data["omitted"]
            if r["record_kind"] == "tool_artifact"]


def _outputs(capsys: pytest.CaptureFixture[str], db: Path, *extra: str) -> str:
    aid = _last_request(capsys, db)
    commands = [
        ["list"],
        ["show", aid],
        ["diff", aid, "--policy", "claude-code:compact_at=200"],
        *(["why", aid, rid] for rid in _artifacts(capsys, db, aid)),
    ]
    outputs = []
    for argv in commands:
        code, out, err = run(capsys, *argv, "--db", str(db), *extra)
        assert code == 0, (argv, err)
        outputs.append(out + err)
    assert len(commands) == 3 + len(SHAPE_SECRETS)
    return "\n".join(outputs)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_no_output_shows_a_secret_of_any_shape(capsys: pytest.CaptureFixture[str],
                                               shapes_db: Path, as_json: bool) -> None:
    everything = _outputs(capsys, shapes_db, *(["--json"] if as_json else []))
    assert _shown(everything) == []
    assert "[masked secret" in everything


def test_reveal_shows_every_shape(capsys: pytest.CaptureFixture[str], shapes_db: Path) -> None:
    everything = _outputs(capsys, shapes_db, "--json", "--reveal")
    assert [s for s in SHAPE_SECRETS if s in everything] == list(SHAPE_SECRETS)
