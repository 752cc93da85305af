"""replay/rules: one module per policy family. Each family's vocabulary is the contract's,
each family's steps write only that vocabulary, and the columnar engine agrees with the
reference assembler family by family (on the sample and on random graphs), so a failure
names the family whose two forms drifted apart."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import duckdb
import pytest
from support.engine import requests_table as _requests
from support.graphs import random_graph, random_requests

from ingest.contract import ENUMS
from ingest.store import Store
from replay import assembler
from replay.engine import Chunk, Replayed, chunks, replay_chunk, replay_chunk_oracle
from replay.explain import POLICY_KEYS
from replay.policy import load_registry
from replay.rules import FAMILIES, POLICY_FAMILIES, REASONS, STAGES, Family, policy_keys
from replay.rules.budget import call_tokens, call_tokens_sql
from replay.snapshot import Request, Snapshot

REGISTRY = load_registry(None)
# reason codes only a real runtime's transcript writes (replay/runtimes.py), no family's
TRANSCRIPT_REASONS = {"elided", "compacted", "evicted"}


def test_the_contract_reason_codes_and_families_are_the_families_own() -> None:
    assert set(REASONS) == set(ENUMS["reason_code"]) - TRANSCRIPT_REASONS
    assert set(POLICY_FAMILIES) == set(ENUMS["policy_family"])
    for fam in FAMILIES:
        assert set(fam.reasons) <= set(ENUMS["reason_code"]), fam.name
        assert set(fam.families) <= set(ENUMS["policy_family"]), fam.name


def test_every_family_runs_in_the_stage_loop_and_the_dead_table_is_gone() -> None:
    assert {f.name for _s, f, _r, _c in STAGES} == {f.name for f in FAMILIES}
    assert [s for s, *_ in STAGES] == sorted(s for s, *_ in STAGES)
    assert not hasattr(assembler, "DECIDING_KEYS")
    assert POLICY_KEYS == policy_keys()


def test_call_tokens_has_one_rule_in_python_and_sql() -> None:
    args = ["", "{}", '{"q": "caf\u00e9 \u2603"}', "x" * 37]
    con = duckdb.connect()
    for a in args:
        sql = con.execute(f"SELECT {call_tokens_sql('?::VARCHAR')}", [a]).fetchone()[0]
        assert sql == call_tokens(a), a


def _sample_pairs(sample_db: Path) -> list[tuple[Request, Snapshot]]:
    from replay.snapshot import load_snapshots, request_from_row

    with Store.open(sample_db) as store:
        rows = store.assembly_requests().to_pylist()
        snaps: dict[tuple[str, str], Snapshot] = {}
        for export_id in sorted({r["export_id"] for r in rows}):
            convs = sorted({r["conversation_id"] for r in rows if r["export_id"] == export_id})
            snaps.update({(export_id, c): s for c, s in
                          load_snapshots(store, convs, export_id).items()})
    return [(request_from_row(r), snaps[(r["export_id"], r["conversation_id"])]) for r in rows]


def test_each_reference_decision_is_in_the_vocabulary_of_its_stage_family(sample_db: Path) -> None:
    """A step writes only its own family's words: every decision (step, family, reason)
    of every sample assembly under every version is declared by a family of that stage."""
    allowed: dict[int, set[tuple[str, str]]] = {}
    for step, fam, _r, _c in STAGES:
        allowed.setdefault(step, set()).update((f, r) for f in fam.families for r in fam.reasons)
    seen: set[str] = set()
    for req, snap in _sample_pairs(sample_db):
        for v in REGISTRY.versions():
            for d in assembler.assemble(snap, req, REGISTRY.get(v)).decisions:
                assert (d["policy_family"], d["reason_code"]) in allowed[d["step"]], d
                seen.add(d["policy_family"])
    assert seen == set(POLICY_FAMILIES)  # the sample exercises every family


def _family_rows(replayed: Replayed, fam: Family) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r["assembly_id"], r["record_kind"], r["record_id"]): r
            for r in replayed.records.to_pylist() if r["policy_family"] in fam.families}


def assert_family_same(columnar: Replayed, oracle: Replayed, fam: Family, context: str) -> int:
    """The records either side says ``fam`` decided are the same records with the same
    row; returns how many."""
    col, ora = _family_rows(columnar, fam), _family_rows(oracle, fam)
    for key in sorted(col.keys() | ora.keys()):
        assert col.get(key) == ora.get(key), (
            f"{fam.name}, {context}: {key}\n columnar {col.get(key)}\n oracle   {ora.get(key)}")
    return len(ora)


@pytest.fixture(scope="module")
def sample_replays(sample_db: Path) -> list[tuple[str, Replayed, Replayed]]:
    """Every sample chunk under every version, replayed by both engines (once)."""
    out = []
    with Store.open(sample_db) as store:
        for version in REGISTRY.versions():
            for chunk in chunks(store, conversations_per_chunk=6):
                out.append((f"version {version}, chunk {chunk.conversation_ids}",
                            replay_chunk(store, chunk, REGISTRY, version),
                            replay_chunk_oracle(store, chunk, REGISTRY, version)))
    return out


@pytest.fixture(scope="module")
def random_replays() -> list[tuple[str, Replayed, Replayed]]:
    """Random graphs (two conversations, five requests each), each request under a version
    of the registry, replayed by both engines (once)."""
    out = []
    versions = REGISTRY.versions()
    for seed in range(12):
        rnd = random.Random(seed)
        snaps: dict[str, Snapshot] = {}
        reqs: list[Request] = []
        for cid in ("c", "d"):
            snap, first, _ = random_graph(rnd, cid)
            snaps[cid] = snap
            reqs += random_requests(rnd, snap, first, 5)
        for i, r in enumerate(reqs):
            r.policy_version = versions[(i + seed) % len(versions)]
        chunk = Chunk("exp", tuple(snaps), _requests(reqs))
        out.append((f"seed {seed}",
                    replay_chunk(None, chunk, REGISTRY, None, snapshots=snaps),  # type: ignore[arg-type]
                    replay_chunk_oracle(None, chunk, REGISTRY, None, snapshots=snaps)))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_family_replays_exactly_as_the_oracle(fam: Family, sample_replays: list[Any],
                                              random_replays: list[Any]) -> None:
    """The records this family decided (on either side) have the same row in both engines,
    on the sample and on random graphs; and the inputs reach the family at all."""
    decided = 0
    for context, columnar, oracle in sample_replays + random_replays:
        decided += assert_family_same(columnar, oracle, fam, context)
    assert decided, f"neither the sample nor the random graphs reach {fam.name}"


def test_each_columnar_step_writes_only_its_family_vocabulary(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The columnar side of the same promise: every decision a family's columnar step
    records on the sample's rows is one of that family's (the budget pass, after the
    steps, writes the budget's words and the rehydration settlement's)."""
    from replay import columnar

    current: list[Family] = []
    wrote: set[str] = set()

    def wrap(fam: Family, step: Any) -> Any:
        def run(s: Any) -> None:
            current.append(fam)
            step(s)
            current.pop()
        return run

    stages = tuple((st_, fam, ref, None if col is None else wrap(fam, col))
                   for st_, fam, ref, col in columnar.STAGES)
    monkeypatch.setattr(columnar, "STAGES", stages)
    budget_words = {(f, r) for fam in FAMILIES if fam.name in ("budget", "rehydration")
                    for f in fam.families for r in fam.reasons}
    add = columnar.Rows.add

    def checked(self: Any, mask: Any, st_: int, family: str, code: str, deny: bool) -> None:
        if current:
            fam = current[-1]
            assert family in fam.families and code in fam.reasons, (fam.name, family, code)
            wrote.add(fam.name)
        else:
            assert (family, code) in budget_words, (family, code)
        add(self, mask, st_, family, code, deny)

    monkeypatch.setattr(columnar.Rows, "add", checked)
    with Store.open(sample_db) as store:
        for chunk in chunks(store, conversations_per_chunk=12):
            replay_chunk(store, chunk, REGISTRY, REGISTRY.versions()[-1])
    assert wrote == {f.name for _s, f, _r, c in STAGES if c is not None}
