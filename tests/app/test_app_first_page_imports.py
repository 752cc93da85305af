"""The app's first page shows before anything it does not show is imported (issue 28, 6): not
the other screens (the assembly screen, the conversation, the command palette's provider),
not the replay engine the lint column runs (its markers follow the frame that shows the
rows). Untimed: the modules loaded when the first rows go into the table are checked, in a
fresh interpreter (``benchmarks/bench_first_page.py`` measures the time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# What the first frame of rows does not need; each costs a tenth of a second or more
NOT_FOR_THE_FIRST_PAGE = (
    "inspector.screens.assembly", "inspector.screens.conversation", "inspector.commands",
    "inspector.widgets.assembly_view", "inspector.widgets.record_panel",
    "replay.lint", "replay.safety", "replay.assembler", "replay.engine", "replay.service",
    "replay.policy",
)

_PROBE = """
import asyncio, json, sys
from pathlib import Path

from inspector.app import ContextLensApp
from inspector.screens.requests import RequestsScreen

seen = {}
shown = RequestsScreen._show_table


def show_table(self, *args, **kwargs):
    if self._display is not None and self._display.num_rows and "modules" not in seen:
        seen["modules"] = sorted(sys.modules)
        seen["rows"] = self._display.num_rows
    return shown(self, *args, **kwargs)


RequestsScreen._show_table = show_table


async def main():
    app = ContextLensApp(db_path=Path(sys.argv[1]))
    async with app.run_test(size=(140, 40)) as pilot:
        while "modules" not in seen:
            await pilot.pause()
        # the markers still come, once the rows are on screen (a bound, not a timing)
        screen = app.screen
        for _ in range(1000):
            if any(screen._display["findings"].to_pylist()):
                break
            await app.workers.wait_for_complete()
            await pilot.pause()
        seen["markers"] = screen._display["findings"].to_pylist()


asyncio.run(main())
print(json.dumps(seen))
"""


def test_the_first_rows_are_shown_before_other_screens_and_the_lint_engine_load(
        sample_db: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(sample_db)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["rows"] == 52  # the sample's every request, on its first page
    loaded = set(seen["modules"])
    assert sorted(m for m in NOT_FOR_THE_FIRST_PAGE if m in loaded) == []
    # the lint column was filled after the first frame (the sample has findings)
    assert any(seen["markers"])
