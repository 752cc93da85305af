"""Secret-shaped identifiers (an assembly, conversation and record id, a tag, a model, a
tool and a skill name, the export id) are masked in every command's output, text and
--json, in the compare --out file and in every file of a bundle, unless --reveal; and a
log-supplied id or tag holding a newline never starts an output line of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.cli import run
from support.planted_ids import (
    ASM, CONV, FORGED, MODEL, NL_ASM, NL_REC, REC, SECRETS, SKILL, TAG, TOOL, leaked,
    make_planted_export,
)

from ingest.store import ingest


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("planted")
    return make_planted_export(root / "export")


@pytest.fixture(scope="module")
def db(planted: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("planted-db") / "store.duckdb"
    ingest(planted, path)
    return path


def _commands(db: Path, tmp: Path) -> list[list[str]]:
    d = ["--db", str(db)]
    return [
        ["list", *d], ["show", ASM, *d], ["why", ASM, REC, *d],
        ["why", ASM, REC, "--policy", "v5", *d], ["replay", ASM, "--policy", "v5", *d],
        ["diff", ASM, "--policy", "v5", *d], ["verify", *d], ["bisect", ASM, "m3", *d],
        ["lint", *d], ["compare", "v4", "v5", "--workers", "1", *d],
        ["show", NL_ASM, *d], ["why", NL_ASM, NL_REC, *d], ["replay", NL_ASM, "--policy", "v4", *d],
        ["diff", NL_ASM, "--policy", "v4", *d],
    ]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_secret_shaped_ids_masked_in_every_command(capsys: pytest.CaptureFixture[str], db: Path,
                                                   planted: Path, tmp_path: Path,
                                                   as_json: bool) -> None:
    fmt = ["--json"] if as_json else []
    outputs = {}
    for argv in _commands(db, tmp_path):
        code, out, err = run(capsys, *argv, *fmt)
        assert code in (0, 1), (argv, err)
        outputs[" ".join(argv[:2])] = out + err
    code, out, err = run(capsys, "ingest", str(planted), "--db", str(tmp_path / "again.duckdb"), *fmt)
    assert code == 0, err
    outputs["ingest"] = out + err
    found = {name: leaked(text) for name, text in outputs.items() if leaked(text)}
    assert found == {}
    assert "[masked secret" in outputs["show " + ASM]


def test_show_json_masks_the_scenario_as_its_tag(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = run(capsys, "show", ASM, "--db", str(db), "--json")
    assert code == 0, err
    assembly = json.loads(out)["assembly"]
    assert TAG not in (assembly["scenario"] or "") and "[masked secret" in assembly["scenario"]
    assert assembly["model"] == "[masked secret (api key)]"


def test_reveal_shows_the_ids(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = run(capsys, "show", ASM, "--db", str(db), "--json", "--reveal")
    assert code == 0, err
    assert {ASM, CONV, REC, TAG, MODEL} <= {s for s in SECRETS if s in out}


def test_compare_out_file_masks_ids(capsys: pytest.CaptureFixture[str], db: Path,
                                    tmp_path: Path) -> None:
    out_file = tmp_path / "rows.parquet"
    code, _out, err = run(capsys, "compare", "v4", "v5", "--workers", "1", "--db", str(db),
                          "--out", str(out_file))
    assert code == 0, err
    rows = json.dumps(pq.read_table(out_file).to_pylist(), default=str)
    assert leaked(rows) == [] and "[masked secret" in rows


def test_bundle_files_hold_no_secret_shaped_name(capsys: pytest.CaptureFixture[str], db: Path,
                                                 tmp_path: Path) -> None:
    out_dir = tmp_path / "bundle"
    code, out, err = run(capsys, "bundle", ASM, "--db", str(db), "--out", str(out_dir))
    assert code == 0, err
    assert leaked(out + err) == []
    texts = {}
    for path in sorted(p for p in out_dir.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            texts[path.name] = json.dumps(pq.read_table(path).to_pylist(), default=str)
        else:
            texts[path.name] = path.read_text(errors="replace")
    # names (model, tool, skills, tags) are masked; the ids rows join on are kept so the
    # bundle replays, and named in the report only masked
    names = (MODEL, TOOL, SKILL, TAG)
    found = {name: [s for s in names if s in text] for name, text in texts.items()}
    assert {k: v for k, v in found.items() if v} == {}
    assert leaked(texts["report.md"]) == []


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_newline_in_an_id_never_starts_an_output_line(
        capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path, as_json: bool) -> None:
    fmt = ["--json"] if as_json else []
    for argv in _commands(db, tmp_path):
        code, out, err = run(capsys, *argv, "--reveal", *fmt) if argv[0] not in (
            "verify", "bisect") else run(capsys, *argv, *fmt)
        assert code in (0, 1), (argv, err)
        lines = (out + err).splitlines()
        assert [line for line in lines if line.lstrip(' "').startswith(FORGED)] == [], argv
