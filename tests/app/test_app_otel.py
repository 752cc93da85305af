"""A governed runtime's assembly log over OpenTelemetry (docs/otel.md: contextlens.assembly.*
on the model-call span) in the app: the Omitted tab groups what the span says was left out
by its reason, and the request replays under its policy like an export's."""

from __future__ import annotations

from pathlib import Path

from inspector.app import ContextLensApp
from inspector.screens.diff import DiffScreen
from inspector.stores import resolve_store
from support.pilot import driven, run_async, screen_text, settle
from support.sql import sql

FIXTURES = Path(__file__).resolve().parents[1] / "otel_fixtures"


def test_omitted_records_of_a_governed_span_show_with_their_reasons_and_replay(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    db = resolve_store(FIXTURES / "assembly.jsonl")
    (aid, omitted), = sql(db, "SELECT assembly_id, count(*) FROM assembly_records "
                              "WHERE decision = 'omitted' GROUP BY assembly_id "
                              "ORDER BY count(*) DESC LIMIT 1")
    reasons = {r for (r,) in sql(db, "SELECT DISTINCT reason_code FROM assembly_records "
                                     f"WHERE assembly_id = '{aid}' AND decision = 'omitted'")}
    assert omitted >= 2 and reasons
    app = ContextLensApp(db_path=db, initial_assembly=aid,
                         policies_dir=FIXTURES / "policies")

    @run_async
    async def check() -> None:
        async with driven(app, size=(160, 45)) as pilot:
            await settle(pilot)
            await pilot.press("2")  # the Omitted tab
            await settle(pilot)
            tree = app.screen.query_one("#omitted-tree")
            groups = {node.data["reason"]: node for node in tree.root.children}
            assert set(groups) == reasons
            assert sum(len(g.children) for g in groups.values()) == omitted
            assert "older than the last 4 messages" in screen_text(app)

            # replayed under the policy the span names, the assembler sends what it recorded
            app.open_diff(aid, "last-4")
            await settle(pilot)
            assert isinstance(app.screen, DiffScreen)
            assert "No record changed" in screen_text(app)

    check()
