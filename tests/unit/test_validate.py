"""Validation: every broken export fails with one line naming file/table/column/row/value."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.errors import ValidationError
from ingest.store import ingest
from ingest.validate import validate_export
from support.stores import make_export, read_table, rewrite_table, set_value


def fails(export: Path, tmp_path: Path) -> str:
    """Ingest must fail with a single-line ValidationError; validate_export must agree."""
    with pytest.raises(ValidationError) as info:
        ingest(export, tmp_path / "store.duckdb")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"export {export.name}: ")
    with pytest.raises(ValidationError) as again:
        validate_export(export)
    assert str(again.value) == message
    assert not (tmp_path / "store.duckdb").exists()
    return message


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return make_export(tmp_path / "exp")


def test_valid_export_has_only_the_broken_provenance_warning(export: Path) -> None:
    report = validate_export(export)
    assert report.export_id == "exp-test"
    assert report.rows["assembly_records"] == 11
    assert report.warnings == [
        "tool_memories row 2 (memory_id=m3): source_artifact_ids names missing "
        "tool_artifacts a-404 (broken provenance)"
    ]


def test_empty_export(tmp_path: Path) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    msg = fails(empty, tmp_path)
    assert "empty export" in msg and "manifest.json" in msg


def test_missing_manifest(export: Path, tmp_path: Path) -> None:
    (export / "manifest.json").unlink()
    assert fails(export, tmp_path) == "export exp: manifest.json is missing"


def test_invalid_manifest(export: Path, tmp_path: Path) -> None:
    (export / "manifest.json").write_text('{"export_id": "x"}')
    msg = fails(export, tmp_path)
    assert "manifest.json is invalid" in msg and "schema_version" in msg


def test_manifest_not_json(export: Path, tmp_path: Path) -> None:
    (export / "manifest.json").write_text("{not json")
    assert "manifest.json is invalid" in fails(export, tmp_path)


def test_missing_table(export: Path, tmp_path: Path) -> None:
    (export / "checkpoints.parquet").unlink()
    msg = fails(export, tmp_path)
    assert msg == (
        "export exp: table checkpoints is missing (expected checkpoints.parquet or checkpoints/)"
    )


def test_not_parquet_file(export: Path, tmp_path: Path) -> None:
    (export / "messages.parquet").write_text("message_id,content\nmsg1,hello\n")
    msg = fails(export, tmp_path)
    assert msg.startswith("export exp: file messages.parquet is not a readable Parquet file")


def test_truncated_parquet_file(export: Path, tmp_path: Path) -> None:
    path = export / "tool_memories.parquet"
    path.write_bytes(path.read_bytes()[:-100])
    assert "file tool_memories.parquet is not a readable Parquet file" in fails(export, tmp_path)


def test_missing_column(export: Path, tmp_path: Path) -> None:
    rewrite_table(export, "tool_memories", read_table(export, "tool_memories").drop_columns(["summary"]))
    msg = fails(export, tmp_path)
    assert msg == (
        "export exp: table tool_memories, file tool_memories.parquet: missing required column summary"
    )


def test_extra_columns_are_kept(export: Path, tmp_path: Path) -> None:
    data = read_table(export, "messages")
    rewrite_table(export, "messages", data.append_column("sentiment", pa.array(["ok", "good"])))
    result = ingest(export, tmp_path / "s.duckdb")
    from ingest.store import Store

    with Store.open(result.db_path) as store:
        assert store.record("message", "msg2")["sentiment"] == "good"


def test_wrong_type_that_does_not_convert(export: Path, tmp_path: Path) -> None:
    set_value(export, "messages", "content_tokens", 1, "many", pa.string())
    msg = fails(export, tmp_path)
    assert msg == (
        "export exp: table messages, column content_tokens, row 1: expected BIGINT, found "
        "VARCHAR value 'many' that does not convert"
    )


def test_wrong_type_that_converts_is_cast(export: Path, tmp_path: Path) -> None:
    set_value(export, "messages", "content_tokens", 1, "6", pa.string())
    result = ingest(export, tmp_path / "s.duckdb")
    assert result.rows["messages"] == 2


def test_incompatible_type(export: Path, tmp_path: Path) -> None:
    data = read_table(export, "context_assemblies")
    idx = data.schema.get_field_index("tags")
    data = data.set_column(idx, "tags", pa.array([1.5, 2.5]))
    rewrite_table(export, "context_assemblies", data)
    msg = fails(export, tmp_path)
    assert "table context_assemblies, column tags" in msg and "expected VARCHAR[]" in msg
    assert "found DOUBLE" in msg


def test_unknown_enum_value(export: Path, tmp_path: Path) -> None:
    set_value(export, "tool_memories", "freshness_class", 2, "fresh")
    assert fails(export, tmp_path) == (
        "export exp: table tool_memories, column freshness_class, row 2 (memory_id=m3): "
        "unknown value 'fresh' (allowed: volatile, session, bounded, durable, permanent)"
    )


def test_null_required_value(export: Path, tmp_path: Path) -> None:
    set_value(export, "assembly_records", "reason_code", 4, None)
    assert fails(export, tmp_path) == (
        "export exp: table assembly_records, column reason_code, row 4 "
        "(assembly_id=as1, record_kind=checkpoint, record_id=k1): required value is null"
    )


def test_duplicate_primary_key(export: Path, tmp_path: Path) -> None:
    set_value(export, "tool_artifacts", "artifact_id", 1, "a1")
    assert fails(export, tmp_path) == (
        "export exp: table tool_artifacts: duplicate primary key (artifact_id=a1) at rows 0, 1"
    )


def test_dangling_hard_foreign_key(export: Path, tmp_path: Path) -> None:
    set_value(export, "assembly_records", "assembly_id", 10, "as-ghost")
    assert fails(export, tmp_path) == (
        "export exp: table assembly_records, column assembly_id, row 10 "
        "(assembly_id=as-ghost, record_kind=message, record_id=msg2): "
        "'as-ghost' names no row of table context_assemblies"
    )


def test_dangling_soft_foreign_key_is_a_warning(export: Path, tmp_path: Path) -> None:
    set_value(export, "tool_artifacts", "tool_call_id", 1, "tc-gone")
    result = ingest(export, tmp_path / "s.duckdb")
    assert (
        "tool_artifacts row 1 (artifact_id=a2): tool_call_id names missing tool_calls tc-gone"
        in result.warnings
    )
    assert any("a-404 (broken provenance)" in w for w in result.warnings)


def test_branch_cycle(export: Path, tmp_path: Path) -> None:
    set_value(export, "branches", "parent_branch_id", 0, "b2")
    assert fails(export, tmp_path) == (
        "export exp: table branches: parent_branch_id forms a cycle: b1 -> b2 -> b1"
    )


def test_self_supersession(export: Path, tmp_path: Path) -> None:
    set_value(export, "tool_memories", "superseded_by", 2, "m3")
    assert fails(export, tmp_path) == "export exp: table tool_memories: memory m3 supersedes itself"


def test_supersession_cycle(export: Path, tmp_path: Path) -> None:
    # m2 replaces m1 (both directions recorded); now m1 also claims to replace m2
    set_value(export, "tool_memories", "supersedes", 0, ["m2"])
    assert fails(export, tmp_path) == (
        "export exp: table tool_memories: supersession forms a cycle: m1 -> m2 -> m1"
    )


def test_manifest_row_count_mismatch(export: Path, tmp_path: Path) -> None:
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["tables"]["messages"]["rows"] = 3
    (export / "manifest.json").write_text(json.dumps(manifest))
    assert fails(export, tmp_path) == (
        "export exp: table messages: 2 rows, but manifest.json says 3"
    )


def test_manifest_sha_mismatch(export: Path, tmp_path: Path) -> None:
    data = read_table(export, "conversations")
    rewrite_table(export, "conversations", data, fix_manifest=False)  # same rows, new bytes
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["tables"]["conversations"]["sha256"] = "0" * 64
    (export / "manifest.json").write_text(json.dumps(manifest))
    msg = fails(export, tmp_path)
    assert msg.startswith("export exp: table conversations: sha256 ")
    assert "does not match manifest.json (000000000000…)" in msg


def test_partitioned_table_folder_with_hive_keys(export: Path, tmp_path: Path) -> None:
    """A table may be a folder of part files, with hive partition columns in the path."""
    data = read_table(export, "assembly_records")
    (export / "assembly_records.parquet").unlink()
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = []
    for aid in ("as1", "as2"):
        folder = export / "assembly_records" / f"assembly_id={aid}"
        folder.mkdir(parents=True)
        part = data.filter(pc.equal(data["assembly_id"], aid)).drop_columns(["assembly_id"])
        pq.write_table(part, folder / "part-0.parquet")
        files.append(f"assembly_records/assembly_id={aid}/part-0.parquet")
    from ingest.writer import table_sha256

    manifest = json.loads((export / "manifest.json").read_text())
    manifest["tables"]["assembly_records"] = {
        "rows": data.num_rows, "files": files, "sha256": table_sha256(export, files)
    }
    (export / "manifest.json").write_text(json.dumps(manifest))
    report = validate_export(export)
    assert report.rows["assembly_records"] == 11


def test_row_numbers_run_across_part_files(export: Path, tmp_path: Path) -> None:
    data = read_table(export, "assembly_records")
    (export / "assembly_records.parquet").unlink()
    import pyarrow.parquet as pq

    folder = export / "assembly_records"
    folder.mkdir()
    pq.write_table(data.slice(0, 6), folder / "part-00000.parquet")
    second = data.slice(6).to_pylist()
    second[1]["decision"] = "maybe"  # row 7 overall
    from ingest.contract import TABLES

    pq.write_table(pa.Table.from_pylist(second, schema=TABLES["assembly_records"].arrow_schema),
                   folder / "part-00001.parquet")
    files = ["assembly_records/part-00000.parquet", "assembly_records/part-00001.parquet"]
    from ingest.writer import table_sha256

    manifest = json.loads((export / "manifest.json").read_text())
    manifest["tables"]["assembly_records"] = {
        "rows": data.num_rows, "files": files, "sha256": table_sha256(export, files)
    }
    (export / "manifest.json").write_text(json.dumps(manifest))
    msg = fails(export, tmp_path)
    assert msg.startswith("export exp: table assembly_records, column decision, row 7 ")
    assert "unknown value 'maybe' (allowed: included, omitted)" in msg


def test_schema_version_mismatch(export: Path, tmp_path: Path) -> None:
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["schema_version"] = "99"
    (export / "manifest.json").write_text(json.dumps(manifest))
    assert "schema_version '99' is not supported" in fails(export, tmp_path)


def test_export_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="is not a folder"):
        validate_export(tmp_path / "absent")


def test_error_values_are_shown_safely(export: Path, tmp_path: Path) -> None:
    set_value(export, "tool_memories", "freshness_class", 0, "bad\x1b[31mred")
    msg = fails(export, tmp_path)
    assert "\x1b" not in msg and "\\x1b" in msg
    shutil.rmtree(export)


def test_json_column_must_hold_json(export: Path, tmp_path: Path) -> None:
    set_value(export, "tool_calls", "arguments_json", 0, "{path: march.csv")
    assert fails(export, tmp_path) == (
        "export exp: table tool_calls, column arguments_json, row 0 (tool_call_id=tc1): "
        "not valid JSON: '{path: march.csv'"
    )
