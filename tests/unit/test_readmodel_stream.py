"""The request list streams: batches arrive one by one, in order, masked, and together they
are exactly the list."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ingest.store import Store
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
