"""The effective token budget (replay.policy.effective_budget): the policy's budget, capped by
the model's context limit recorded on the request, less the reserve. The assembler takes its
budget from it, so what the views show is what was applied."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from ingest.store import Store
from replay.assembler import assemble
from replay.policy import RuntimePolicy, effective_budget, effective_budgets, load_registry, parse_runtime
from replay.snapshot import load_snapshot, request_from_row


def _requests(db: Path) -> list[dict]:
    with Store.open(db) as store:
        return store.assembly_requests().to_pylist()


def _capped_request(db: Path) -> dict:
    """A sample request whose model limit is below its recorded policy's budget (the story
    of a runtime that capped a request's input), found from the rows and the policy files."""
    registry = load_registry(None)
    capped = [r for r in _requests(db) if r["context_limit"] is not None
              and r["context_limit"] < registry.get(r["policy_version"]).budget.token_budget]
    assert capped, "the sample tells the story of a request its model's limit capped"
    return capped[0]


def test_the_models_limit_below_the_policy_budget_is_the_budget(sample_db: Path) -> None:
    row = _capped_request(sample_db)
    policy = load_registry(None).get(row["policy_version"])
    budget = effective_budget(policy, row["context_limit"])
    assert budget.capped_by == "context_limit"
    assert budget.budget == row["context_limit"] < budget.policy_budget == policy.budget.token_budget
    assert budget.reserve_tokens == policy.budget.reserve_tokens
    assert budget.available == row["context_limit"] - policy.budget.reserve_tokens
    assert "the model's context limit" in budget.sentence()


def test_the_assembler_applies_the_budget_the_views_show(sample_db: Path) -> None:
    """The capped request keeps its protected records over budget: the assembler says by
    how much, and that is their tokens less the available budget shown."""
    row = _capped_request(sample_db)
    policy = load_registry(None).get(row["policy_version"])
    with Store.open(sample_db) as store:
        snapshot = load_snapshot(store, row["conversation_id"], row["export_id"])
    out = assemble(snapshot, request_from_row(row), policy)
    protected = [r for r in out.records if r["reason_code"] == "recovery_protected"
                 and r["decision"] == "included"]
    assert protected, "the capped story keeps a failed call over budget"
    used = sum(int(r["tokens"]) for r in protected)
    available = effective_budget(policy, row["context_limit"]).available
    assert used > available
    assert all(f"kept although over budget by {used - available} tokens" in r["detail"]
               for r in protected)


def test_a_higher_or_missing_limit_leaves_the_policy_budget() -> None:
    policy = load_registry(None).get("v1")
    tokens, reserve = policy.budget.token_budget, policy.budget.reserve_tokens
    for limit in (tokens, tokens + 1, None):  # equal: the policy's budget is not above it
        budget = effective_budget(policy, limit)
        assert (budget.budget, budget.available, budget.capped_by) == (tokens, tokens - reserve, "policy")
        assert budget.context_limit == limit
    assert "no model context limit recorded" in effective_budget(policy, None).sentence()


def test_a_runtime_policy_has_no_budget_only_the_models_window() -> None:
    runtime = parse_runtime("claude-code:compaction=false")
    assert isinstance(runtime, RuntimePolicy)
    budget = effective_budget(runtime, 200_000)
    assert not budget.has_budget
    assert (budget.policy_budget, budget.reserve_tokens, budget.budget, budget.available,
            budget.capped_by) == (None, None, None, None, None)
    assert budget.context_limit == 200_000
    assert budget.sentence().startswith("no token budget") and "200,000" in budget.sentence()
    assert budget.to_json()["budget"] is None
    assert "no model window recorded" in effective_budget(runtime, None).short()


def test_the_columnar_form_is_the_same_rule() -> None:
    tokens = [0, 900, 4000, 6000]
    limits = [0, 899, 900, 4000, 5999, 6000, 10**6]
    reserve = 500
    for budget_tokens, limit, has in itertools.product(tokens, limits, (True, False)):
        policy = load_registry(None).get("v1").model_copy(
            update={"budget": load_registry(None).get("v1").budget.model_copy(
                update={"token_budget": budget_tokens, "reserve_tokens": reserve})})
        one = effective_budget(policy, limit if has else None)
        b, avail, capped = effective_budgets(np.array([budget_tokens]), np.array([reserve]),
                                             np.array([limit]), np.array([has]))
        assert (int(b[0]), int(avail[0]), bool(capped[0])) == (
            one.budget, one.available, one.capped_by == "context_limit")


@pytest.mark.parametrize("field", ["policy_budget", "context_limit", "reserve_tokens", "budget",
                                   "available", "capped_by", "policy_version"])
def test_the_json_names_every_number(field: str) -> None:
    assert field in effective_budget(load_registry(None).get("v4"), 900).to_json()
