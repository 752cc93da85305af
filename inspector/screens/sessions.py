"""The agent sessions on this machine (``readmodel.local_sessions``, the rows
``contextlens sessions`` prints), newest first. Enter opens the highlighted one: the app
adapts and ingests it in a worker and shows its requests (``ContextLensApp.open_source``).

Opened from the command palette ("Sessions"), or first with ``contextlens --sessions``.
"""

from __future__ import annotations

from pathlib import Path
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
from ingest.timefmt import table_time

from ..lens_app import lens_app
from ..widgets.arrow_table import arrow_table
from ..widgets.footer import KeysFooter
from ..widgets.safe import safe_text

COLUMNS = ("last written (UTC)", "runtime", "requests", "size", "project", "first prompt")


class SessionsLoaded(Message):
    def __init__(self, found: Any) -> None:
        super().__init__()
        self.found = found  # readmodel.SessionList


class SessionsFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def sessions_table(rows: Any) -> pa.Table:
    """The rows shown, one per session (text is escaped by the table)."""
    from readmodel.sessions import size_text

    return pa.table({
        "last written (UTC)": [table_time(r.last_written) for r in rows],
        "runtime": [r.runtime for r in rows],
        "requests": pa.array([r.requests for r in rows], pa.int64()),
        "size": [size_text(r.size) for r in rows],
        "project": [r.project or "" for r in rows],
        "first prompt": [r.first_prompt or "" for r in rows],
    })


class SessionsScreen(Screen[None]):
    """Every agent session found on this machine; enter opens one."""

    BINDINGS = [
        Binding("enter", "open", "Open session"),
        Binding("R", "reload", "Reload"),
        Binding("escape", "back", "Back"),
    ]

    DEFAULT_CSS = """
    #sessions-detail { height: auto; max-height: 3; padding: 0 1; background: $boost; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.rows: tuple[Any, ...] = ()

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Agent sessions on this machine, newest first", id="sessions-title",
                     markup=False)
        yield Vertical(Static("Looking for sessions…", classes="placeholder", markup=False),
                       id="sessions-holder")
        # the highlighted session's file, whole (the one thing the table does not show)
        yield Static("", id="sessions-detail", markup=False)
        yield Static("", id="sessions-status", markup=False)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.watch(self.app, "reveal", self._reveal_changed, init=False)
        self.load()

    def _reveal_changed(self, _reveal: bool) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="sessions")
    def load(self) -> None:
        from readmodel import local_sessions

        try:
            found = local_sessions(reveal=bool(lens_app(self).reveal))
        except ContextlensError as err:
            self.post_message(SessionsFailed(str(err)))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(SessionsLoaded(found))

    async def on_sessions_loaded(self, message: SessionsLoaded) -> None:
        found = message.found
        # the session under the cursor stays under it when the rows come again (R, reveal)
        old = next(iter(self.query("#sessions-table").results(DataTable)), None)
        kept = (self.rows[old.cursor_row].path
                if old is not None and 0 <= old.cursor_row < len(self.rows) else None)
        self.rows = found.rows
        holder = self.query_one("#sessions-holder")
        await holder.remove_children()
        status = self.query_one("#sessions-status", Static)
        skipped = f" · {len(found.notes)} skipped: {found.notes[0]}" if found.notes else ""
        if not self.rows:
            looked = "\n".join(f"  {p}" for p in found.looked_in)
            await holder.mount(Static(safe_text(f"No agent sessions found. Looked in:\n{looked}"),
                                      classes="placeholder", markup=False))
            status.update(safe_text(f"0 sessions{skipped}"))
            return
        table = arrow_table(sessions_table(self.rows), id="sessions-table",
                            cursor_type="row", max_column_content_width=80)
        await holder.mount(table)
        table.focus()
        paths = [r.path for r in self.rows]
        if kept in paths:
            table.move_cursor(row=paths.index(kept), animate=False)
        n = len(self.rows)
        masked = f" · {found.masked} masked" if found.masked else ""
        status.update(safe_text(f"{n:,} session{'s' if n != 1 else ''}{masked}{skipped} · "
                                "enter: open it"))

    def on_sessions_failed(self, message: SessionsFailed) -> None:
        holder = self.query_one("#sessions-holder")
        holder.remove_children()
        holder.mount(Static(safe_text(message.error), classes="placeholder", markup=False))

    @on(DataTable.RowHighlighted, "#sessions-table")
    def row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if 0 <= event.cursor_row < len(self.rows):
            row = self.rows[event.cursor_row]
            self.query_one("#sessions-detail", Static).update(safe_text(row.path))

    @on(DataTable.RowSelected, "#sessions-table")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        self._open(event.cursor_row)

    def _open(self, row: int) -> None:
        if 0 <= row < len(self.rows):
            chosen = self.rows[row]
            lens_app(self).open_source(Path(chosen.path), chosen.runtime)

    def action_open(self) -> None:
        for table in self.query("#sessions-table").results(DataTable):
            if table.row_count:
                self._open(table.cursor_row)

    def action_reload(self) -> None:
        self.load()

    def action_back(self) -> None:
        self.app.pop_screen()
