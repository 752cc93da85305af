"""The tamper corpus: one assembly's recording is changed in a copy of the sample export,
kept consistent as a file (manifest rows and sha256 fixed, so it ingests), and
``contextlens verify --json`` must not call it faithful, must give the right verdict and
name the changed record.

A careful forger also rewrites the stored ``selection_hash`` and totals (assembled_tokens,
the counts) to match the forged rows (``forge_hash=True``): verify must still catch it by
replaying (drifted). A careless one leaves the stored hash and totals alone: the recording
contradicts itself (inconsistent). A stored total changed alone (the rows untouched) is
inconsistent too, and the verdict names the field, stored against what the rows give.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pytest
from support.cli import run
from support.stores import read_table, rewrite_table

from ingest.contract import selection_hash
from replay.verify import stored_totals

TARGET = "asm-027"  # faithful in the sample: 21 records of every kind, google_derived artifacts omitted
DRIFT_STORY = ["asm-013", "asm-014", "asm-015"]
Rows = list[dict[str, Any]]


def _record(rows: Rows, record_id: str) -> dict[str, Any]:
    (row,) = [r for r in rows if r["assembly_id"] == TARGET and r["record_id"] == record_id]
    return row


def flip_decision(rows: Rows) -> None:
    r = _record(rows, "msg-041")
    r.update(decision="omitted", rendering=None, position=None, reason_code="outside_window")


def change_reason(rows: Rows) -> None:
    _record(rows, "art-016")["reason_code"] = "provider_restricted"


def swap_positions(rows: Rows) -> None:
    a, b = _record(rows, "msg-033"), _record(rows, "msg-040")
    a["position"], b["position"] = b["position"], a["position"]


def change_rendering(rows: Rows) -> None:
    _record(rows, "mem-014")["rendering"] = "compact_memory"


def change_tokens(rows: Rows) -> None:
    _record(rows, "msg-035")["tokens"] += 1


def add_restricted_raw(rows: Rows) -> None:
    # a raw google_derived artifact recorded as sent: what the privacy policy exists to stop
    rows.append({"assembly_id": TARGET, "record_kind": "tool_artifact", "record_id": "art-021",
                 "decision": "included", "rendering": "rehydrated_raw", "position": 13,
                 "policy_family": "rehydration", "reason_code": "rehydrated_exact",
                 "detail": "raw artifact", "tokens": 400})


def delete_record(rows: Rows) -> None:
    rows.remove(_record(rows, "msg-041"))


def no_change(rows: Rows) -> None:
    pass


@dataclass(frozen=True)
class Case:
    name: str
    edit: Callable[[Rows], None]
    verdict: str
    records: dict[str, set[str]]  # changed record id -> the fields named for it
    forge_hash: bool = True  # rewrite the stored selection_hash to match the forged rows
    stored_hash: str | None = None  # overwrite the stored hash with this


CASES = [
    Case("decision flipped", flip_decision, "drifted",
         {"msg-041": {"decision", "reason_code", "rendering", "position"}}),
    Case("decision flipped, stored hash left", flip_decision, "inconsistent",
         {"msg-041": {"decision", "reason_code", "rendering", "position"}}, forge_hash=False),
    Case("reason changed", change_reason, "drifted", {"art-016": {"reason_code"}}),
    Case("positions swapped", swap_positions, "drifted",
         {"msg-033": {"position"}, "msg-040": {"position"}}),
    Case("rendering changed", change_rendering, "drifted", {"mem-014": {"rendering"}}),
    Case("tokens changed", change_tokens, "drifted", {"msg-035": {"tokens"}}),
    Case("stored selection_hash changed", no_change, "inconsistent", {}, stored_hash="0" * 64),
    Case("extra raw google_derived artifact included", add_restricted_raw, "drifted",
         {"art-021": {"record"}}),
    Case("record deleted", delete_record, "drifted", {"msg-041": {"record"}}),
]


def tamper(sample_export: Path, folder: Path, case: Case) -> Path:
    export = folder / "export"
    shutil.copytree(sample_export, export)
    records = read_table(export, "assembly_records")
    rows = records.to_pylist()
    case.edit(rows)
    rewrite_table(export, "assembly_records", pa.Table.from_pylist(rows, schema=records.schema))
    stored = case.stored_hash
    mine = [r for r in rows if r["assembly_id"] == TARGET]
    if stored is None and case.forge_hash:
        stored = selection_hash(mine)
    if stored is not None:
        forged = {"selection_hash": stored}
        if case.forge_hash:
            forged.update(stored_totals(mine, stored_request(export)["tags"]))
        set_request(export, forged)
    return export


def stored_request(export: Path) -> dict[str, Any]:
    """The TARGET request's context_assemblies row as the export stores it."""
    (row,) = [r for r in read_table(export, "context_assemblies").to_pylist()
              if r["assembly_id"] == TARGET]
    return row


