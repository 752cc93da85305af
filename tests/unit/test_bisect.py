"""Bisecting a record across policy versions (replay/bisect.py, ReadModel.bisect), on the
sample's incident and on small registries written for each rule."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

import pytest

from ingest.errors import ContextlensError, NotFoundError
from ingest.store import Store
from readmodel import BisectResult, ReadModel
from replay import bisect as bisect_module
from replay.bisect import hybrid
from replay.policy import PolicyRegistry, load_registry

INCIDENT = ["asm-033", "asm-034", "asm-035", "asm-036"]  # recorded under v5
CALENDAR = "mem-020"  # Dana's availability: volatile, google_derived
STALE_MARKER = {"decision": "included", "rendering": "stale_marker", "reason_code": "stale_marker"}
AS_CURRENT = {"decision": "included", "rendering": "compact_memory", "reason_code": "compact_memory"}


@pytest.fixture(scope="module")
def store(sample_db: Path) -> Iterator[Store]:
    with Store.open(sample_db) as s:
        yield s


def model(store: Store, texts: dict[str, str] | None = None) -> ReadModel:
    return ReadModel(store, PolicyRegistry.from_texts(texts) if texts else None)


def version(name: str, body: str = "", extends: str | None = None) -> str:
    parent = f'extends = "{extends}"\n' if extends else ""
    return f'version = "{name}"\n{parent}description = "test {name}"\n{body}'


# ---------------------------------------------------------------------- the incident


@pytest.mark.parametrize("assembly", INCIDENT)
def test_incident_names_v5_and_the_volatile_window(store: Store, assembly: str) -> None:
    result = model(store).bisect(assembly, CALENDAR, good="v4", bad="v5")
    assert isinstance(result, BisectResult)
    assert (result.version, result.previous) == ("v5", "v4")
    assert dict(result.good_state) == STALE_MARKER
    assert dict(result.bad_state) == AS_CURRENT
    assert [dict(k) for k in result.keys] == [
        {"key": "freshness.volatile", "before": 6, "after": 168}]
    assert result.alone
    # v5 widened three windows; the other two alone leave the memory marked stale
    alone = {c["key"]: c["flips_alone"] for c in result.changed}
    assert alone == {"freshness.volatile": True, "freshness.session": False,
                     "freshness.bounded": False}


def test_defaults_are_the_first_version_and_the_recorded_one(store: Store) -> None:
    result = model(store).bisect("asm-035", CALENDAR)
    assert (result.good, result.bad) == ("v1", "v5")
    assert [t["version"] for t in result.tried] == ["v1", "v2", "v3", "v4", "v5"]
    # v1 omits it as stale, v2..v4 mark it stale: the flip into "current" is still v5
    assert result.tried[0]["state"]["reason_code"] == "stale"
    assert result.version == "v5" and result.first_seen == "v5"
    assert [k["key"] for k in result.keys] == ["freshness.volatile"]


def test_the_result_is_frozen(store: Store) -> None:
    result = model(store).bisect("asm-035", CALENDAR, good="v4", bad="v5")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.version = "v4"  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.keys[0]["key"] = "window.max_messages"  # type: ignore[index]


# ---------------------------------------------------------------------- the rules


def test_a_state_that_flips_back_and_forth_names_the_last_flip(store: Store) -> None:
    texts = {
        "v1": version("v1"),
        "v2": version("v2", "[freshness]\nvolatile = 168\n", "v1"),
        "v3": version("v3", "[freshness]\nvolatile = 6\n", "v2"),
        "v4": version("v4", "[freshness]\nvolatile = 168\n", "v3"),
    }
    result = model(store, texts).bisect("asm-035", CALENDAR, bad="v4")
    states = [t["state"]["reason_code"] for t in result.tried]
    assert states == ["stale", "compact_memory", "stale", "compact_memory"]
    assert (result.version, result.previous, result.first_seen) == ("v4", "v3", "v2")
    assert "already under v2" in result.rule
    assert [(k["key"], k["before"], k["after"]) for k in result.keys] == [
        ("freshness.volatile", 6, 168)]


def test_keys_that_flip_it_only_together_are_the_smallest_set(store: Store) -> None:
    # v1 blocks google-derived data for anthropic AND calls the memory stale; v2 (another
    # root, no provider table at all) lifts both and also widens an unrelated window
    texts = {
        "v1": version("v1", '[privacy.providers.anthropic]\nblocked_classes = ["google_derived"]\n'),
        "v2": version("v2", "[freshness]\nvolatile = 168\n[window]\nmax_messages = 40\n"),
    }
    result = model(store, texts).bisect("asm-035", CALENDAR, bad="v2")
    assert result.good_state["reason_code"] == "provider_restricted"
    assert dict(result.bad_state) == AS_CURRENT
    assert not result.alone
    assert [(k["key"], k["before"], k["after"]) for k in result.keys] == [
        ("freshness.volatile", 6, 168),
        ("privacy.providers.anthropic.blocked_classes", ["google_derived"], None),
    ]
    assert {c["key"] for c in result.changed} == {
        "freshness.volatile", "privacy.providers.anthropic.blocked_classes",
        "window.max_messages"}
    assert not any(c["flips_alone"] for c in result.changed)


def test_when_the_search_budget_runs_out_every_changed_key_is_named(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bisect_module, "SEARCH_BUDGET", 0)
    texts = {
        "v1": version("v1", '[privacy.providers.anthropic]\nblocked_classes = ["google_derived"]\n'),
        "v2": version("v2", "[freshness]\nvolatile = 168\n[window]\nmax_messages = 40\n"),
    }
    result = model(store, texts).bisect("asm-035", CALENDAR, bad="v2")
    assert not result.alone
    assert [k["key"] for k in result.keys] == [c["key"] for c in result.changed]
    assert len(result.keys) == 3


def test_a_hybrid_takes_only_the_named_keys() -> None:
    registry = load_registry(None)
    policy = hybrid(registry, "v4", "v5", ("freshness.volatile",))
    assert policy.freshness.volatile == 168
    assert policy.freshness.session == 24 and policy.freshness.bounded == 72
    assert policy.budget.token_budget == 6000  # the rest is v4's


# ---------------------------------------------------------------------- refusals


def test_nothing_to_bisect_says_the_state(store: Store) -> None:
    with pytest.raises(ContextlensError, match=r"nothing to bisect: tool_memory mem-020 is "
                       r"already included as compact_memory \(compact_memory\) under --good v5"):
        model(store).bisect("asm-035", CALENDAR, good="v5", bad="v5")


def test_a_record_not_in_the_request_is_refused(store: Store) -> None:
    with pytest.raises(NotFoundError, match="record 'mem-nope' is not in assembly 'asm-035'"):
        model(store).bisect("asm-035", "mem-nope")


def test_unknown_versions_and_reversed_order_are_refused(store: Store) -> None:
    m = model(store)
    with pytest.raises(ContextlensError, match=r"--good: unknown policy version 'v9' \(known: v1"):
        m.bisect("asm-035", CALENDAR, good="v9")
    with pytest.raises(ContextlensError, match="--bad: unknown policy version 'v0'"):
        m.bisect("asm-035", CALENDAR, bad="v0")
    with pytest.raises(ContextlensError, match="--good v5 comes after --bad v4 in the registry order"):
        m.bisect("asm-035", CALENDAR, good="v5", bad="v4")


def test_a_recorded_version_missing_from_the_registry_asks_for_bad(store: Store) -> None:
    texts = {"v1": version("v1"), "v2": version("v2", extends="v1")}
    with pytest.raises(ContextlensError, match="recorded policy version 'v5', which is not in "
                       r"the registry \(v1, v2\): name one with --bad"):
        model(store, texts).bisect("asm-035", CALENDAR)
