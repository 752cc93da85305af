"""The request list: every recorded context assembly, filtered, sorted and paged with SQL.

The table holds pages of ``PAGE_ROWS`` rows fetched from ``Store.list_assemblies``; moving
the cursor near the last loaded row fetches the next page. Counts are "N of M": N requests
match the filter, M are in the store.

(A little over 500 lines: paging, the debounced filter, sorting, loading ahead and the lint
column are the one screen's behaviour, each kept beside the events that drive it.)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.coordinate import Coordinate
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Header, Input, Static
from textual.worker import get_current_worker
from textual_fastdatatable import DataTable

from ingest.errors import ContextlensError
from ingest.secrets import MASK_PREFIX
from ingest.tags import TIMES_UNRECORDED

from ..widgets.arrow_table import arrow_table, refill
from ..widgets.assembly_view import assembly_content
from ..widgets.footer import KeysFooter
from ..widgets.request_columns import (
    ARROWS, BY_KEY, COLUMNS, CONSTANT_ELSEWHERE, MARKER_LEGEND, Column, constant_value, cut,
    display_page, finding_markers, fit_columns, id_affixes, short_ids,
)
from ..widgets.safe import READABLE_COLUMNS, one_line, safe_column

PAGE_ROWS = 500
DETAILS_MAX_REQUESTS = 10_000  # stores up to this size get the request #, tools, preview
FILTER_PAUSE = 0.3  # seconds of no typing before the filter runs its query
_INVALID = object()  # a filter text that does not parse
PREFETCH_PAUSE = 0.15  # seconds the cursor rests on a request before it is loaded ahead
PREFETCH_ROWS = 20  # fetch the next page when the cursor is this close to the last row

FILTER_HINT = (
    "filter: tag:x scenario:x policy:v4 runtime:chat participant:p reason:stale "
    "-key:value or text"
)


@dataclass(frozen=True)
class ListQuery:
    """What the list shows: the filter text, its parsed form, and the order."""

    text: str = ""
    flt: Any = None
    sort: str = "assembled_at"
    # oldest first, as `contextlens list` prints them (a transcript reads top down)
    descending: bool = False
    column: str = "time"  # the column shown sorted (two columns sort by tokens)


class AssembliesLoaded(Message):
    """A page of the request list arrived from the store."""

    def __init__(
        self,
        generation: int,
        offset: int,
        keys: pa.Table,
        display: pa.Table,
        matched: int,
        total: int,
        affixes: tuple[str, str] = ("", ""),
        misses: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.generation = generation
        self.offset = offset
        self.keys = keys  # assembly_id, conversation_id of each row
        self.display = display
        self.matched = matched
        self.total = total
        self.affixes = affixes  # the id prefix and suffix every shown id drops
        self.misses = misses or []  # filter values no request has (ReadModel.filter_misses)


class FindingsLoaded(Message):
    """The lint markers of the page loaded at ``offset`` (``finding_markers``)."""

    def __init__(self, generation: int, offset: int, markers: pa.Array) -> None:
        super().__init__()
        self.generation = generation
        self.offset = offset
        self.markers = markers


class AssembliesFailed(Message):
    def __init__(self, generation: int, error: str) -> None:
        super().__init__()
        self.generation = generation
        self.error = error


class RequestsScreen(Screen[None]):
    """Every recorded request, oldest first, with a filter and per-column sort; the
    columns shown are the most useful that fit the terminal (``fit_columns``)."""

    AUTO_FOCUS = ""  # the table takes focus once its first page is in

    BINDINGS = [
        Binding("slash", "focus_filter", "Filter", key_display="/"),
        Binding("s", "sort", "Sort"),
        Binding("enter", "open", "Open"),
        Binding("c", "conversation", "Conversation"),
        # the footer keeps what fits 80 columns; R is in the help (?)
        Binding("R", "reload", "Reload", show=False),
        Binding("V", "verify", "Verify"),
        Binding("C", "compare", "Compare", tooltip="Compare versions"),
        # the transcript the list was opened from, kept in step as it grows (F again: stop)
        Binding("F", "app.toggle_follow", "Follow", show=False),
        Binding("escape", "leave_filter", "Back to list", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.query_state = ListQuery()
        self._generation = 0
        self._keys: pa.Table | None = None
        self._display: pa.Table | None = None
        self._matched = 0
        self._total = 0
        self._loading_more = False
        self._affixes: tuple[str, str] = ("", "")
        self._misses: list[str] = []
        self._shown: list[tuple[Column, int]] = []  # the columns on screen and their widths
        self._source_named = False
        self._filter_timer: Timer | None = None
        self._prefetch_timer: Timer | None = None
        self.queries_run = 0  # store queries run for the list (pages and counts)
        # the request the cursor was on when the rows were reloaded under it (follow)
        self._keep_assembly: str | None = None

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="filter-bar"):
            filter_input = Input(placeholder=FILTER_HINT, id="filter", compact=True)
            filter_input.cursor_blink = False
            yield filter_input
            yield Static("", id="filter-error", markup=False)
        yield Vertical(Static("Loading requests…", classes="placeholder"), id="requests-holder")
        yield Static("", id="status", markup=False)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.reload()

    # ------------------------------------------------------------------ loading

    def reload(self) -> None:
        self._generation += 1
        self._loading_more = False
        self.load_page(self._generation, self.query_state, 0)

    def refresh_rows(self) -> None:
        """Load the rows again from a store that changed under the list (a followed file
        grew): the filter and sort stay, the rows already loaded are loaded again, and the
        cursor stays on the request it was on."""
        self._keep_assembly = self.highlighted_assembly()
        self._generation += 1
        self._loading_more = False
        loaded = self._display.num_rows if self._display is not None else 0
        self.load_page(self._generation, self.query_state, 0, max(PAGE_ROWS, loaded))

    def follow_noted(self) -> None:
        """The app started, stopped or failed following: the status line says so."""
        self._update_status()

    @work(thread=True, exclusive=True, group="requests")
    def load_page(self, generation: int, query: ListQuery, offset: int,
                  limit: int = PAGE_ROWS) -> None:
        answers = self.app.answers()  # type: ignore[attr-defined]
        reveal = bool(self.app.reveal)  # type: ignore[attr-defined]
        self.queries_run += 1
        try:
            counts = None if offset == 0 or not self._total else (self._matched, self._total)
            result = answers.requests(
                query.flt,
                sort=query.sort,
                descending=query.descending,
                limit=limit,
                offset=offset,
                reveal=reveal,
                counts=counts,
            )
            page = result.rows
            matched, total = result.matched, result.total
            # the transcript columns read more of the store (about 0.1 s a page at 20,000
            # requests): a store that large shows the first page without them
            details = (answers.request_details(result.keys["assembly_id"], reveal=reveal)
                       if total <= DETAILS_MAX_REQUESTS else None)
            affixes = id_affixes(page["assembly_id"]) if offset == 0 else self._affixes
            display = display_page(page, details, affixes)
            misses = (answers.filter_misses(query.flt, reveal=reveal)
                      if offset == 0 and matched == 0 else [])
            source = None if self._source_named else answers.source_name()
        except ContextlensError as err:
            self.post_message(AssembliesFailed(generation, str(err)))
            return
        if get_current_worker().is_cancelled:
            return
        if source:
            self.app.call_from_thread(self._name_source, source)
        keys = result.keys
        self.post_message(AssembliesLoaded(generation, offset, keys, display, matched, total,
                                           affixes, misses))
        # the markers come after the rows: the page shows at once, its lint follows
        try:
            markers = finding_markers(answers.request_findings(keys["assembly_id"]))
        except ContextlensError:
            markers = pa.array([""] * keys.num_rows, pa.string())
        if not get_current_worker().is_cancelled:
            self.post_message(FindingsLoaded(generation, offset, markers))

    def _name_source(self, source: str) -> None:
        """The header names what the store was built from, not its cache file (a store
        named otherwise is named too)."""
        self._source_named = True
        app = self.app
        store = app.db_path.name  # type: ignore[attr-defined]
        # a cache store is named after its source: named once, and never whole beside a
        # source name that was masked (the store's name would show what was masked)
        label = (source if store.startswith(source) or MASK_PREFIX in source
                 else f"{source} · {store}")
        app.source_label = label  # type: ignore[attr-defined]
        app.watch_reveal(app.reveal)  # type: ignore[attr-defined]

    async def on_assemblies_loaded(self, message: AssembliesLoaded) -> None:
        if message.generation != self._generation:
            return  # a newer query replaced this one
        self._matched, self._total = message.matched, message.total
        old_table = self._table()
        cursor = old_table.cursor_coordinate if old_table is not None else Coordinate(0, 0)
        in_place = False
        if message.offset == 0 or self._keys is None or self._display is None:
            self._keys, self._display = message.keys, message.display
            self._affixes, self._misses = message.affixes, message.misses
            keep, self._keep_assembly = self._keep_assembly, None
            row = 0
            if keep is not None:  # rows reloaded under the cursor: it stays on its request
                found = pc.index(message.keys["assembly_id"], keep).as_py()
                row = found if found >= 0 else cursor.row
            cursor = Coordinate(row, cursor.column)
            in_place = keep is not None
        else:
            self._keys = pa.concat_tables([self._keys, message.keys])
            self._display = pa.concat_tables([self._display, message.display])
        self._loading_more = False
        await self._show_table(cursor, in_place)
        self._update_status()

    async def on_findings_loaded(self, message: FindingsLoaded) -> None:
        display = self._display
        if message.generation != self._generation or display is None:
            return
        end = message.offset + len(message.markers)
        if end > display.num_rows:
            return  # the page it belongs to was replaced
        column = display["findings"]
        markers = pa.chunked_array(
            [column.slice(0, message.offset).combine_chunks(), message.markers,
             column.slice(end).combine_chunks()], pa.string())
        self._display = display.set_column(display.column_names.index("findings"),
                                           "findings", markers)
        found = pc.any(pc.not_equal(message.markers, "")).as_py()
        if found or "findings" in [c.key for c, _ in self._shown]:
            table = self._table()
            cursor = table.cursor_coordinate if table is not None else Coordinate(0, 0)
            # while following, the markers of each update's rows change rows, not the table
            await self._show_table(cursor, in_place=bool(getattr(self.app, "follow_note", "")))
            self._update_status()

    def on_assemblies_failed(self, message: AssembliesFailed) -> None:
        if message.generation != self._generation:
            return
        self._loading_more = False
        self._show_error(message.error)

    def _fit(self) -> list[tuple[Column, int]]:
        assert self._display is not None
        return fit_columns(self._display, self.size.width or self.app.size.width,
                           self.query_state.column)

    async def _show_table(self, cursor: Coordinate, in_place: bool = False) -> None:
        """Show the loaded rows. ``in_place`` (rows reloaded under the list, as a followed
        file grows): when the columns and their widths are the same, the table keeps its
        widget and only its rows change, so a click on it while rows arrive lands on a
        table that is still there."""
        assert self._display is not None
        holder = self.query_one("#requests-holder")
        had_focus = self.focused is None or isinstance(self.focused, DataTable)
        before = list(self._shown)
        old = [c.key for c, _ in self._shown]
        self._shown = self._fit()
        if not self._display.num_rows:  # the headers of the main columns, over the reason
            self._shown = [(c, len(c.label) + 2) for c in COLUMNS if c.rank <= 3]
        current = self._table()
        if (in_place and current is not None and self._display.num_rows
                and [(c.key, w) for c, w in before] == [(c.key, w) for c, w in self._shown]):
            refill(current, self._shown_rows())
            current.move_cursor(row=min(cursor.row, self._display.num_rows - 1),
                                column=cursor.column, animate=False)
            return
        await holder.remove_children()
        if 0 <= cursor.column < len(old) and old[cursor.column] in BY_KEY:
            # the cursor stays on its column when columns come or go
            keys = [c.key for c, _ in self._shown]
            column = old[cursor.column]
            cursor = Coordinate(cursor.row, keys.index(column) if column in keys else 0)
        table = arrow_table(
            self._shown_rows(),
            id="requests-table",
            cursor_type="cell",
            max_column_content_width=None,
            column_widths=[w for _, w in self._shown],
        )
        await holder.mount(table)
        if self._display.num_rows:
            row = min(cursor.row, self._display.num_rows - 1)
            table.move_cursor(row=row, column=cursor.column, animate=False)
            self._prefetch_later(row)  # the cursor starts resting here
        else:
            table.styles.height = 1  # the header; what follows says why it is empty
            why = ("; ".join(f"no request has {m}" for m in self._misses)
                   if self._misses else "no request matches every term")
            await holder.mount(
                Static(one_line(f"No requests match: {why}."), classes="placeholder",
                       markup=False)
            )
        if had_focus:
            table.focus()

    def _shown_rows(self) -> pa.Table:
        """The loaded rows as the table shows them: the fitted columns, escaped, then cut
        (so what is cut is what is shown), the sorted column's header with its arrow."""
        assert self._display is not None
        q = self.query_state
        shown = pa.table({c.key: cut(safe_column(self._display[c.key], body=c.key in READABLE_COLUMNS), w)
                          for c, w in self._shown})
        return shown.rename_columns(
            [f"{c.label} {ARROWS[q.descending]}" if c.key == q.column else c.label
             for c, _ in self._shown])

    def _table(self) -> DataTable | None:
        tables = self.query("#requests-table").results(DataTable)
        return next(iter(tables), None)

    def _made_up_times(self) -> int:
        """How many loaded requests have made-up times (their log records none)."""
        if self._display is None or "tags" not in self._display.column_names:
            return 0
        # the shown tags, joined by ", "
        hits = pc.match_substring(pc.fill_null(self._display["tags"], ""), TIMES_UNRECORDED)
        return int(pc.sum(hits.cast(pa.int64())).as_py() or 0)

    def _update_status(self) -> None:
        q = self.query_state
        loaded = self._display.num_rows if self._display is not None else 0
        parts = [f"{self._matched:,} of {self._total:,} requests"]
        follow_note = getattr(self.app, "follow_note", "")
        if follow_note:
            parts.append(one_line(follow_note, 100))
        parts.append(f"sorted by {BY_KEY[q.column].label} {ARROWS[q.descending]}")
        prefix, suffix = self._affixes
        if prefix or suffix:
            # the list drops what every id shares: say what, so an id can be typed whole
            # (``contextlens show <prefix>r3<suffix>``); short, it stays on a 160-column line
            parts.append(f"ids short for {one_line(prefix, 40)}…{one_line(suffix, 20)}")
        made_up = self._made_up_times()
        if made_up:
            # made-up times must not read as when the requests were made
            parts.append("times not recorded: the log's order kept"
                         if made_up == loaded else
                         f"{made_up:,} of {loaded:,} loaded requests' times not recorded "
                         "(by time: after the others, in the log's order)")
        if self._display is not None:
            for key in CONSTANT_ELSEWHERE:
                value = constant_value(short_ids(self._display[key], self._affixes[0], ""))
                if value is not None:
                    parts.append(f"{BY_KEY[key].label} {one_line(value, 30)}")
        if loaded < self._matched:
            parts.append(f"{loaded:,} loaded")
        if "findings" in [c.key for c, _ in self._shown]:
            parts.append(MARKER_LEGEND)
        if q.text.strip():
            parts.append(f"filter: {one_line(q.text, 60)}")
        self.query_one("#status", Static).update(" · ".join(parts))

    # ------------------------------------------------------------------ filter

    @on(Input.Changed, "#filter")
    def filter_changed(self, event: Input.Changed) -> None:
        """A parse error shows at once; the query runs once typing pauses."""
        self._cancel_pending_filter()
        value = event.value
        if self._parse(value, typing=True) is not _INVALID and value != self.query_state.text:
            self._filter_timer = self.set_timer(FILTER_PAUSE, lambda: self.apply_filter(value))

    @on(Input.Submitted, "#filter")
    def filter_submitted(self, event: Input.Submitted) -> None:
        self._cancel_pending_filter()
        if self.apply_filter(event.value):
            table = self._table()
            if table is not None:
                table.focus()

    @property
    def filter_pending(self) -> bool:
        """True while typed filter text waits for its pause before the query runs."""
        return self._filter_timer is not None

    def _cancel_pending_filter(self) -> None:
        if self._filter_timer is not None:
            self._filter_timer.stop()
            self._filter_timer = None

    def _parse(self, text: str, typing: bool = False) -> Any:
        """The parsed filter (None for no filter), or ``_INVALID`` with the error shown;
        while ``typing``, a key whose value has not been typed yet (``policy:``) is not an
        error yet, only not a filter to run."""
        from ingest.filters import parse_filter

        try:
            flt = parse_filter(text) if text.strip() else None
        except ContextlensError as err:
            self._show_error(None if typing and text.endswith(":") else str(err))
            return _INVALID
        self._show_error(None)
        return flt

    def apply_filter(self, text: str) -> bool:
        """Parse ``text``; show a parse error inline, or reload with the new filter."""
        self._filter_timer = None
        flt = self._parse(text)
        if flt is _INVALID:
            return False
        if text == self.query_state.text:
            return True
        q = self.query_state
        self.query_state = ListQuery(text, flt, q.sort, q.descending, q.column)
        self.reload()
        return True

    def _show_error(self, error: str | None) -> None:
        self.set_class(error is not None, "-bad-filter")
        self.query_one("#filter", Input).set_class(error is not None, "-invalid")
        self.query_one("#filter-error", Static).update(one_line(error or ""))

    # ------------------------------------------------------------------ table events

    @on(DataTable.CellSelected, "#requests-table")
    def cell_selected(self, event: DataTable.CellSelected) -> None:
        self._open_row(event.coordinate.row)

    @on(DataTable.CellHighlighted, "#requests-table")
    def cell_highlighted(self, event: DataTable.CellHighlighted) -> None:
        self._prefetch_later(event.coordinate.row)
        loaded = self._display.num_rows if self._display is not None else 0
        near_end = event.coordinate.row >= loaded - PREFETCH_ROWS
        if near_end and loaded < self._matched and not self._loading_more:
            self._loading_more = True
            self.load_page(self._generation, self.query_state, loaded)
            self._update_status()

    def _prefetch_later(self, row: int) -> None:
        """Once the cursor rests on a request, load its assembly in the background, so
        Enter opens it with its records already read and shown at once."""
        if self._prefetch_timer is not None:
            self._prefetch_timer.stop()
        keys = self._row_keys(row)
        if keys is not None:
            self._prefetch_timer = self.set_timer(PREFETCH_PAUSE, lambda: self.prefetch(keys[0]))

    @work(thread=True, exclusive=True, group="prefetch")
    def prefetch(self, assembly_id: str) -> None:
        """Load what the assembly screen shows of ``assembly_id`` (its records and the first
        record's panel), so Enter fills the screen without waiting for the read model."""
        self._prefetch_timer = None
        app = self.app
        reveal = bool(app.reveal)  # type: ignore[attr-defined]
        try:
            app.contents.get(  # type: ignore[attr-defined]
                (assembly_id, reveal),
                lambda: assembly_content(app.answers(), assembly_id, reveal),  # type: ignore[attr-defined]
            )
        except ContextlensError:
            pass  # opening it will say what is wrong

    @on(DataTable.HeaderSelected, "#requests-table")
    def header_selected(self, event: DataTable.HeaderSelected) -> None:
        self._sort_by(event.column_index)

    def _row_keys(self, row: int) -> tuple[str, str] | None:
        if self._keys is None or not 0 <= row < self._keys.num_rows:
            return None
        return (
            self._keys.column("assembly_id")[row].as_py(),
            self._keys.column("conversation_id")[row].as_py(),
        )

    def highlighted_assembly(self) -> str | None:
        """The highlighted row's assembly id (the command palette acts on it)."""
        table = self._table()
        keys = self._row_keys(table.cursor_row) if table is not None else None
        return keys[0] if keys is not None else None

    def _open_row(self, row: int) -> None:
        keys = self._row_keys(row)
        if keys is not None:
            self.app.open_assembly(keys[0])  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ actions

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_leave_filter(self) -> None:
        table = self._table()
        if table is not None:
            table.focus()

    def action_open(self) -> None:
        table = self._table()
        if table is not None and table.row_count:
            self._open_row(table.cursor_row)

    def action_conversation(self) -> None:
        table = self._table()
        if table is None or not table.row_count:
            return
        keys = self._row_keys(table.cursor_row)
        if keys is not None:
            self.app.open_conversation(keys[1], keys[0])  # type: ignore[attr-defined]

    def action_sort(self) -> None:
        table = self._table()
        if table is not None:
            self._sort_by(table.cursor_column)

    def action_reload(self) -> None:
        self.reload()

    def action_verify(self) -> None:
        self.app.verify_from_list()  # type: ignore[attr-defined]

    def action_compare(self) -> None:
        """Compare two policy versions over the requests the current filter selects."""
        q = self.query_state
        self.app.pick_compare(q.flt, q.text)  # type: ignore[attr-defined]

    def _sort_by(self, column_index: int) -> None:
        """Sort by the column shown at ``column_index``; again on the same column reverses."""
        if not 0 <= column_index < len(self._shown):
            return
        col = self._shown[column_index][0]
        if col.sort is None:
            self.notify(f"The {col.label} column cannot be sorted.", severity="warning")
            return
        q = self.query_state
        # a first sort by a count puts the largest first; by text, A first
        numeric = col.sort.endswith(("_count", "_tokens"))
        descending = not q.descending if col.sort == q.sort else numeric
        self.query_state = ListQuery(q.text, q.flt, col.sort, descending, col.key)
        self.reload()

    def on_resize(self, event: Any) -> None:
        """The columns shown follow the terminal's width."""
        if self._display is not None and self._shown and [
                c.key for c, _ in self._fit()] != [c.key for c, _ in self._shown]:
            table = self._table()
            cursor = table.cursor_coordinate if table is not None else Coordinate(0, 0)
            # the function, not a coroutine: a run replaced before it starts leaves none behind
            self.run_worker(partial(self._show_table, cursor), group="requests-layout",
                            exclusive=True)
