"""Verify: replay every recorded assembly under its own recorded policy version, compare it
with the recorded rows, and list the drifted and inconsistent ones with their verdict.

The replays run in a thread worker; its progress callback hands ``(done, total)`` to the
screen through ``App.call_from_thread``, so the bar moves while the screen stays live, and
the line under it says how many requests are done, at what rate and how long is left
(``readmodel.progress``, as compare says it).
Enter on a listed request opens its diff (the recorded rows against the replay).

Pipeline: ``VerifyProgressed`` (from the callback) -> ``VerifyFinished`` or ``VerifyFailed``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, ProgressBar, Static
from textual.worker import get_current_worker
from textual_fastdatatable import DataTable

from ingest.errors import ContextlensError

from ..lens_app import lens_app
from ..widgets.arrow_table import arrow_table, refill
from ..widgets.id_text import IdText
from ..widgets.safe import one_line, safe_text
from readmodel import RECORDED, AssemblyVerdict, VerifyResult
from readmodel.ids import NO_AFFIXES, store_id_affixes
from readmodel.progress import ProgressClock


PROGRESS_STEPS = 200  # at most this many progress updates per run


class VerifyCancelled(Exception):
    """The screen went away while verify was running."""


class VerifyFinished(Message):
    def __init__(self, result: VerifyResult, affixes: tuple[str, str] = NO_AFFIXES) -> None:
        super().__init__()
        self.result = result
        self.affixes = affixes  # the store's id affixes: ids listed as the request list shows them


class VerifyFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


LISTED = ("drifted", "inconsistent")  # the verdicts the table lists (the others are counted)


def record_summary(item: AssemblyVerdict, most: int = 3,
                   affixes: tuple[str, str] = NO_AFFIXES, ids: IdText | None = None) -> str:
    """The first differing records and their fields, e.g. ``mem-005 decision, position``;
    ids as ``ids`` shows them (masked when not given)."""
    ids = ids if ids is not None else IdText(False, affixes)
    parts = [f"{ids(r.record_id, None)} "
             f"{', '.join(f.field for f in r.fields)}" for r in item.records[:most]]
    if len(item.records) > most:
        parts.append(f"+{len(item.records) - most} more")
    if item.problems and not parts:
        return ids.prose("; ".join(item.problems))  # they name records
    return " · ".join(parts) or "-"


def listed_rows(listed: list[AssemblyVerdict], affixes: tuple[str, str] = NO_AFFIXES,
                ids: IdText | None = None) -> pa.Table:
    """One row per drifted or inconsistent assembly (bounded by those found), its ids as
    the request list shows them (``IdText``: masked when ``ids`` is not given)."""
    ids = ids if ids is not None else IdText(False, affixes)
    rows: dict[str, list[Any]] = {name: [] for name in (
        "assembly", "verdict", "policy", "recorded by", "records differ", "first differences"
    )}
    for item in listed:
        rows["assembly"].append(ids(item.assembly_id, None, assembly=True))
        rows["verdict"].append(item.verdict)
        rows["policy"].append(ids(item.policy_version, None))
        rows["recorded by"].append(ids(item.assembler_version, None))
        moved = item.position_only
        rows["records differ"].append(
            f"{len(item.records) - moved}" + (f" (+{moved} shifted)" if moved else ""))
        rows["first differences"].append(record_summary(item, affixes=affixes, ids=ids))
    return pa.table({name: pa.array(values, pa.string()) for name, values in rows.items()})


class VerifyScreen(Screen[None]):
    """Replay every recorded assembly under its recorded policy; list the drifted and the
    inconsistent ones."""

    BINDINGS = [
        Binding("enter", "open", "Open diff", show=False),
        Binding("R", "rerun", "Verify again"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, flt: Any = None, filter_text: str = "") -> None:
        super().__init__()
        self.flt = flt  # the request list's filter: verify what it selects, as compare does
        self.filter_text = filter_text
        self.checked = 0
        self.faithful = 0
        self.result: VerifyResult | None = None
        self.listed: list[AssemblyVerdict] = []
        self.running = False
        self.affixes: tuple[str, str] = NO_AFFIXES  # the store's (VerifyFinished)
        self._clock = ProgressClock()  # the run's start: rate and time left
        self._run = 0  # which run is on screen (R starts another)

    def compose(self) -> ComposeResult:
        yield Header()
        what = (f"the requests matching {one_line(self.filter_text, 60)}"
                if self.filter_text.strip() else "every recorded assembly")
        yield Static(f"Verify: {what} replayed under its own recorded policy version",
                     id="verify-title", markup=False)
        bar = ProgressBar(id="verify-progress", show_eta=False)
        yield bar
        yield Static("", id="verify-summary", markup=False)
        yield Vertical(id="verify-holder")
        yield Static("", id="verify-status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "reveal", self._reveal_changed, init=False)
        self.start()

    def _reveal_changed(self, _reveal: bool) -> None:
        """The listed ids shown again, masked or revealed as the app now is."""
        for table in self.query("#verify-table").results(DataTable):
            refill(table, listed_rows(self.listed, self.affixes, self.ids()), keep_view=True)

    def start(self) -> None:
        self.running = True
        self.set_class(True, "-running")
        self.set_class(False, "-drifted")
        self.query_one("#verify-progress", ProgressBar).update(total=None, progress=0)
        self.query_one("#verify-summary", Static).update("Replaying…")
        self.query_one("#verify-holder").remove_children()
        self._run += 1  # a late report of an earlier run is not this run's
        self._clock = ProgressClock()
        self.query_one("#verify-status", Static).update("esc: back (verify stops)")
        self.run_verify()

    # ------------------------------------------------------------------ the worker

    @work(thread=True, exclusive=True, group="verify")
    def run_verify(self) -> None:
        worker = get_current_worker()
        answers = lens_app(self).answers()
        last = [-1]
        run = self._run

        def progress(done: int, total: int) -> None:
            if worker.is_cancelled:
                raise VerifyCancelled
            step = max(total // PROGRESS_STEPS, 1)
            # the first report at once (the count to do), then at most PROGRESS_STEPS
            if last[0] < 0 or done == total or done - last[0] >= step:
                last[0] = done
                self.app.call_from_thread(self._progressed, done, total, run)

        try:
            result = answers.verify(self.flt, progress=progress, workers=None)  # a process per CPU
            affixes = store_id_affixes(answers)
        except VerifyCancelled:
            return
        except ContextlensError as err:
            self.post_message(VerifyFailed(str(err)))
            return
        if not worker.is_cancelled:
            self.post_message(VerifyFinished(result, affixes))

    def _progressed(self, done: int, total: int, run: int) -> None:
        if not self.is_attached or not self.running or run != self._run:
            return  # the user left while the last replays ran, or this run is over
        self.query_one("#verify-progress", ProgressBar).update(total=max(total, 1), progress=done)
        self.query_one("#verify-summary", Static).update(
            "Replaying… " + self._clock.report(done, total).text("requests"))

    # ------------------------------------------------------------------ results

    async def on_verify_finished(self, message: VerifyFinished) -> None:
        self.running = False
        result = self.result = message.result
        self.affixes = message.affixes
        self.checked, self.faithful = result.checked, result.faithful
        self.listed = [item for item in result.results if item.verdict in LISTED]
        self.set_class(False, "-running")
        self.set_class(bool(self.listed), "-drifted")
        bar = self.query_one("#verify-progress", ProgressBar)
        bar.update(total=max(self.checked, 1), progress=max(self.checked, 1))
        summary = Text()
        summary.append(f"checked {self.checked:,}", style="bold")
        summary.append(f"  ·  faithful {self.faithful:,}", style="bold green")
        summary.append(f"  ·  drifted {result.drifted:,}", style="bold red" if result.drifted else "bold")
        summary.append(f"  ·  inconsistent {result.inconsistent:,}",
                       style="bold red" if result.inconsistent else "bold")
        summary.append(f"  ·  not replayable {result.not_replayable:,}",
                       style="bold yellow" if result.not_replayable else "bold")
        if result.missing_policies:
            summary.append(f"\n{safe_text(result.missing_policies)}", style="yellow")
        if self.listed:
            summary.append("\nthe replay under the recorded policy differs from these recordings, "
                           "or the recording contradicts itself:")
        elif not result.not_replayable:
            summary.append("  —  every replay selects what was recorded.")
        self.query_one("#verify-summary", Static).update(summary)
        holder = self.query_one("#verify-holder")
        await holder.remove_children()
        if self.listed:
            table = arrow_table(listed_rows(self.listed, self.affixes, self.ids()),
                                id="verify-table",
                                max_column_content_width=70)
            await holder.mount(table)
            table.focus()
            self.query_one("#verify-status", Static).update(
                "enter: diff of the recorded rows against the replay · R: verify again · esc: back"
            )
        else:
            self.query_one("#verify-status", Static).update("R: verify again · esc: back")

    def on_verify_failed(self, message: VerifyFailed) -> None:
        self.running = False
        self.set_class(False, "-running")
        self.query_one("#verify-summary", Static).update(
            Text(f"Verify failed: {self.ids().prose(message.error)}", style="bold red")
        )

    # ------------------------------------------------------------------ actions

    @on(DataTable.RowSelected, "#verify-table")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        self._open(event.cursor_row)

    def _open(self, row: int) -> None:
        if not 0 <= row < len(self.listed):
            return
        item = self.listed[row]
        version = item.policy_version
        if not item.replayable:
            self.query_one("#verify-status", Static).update(
                f"{self.ids()(item.assembly_id, None, assembly=True)}: no policy "
                f"{self.ids()(version, None)} to replay it, "
                "so no diff · R: verify again · esc: back"
            )
            return
        if item.verdict == "inconsistent":
            note = (f"inconsistent: {'; '.join(item.problems)}; the diff compares the recorded "
                    f"rows with the replay under {version}")
        else:
            note = (f"drift: recorded by assembler {item.assembler_version} under {version}; "
                    f"the reference assembler replaying the same request under {version} "
                    "selects differently")
        lens_app(self).open_diff(item.assembly_id, version, RECORDED, note=note)

    def ids(self) -> IdText:
        """Ids as the request list shows them: masked unless the app reveals."""
        return IdText(bool(lens_app(self).reveal), self.affixes)

    def action_open(self) -> None:
        for table in self.query("#verify-table").results(DataTable):
            self._open(table.cursor_row)

    def action_rerun(self) -> None:
        if not self.running:
            self.start()

    def action_back(self) -> None:
        self.app.workers.cancel_node(self)
        self.app.pop_screen()
