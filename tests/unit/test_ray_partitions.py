"""How the Ray engine cuts and loads its partitions, without Ray: a partition reads only the
Parquet row groups its keys' span touches (not every file whole, once per partition), with
the same rows in the same order as a whole read; partitions are sized from the data and the
cluster's CPUs; the local object store from what the results need and the machine."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from replay import distributed
from replay.distributed import (_MEMBERSHIP, _open_exports, _work_list, default_partitions,
                                object_store_size, partition_requests, partition_store,
                                plan_partitions)
from replay.sample_export import write_scale

ROWS_PER_GROUP = 64


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A generated export written as one row group per file, and the same rows in row
    groups of ``ROWS_PER_GROUP`` (an export written in conversation order, as producers do)."""
    whole = tmp_path_factory.mktemp("ray-partitions") / "whole"
    write_scale(whole, 300, seed=11, drift=0.02)
    grouped = whole.parent / "grouped"
    shutil.copytree(whole, grouped)
    for path in grouped.glob("*.parquet"):
        pq.write_table(pq.read_table(path), path, row_group_size=ROWS_PER_GROUP)
    return whole, grouped


def _middle_partition(export: Path) -> tuple[object, tuple[str, ...]]:
    opened = _open_exports([export])
    plan = plan_partitions(_work_list(opened), 5)
    return opened[0], plan[2].conversation_ids


def test_a_partition_has_the_same_rows_in_the_same_order_as_a_whole_read(exports) -> None:
    whole, grouped = exports
    export_whole, ids = _middle_partition(whole)
    export_grouped, same = _middle_partition(grouped)
    assert ids == same and ids
    with partition_store(export_whole, ids) as one, partition_store(export_grouped, ids) as many:
        for name, _keys in _MEMBERSHIP:
            expected = one._arrow(f'SELECT * FROM "{name}"')
            assert many._arrow(f'SELECT * FROM "{name}"').equals(expected), name
        # every way into tool_artifacts (branch, owner run, tool call) is kept
        assert one._rows("SELECT count(*) FROM tool_artifacts")[0][0] > 0
        assert one._rows("SELECT count(*) FROM assembly_records")[0][0] > 0


def test_a_partition_reads_only_the_row_groups_its_span_touches(exports, tmp_path: Path) -> None:
    _, grouped = exports
    damaged = tmp_path / "damaged"
    shutil.copytree(grouped, damaged)
    records = damaged / "assembly_records.parquet"
    meta = pq.read_metadata(records)
    assert meta.num_row_groups > 4
    # the last row group's pages are garbage, its footer entry (min/max) intact: a partition
    # of the first conversations never needs it, so never reads it
    data = bytearray(records.read_bytes())
    last = meta.row_group(meta.num_row_groups - 1)
    for c in range(last.num_columns):
        start = last.column(c).data_page_offset
        for i in range(start, start + 32):
            data[i] ^= 0x5A
    records.write_bytes(bytes(data))
    opened = _open_exports([damaged])
    first = plan_partitions(_work_list(opened), 5)[0]
    with partition_store(opened[0], first.conversation_ids) as mini:
        loaded = mini._arrow("SELECT * FROM assembly_records")
    clean = _open_exports([grouped])[0]
    with partition_store(clean, first.conversation_ids) as mini:
        assert loaded.equals(mini._arrow("SELECT * FROM assembly_records"))
    assert loaded.num_rows > 0


def test_partitions_are_one_per_cpu_and_more_only_for_more_data() -> None:
    assert default_partitions(2, 1_000, 10_000) == 2  # a small export: one per CPU
    assert default_partitions(2, 100_000, 10_000) == 10
    # whole waves over the CPUs: the last does not leave a CPU idle
    assert default_partitions(2, 105_000, 10_000) == 12
    assert default_partitions(4, 0, 10_000) == 4


def test_larger_requests_make_smaller_partitions(exports, monkeypatch) -> None:
    whole, _ = exports
    opened = _open_exports([whole])
    per_partition = partition_requests(opened)
    assert 0 < per_partition <= distributed.MAX_PARTITION_REQUESTS
    monkeypatch.setattr(distributed, "PARTITION_BYTES", distributed.PARTITION_BYTES // 1000)
    # a thousandth of the bytes per partition, as if each request were a thousand times larger
    assert partition_requests(opened) < per_partition


def test_the_object_store_is_what_the_results_need_within_the_machine() -> None:
    floor = distributed.OBJECT_STORE_BYTES
    assert object_store_size(0) == floor
    assert object_store_size(floor) == 2 * floor  # results held back until their turn
    machine = Path("/proc/meminfo").read_text().split()[1]  # MemTotal, kB
    assert object_store_size(10 ** 15) <= 0.3 * int(machine) * 1024 + 1
