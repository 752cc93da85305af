"""A bundle without --reveal names a secret-shaped id that rows join on (an assembly, a
conversation, a participant, a record) by one pseudonym in every table, so no file of the
bundle holds the secret, and the bundle still lists, verifies and replays as the store
does. With --reveal the ids stay as recorded.

The store is a small synthetic export (faithful to the reference assembler) whose first
request, its conversation, its model participant and one of its records are renamed to
secret shapes in every table (the stored selection_hash recomputed), so verify has a
faithful request to keep faithful."""

from __future__ import annotations

import json
from pathlib import Path
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ingest.contract import TABLES, selection_hashes
from readmodel.bundle import PSEUDONYM_PREFIX, pseudonym
from support.cli import run, run_json
from support.planted_ids import ASM, CONV, REC
from support.stores import read_table, rewrite_table

PARTICIPANT = "xoxb-2468013579-participantz"  # a model participant's id (a Slack token)
PLANTED = (ASM, CONV, REC, PARTICIPANT)


def _renamed(column: pa.ChunkedArray, names: dict[str, str]) -> pa.Array:
    keys = pa.array(list(names), pa.string())
    values = pa.array(list(names.values()), pa.string())
    col = column.combine_chunks()
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        inner = col.values.cast(pa.string())
        inner = pc.coalesce(pc.take(values, pc.index_in(inner, value_set=keys)), inner)
        return type(col).from_arrays(col.offsets, inner.cast(col.type.value_type), mask=col.is_null())
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return col
    return pc.coalesce(pc.take(values, pc.index_in(col, value_set=keys)), col)


@pytest.fixture(scope="module")
def planted_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    from ingest.store import ingest
    from replay.sample_export import write_sample

    root = tmp_path_factory.mktemp("bundle-ids")
    export = write_sample(root / "export", scale=4, drift=0.0)
    first = read_table(export, "context_assemblies").sort_by("assembled_at").slice(0, 1).to_pylist()[0]
    records = read_table(export, "assembly_records")
    rec = records.filter(pc.and_(pc.equal(records["assembly_id"], first["assembly_id"]),
                                 pc.equal(records["record_kind"], "message")))
    names = {first["assembly_id"]: ASM, first["conversation_id"]: CONV,
             first["participant_id"]: PARTICIPANT, rec["record_id"][0].as_py(): REC}
    for name in TABLES:
        if not (export / f"{name}.parquet").exists():
            continue
        table = read_table(export, name)
        for i, col in enumerate(table.column_names):
            if col.endswith("_id") or col.endswith("_ids") or col in (
                    "shared_with", "supersedes", "superseded_by", "conflicts_with"):
                table = table.set_column(i, table.schema.field(i), _renamed(table[col], names))
        rewrite_table(export, name, table)
    # the stored hash of each request, over its renamed rows
    hashes = selection_hashes(read_table(export, "assembly_records"))
    by_id = dict(zip(hashes["assembly_id"].to_pylist(), hashes["selection_hash"].to_pylist()))
    table = read_table(export, "context_assemblies")
    i = table.schema.get_field_index("selection_hash")
    table = table.set_column(i, table.schema.field(i), pa.array(
        [by_id.get(a, h) for a, h in zip(table["assembly_id"].to_pylist(),
                                           table["selection_hash"].to_pylist())], pa.string()))
    rewrite_table(export, "context_assemblies", table)
    db = root / "store.duckdb"
    ingest(export, db)
    return db, ASM


def _verdicts(capsys: pytest.CaptureFixture[str], db: Path, policies: Path | None = None) -> tuple[int, int]:
    """(requests checked, faithful ones)."""
    extra = ["--policies", str(policies)] if policies else []
    doc = run_json(capsys, "verify", "--db", str(db), *extra)
    return doc["checked"], doc["faithful"]


def _every_text(folder: Path) -> str:
    """Every file of the bundle as raw bytes (decoded loosely) and, for Parquet, its rows."""
    parts = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        parts.append(path.read_bytes().decode("utf-8", "replace"))
        if path.suffix == ".parquet":
            parts.append(json.dumps(pq.read_table(path).to_pylist(), default=str))
    return "\n".join(parts)


def test_a_masked_bundle_holds_no_secret_shaped_id_and_verifies_as_the_store_does(
    planted_store: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, asm = planted_store
    assert _verdicts(capsys, db) == (4, 4)  # the planted request among them
    out = tmp_path / "bundle"

    code, _out, err = run(capsys, "bundle", asm, "--out", str(out), "--db", str(db))

    assert code == 0, err
    text = _every_text(out)
    assert [s for s in PLANTED if s in text or s[:12] in text] == []
    shown = pseudonym(asm)
    assert shown.startswith(PSEUDONYM_PREFIX)
    # the same pseudonym in every table that names the request
    for name in ("context_assemblies", "assembly_records", "policy_decisions"):
        ids = set(pq.read_table(out / f"{name}.parquet", columns=["assembly_id"])["assembly_id"].to_pylist())
        assert ids == {shown}, name
    convs = {pq.read_table(out / f"{t}.parquet", columns=["conversation_id"])["conversation_id"][0].as_py()
             for t in ("conversations", "context_assemblies", "messages")}
    assert convs == {pseudonym(CONV)}
    # the bundle opens, and its request verifies as it does in the store, named by its pseudonym
    assert _verdicts(capsys, out, out / "policies") == (1, 1)
    report = (out / "report.md").read_text(encoding="utf-8")
    assert f"show {shown} --db bundle" in report
    code, listed, err = run(capsys, "show", shown, "--db", str(out))
    assert code == 0, err


def test_a_revealed_bundle_keeps_the_ids_as_recorded(
    planted_store: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, asm = planted_store
    out = tmp_path / "revealed"
    code, _out, err = run(capsys, "bundle", asm, "--out", str(out), "--db", str(db), "--reveal")
    assert code == 0, err
    ids = pq.read_table(out / "context_assemblies.parquet", columns=["assembly_id"])["assembly_id"].to_pylist()
    assert ids == [asm]
    assert _verdicts(capsys, out, out / "policies") == (1, 1)
