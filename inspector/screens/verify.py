"""Verify: replay every recorded assembly under its own recorded policy version and list the
ones whose selection drifted from what was recorded.

The replays run in a thread worker; its progress callback hands ``(done, total)`` to the
screen through ``App.call_from_thread``, so the bar moves while the screen stays live.
Enter on a drifted request opens its diff (recorded against the replay).

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

from ..widgets.arrow_table import arrow_table
from ..widgets.safe import safe_text
from readmodel import CHANGE_CLASSES, RECORDED


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """An attribute of a result object, or a key of its JSON form."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)

PROGRESS_STEPS = 200  # at most this many progress updates per run


class VerifyCancelled(Exception):
    """The screen went away while verify was running."""


class VerifyFinished(Message):
    def __init__(self, checked: int, faithful: int, drifted: list[dict[str, Any]],
                 errors: list[dict[str, Any]]) -> None:
        super().__init__()
        self.checked = checked
        self.faithful = faithful
        self.drifted = drifted
        self.errors = errors  # assemblies that could not be replayed, e.g. an unknown policy


class VerifyFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def change_summary(diff: Any) -> str:
    counts = (_get(diff, "summary") or {}).get("counts") or {}
    parts = [f"{name} {counts[name]}" for name in CHANGE_CLASSES
             if name != "unchanged" and counts.get(name)]
    return ", ".join(parts) or "selection hash only"


def drifted_rows(drifted: list[dict[str, Any]]) -> pa.Table:
    """One row per drifted assembly (bounded by the drifts found)."""
    rows: dict[str, list[Any]] = {name: [] for name in (
        "assembly", "policy", "recorded by", "changes", "tokens", "safety"
    )}
    for item in drifted:
        diff = item["diff"]
        summary = _get(diff, "summary") or {}
        rows["assembly"].append(item["assembly_id"])
        rows["policy"].append(item.get("policy_version"))
        rows["recorded by"].append(item.get("assembler_version"))
        rows["changes"].append(change_summary(diff))
        rows["tokens"].append(f"{summary.get('tokens_a', 0):,} → {summary.get('tokens_b', 0):,}")
        safety = len(_get(diff, "safety") or [])
        rows["safety"].append(f"⚠ {safety}" if safety else "")
    return pa.table({name: pa.array(values, pa.string()) for name, values in rows.items()})