def set_request(export: Path, values: dict[str, Any]) -> None:
    """Overwrite columns of the TARGET request in context_assemblies (manifest fixed)."""
    requests = read_table(export, "context_assemblies")
    ids = requests.column("assembly_id").to_pylist()
    for column, value in values.items():
        old = requests.column(column).to_pylist()
        idx = requests.schema.get_field_index(column)
        new = [value if aid == TARGET else v for aid, v in zip(ids, old)]
        requests = requests.set_column(idx, requests.schema.field(idx),
                                       pa.array(new, requests.schema.field(idx).type))
    rewrite_table(export, "context_assemblies", requests)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_tampered_recording_is_caught(capsys, tmp_path: Path, sample_export: Path, case: Case) -> None:
    export = tamper(sample_export, tmp_path, case)
    db = tmp_path / "store.duckdb"
    code, out, err = run(capsys, "ingest", str(export), "--db", str(db))
    assert code == 0, err
    code, out, err = run(capsys, "verify", "--db", str(db), "--json")
    assert code == 1
    result = json.loads(out)
    by_id = {r["assembly_id"]: r for r in result["results"]}
    assert sorted(by_id) == sorted(DRIFT_STORY + [TARGET]), "only the tampered one joins the drift story"
    assert result["faithful"] == result["checked"] - 4
    assert result[case.verdict] == (4 if case.verdict == "drifted" else 1)
    got = by_id[TARGET]
    assert got["verdict"] == case.verdict
    named = {r["record_id"]: {f["field"] for f in r["fields"]} for r in got["records"]}
    assert named == case.records
    if case.verdict == "inconsistent":
        assert got["recorded_hash"] != got["recomputed_hash"]
    else:
        # the stored hash agrees with the forged rows, and may even equal the replay's
        # (reason and tokens are not in it): only the record by record comparison sees it
        assert got["recorded_hash"] == got["recomputed_hash"] and got["replay_hash"]
    for record in got["records"]:
        for f in record["fields"]:
            assert f["recorded"] != f["replayed"]


def test_the_forged_decision_shows_both_values(capsys, tmp_path: Path, sample_export: Path) -> None:
    export = tamper(sample_export, tmp_path, CASES[0])
    db = tmp_path / "store.duckdb"
    assert run(capsys, "ingest", str(export), "--db", str(db))[0] == 0
    code, out, err = run(capsys, "verify", "--db", str(db), "--json")
    (got,) = [r for r in json.loads(out)["results"] if r["assembly_id"] == TARGET]
    (record,) = got["records"]
    assert record["record_kind"] == "message"
    assert {"field": "decision", "recorded": "omitted", "replayed": "included"} in record["fields"]
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 1
    assert f"DRIFTED {TARGET} (policy v4, assembler ref-1.0.0): 1 record differs" in out
    assert "  message msg-041: decision omitted → included;" in out


# A stored total changed alone: the rows (and so the selection hash and the replay) agree,
# but show and list would display the stored figure.
TOTALS = [("assembled_tokens", 1000), ("selected_memory_count", 1), ("raw_artifact_count", -1)]


@pytest.mark.parametrize(("field", "delta"), TOTALS, ids=[f for f, _ in TOTALS])
def test_a_tampered_stored_total_is_inconsistent_and_named(capsys, tmp_path: Path, sample_export: Path,
                                                           field: str, delta: int) -> None:
    export = tmp_path / "export"
    shutil.copytree(sample_export, export)
    original = stored_request(export)[field]
    set_request(export, {field: original + delta})
    db = tmp_path / "store.duckdb"
    assert run(capsys, "ingest", str(export), "--db", str(db))[0] == 0
    code, out, err = run(capsys, "verify", "--db", str(db), "--json")
    assert code == 1
    result = json.loads(out)
    by_id = {r["assembly_id"]: r for r in result["results"]}
    assert sorted(by_id) == sorted(DRIFT_STORY + [TARGET])
    assert (result["inconsistent"], result["drifted"]) == (1, 3)
    got = by_id[TARGET]
    assert got["verdict"] == "inconsistent"
    assert got["totals"] == [{"field": field, "stored": original + delta, "expected": original}]
    assert got["records"] == []  # every record replays as recorded
    assert got["recorded_hash"] == got["recomputed_hash"]
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 1
    (line,) = [ln for ln in out.splitlines() if ln.startswith(f"INCONSISTENT {TARGET} ")]
    assert f"stored {field} {original + delta:,} is not its rows' {original:,}" in line
    assert "selection_hash" not in line  # the hash agrees with the rows: not blamed

