"""The request list at the sizes people use: the most useful columns that fit, a footer
that fits, and an empty result that says why."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from support.pilot import driven, run_async, screen_text, settle, status

from inspector.app import ContextLensApp
from inspector.widgets.request_columns import display_page, fit_columns
from readmodel.ids import id_affixes, short_ids


def headers(app: ContextLensApp) -> list[str]:
    table = app.screen.query_one("#requests-table")
    return [h.rstrip(" ↑↓") for h in table.backend.columns]


@run_async
async def test_a_small_terminal_keeps_the_useful_columns_and_the_whole_footer(
        sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        shown = headers(app)
        for name in ("time (UTC)", "request", "policy", "incl", "omit", "tokens"):
            assert name in shown
        # the least useful went first
        assert "tags" not in shown and "participant" not in shown
        last_line = screen_text(app).splitlines()[-1]
        assert "q Quit" in last_line and "palette" in last_line
        await pilot.resize_terminal(160, 45)
        await settle(pilot)
        wide = headers(app)
        assert set(shown) < set(wide) and "budget use" in wide


@run_async
async def test_an_80_column_terminal_keeps_the_safety_markers(sample_db: Path) -> None:
    """The lint column (⚠ where a safety invariant broke) is worth more than the model and
    the policy: at 80x24 it stays, they may go."""
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(80, 24)) as pilot:
        await settle(pilot)
        shown = headers(app)
        assert "lint" in shown and "request" in shown and "time (UTC)" in shown, shown
        assert "⚠" in screen_text(app)
        # what was left out and what it cost outrank the model's name
        assert {"omit", "tokens"} <= set(shown) and "model" not in shown, shown
        # the whole footer: compare's key, and quit at its end
        footer = screen_text(app).splitlines()[-1]
        assert "C Compare" in footer and footer.rstrip().endswith("q Quit"), footer
        # the help wraps inside the screen: its right border is on screen
        await pilot.press("question_mark")
        await settle(pilot)
        dialog = app.screen.query_one("#help-dialog")
        assert dialog.region.right <= 80


@run_async
async def test_an_unknown_filter_value_is_named_with_the_known_ones(sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"policy:v9", "enter")
        await settle(pilot)
        assert "0 of 52 requests" in status(app)
        text = screen_text(app)
        assert "No requests match: no request has policy:v9 (known: v4, v5, v6)." in text


def test_ids_lose_the_segments_every_id_shares() -> None:
    ids = pa.array(["22582fdc81:r0:asm", "22582fdc81:r10:asm", "22582fdc81:r9:asm"])
    prefix, suffix = id_affixes(ids)
    assert (prefix, suffix) == ("22582fdc81:", ":asm")
    later = pa.array(["22582fdc81:r11:asm", "other:r1:asm"])  # a later page
    assert short_ids(later, prefix, suffix).to_pylist() == ["r11", "other:r1:asm"]
    # ids with nothing in common by segment stay whole
    assert id_affixes(pa.array(["asm-001", "asm-002"])) == ("", "")


def _page(rows: int, scenario: str | None, participant: str) -> pa.Table:
    import datetime as dt

    when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table({
        "assembly_id": [f"a{i}" for i in range(rows)],
        "assembled_at": pa.array([when] * rows, pa.timestamp("us", tz="UTC")),
        "participant_id": [participant] * rows, "runtime_kind": ["chat"] * rows,
        "model": ["m-20250101"] * rows, "policy_version": ["v4"] * rows,
        "included_count": [3] * rows, "omitted_count": [0] * rows,
        "assembled_tokens": [1200] * rows, "baseline_tokens": [2000] * rows,
        "token_budget": [4000] * rows, "tags": pa.array([[]] * rows, pa.list_(pa.string())),
        "scenario": pa.array([scenario] * rows, pa.string()),
    })


def test_empty_and_one_valued_columns_are_not_shown() -> None:
    display = display_page(_page(3, None, "p-1"))
    keys = [c.key for c, _ in fit_columns(display, 200, "time")]
    # no scenario anywhere, one participant (said in the status line), no previews
    assert "scenario" not in keys and "participant" not in keys and "preview" not in keys
    assert "omit" not in keys  # nothing omitted on any row
    assert display["model"].to_pylist() == ["m"] * 3  # the model without its date
    narrow = [c.key for c, _ in fit_columns(display, 60, "time")]
    assert narrow[0] == "time" and len(narrow) < len(keys)
    assert sum(w + 2 for _, w in fit_columns(display, 60, "time")) <= 58


# ---------------------------------------------------------------------- the diff screen


@run_async
async def test_the_diff_shows_the_text_each_side_sends_for_a_changed_rendering(
        sample_db: Path) -> None:
    """A v5 incident request replayed under v4: the memory that v5 sent as current is a
    stale marker under v4, and the panel shows the marker the model would have received."""
    from support.pilot import first_assembly, replay_under

    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        diff = await replay_under(pilot, "v4")
        rows = [c for c in diff.diff.changes if c["change"] == "rendering_changed"]
        table = diff.query_one("#diff-table")
        target = next(i for i, c in enumerate(rows) if c["record_id"] == "mem-020")
        table.move_cursor(row=target, animate=False)
        await settle(pilot)
        b_side = str(diff.query_one("#change-b").render())
        assert "the model receives: [STALE: observed" in b_side
        assert "revalidate with calendar.freebusy]" in b_side
        # the table is as tall as its rows, and the status line names what enter does
        assert diff.query_one("#diff-holder").size.height == len(rows) + 2
        assert "enter: read the why" in screen_text(app).splitlines()[-2]  # enter opens the why


@run_async
async def test_the_diff_shows_what_a_runtime_sends_for_a_result_it_clears(tmp_path: Path) -> None:
    """A SWE-agent step replayed with one observation kept instead of two: the output that
    becomes cleared is shown as SWE-agent's placeholder on the replay's side (the recorded
    row, where it was sent whole, says nothing of what replaces it)."""
    from support import swe_trajectory

    from ingest.adapters import adapt
    from ingest.store import Store, ingest
    from inspector.screens.diff import DiffScreen

    res = adapt(swe_trajectory.write(tmp_path / "run.traj"), tmp_path / "export")
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    with Store.open(db) as store:
        last = store.list_assemblies(sort="assembled_at", descending=True, limit=1)["assembly_id"][0].as_py()
    app = ContextLensApp(db_path=db, initial_assembly=last)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        app.open_diff(last, "swe-agent:last_n_observations.n=1")
        await settle(pilot)
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        rows = [c for c in diff.diff.changes if c["change"] == "rendering_changed"]
        assert len(rows) == 1
        diff.query_one("#diff-table").move_cursor(
            row=next(i for i, c in enumerate(diff.diff.changes) if c is rows[0]), animate=False)
        await settle(pilot)
        b_side = str(diff.query_one("#change-b").render())
        assert "the model receives: Old environment output: (" in b_side, b_side
        assert "lines omitted)" in b_side and "[content cleared by the runtime]" not in b_side


@run_async
async def test_a_diff_without_findings_says_safety_none(sample_db: Path) -> None:
    from support.pilot import first_assembly, replay_under

    assembly = first_assembly(sample_db, "policy:v6")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        diff = await replay_under(pilot, "v6")
        assert not any(diff.diff.safety.regressions + diff.diff.safety.in_recording
                       + diff.diff.safety.fixes)
        assert "safety: none" in screen_text(app)


# ---------------------------------------------------------------------- the assembly header


@run_async
async def test_the_assembly_header_pictures_tokens_and_names_lint_findings(
        sample_db: Path) -> None:
    """A v5 incident request sent days-old calendar memories as current: the header names
    them under their lint rule, and draws the prompt's tokens by kind with the omitted."""
    from support.pilot import first_assembly

    assembly = first_assembly(sample_db, "tag:incident policy:v5")
    app = ContextLensApp(db_path=sample_db, initial_assembly=assembly)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        header = str(app.screen.query_one("#assembly-header").render())
        view = app.answers().assembly(assembly)
        tokens = view.tokens
        kinds = "  ".join(f"■ {k} {n:,}" for k, n in tokens.by_kind.items())
        assert "prompt █" in header and kinds in header
        assert "omitted ▒" in header and f"{tokens.omitted_tokens:,}" in header
        assert "⚠ lint stale_as_current: memory mem-014" in header