class VerifyScreen(Screen[None]):
    """Replay every recorded assembly under its recorded policy; list the drifted ones."""

    BINDINGS = [
        Binding("enter", "open", "Open diff", show=False),
        Binding("r", "rerun", "Verify again"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.checked = 0
        self.faithful = 0
        self.drifted: list[dict[str, Any]] = []
        self.running = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(
            "Verify: every recorded assembly replayed under its own recorded policy version",
            id="verify-title",
            markup=False,
        )
        bar = ProgressBar(id="verify-progress", show_eta=False)
        yield bar
        yield Static("", id="verify-summary", markup=False)
        yield Vertical(id="verify-holder")
        yield Static("", id="verify-status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.start()

    def start(self) -> None:
        self.running = True
        self.set_class(True, "-running")
        self.set_class(False, "-drifted")
        self.query_one("#verify-progress", ProgressBar).update(total=None, progress=0)
        self.query_one("#verify-summary", Static).update("Replaying…")
        self.query_one("#verify-holder").remove_children()
        self.query_one("#verify-status", Static).update("esc: back (verify stops)")
        self.run_verify()

    # ------------------------------------------------------------------ the worker

    @work(thread=True, exclusive=True, group="verify")
    def run_verify(self) -> None:
        worker = get_current_worker()
        answers = self.app.answers()  # type: ignore[attr-defined]
        last = [-1]

        def progress(done: int, total: int) -> None:
            if worker.is_cancelled:
                raise VerifyCancelled
            step = max(total // PROGRESS_STEPS, 1)
            if done == total or done - last[0] >= step:
                last[0] = done
                self.app.call_from_thread(self._progressed, done, total)

        try:
            result = answers.verify(progress=progress)
        except VerifyCancelled:
            return
        except ContextlensError as err:
            self.post_message(VerifyFailed(str(err)))
            return
        drifted = [dict(item) for item in (_get(result, "drifted") or [])]
        drifted.sort(key=lambda item: item["assembly_id"])
        errors = [dict(item) for item in (_get(result, "errors") or [])]
        if not worker.is_cancelled:
            self.post_message(VerifyFinished(
                int(_get(result, "checked")), int(_get(result, "faithful")), drifted, errors
            ))

    def _progressed(self, done: int, total: int) -> None:
        if not self.is_attached:
            return  # the user left while the last replays ran
        self.query_one("#verify-progress", ProgressBar).update(total=total, progress=done)
        self.query_one("#verify-summary", Static).update(f"Replaying… {done:,} of {total:,} assemblies")

    # ------------------------------------------------------------------ results

    async def on_verify_finished(self, message: VerifyFinished) -> None:
        self.running = False
        self.checked, self.faithful, self.drifted = message.checked, message.faithful, message.drifted
        self.set_class(False, "-running")
        self.set_class(bool(self.drifted), "-drifted")
        bar = self.query_one("#verify-progress", ProgressBar)
        bar.update(total=max(self.checked, 1), progress=max(self.checked, 1))
        summary = Text()
        summary.append(f"checked {self.checked:,}", style="bold")
        summary.append(f"  ·  faithful {self.faithful:,}", style="bold green")
        summary.append(f"  ·  drifted {len(self.drifted):,}",
                       style="bold red" if self.drifted else "bold")
        if message.errors:
            first = message.errors[0]
            summary.append(f"  ·  not replayable {len(message.errors):,}", style="bold yellow")
            summary.append(
                f" (first: {safe_text(first.get('assembly_id'))}: {safe_text(first.get('error'))})",
                style="yellow",
            )
        if self.drifted:
            summary.append("  —  replaying under the recorded policy selects differently for these:")
        elif not message.errors:
            summary.append("  —  every replay selects what was recorded.")
        self.query_one("#verify-summary", Static).update(summary)
        holder = self.query_one("#verify-holder")
        await holder.remove_children()
        if self.drifted:
            table = arrow_table(drifted_rows(self.drifted), id="verify-table", max_column_content_width=70)
            await holder.mount(table)
            table.focus()
            self.query_one("#verify-status", Static).update(
                "enter: diff of the recorded assembly against its replay · r: verify again · esc: back"
            )
        else:
            self.query_one("#verify-status", Static).update("r: verify again · esc: back")

    def on_verify_failed(self, message: VerifyFailed) -> None:
        self.running = False
        self.set_class(False, "-running")
        self.query_one("#verify-summary", Static).update(
            Text(f"Verify failed: {safe_text(message.error)}", style="bold red")
        )

    # ------------------------------------------------------------------ actions

    @on(DataTable.RowSelected, "#verify-table")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        self._open(event.cursor_row)

    def _open(self, row: int) -> None:
        if not 0 <= row < len(self.drifted):
            return
        item = self.drifted[row]
        version = str(item.get("policy_version"))
        note = (
            f"drift: recorded by assembler {item.get('assembler_version')} under {version}; "
            f"the reference assembler replaying the same request under {version} selects differently"
        )
        self.app.open_diff(  # type: ignore[attr-defined]
            item["assembly_id"], version, RECORDED, diff=item["diff"], note=note
        )

    def action_open(self) -> None:
        for table in self.query("#verify-table").results(DataTable):
            self._open(table.cursor_row)

    def action_rerun(self) -> None:
        if not self.running:
            self.start()

    def action_back(self) -> None:
        self.app.workers.cancel_node(self)
        self.app.pop_screen()
