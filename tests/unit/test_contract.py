"""The contract's single source of truth: Arrow schemas, row models and the doc agree."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError

from ingest.contract import ENUMS, ROW_MODELS, TABLES
from ingest.errors import ContextlensError
from ingest.writer import ExportWriter

DOC = Path(__file__).resolve().parents[2] / "docs" / "export-format.md"

EXAMPLE = {
    "str": "x",
    "json": "{}",
    "int": 3,
    "float": 0.5,
    "bool": True,
    "ts": dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc),
    "list": ["a", "b"],
}


def example_row(table: str) -> dict:
    row = {}
    for col in TABLES[table].columns:
        row[col.name] = ENUMS[col.enum][0] if col.enum else EXAMPLE[col.kind]
    return row


@pytest.mark.parametrize("name", list(TABLES))
def test_arrow_schema_and_row_model_accept_the_same_row(name: str) -> None:
    row = example_row(name)
    model = ROW_MODELS[name]
    assert model.model_validate(row).model_dump(exclude_unset=False) == row
    table = pa.Table.from_pylist([row], schema=TABLES[name].arrow_schema)
    assert table.to_pylist() == [row]


@pytest.mark.parametrize("name", list(TABLES))
def test_row_model_fields_match_arrow_schema(name: str) -> None:
    schema = TABLES[name].arrow_schema
    fields = ROW_MODELS[name].model_fields
    assert list(fields) == schema.names
    for field in schema:
        assert fields[field.name].is_required() == (not field.nullable), field.name


def test_row_model_rejects_unknown_enum_and_missing_required() -> None:
    row = example_row("tool_memories")
    row["freshness_class"] = "fresh"
    with pytest.raises(ValidationError, match="freshness_class"):
        ROW_MODELS["tool_memories"].model_validate(row)
    row = example_row("messages")
    del row["content"]
    with pytest.raises(ValidationError, match="content"):
        ROW_MODELS["messages"].model_validate(row)


def _doc_section(name: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    m = re.search(rf"^### {name}\n(.*?)(?=^### |^## )", text, re.S | re.M)
    assert m, f"docs/export-format.md has no section for {name}"
    return m.group(1)


@pytest.mark.parametrize("name", list(TABLES))
def test_doc_states_every_column_exactly(name: str) -> None:
    section = _doc_section(name)
    documented = re.findall(r"^\| `(\w+)` \| ([^|]+) \| (allowed|no) \| ([^|]*)\|", section, re.M)
    table = TABLES[name]
    assert [d[0] for d in documented] == table.column_names
    for (col_name, _type, nulls, values), col in zip(documented, table.columns):
        assert (nulls == "allowed") == col.nullable, col_name
        assert (f"`{col.enum}`" in values) == bool(col.enum), col_name
    assert f"Primary key: `{', '.join(table.primary_key)}`" in section


def test_doc_lists_every_enum_value() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name, values in ENUMS.items():
        line = next(l for l in text.splitlines() if l.startswith(f"- `{name}`:"))
        assert re.findall(r"`(\w+)`", line)[1:] == list(values)


def test_writer_writes_every_table_with_manifest(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    with ExportWriter(out, export_id="e1", producer="test") as w:
        w.write("conversations", [example_row("conversations")])
        sha = w.add_blob(b"hello")
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["tables"]) == set(TABLES)
    assert manifest["tables"]["conversations"]["rows"] == 1
    assert manifest["tables"]["messages"]["rows"] == 0
    assert (out / "blobs" / sha).read_bytes() == b"hello"
    assert not (tmp_path / "exp.writing").exists()


def test_writer_rejects_wrong_type_naming_table(tmp_path: Path) -> None:
    with pytest.raises(ContextlensError, match="conversations"):
        with ExportWriter(tmp_path / "e", export_id="e", producer="t") as w:
            row = example_row("conversations")
            row["created_at"] = "not a time"
            w.write("conversations", [row])
    # a failed write leaves nothing half-written behind
    assert not (tmp_path / "e").exists()
    assert not (tmp_path / "e.writing").exists()


def test_writer_rejects_a_column_the_contract_lacks_naming_table_row_and_column(
        tmp_path: Path) -> None:
    rows = [example_row("conversations"), {**example_row("conversations"), "colour": "red"}]
    with pytest.raises(ContextlensError, match=r"table conversations, row 1: unknown column colour"):
        with ExportWriter(tmp_path / "e", export_id="e", producer="t") as w:
            w.write("conversations", rows)