@run_async
async def test_a_large_store_shows_its_first_page_without_the_transcript_columns(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("inspector.screens.requests.DETAILS_MAX_REQUESTS", 10)
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        shown = headers(app)
        assert "tokens" in shown and "#" not in shown
        assert "last user or tool message" not in shown


# ---------------------------------------------------------------------- lint markers


@run_async
async def test_list_rows_carry_the_lint_and_safety_findings_of_their_request(
        sample_db: Path) -> None:
    """Each row's marker is what `contextlens lint` finds in that request: ⚠ and the count
    when a safety invariant broke, nothing on a clean request; the status line says what the
    symbols mean. Checked on every row at 100x30, the size that drops most columns."""
    from ingest.store import Store
    from replay.lint import SAFETY_RULES, lint

    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#requests-table")
        assert "lint" in headers(app)
        shown = table.backend.data.to_pylist()
        ids = app.screen._keys["assembly_id"].to_pylist()
        assert "lint: ⚠ safety ✗ error ! warning i info" in status(app)
    store = Store.open(sample_db)
    found: dict[str, list[str]] = {}
    for finding in lint(store):
        found.setdefault(finding.assembly_id or "", []).append(finding.rule)
    markers = [row["lint"] for row in shown]
    expected = []
    for assembly_id in ids:
        rules = found.get(assembly_id, [])
        safety = any(r in SAFETY_RULES for r in rules)
        expected.append(f"⚠{len(rules)}" if safety else (f"✗{len(rules)}" if rules else ""))
    assert markers == expected
    # the v5 incident is among them
    assert any(m.startswith("⚠") for m in markers) and "" in markers
