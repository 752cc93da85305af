"""The distributed engine's partitions and merge, without Ray: each partition's own store
(its conversations' rows loaded from the Parquet export) run through the local engine's
per-partition function, merged in walk order, gives exactly the local engine's answer; and
the core never imports Ray."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ingest.filters import parse_filter
from ingest.store import Store, ingest
from replay import compare as compare_module
from replay.assembler import get_assembler
from replay.compare import Comparison, compare, compare_partition, tally_in_recording
from replay.distributed import _open_exports, partition_store, plan_partitions
from replay.policy import load_registry
from replay.verify import VerifyResult, finish_verify, merge_verify, verify, verify_chunks
from sample_data import SAMPLE_DIR


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    db = tmp_path_factory.mktemp("merge") / "sample.duckdb"
    ingest(SAMPLE_DIR, db)
    with Store.open(db) as s:
        yield s


def _partitions(size: int):
    """The sample's conversations in walk order, ``size`` requests or so per partition."""
    requests = pq.read_table(SAMPLE_DIR / "context_assemblies.parquet", columns=["conversation_id"])
    counts = pc.value_counts(requests["conversation_id"]).to_pylist()
    work = sorted((0, c["values"], c["counts"]) for c in counts)
    total = sum(n for *_, n in work)
    export = _open_exports([SAMPLE_DIR])[0]
    return export, plan_partitions(work, -(-total // size))


@pytest.mark.parametrize("a,b,flt", [("v4", "v5", None), ("recorded", "v5", None),
                                     ("v1", "v6", "policy:v4 -reason:budget_exceeded")])
def test_partitions_merged_equal_one_walk(store, monkeypatch, a: str, b: str, flt) -> None:
    # few examples kept, so the merge has to cut the lists exactly where one walk does
    monkeypatch.setattr(compare_module, "EXAMPLES", 1)
    monkeypatch.setattr(compare_module, "EXAMPLE_RECORDS", 2)
    registry = load_registry(None)
    parsed = parse_filter(flt)
    local = compare(store, registry, a, b, parsed, top=3)
    export, partitions = _partitions(size=4)
    assert len(partitions) == 4  # one conversation each
    merged = Comparison(a, b, parsed.text)
    recorded = []
    for p in partitions:
        with partition_store(export, p.conversation_ids) as mini:
            partial, rows = compare_partition(mini, registry, a, b, parsed, lambda _t: None, top=3)
        merged.merge(partial, top=3)
        if rows is not None:
            recorded.append(rows)
    if a == "recorded":
        import pyarrow as pa

        tally_in_recording(merged, pa.concat_tables(recorded))
    assert merged.to_json() == local.to_json()
    assert local.requests > 0


def test_verify_partitions_merged_equal_one_walk(store) -> None:
    registry = load_registry(None)
    local = verify(store, registry)
    export, partitions = _partitions(size=6)
    merged, verdicts, versions = VerifyResult(), [], Counter()
    for p in partitions:
        part = VerifyResult()
        with partition_store(export, p.conversation_ids) as mini:
            verify_chunks(mini, registry, get_assembler("reference"), None, part,
                          verdicts.append, versions)
        merge_verify(merged, part)
    merged.results.extend(verdicts)
    finish_verify(merged, registry, versions)
    assert merged.to_json() == local.to_json()
    assert local.drifted > 0


def test_the_core_does_not_import_ray() -> None:
    code = ("import sys, inspector.cli, readmodel.distributed, replay.distributed; "
            "assert 'ray' not in sys.modules, 'ray imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
