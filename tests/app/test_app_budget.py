"""The effective token budget in the inspector, at 80x24: the assembly screen's header says
which budget its request was assembled under, the diff's says each side's, the model's limit
named where it capped the policy's budget. Numbers come from the policy files and the
request rows."""

from __future__ import annotations

from pathlib import Path

from support.pilot import driven, run_async, screen_text, settle

from ingest.store import Store
from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.screens.diff import DiffScreen
from replay.policy import load_registry

SIZE = (80, 24)


def _capped(db: Path) -> dict:
    """A request whose model limit is below every sample policy's token budget."""
    registry = load_registry(None)
    lowest = min(registry.get(v).budget.token_budget for v in registry.versions())
    with Store.open(db) as store:
        rows = store.assembly_requests().to_pylist()
    row = next((r for r in rows if r["context_limit"] is not None and r["context_limit"] < lowest),
               None)
    assert row is not None, "the sample has a request its runtime capped"
    return row


def _short(version: str, limit: int) -> str:
    budget = load_registry(None).get(version).budget
    return (f"{limit:,} (model limit; policy {budget.token_budget:,}) - reserve "
            f"{budget.reserve_tokens:,} = {limit - budget.reserve_tokens:,}")


@run_async
async def test_the_assembly_header_names_the_models_limit_as_the_cap(sample_db: Path) -> None:
    row = _capped(sample_db)
    app = ContextLensApp(db_path=sample_db, initial_assembly=row["assembly_id"])
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        text = screen_text(app)
        assert f"budget {_short(row['policy_version'], row['context_limit'])}" in text


@run_async
async def test_the_diff_header_shows_each_sides_budget(sample_db: Path) -> None:
    row = _capped(sample_db)
    app = ContextLensApp(db_path=sample_db, initial_assembly=row["assembly_id"])
    async with driven(app, size=SIZE) as pilot:
        await settle(pilot)
        other = next(v for v in load_registry(None).versions()
                     if load_registry(None).get(v).budget.token_budget
                     != load_registry(None).get(row["policy_version"]).budget.token_budget)
        app.open_diff(row["assembly_id"], other)
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        text = screen_text(app)
        assert f"budget A {_short(row['policy_version'], row['context_limit'])}" in text
        assert f"budget B {_short(other, row['context_limit'])}" in text
        # the same budget on both sides is said once
        app.pop_screen()
        app.open_diff(row["assembly_id"], row["policy_version"])
        await settle(pilot)
        text = screen_text(app)
        assert f"budget (A and B) {_short(row['policy_version'], row['context_limit'])}" in text
