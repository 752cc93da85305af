"""The app's pickers offer the policies that apply (readmodel/applicable.py): a SWE-agent
trajectory's request its runtime's family and variants of it, never the sample's v1-v6; a
store of the sample and a trajectory both families, each compared over its own requests.
And the request list shows no made-up time: by time, the untimed come after the timed."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.palette import palette
from support.pilot import driven, run_async, screen_text, settle
from support.sql import sql

from ingest.adapters import adapt
from ingest.store import ingest
from inspector.app import ContextLensApp
from inspector.screens.compare import ComparePicker, CompareScreen
from inspector.screens.replay import PolicyPicker
from replay.policy import load_registry

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
SWE = REALDATA / "swe-agent" / "gpt4_fc__6e44b9__sweagenttestrepo-1c2844.traj"
SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
SAMPLE_VERSIONS = load_registry(None).versions()


def _store(tmp_path: Path, with_sample: bool) -> Path:
    if not SWE.is_file():
        pytest.skip(f"shared/realdata is not beside this checkout ({SWE.name})")
    db = tmp_path / "s.duckdb"
    if with_sample:
        ingest(SAMPLE, db)
    ingest(adapt(SWE, tmp_path / "export").export_dir, db)
    return db


@run_async
async def test_a_trajectory_s_replay_picker_offers_its_runtime_not_v1_to_v6(tmp_path: Path) -> None:
    db = _store(tmp_path, with_sample=False)
    app = ContextLensApp(db_path=db)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, PolicyPicker)
        offered = [p.version for p in picker.policies]
        assert offered[0] == "swe-agent" and picker.highlighted_version() == "swe-agent"
        assert not set(offered) & set(SAMPLE_VERSIONS), offered
        # its variants, as examples: each a version with one key changed
        assert "swe-agent:last_n_observations.n=3" in offered
        assert all(v == "swe-agent" or v.startswith("swe-agent:") for v in offered)
        text = screen_text(app)
        assert "v4" not in text.split() and "swe-agent:last_n_observations.n=3" in text


@run_async
async def test_a_mixed_store_s_compare_picker_offers_each_family_and_says_so(tmp_path: Path) -> None:
    db = _store(tmp_path, with_sample=True)
    swe = sql(db, "SELECT count(*) FROM context_assemblies WHERE policy_version = 'swe-agent'")[0][0]
    total = sql(db, "SELECT count(*) FROM context_assemblies")[0][0]
    app = ContextLensApp(db_path=db)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("C")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, ComparePicker)
        offered = [p.version for p in picker.policies]
        assert offered[:len(SAMPLE_VERSIONS)] == SAMPLE_VERSIONS and "swe-agent" in offered
        scope = str(picker.query_one("#compare-scope").render())
        assert f"{total - swe:,} under the registry" in scope and f"{swe:,} under swe-agent" in scope
        # B = v5 (A: the recording) runs over the export's requests only
        names = offered
        steps = names.index("v5") - names.index(picker.highlighted_version())
        await pilot.press(*(["down"] * steps if steps > 0 else ["up"] * -steps))
        assert picker.highlighted_version() == "v5"
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen) and screen.result is not None
        assert screen.result.requests == total - swe


@run_async
async def test_the_list_by_time_puts_the_untimed_after_the_timed_both_ways(tmp_path: Path) -> None:
    db = _store(tmp_path, with_sample=True)
    untimed = sql(db, "SELECT count(*) FROM context_assemblies "
                      "WHERE list_contains(tags, 'times:unrecorded')")[0][0]
    app = ContextLensApp(db_path=db)
    async with driven(app, size=(200, 45)) as pilot:
        await settle(pilot)
        for arrow in "↑↓":  # oldest first, then (s on the time column) newest first
            status = str(app.screen.query_one("#status").render())
            assert f"sorted by time (UTC) {arrow}" in status, status
            table = app.screen.query_one("#requests-table")
            times = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
            assert times[-untimed:] == ["not recorded"] * untimed, times
            assert all(t[:2] == "20" and not t.startswith("2000-") for t in times[:-untimed]), times
            await pilot.press("s")
            await settle(pilot)


@run_async
async def test_the_palette_offers_a_trajectory_its_runtime_not_v1_to_v6(tmp_path: Path) -> None:
    db = _store(tmp_path, with_sample=False)
    last = sql(db, "SELECT assembly_id FROM context_assemblies ORDER BY assembled_at DESC LIMIT 1")[0][0]
    app = ContextLensApp(db_path=db, initial_assembly=last)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        offered = await palette(pilot, "compare", "Compare recorded → swe-agent")
        assert not [o for o in offered if any(f" {v}" in o for v in SAMPLE_VERSIONS)], offered
        await pilot.press("escape")
        await pilot.pause()
        # the request named as the list names it (readmodel.ids)
        from readmodel.ids import id_affixes, short_id

        ids = [row[0] for row in sql(db, "SELECT assembly_id FROM context_assemblies")]
        shown = short_id(last, id_affixes(ids))
        assert shown != last
        offered = await palette(pilot, "replay", f"Replay {shown} under swe-agent")
        assert not [o for o in offered if any(f"under {v}" in o for v in SAMPLE_VERSIONS)], offered
