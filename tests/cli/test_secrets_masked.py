"""Secrets in a transcript's tool arguments and results never reach list, show or why, in
text or JSON, unless --reveal; then they do (so the test would see a leak)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run
from support.secrets import SECRETS, leaked



def _assemblies(capsys: pytest.CaptureFixture[str], db: Path) -> list[str]:
    import json

    code, out, _ = run(capsys, "list", "--db", str(db), "--json")
    assert code == 0
    return [row["assembly_id"] for row in json.loads(out)]


def _records(capsys: pytest.CaptureFixture[str], db: Path, aid: str) -> list[str]:
    import json

    code, out, _ = run(capsys, "show", aid, "--db", str(db), "--json", "--reveal")
    assert code == 0
    data = json.loads(out)
    return [r["record_id"] for r in data["included"] + data["omitted"]]


@pytest.mark.parametrize("as_json", [False, True])
def test_list_show_and_why_show_no_secret(capsys: pytest.CaptureFixture[str], secret_db: Path,
                                          as_json: bool) -> None:
    fmt = ["--json"] if as_json else []
    outputs = []
    code, out, err = run(capsys, "list", "--db", str(secret_db), *fmt)
    outputs.append(out + err)
    for aid in _assemblies(capsys, secret_db):
        code, out, err = run(capsys, "show", aid, "--db", str(secret_db), *fmt)
        assert code == 0, err
        outputs.append(out + err)
        for rid in _records(capsys, secret_db, aid):
            code, out, err = run(capsys, "why", aid, rid, "--db", str(secret_db), *fmt)
            assert code == 0, err
            outputs.append(out + err)
    everything = "\n".join(outputs)
    assert leaked(everything) == []
    assert "[masked secret" in everything


def test_reveal_shows_them(capsys: pytest.CaptureFixture[str], secret_db: Path) -> None:
    shown = []
    for aid in _assemblies(capsys, secret_db):
        for rid in _records(capsys, secret_db, aid):
            code, out, _ = run(capsys, "why", aid, rid, "--db", str(secret_db), "--json",
                               "--reveal")
            shown.append(out)
    text = "\n".join(shown)
    assert [s for s in SECRETS if s in text] == list(SECRETS)


def test_an_error_names_the_file_as_typed_even_when_its_name_looks_random(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A path is the user's own words, not log content: masking it would leave the error
    naming no file (inspect_ai names its logs like this)."""
    name = "2025-02-11T15-18-04-05-00_popularity_mj7khqpMM4GBCfVQozKgzB.json"
    bad = tmp_path / name
    bad.write_text('{"nothing": "known", "token": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}')
    code, out, err = run(capsys, "list", "--db", str(bad))
    assert code == 2
    assert str(bad) in err
