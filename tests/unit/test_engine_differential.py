"""The columnar replay engine against the oracle: replay_chunk (columnar for the reference
assembler) must give exactly what the reference assembler gives one assembly at a time,
for every record (decision, rendering, position, policy family, reason, tokens) and every
assembly (selection hash, assembled and baseline tokens, included and omitted counts)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.engine import Mini, TestRegistry as _Registry, policy, requests_table as _requests
from support.graphs import policies, random_graph, random_requests

from ingest.store import Store
from replay.columnar import graphs_from_snapshots
from replay.engine import Chunk, Replayed, chunks, replay_chunk, replay_chunk_oracle
from replay.policy import Policy, load_registry
from replay.sample.drift import InvertedSupersessionAssembler
from replay.snapshot import Request, Snapshot

REGISTRY = load_registry(None)


def assert_same(columnar: Replayed, oracle: Replayed, context: str) -> None:
    """Equal tables; else the first differing record and assembly, side by side."""
    if not columnar.records.equals(oracle.records):
        col, ora = columnar.records.to_pylist(), oracle.records.to_pylist()
        assert len(col) == len(ora), f"{context}: {len(col)} records, the oracle has {len(ora)}"
        first = next(i for i, (x, y) in enumerate(zip(col, ora)) if x != y)
        raise AssertionError(f"{context}: record {first}\n columnar {col[first]}\n oracle   {ora[first]}")
    if not columnar.assemblies.equals(oracle.assemblies):
        col, ora = columnar.assemblies.to_pylist(), oracle.assemblies.to_pylist()
        first = next(i for i, (x, y) in enumerate(zip(col, ora)) if x != y)
        raise AssertionError(f"{context}: assembly {first}\n columnar {col[first]}\n oracle   {ora[first]}")


@pytest.mark.parametrize("version", [None, *REGISTRY.versions()])
def test_sample_store_replays_exactly_as_the_oracle(sample_db: Path, version: str | None) -> None:
    """Every request of the sample, under each policy version and under its own recorded
    one, in chunks of a few conversations."""
    replayed = requests = 0
    with Store.open(sample_db) as store:
        for chunk in chunks(store, conversations_per_chunk=3):
            columnar = replay_chunk(store, chunk, REGISTRY, version)
            assert_same(columnar, replay_chunk_oracle(store, chunk, REGISTRY, version),
                        f"version {version}, chunk {chunk.conversation_ids}")
            replayed += columnar.assemblies.num_rows
            requests += chunk.requests.num_rows
    assert replayed == requests  # the sample records only versions of the registry


@pytest.mark.parametrize("per_chunk", [1, 5, 12])
def test_chunks_hold_whole_conversations_and_stop_at_the_request_bound(
        sample_db: Path, per_chunk: int) -> None:
    """A chunk never splits a conversation, holds more than ``requests_per_chunk`` requests
    only when one conversation alone is longer, and the chunks together are every request
    once, in the walk's order."""
    with Store.open(sample_db) as store:
        whole = next(chunks(store, conversations_per_chunk=10_000, requests_per_chunk=10**9))
        parts = list(chunks(store, conversations_per_chunk=10_000, requests_per_chunk=per_chunk))
    ids = [i for c in parts for i in c.requests.column("assembly_id").to_pylist()]
    assert ids == whole.requests.column("assembly_id").to_pylist()
    seen: set[str] = set()
    for chunk in parts:
        convs = chunk.requests.column("conversation_id").to_pylist()
        assert list(dict.fromkeys(convs)) == list(chunk.conversation_ids)
        assert not seen & set(convs)  # no conversation in two chunks
        seen |= set(convs)
        if chunk.requests.num_rows > per_chunk:
            # over the bound only by the last conversation that filled it
            assert chunk.requests.num_rows - convs.count(convs[-1]) < per_chunk
    assert len(parts) > 1


