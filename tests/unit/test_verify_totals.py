"""Verify holds each request's stored totals (context_assemblies.assembled_tokens and the
counts) to its recorded rows: ``show`` and ``list`` display the stored figures, so a total
its rows do not give is a recording that contradicts itself.

A transcript's request sends more than its records (system prompt, tool schemas): its
``unattributed_tokens`` tag says how much, and verify counts it in. Every real log of
../shared/realdata must verify with no inconsistent request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from support.cli import run
from support.stores import read_table, rewrite_table

from ingest.adapters.registry import adapt
from ingest.tags import unattributed_tokens
from replay.verify import STORED_TOTALS, stored_totals

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
REAL_FILES = sorted(
    p for p in REALDATA.rglob("*")
    if p.is_file() and not p.name.startswith("LICENSE") and p.suffix != ".md"
) if REALDATA.is_dir() else []
# a Claude Code session whose requests record their input tokens (usage)
RECORDED = Path(__file__).resolve().parents[1] / "adapter_fixtures" / "compaction.jsonl"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _set(export: Path, assembly_id: str, column: str, value: int) -> None:
    requests = read_table(export, "context_assemblies")
    ids = requests.column("assembly_id").to_pylist()
    values = [value if a == assembly_id else v for a, v in zip(ids, requests.column(column).to_pylist())]
    idx = requests.schema.get_field_index(column)
    rewrite_table(export, "context_assemblies", requests.set_column(
        idx, requests.schema.field(idx), pa.array(values, requests.schema.field(idx).type)))


def test_the_sample_stores_what_its_rows_give(sample_export: Path) -> None:
    """The sample's writer and verify share one definition (stored_totals): every stored
    total of the sample is its rows'."""
    records = read_table(sample_export, "assembly_records").to_pylist()
    by_id: dict[str, list[dict]] = {}
    for r in records:
        by_id.setdefault(r["assembly_id"], []).append(r)
    for request in read_table(sample_export, "context_assemblies").to_pylist():
        mine = by_id[request["assembly_id"]]
        assert {k: request[k] for k in STORED_TOTALS} == stored_totals(mine, request["tags"])
        included = [r for r in mine if r["decision"] == "included"]
        # independently of the rule: the tokens are the included records', no more
        assert request["assembled_tokens"] == sum(r["tokens"] for r in included)
        assert request["selected_memory_count"] == sum(r["record_kind"] == "tool_memory" for r in included)


def test_a_transcripts_unattributed_tokens_count_and_a_tampered_total_is_named(
        capsys, tmp_path: Path) -> None:
    export = tmp_path / "export"
    adapt(RECORDED, export)
    requests = read_table(export, "context_assemblies").to_pylist()
    records = read_table(export, "assembly_records").to_pylist()
    # the request that sent most beyond its records (what makes this test mean something)
    target = max(requests, key=lambda r: abs(unattributed_tokens(r["tags"]) or 0))
    extra = unattributed_tokens(target["tags"])
    assert extra, "the fixture's requests record usage beyond their records"
    rows = sum(r["tokens"] for r in records
               if r["assembly_id"] == target["assembly_id"] and r["decision"] == "included")
    assert target["assembled_tokens"] == rows + extra

    code, out, err = run(capsys, "verify", "--db", str(export), "--json")
    doc = json.loads(out)
    assert doc["inconsistent"] == 0, doc["results"]

    _set(export, target["assembly_id"], "assembled_tokens", target["assembled_tokens"] + 1000)
    code, out, err = run(capsys, "verify", "--db", str(export), "--json")
    assert code == 1
    doc = json.loads(out)
    (got,) = [r for r in doc["results"] if r["assembly_id"] == target["assembly_id"]]
    assert got["verdict"] == "inconsistent"
    assert got["totals"] == [{"field": "assembled_tokens", "stored": target["assembled_tokens"] + 1000,
                              "expected": target["assembled_tokens"], "unattributed": extra}]
    assert doc["inconsistent"] == 1
    code, out, err = run(capsys, "verify", "--db", str(export))
    assert (f"stored assembled_tokens {target['assembled_tokens'] + 1000:,} is not its rows' "
            f"{target['assembled_tokens']:,} ({rows:,} in its records and {extra:,} unattributed)") in out


@pytest.mark.skipif(not REAL_FILES, reason=f"real logs not present ({REALDATA} is absent)")
@pytest.mark.parametrize("path", REAL_FILES, ids=[p.name for p in REAL_FILES])
def test_every_real_log_stores_the_totals_of_its_rows(capsys, path: Path) -> None:
    code, out, err = run(capsys, "verify", "--db", str(path), "--json")
    assert code in (0, 1), err
    doc = json.loads(out)
    assert doc["inconsistent"] == 0, [(r["assembly_id"], r["problems"]) for r in doc["results"]]
    assert doc["checked"] > 0


def test_the_totals_are_columns_of_the_contract() -> None:
    """verify's SQL and the writers' Python name the same contract columns."""
    from ingest.contract import TABLES

    columns = {c.name for c in TABLES["context_assemblies"].columns}
    assert set(STORED_TOTALS) <= columns
    assert set(stored_totals([], [])) == set(STORED_TOTALS)
