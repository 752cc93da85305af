"""Following a growing transcript (ingest/follow.py): only appended bytes are read, a
half-written last line waits, a truncated or replaced file is read again, a subagent file
that appears later is picked up, and the store always equals a one-shot ingest of the same
bytes, with the ids of requests already read unchanged."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ingest.adapters import adapt
from ingest.follow import FollowedFile, Follower
from ingest.store import ingest
from support.sql import sql, store_tables

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
SESSION = REALDATA / "claude-code-entire" / "198393f2-compact-midsession.jsonl"
SPOTTER = REALDATA / "claude-code-spotter"
WITH_SUBAGENTS = "258c7280-ae70-4798-800f-63464d01a85d"
def lines_of(path: Path) -> list[bytes]:
    if not path.is_file():
        pytest.skip(f"the development data is absent ({path.name})")
    return path.read_bytes().splitlines(keepends=True)


def one_shot(path: Path, work: Path) -> Path:
    adapt(path, work / "one-shot-export", None)
    ingest(work / "one-shot-export", work / "one-shot.duckdb")
    return work / "one-shot.duckdb"


def assembly_ids(db: Path) -> list[str]:
    return [r[0] for r in sql(db, "SELECT assembly_id FROM context_assemblies "
                                  "ORDER BY assembled_at, assembly_id")]


def append(path: Path, *chunks: bytes) -> None:
    with open(path, "ab") as f:
        for chunk in chunks:
            f.write(chunk)


def test_only_appended_bytes_are_read_and_a_half_written_line_waits(tmp_path: Path) -> None:
    f = tmp_path / "log.jsonl"
    f.write_bytes(b'{"a": 1}\n{"a": 2}\n')
    followed = FollowedFile(f)
    first = followed.read()
    assert first.changed and not first.reset and first.read_bytes == 18
    assert followed.read().changed is False  # nothing new: nothing read
    append(f, b'{"a": 3}\n{"a": ')
    grown = followed.read()
    assert grown.changed and grown.read_bytes == 15  # the appended bytes, not the file
    assert followed.data == b'{"a": 1}\n{"a": 2}\n{"a": 3}\n'  # the half line waits
    append(f, b'4}')  # whole now, though its newline has not come yet
    assert followed.read().changed
    assert followed.data.endswith(b'{"a": 3}\n{"a": 4}')
    append(f, b"\n")
    followed.read()
    assert followed.data == f.read_bytes()


def test_a_truncated_replaced_or_rewritten_file_is_read_again(tmp_path: Path) -> None:
    f = tmp_path / "log.jsonl"
    f.write_bytes(b'{"a": 1}\n{"a": 2}\n')
    followed = FollowedFile(f)
    followed.read()
    f.write_bytes(b'{"b": 1}\n')  # truncated (shorter than what was read)
    change = followed.read()
    assert change.reset and followed.data == b'{"b": 1}\n'
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(b'{"c": 1}\n{"c": 2}\n')
    os.replace(replacement, f)  # rotated / replaced: another inode
    change = followed.read()
    assert change.reset and followed.data == b'{"c": 1}\n{"c": 2}\n'
    with open(f, "r+b") as h:  # rewritten in place from its start, and longer
        h.write(b'{"d": 1}\n{"d": 2}\n{"d": 3}\n')
    change = followed.read()
    assert change.reset and followed.data == b'{"d": 1}\n{"d": 2}\n{"d": 3}\n'


def test_a_document_is_read_again_whole_when_it_changes(tmp_path: Path) -> None:
    f = tmp_path / "session.json"
    f.write_text(json.dumps({"messages": [1]}, indent=2))
    followed = FollowedFile(f)
    followed.read()
    assert followed.read().changed is False
    f.write_text(json.dumps({"messages": [1, 2]}, indent=2))
    assert followed.read().changed
    assert json.loads(followed.data) == {"messages": [1, 2]}


def test_a_followed_session_equals_a_one_shot_ingest_and_keeps_its_ids(tmp_path: Path) -> None:
    lines = lines_of(SESSION)
    f = tmp_path / SESSION.name
    f.write_bytes(b"".join(lines[:12]))
    follower = Follower(f, tmp_path / "follow")
    first = follower.update()
    assert first is not None and first.generation == 1
    early = assembly_ids(first.store)
    assert early
    assert follower.update() is None  # nothing new
    half = len(lines[12]) // 2
    append(f, lines[12][:half])
    assert follower.update() is None  # a half-written line makes no update
    append(f, lines[12][half:], *lines[13:])
    last = follower.update()
    assert last is not None and last.generation == 2 and not last.reset
    assert last.read_bytes == sum(map(len, lines[12:])) - half  # only what was appended
    later = assembly_ids(last.store)
    assert later[: len(early)] == early and len(later) > len(early)
    assert store_tables(last.store) == store_tables(one_shot(f, tmp_path))


def test_a_subagent_file_that_appears_later_is_picked_up(tmp_path: Path) -> None:
    main = SPOTTER / f"{WITH_SUBAGENTS}.jsonl"
    lines_of(main)
    f = tmp_path / main.name
    shutil.copyfile(main, f)
    follower = Follower(f, tmp_path / "follow")
    before = follower.update()
    assert before is not None
    subagents = tmp_path / WITH_SUBAGENTS / "subagents"
    shutil.copytree(SPOTTER / WITH_SUBAGENTS / "subagents", subagents)
    after = follower.update()  # the main file did not change: the new folder did
    assert after is not None
    assert len(assembly_ids(after.store)) > len(assembly_ids(before.store))
    assert store_tables(after.store) == store_tables(one_shot(f, tmp_path))