def test_graph_facts_computed_once_serve_every_version(sample_db: Path) -> None:
    """Compare computes a chunk's graph facts once and replays both sides from them: every
    version replayed from shared facts is exactly the oracle's replay."""
    from replay.engine import chunk_facts

    with Store.open(sample_db) as store:
        for chunk in chunks(store, conversations_per_chunk=4):
            graphs = store.conversation_graphs(list(chunk.conversation_ids), chunk.export_id)
            facts = chunk_facts(chunk, graphs)
            for version in REGISTRY.versions():
                shared = replay_chunk(store, chunk, REGISTRY, version, graphs=graphs, facts=facts)
                assert_same(shared, replay_chunk_oracle(store, chunk, REGISTRY, version),
                            f"version {version} from shared facts, chunk {chunk.conversation_ids}")


def test_the_reference_assembler_is_replayed_without_assembling_one_request_at_a_time(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = []
    with Store.open(sample_db) as store:
        for chunk in chunks(store, conversations_per_chunk=64):
            expected.append(replay_chunk_oracle(store, chunk, REGISTRY, "v1"))

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("the columnar path assembled a request one at a time")

    monkeypatch.setattr("replay.assembler._assemble", refuse)
    with Store.open(sample_db) as store:
        for chunk, oracle in zip(chunks(store, conversations_per_chunk=64), expected):
            assert_same(replay_chunk(store, chunk, REGISTRY, "v1"), oracle, "v1")


def test_another_assembler_is_replayed_by_itself(sample_db: Path) -> None:
    """The drift build (the reference with its supersession inverted) has no columnar form:
    replay_chunk gives its own answers, which differ from the reference's."""
    drift = InvertedSupersessionAssembler()
    with Store.open(sample_db) as store:
        chunk = next(chunks(store, conversations_per_chunk=64))
        replayed = replay_chunk(store, chunk, REGISTRY, "v4", assembler=drift)
        assert_same(replayed, replay_chunk_oracle(store, chunk, REGISTRY, "v4", assembler=drift),
                    "drift build")
        reference = replay_chunk(store, chunk, REGISTRY, "v4")
    assert not replayed.records.equals(reference.records)


# ---------------------------------------------------------------------------- random graphs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), pols=st.lists(policies, min_size=1, max_size=3),
       convs=st.integers(1, 3), n=st.integers(1, 8))
def test_random_graphs_replay_exactly_as_the_oracle(seed: int, pols: list[Policy], convs: int,
                                                     n: int) -> None:
    """Random conversations (branches and forks, participants and subagent chains, calls
    retried and pending, artifacts, memories superseding and conflicting, skill states,
    checkpoints), several in one chunk with the same record ids (as a row reachable from
    two conversations is in both), each with requests of different runs at different
    times, each request under its own policy."""
    rnd = random.Random(seed)
    snaps: dict[str, Snapshot] = {}
    reqs: list[Request] = []
    for cid in ("c", "d", "e")[:convs]:
        snap, first, _ = random_graph(rnd, cid)
        snaps[cid] = snap
        reqs += random_requests(rnd, snap, first, n)
    for i, r in enumerate(reqs):
        r.policy_version = f"p{i % len(pols)}"
    registry = _Registry({f"p{i}": p for i, p in enumerate(pols)})
    chunk = Chunk("exp", tuple(snaps), _requests(reqs))
    oracle = replay_chunk_oracle(None, chunk, registry, None, snapshots=snaps)  # type: ignore[arg-type]
    columnar = replay_chunk(None, chunk, registry, None, snapshots=snaps)  # type: ignore[arg-type]
    assert_same(columnar, oracle, f"seed {seed}")


