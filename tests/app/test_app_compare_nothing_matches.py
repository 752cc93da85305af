"""Compare's picker over a filter that selects no request: side B says so in one line
instead of being empty, and enter (or any key that chooses) runs nothing."""

from __future__ import annotations

from pathlib import Path

from support.pilot import driven, run_async, screen_text, settle

from inspector.app import ContextLensApp
from inspector.screens.compare import ComparePicker, CompareScreen
from inspector.screens.requests import RequestsScreen

NOTHING = "no request matches the filter: nothing to compare"


@run_async
async def test_a_filter_matching_nothing_says_there_is_nothing_to_compare(
        sample_db: Path) -> None:
    app = ContextLensApp(db_path=sample_db)
    async with driven(app, size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"policy:v9", "enter")
        await settle(pilot)
        assert app.screen.query_one("#requests-table").row_count == 0
        # enter typed at once, before the picker knows there is nothing: kept for nothing
        await pilot.press("C", "enter")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, ComparePicker)
        versions = picker.query_one("#policy-versions")
        assert [str(versions.get_option_at_index(i).prompt)
                for i in range(versions.option_count)] == [NOTHING]
        assert not picker.query_one("#side-a-column").display  # nothing to offer there
        text = screen_text(app)
        assert text.count(NOTHING) == 1 and "enter: compare" not in text
        await pilot.press("enter", "down", "enter", "tab", "enter", "a", "enter")
        await settle(pilot)
        assert app.screen is picker and not isinstance(app.screen, CompareScreen)
        assert picker.policies == []
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RequestsScreen)
