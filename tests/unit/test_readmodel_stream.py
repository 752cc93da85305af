"""The request list streams: batches arrive one by one, in order, masked, and together they
are exactly the list."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from ingest.store import Store
from ingest.store.requests import LIST_COLUMNS
from readmodel import ReadModel


def test_request_stream_is_the_list_in_batches(sample_db: Path) -> None:
    with Store.open(sample_db) as store:
        model = ReadModel(store)
        whole = model.requests(None, sort="assembled_tokens", descending=True).rows
        batches = list(model.request_stream(None, sort="assembled_tokens", descending=True,
                                            batch_rows=7))
        assert len(batches) == -(-whole.num_rows // 7) > 1
        assert all(b.num_rows <= 7 for b in batches)
        assert pa.concat_tables(batches).to_pylist() == whole.to_pylist()
        # a filter and a limit apply to the stream as to the page
        some = list(model.request_stream("policy:v5", limit=5, batch_rows=2))
        assert [r["policy_version"] for b in some for r in b.to_pylist()] == ["v5"] * 5
        # the store answers other questions while a stream is half read
        stream = model.request_stream(None, batch_rows=3)
        next(stream)
        assert model.request_counts("policy:v5")[0] >= 5
        assert next(stream).num_rows == 3


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("sort", LIST_COLUMNS)
def test_pages_follow_the_list_order_across_ties_and_nulls(sample_db: Path, sort: str,
                                                           descending: bool) -> None:
    """Each batch is a page after the previous page's last row: ties of the sort column
    (policy_version, runtime_kind) and nulls (scenario) fall across page
    boundaries, and no row is lost, repeated or out of place."""
    with Store.open(sample_db) as store:
        for flt in (None, "policy:v5"):
            whole = store.list_assemblies(flt, sort=sort, descending=descending)
            for rows in (1, 7):
                pages = list(store.iter_assemblies(flt, sort=sort, descending=descending,
                                                   batch_rows=rows))
                assert pa.Table.from_batches(pages, schema=whole.schema).equals(whole)
            first = pa.Table.from_batches(list(store.iter_assemblies(
                flt, sort=sort, descending=descending, limit=10, batch_rows=3)), schema=whole.schema)
            assert first.equals(whole.slice(0, 10))
