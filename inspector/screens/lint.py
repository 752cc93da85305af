"""Lint findings in the app: transcript pitfalls and safety invariants of the recorded
assemblies, one row per finding (``ReadModel.lint``, the answer ``contextlens lint`` prints).

Opened from the command palette ("Lint", or "Safety findings" for the safety rules only);
Enter opens the finding's assembly.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Header, Static
from textual.worker import get_current_worker
from textual_fastdatatable import DataTable

from ingest.errors import ContextlensError
from readmodel.masking import Masker, masked_ids

from ..lens_app import lens_app
from ..widgets.arrow_table import arrow_table
from ..widgets.footer import KeysFooter
from ..widgets.safe import safe_text

COLUMNS = ("severity", "rule", "assembly", "record", "detail")


class LintLoaded(Message):
    def __init__(self, findings: list[dict[str, Any]], table: pa.Table | None = None) -> None:
        super().__init__()
        self.findings = findings
        self.table = table if table is not None else findings_table(findings)  # as shown


class LintFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def findings_table(findings: list[dict[str, Any]], reveal: bool = False) -> pa.Table:
    """The rows shown, one per finding (text is escaped by the table), the ids masked
    where secret-shaped unless ``reveal`` (``masked_ids``, columnar: each distinct id
    judged once); ``findings`` keep the real ids, to open a request by."""
    ids = masked_ids(pa.table({
        "assembly_id": pa.array([f.get("assembly_id") or "" for f in findings], pa.string()),
        "record_id": pa.array([f.get("record_id") for f in findings], pa.string()),
    }), Masker(reveal))
    kinds = [f.get("record_kind") for f in findings]
    return pa.table({
        "severity": pa.array([f.get("severity") or "" for f in findings], pa.string()),
        "rule": pa.array([f.get("rule") or "" for f in findings], pa.string()),
        "assembly": ids["assembly_id"],
        "record": pa.array([" ".join(str(p) for p in (k, r) if p)
                            for k, r in zip(kinds, ids["record_id"].to_pylist(), strict=True)],
                           pa.string()),
        "detail": pa.array([f.get("detail") or "" for f in findings], pa.string()),
    })


class LintScreen(Screen[None]):
    """Every lint finding of the store (or those of ``rules``)."""

    BINDINGS = [
        Binding("enter", "open", "Open assembly"),
        Binding("escape", "back", "Back"),
    ]

    DEFAULT_CSS = """
    #lint-detail { height: auto; max-height: 4; padding: 0 1; background: $boost; }
    """

    def __init__(self, rules: frozenset[str] | None = None, title: str = "Lint") -> None:
        super().__init__()
        self.rules = rules  # None: every rule
        self.title_text = title
        self.findings: list[dict[str, Any]] = []
        self._shown: pa.Table | None = None  # the rows as shown (ids masked)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(self.title_text, id="lint-title", markup=False)
        yield Vertical(Static("Linting…", classes="placeholder", markup=False), id="lint-holder")
        # the highlighted finding's detail whole (the table cuts it: the date that matters
        # comes last)
        yield Static("", id="lint-detail", markup=False)
        yield Static("", id="lint-status", markup=False)
        yield KeysFooter()

    def on_mount(self) -> None:
        # the details and ids are masked or revealed as the app is: linted again on a change
        self.watch(self.app, "reveal", lambda _reveal: self.run_lint(), init=False)
        self.run_lint()

    @work(thread=True, exclusive=True, group="lint")
    def run_lint(self) -> None:
        app = lens_app(self)
        reveal = bool(app.reveal)
        try:
            found = app.answers().lint(reveal=reveal)
        except ContextlensError as err:
            self.post_message(LintFailed(Masker(reveal).text(str(err))))
            return
        if self.rules is not None:
            found = [f for f in found if f.get("rule") in self.rules]
        if not get_current_worker().is_cancelled:
            self.post_message(LintLoaded(found, findings_table(found, reveal)))

    async def on_lint_loaded(self, message: LintLoaded) -> None:
        self.findings = message.findings
        self._shown = message.table
        holder = self.query_one("#lint-holder")
        await holder.remove_children()
        count = len(self.findings)
        status = self.query_one("#lint-status", Static)
        if not count:
            await holder.mount(Static("No findings.", classes="placeholder", markup=False))
            status.update("0 findings")
            return
        table = arrow_table(message.table, id="lint-table",
                            cursor_type="row", max_column_content_width=90)
        await holder.mount(table)
        table.focus()
        errors = sum(1 for f in self.findings if f.get("severity") == "error")
        requests = len({f.get("assembly_id") for f in self.findings})
        status.update(f"{count:,} finding{'s' if count != 1 else ''} ({errors:,} errors) "
                      f"in {requests:,} request{'s' if requests != 1 else ''} · "
                      "enter: open the assembly")

    def on_lint_failed(self, message: LintFailed) -> None:
        holder = self.query_one("#lint-holder")
        holder.remove_children()
        holder.mount(Static(message.error, classes="placeholder", markup=False))

    @on(DataTable.RowHighlighted, "#lint-table")
    def row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        shown = self._shown
        if shown is not None and 0 <= event.cursor_row < shown.num_rows:
            row = {name: shown[name][event.cursor_row].as_py() for name in shown.column_names}
            where = f"{row['assembly']} {row['record']}"  # the ids as the table shows them
            self.query_one("#lint-detail", Static).update(
                safe_text(f"{row['rule']} · {where.strip()}: {row['detail']}"))

    @on(DataTable.RowSelected, "#lint-table")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        self._open(event.cursor_row)

    def _open(self, row: int) -> None:
        if 0 <= row < len(self.findings):
            assembly_id = self.findings[row].get("assembly_id")
            if assembly_id:
                lens_app(self).open_assembly(assembly_id)

    def action_open(self) -> None:
        for table in self.query("#lint-table").results(DataTable):
            if table.row_count:
                self._open(table.cursor_row)

    def action_back(self) -> None:
        self.app.pop_screen()
