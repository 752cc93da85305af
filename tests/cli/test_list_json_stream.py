"""``list --json`` as a program reads it (issue 28, point 3): piped or to a file, one compact
JSON array, one request a line, with the same keys, values and order as the indented form a
terminal gets; a secret-shaped id is masked in it while a random-looking one (an id, not a
key) is shown, and a free-text secret of no known shape is still masked where text is shown."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
from support.cli import run
from support.planted_ids import leaked, make_planted_export
from support.stores import make_export

from ingest.store import ingest

# random-looking: the free-text detector masks it by entropy, the id rule shows it
RANDOM = "Zx8Qp2Lm7Rt4Vw9Ks3Nb6Hy1Jc5Fd0Wq"


def _lines(out: str) -> list[str]:
    return out.rstrip("\n").split("\n")


def test_piped_list_json_is_one_compact_array_one_request_a_line(
        capsys: pytest.CaptureFixture[str], sample_db: Path) -> None:
    code, out, err = run(capsys, "list", "--db", str(sample_db), "--json")
    assert code == 0, err
    rows = json.loads(out)
    lines = _lines(out)
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == len(rows) + 2
    for line, row in zip(lines[1:-1], rows):
        assert json.loads(line.removesuffix(",")) == row
        assert line.startswith('{"assembly_id":"') and ", " not in line.split('"tags"')[0]


def test_the_terminal_form_is_indented_with_the_same_content(
        capsys: pytest.CaptureFixture[str], sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import inspector.console as console

    code, piped, err = run(capsys, "list", "--db", str(sample_db), "--json", "--sort", "model")
    assert code == 0, err
    monkeypatch.setattr(console, "_to_terminal", lambda: True)
    code, shown, err = run(capsys, "list", "--db", str(sample_db), "--json", "--sort", "model")
    assert code == 0, err
    assert shown.startswith('[\n  {\n    "assembly_id": ')
    assert json.loads(shown) == json.loads(piped)
    # key order too
    assert [list(r) for r in json.loads(shown)] == [list(r) for r in json.loads(piped)]


def test_an_empty_list_is_an_empty_array(capsys: pytest.CaptureFixture[str], sample_db: Path) -> None:
    code, out, err = run(capsys, "list", "--db", str(sample_db), "--json", "--filter", "policy:nope")
    assert code == 0, err
    assert out == "[]\n"


def test_times_are_written_as_isoformat_writes_them() -> None:
    from inspector.cli.browse import _iso_times

    rng = random.Random(5)
    micros = [rng.randint(-2 * 10**16, 2 * 10**17) for _ in range(2000)]
    micros += [m - m % 1_000_000 for m in micros[:200]] + [0, 1, -1, 999_999, 1_000_000]
    values = [None] + micros
    column = pa.chunked_array([pa.array(values, pa.timestamp("us", tz="UTC"))])
    expected = [None if v is None else (dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
                                        + dt.timedelta(microseconds=v)).isoformat() for v in values]
    assert _iso_times(column).to_pylist() == expected
    ms = pa.chunked_array([pa.array([1_500, 2_000, None], pa.timestamp("ms", tz="UTC"))])
    assert _iso_times(ms).to_pylist() == ["1970-01-01T00:00:01.500000+00:00",
                                          "1970-01-01T00:00:02+00:00", None]
    # what it cannot write exactly is left to the row conversion
    early = pa.chunked_array([pa.array([-62_000_000_000_000_000], pa.timestamp("us", tz="UTC"))])
    assert _iso_times(early) is None
    assert _iso_times(pa.chunked_array([pa.array([0], pa.timestamp("us", tz="Europe/Paris"))])) is None


@pytest.fixture(scope="module")
def planted_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("planted")
    db = root / "store.duckdb"
    ingest(make_planted_export(root / "export"), db)
    return db


@pytest.fixture(scope="module")
def random_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test export whose requests are tagged with a random-looking value, which its
    first message's content holds too."""
    root = tmp_path_factory.mktemp("random")
    db = root / "store.duckdb"

    def plant(rows: dict) -> None:
        for a in rows["context_assemblies"]:
            a["tags"] = [f"run:{RANDOM}"]
        rows["messages"][0]["content"] = f"the deploy key is {RANDOM} (do not share)"

    ingest(make_export(root / "export", edit=plant), db)
    return db


def test_a_secret_shaped_id_is_masked_in_list_json(capsys: pytest.CaptureFixture[str],
                                                   planted_db: Path) -> None:
    code, out, err = run(capsys, "list", "--db", str(planted_db), "--json")
    assert code == 0, err
    assert leaked(out) == [] and "[masked secret" in out


def test_a_random_id_is_shown_and_the_same_value_in_free_text_masked(
        capsys: pytest.CaptureFixture[str], random_db: Path) -> None:
    code, out, err = run(capsys, "list", "--db", str(random_db), "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert {t for row in rows for t in row["tags"]} == {f"run:{RANDOM}"}
    code, out, err = run(capsys, "show", rows[0]["assembly_id"], "--db", str(random_db), "--json")
    assert code == 0, err
    assert "the deploy key is [masked secret" in out
    assert RANDOM not in out.replace(f"run:{RANDOM}", "")
