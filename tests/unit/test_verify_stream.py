"""Verify streams: each non-faithful verdict is handed over as its chunk is verified, the
counts come at the end, and the streamed verdicts are exactly the ones a kept result lists."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from ingest.store import Store
from replay.policy import load_registry
from replay.verify import AssemblyVerdict, verify

REG = load_registry(None)


@pytest.fixture(scope="module")
def store(sample_db: Path) -> Iterator[Store]:
    with Store.open(sample_db) as s:
        yield s


def test_streamed_verdicts_are_the_kept_ones_and_come_before_the_end(store: Store) -> None:
    kept = verify(store, REG)
    done = [0]
    arrived: list[tuple[AssemblyVerdict, int]] = []
    streamed = verify(store, REG, progress=lambda d, _t: done.__setitem__(0, d),
                      on_verdict=lambda v: arrived.append((v, done[0])),
                      conversations_per_chunk=1)
    total = store.count_assemblies()
    assert not streamed.results, "a streaming caller keeps the verdicts, not the result"
    assert (streamed.checked, streamed.faithful, streamed.drifted) == (
        kept.checked, kept.faithful, kept.drifted) == (total, total - 3, 3)
    assert [v.to_json() for v, _ in arrived] == [v.to_json() for v in kept.results]
    # handed over while the rest of the store was still to be verified
    assert all(at < total for _, at in arrived)


def test_chunk_size_does_not_change_a_verdict(store: Store) -> None:
    whole = verify(store, REG).to_json()
    for size in (1, 3):
        assert verify(store, REG, conversations_per_chunk=size).to_json() == whole


def test_verify_in_processes_gives_the_same_verdicts_in_the_same_order(store: Store) -> None:
    """verify's process path (workers > 1): each chunk verified in a worker, its counts
    merged and its verdicts handed on in walk order, as one process does."""
    from collections import Counter

    from replay.assembler import get_assembler
    from replay.verify import VerifyResult, verify_chunks

    out = {}
    for workers in (1, 2):
        result, verdicts, versions, sizes = VerifyResult(), [], Counter(), []
        verify_chunks(store, REG, get_assembler("reference"), None, result, verdicts.append,
                      versions, sizes.append, conversations_per_chunk=1, workers=workers)
        out[workers] = (result.to_json(), [v.to_json() for v in verdicts], versions, sizes)
    assert out[1][0]["drifted"] == 3 and len(out[1][3]) > 1
    assert out[2] == out[1]