@pytest.mark.parametrize("slack", [-1, 0, 1])
def test_exact_fits_and_edges_of_time_replay_exactly_as_the_oracle(slack: int) -> None:
    """Where random graphs rarely land: a token budget the history fits exactly (or misses
    by one token), an exact-evidence artifact the byte budget fits exactly, a retry that
    succeeded at the very moment of the request, a memory exactly as old as its window."""
    m = Mini()
    g = m.g
    for i in range(6):
        g.message("b-main", "user" if i % 2 else "assistant", "w" * (8 + 4 * i),
                  f"2026-01-01 00:01:0{i}", participant="p-user" if i % 2 else "p-me")
    failed = g.call(m.run, "fetch", {"q": 1}, "2026-01-01 00:02:00", "2026-01-01 00:02:01",
                    status="failed", retryable=True)
    retry = g.call(m.run, "fetch", {"q": 1}, "2026-01-01 00:02:02", "2026-01-01 00:03:00")
    g.artifact(failed, "nope", "2026-01-01 00:02:01", status="failed")
    raw = g.artifact(retry, "x" * 300, "2026-01-01 00:02:30", vis="conversation")
    g.memory("b-main", [raw], "fresh until the edge", "2026-01-01 00:02:40",
             observed="2025-12-31 18:03:00", freshness="volatile", vis="conversation")
    at = "2026-01-01 00:03:00"
    byte_size = g.get("tool_artifacts", raw)["byte_size"]
    base = policy("v1", **{"rehydration.byte_budget": byte_size + slack})
    full = Mini.assemble(m, at, base, exact=(raw,))
    history = sum(r["tokens"] for r in full.records
                  if r["decision"] == "included" and r["reason_code"] != "recovery_protected")
    tight = policy("v1", **{"rehydration.byte_budget": byte_size + slack,
                            "budget.token_budget": history + slack + base.budget.reserve_tokens})
    snap = Snapshot(g.tables)
    reqs = [m.request(at, exact=(raw,)), m.request(at, context_limit=history + slack + 500)]
    for i, r in enumerate(reqs):
        r.assembly_id, r.policy_version = f"asm-{i}", "tight"
    chunk = Chunk("exp", ("c",), _requests(reqs))
    registry = _Registry({"tight": tight})
    oracle = replay_chunk_oracle(None, chunk, registry, None, snapshots={"c": snap})  # type: ignore[arg-type]
    columnar = replay_chunk(None, chunk, registry, None, snapshots={"c": snap})  # type: ignore[arg-type]
    assert_same(columnar, oracle, f"slack {slack}")
    reasons = set(oracle.records.column("reason_code").to_pylist())
    assert ("over_budget" in reasons) == (slack < 0)
    assert ("rehydrated_exact" in reasons) == (slack >= 0)


@pytest.mark.parametrize("both_sides", [False, True])
def test_a_chain_of_conflicts_replays_exactly_as_the_oracle(both_sides: bool) -> None:
    """m1 - m2 - m3 conflict in a chain, confidence falling: m2 loses to m1, and m3, whose
    only rival m2 is gone by its turn, stays (unless both sides are shown)."""
    m = Mini()
    g = m.g
    m1 = g.memory("b-main", [], "one", "2026-01-01 00:01:00", confidence=0.9, vis="conversation")
    m2 = g.memory("b-main", [], "two", "2026-01-01 00:01:01", confidence=0.5, vis="conversation",
                  conflicts=(m1,))
    m3 = g.memory("b-main", [], "three", "2026-01-01 00:01:02", confidence=0.1,
                  vis="conversation", conflicts=(m2,))
    req = m.request("2026-01-01 00:02:00")
    req.policy_version = "p"
    chunk = Chunk("exp", ("c",), _requests([req]))
    registry = _Registry({"p": policy("v1", **{"contradiction.show_both_sides": both_sides})})
    snaps = {"c": Snapshot(g.tables)}
    oracle = replay_chunk_oracle(None, chunk, registry, None, snapshots=snaps)  # type: ignore[arg-type]
    columnar = replay_chunk(None, chunk, registry, None, snapshots=snaps)  # type: ignore[arg-type]
    assert_same(columnar, oracle, f"show_both_sides {both_sides}")
    decided = {r["record_id"]: (r["decision"], r["reason_code"]) for r in columnar.records.to_pylist()}
    if both_sides:
        assert {decided[x] for x in (m1, m2, m3)} == {("included", "conflict_both_sides")}
    else:
        assert decided[m2] == ("omitted", "redundant")
        assert decided[m1][0] == decided[m3][0] == "included"


def test_graphs_from_snapshots_keep_every_row() -> None:
    snap, _, _ = random_graph(random.Random(7))
    graphs = graphs_from_snapshots({"c": snap})
    for name, rows in snap.tables.items():
        assert graphs[name].num_rows == len(rows)
        assert set(graphs[name].column("graph_conversation_id").to_pylist()) <= {"c"}
