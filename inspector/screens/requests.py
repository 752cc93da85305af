"""The request list: every recorded context assembly, filtered, sorted and paged with SQL.

The table holds a run of the list's rows, read in keyset pages of ``PAGE_ROWS`` rows
(``ReadModel.request_page``): moving the cursor near the last (first) loaded row reads the
page after (before) it; Home and End read the list's first and last page, wherever the rows
loaded are. The table is composed once and its rows and columns replaced in place (a click
that lands while rows arrive meets the table it aimed at). Counts are "N of M": N requests
match the filter, M are in the store.

(About 700 lines: paging both ways, Home and End, the debounced filter, sorting, loading
ahead and the lint column are the one screen's behaviour, each kept beside the events that
drive it.)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from textual import on, work
from textual.app import ComposeResult
from textual.actions import SkipAction
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Header, Input, Static
from textual.worker import get_current_worker
from textual_fastdatatable import DataTable

from ingest.errors import ContextlensError
from ingest.secrets import MASK_PREFIX
from ingest.tags import TIMES_UNRECORDED
from readmodel.ids import short_ids, store_id_affixes

from ..lens_app import lens_app
from ..widgets.arrow_table import ArrowDataTable, arrow_table, refill
from ..widgets.footer import KeysFooter
from ..widgets.id_text import IdText
from ..widgets.request_columns import (
    ARROWS, BY_KEY, COLUMNS, CONSTANT_ELSEWHERE, MARKER_LEGEND, Column, constant_value, cut,
    display_page, finding_markers, fit_columns,
)
from ..widgets.safe import READABLE_COLUMNS, one_line, safe_column

PAGE_ROWS = 500
DETAILS_MAX_REQUESTS = 10_000  # stores up to this size get the request #, tools, preview
FILTER_PAUSE = 0.3  # seconds of no typing before the filter runs its query
_INVALID = object()  # a filter text that does not parse
PREFETCH_PAUSE = 0.15  # seconds the cursor rests on a request before it is loaded ahead
PREFETCH_ROWS = 20  # fetch the next page when the cursor is this close to the last row
# A page's lint waits for the frame that shows its rows (it imports and runs the replay
# engine's safety checks: seconds of a shared core, which the rows' first frame would wait
# on), or this long when no frame comes (the list is not the screen shown)
FINDINGS_AFTER_PAINT_S = 1.0

RowKey = tuple[str, str]  # (assembly_id, export_id): a row's place in any order of the list

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
        place: str = "replace",
        cursor_row: int | None = None,
    ) -> None:
        super().__init__()
        self.generation = generation
        self.offset = offset  # the page's place in the list
        self.keys = keys  # assembly_id, conversation_id, export_id of each row
        # "replace" the rows loaded, or join them: "append" after, "prepend" before
        self.place = place
        self.cursor_row = cursor_row  # where the cursor goes in a replacing page (-1: last)
        self.display = display
        self.matched = matched
        self.total = total
        self.affixes = affixes  # the id prefix and suffix every shown id drops
        self.misses = misses or []  # filter values no request has (ReadModel.filter_misses)


class FindingsLoaded(Message):
    """The lint markers of the page at ``offset`` in the list (``finding_markers``)."""

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


class RequestTable(ArrowDataTable):
    """The list's table: Home and End (ctrl+Home, ctrl+End too) go to the list's first and
    last request, not the loaded rows' (the screen reads them when they are not loaded)."""

    def _jump(self, end: bool) -> None:
        screen = self.screen
        if isinstance(screen, RequestsScreen):
            screen.jump(end)

    def action_scroll_home(self, select: bool = False) -> None:
        self._jump(False)

    def action_scroll_end(self, select: bool = False) -> None:
        self._jump(True)

    def action_cursor_table_start(self, select: bool = False) -> None:
        self._jump(False)

    def action_cursor_table_end(self, select: bool = False) -> None:
        self._jump(True)


# the table before the first page: the main columns' headers, no row
_NO_ROWS = pa.table({c.label: pa.array([], pa.string()) for c in COLUMNS if c.rank <= 3})


class RequestsScreen(Screen[None]):
    """Every recorded request, oldest first, with a filter and per-column sort; the
    columns shown are the most useful that fit the terminal (``fit_columns``)."""

    AUTO_FOCUS = ""  # the table takes focus once its first page is in

    BINDINGS = [
        # a priority binding, run as the key arrives (not after the keys queued behind it
        # reached the list): what is typed right after / lands in the filter
        Binding("slash", "focus_filter", "Filter", key_display="/", priority=True),
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
        self._loading_more = False  # the page after the loaded rows is being read
        self._loading_back = False  # the page before them
        self._start = 0  # the list's place of the first loaded row
        self._going_to = ""  # "first" or "last" while Home or End reads its page
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
        with Vertical(id="requests-holder"):
            yield Static("Loading requests…", classes="placeholder", id="requests-loading")
            # built once: pages, lint, sorts and filters replace its rows, never the widget
            table = arrow_table(_NO_ROWS, id="requests-table", cursor_type="cell",
                                max_column_content_width=None, table_class=RequestTable)
            table.display = False
            yield table
            empty = Static("", classes="placeholder", markup=False, id="requests-empty")
            empty.display = False
            yield empty
        yield Static("", id="status", markup=False)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.reload()

    # ------------------------------------------------------------------ loading

    def reload(self) -> None:
        self._generation += 1
        self._loading_more = self._loading_back = False
        self._going_to = ""
        self.load_page(self._generation, self.query_state)

    def refresh_rows(self) -> None:
        """Load the rows again from a store that changed under the list (a followed file
        grew): the filter and sort stay, the rows already loaded are loaded again (around
        the cursor's request when they are not the list's first), and the cursor stays on
        the request it was on."""
        self._keep_assembly = self.highlighted_assembly()
        around = self._highlighted_key() if self._start else None
        self._generation += 1
        self._loading_more = self._loading_back = False
        loaded = self._display.num_rows if self._display is not None else 0
        self.load_page(self._generation, self.query_state, around=around,
                       limit=max(PAGE_ROWS, loaded))

    def jump(self, end: bool) -> None:
        """Home (``end`` False) or End: the cursor on the list's first or last request; its
        page is read when the rows loaded do not hold it."""
        table = self._table()
        if table is None or self._display is None:
            return
        loaded = self._display.num_rows
        if not end and self._start == 0:
            table.move_cursor(row=0, animate=False)
        elif end and self._start + loaded >= self._matched:
            table.move_cursor(row=max(loaded - 1, 0), animate=False)
        else:
            self._generation += 1
            self._loading_more = self._loading_back = False
            self._going_to = "last" if end else "first"
            self.load_page(self._generation, self.query_state, last=end,
                           cursor_row=-1 if end else 0, counts=(self._matched, self._total))
            self._update_status()

    def follow_noted(self) -> None:
        """The app started, stopped or failed following: the status line says so."""
        self._update_status()

    @work(thread=True, exclusive=True, group="requests")
    def load_page(self, generation: int, query: ListQuery, *, last: bool = False,
                  around: RowKey | None = None, limit: int = PAGE_ROWS,
                  cursor_row: int | None = None, counts: tuple[int, int] | None = None) -> None:
        """Rows that replace the loaded ones: the list's first page, its ``last``, or the
        page ``around`` a row."""
        self._load(generation, query, "replace", last=last, around=around, limit=limit,
                   cursor_row=cursor_row, counts=counts)

    @work(thread=True, group="requests-more")
    def load_more(self, generation: int, query: ListQuery, place: str, key: RowKey,
                  offset: int | None, counts: tuple[int, int]) -> None:
        """The page after (``place`` "append") or before ("prepend") the row ``key``: not
        exclusive, so a page read while the one before it reads its lint cancels neither."""
        self._load(generation, query, place, after=key if place == "append" else None,
                   before=key if place == "prepend" else None, offset=offset, counts=counts)

    def _load(self, generation: int, query: ListQuery, place: str, *,
              after: RowKey | None = None, before: RowKey | None = None, last: bool = False,
              around: RowKey | None = None, offset: int | None = None, limit: int = PAGE_ROWS,
              cursor_row: int | None = None, counts: tuple[int, int] | None = None) -> None:
        answers = lens_app(self).answers()
        reveal = bool(lens_app(self).reveal)
        self.queries_run += 1
        try:
            result = answers.request_page(
                query.flt, sort=query.sort, descending=query.descending, rows=limit,
                after=after, before=before, last=last, around=around, offset=offset,
                reveal=reveal, counts=counts,
            )
            page = result.rows
            matched, total = result.matched, result.total
            # the transcript columns read more of the store (about 0.1 s a page at 20,000
            # requests): a store that large shows the first page without them
            details = (answers.request_details(result.keys["assembly_id"], reveal=reveal)
                       if total <= DETAILS_MAX_REQUESTS else None)
            affixes = store_id_affixes(answers) if place == "replace" else self._affixes
            display = display_page(page, details, affixes)
            misses = (answers.filter_misses(query.flt, reveal=reveal)
                      if place == "replace" and matched == 0 else [])
            source = None if self._source_named else answers.source_name()
        except ContextlensError as err:
            self.post_message(AssembliesFailed(generation, str(err)))
            return
        if get_current_worker().is_cancelled:
            return
        if source:
            self.app.call_from_thread(self._name_source, source)
        self.post_message(AssembliesLoaded(generation, result.offset, result.keys, display,
                                           matched, total, affixes, misses, place, cursor_row))

    @work(thread=True, group="requests-findings")
    def load_findings(self, generation: int, offset: int, keys: pa.Table,
                      painted: threading.Event) -> None:
        """The lint markers of the page at ``offset``, once its rows are on screen (the
        page shows at once, its lint follows): not exclusive, each page loaded gets its own."""
        painted.wait(FINDINGS_AFTER_PAINT_S)
        if generation != self._generation or get_current_worker().is_cancelled:
            return  # a newer query replaced the page
        answers = lens_app(self).answers()
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
        app = lens_app(self)
        store = app.db_path.name
        # a cache store is named after its source: named once, and never whole beside a
        # source name that was masked (the store's name would show what was masked)
        label = (source if store.startswith(source) or MASK_PREFIX in source
                 else f"{source} · {store}")
        app.source_label = label
        app.watch_reveal(app.reveal)

    def on_assemblies_loaded(self, message: AssembliesLoaded) -> None:
        if message.generation != self._generation:
            return  # a newer query replaced this one
        self._matched, self._total = message.matched, message.total
        joined = self._keys is not None and self._display is not None
        if message.place == "append" and joined:
            self._loading_more = False
            self._keys = pa.concat_tables([self._keys, message.keys])
            self._display = pa.concat_tables([self._display, message.display])
            self._show_table()
        elif message.place == "prepend" and joined:
            self._loading_back = False
            self._keys = pa.concat_tables([message.keys, self._keys])
            self._display = pa.concat_tables([message.display, self._display])
            self._start = message.offset
            # the rows on screen stay where they are, the cursor on its request
            self._show_table(shift=message.keys.num_rows)
        else:
            self._loading_more = self._loading_back = False
            self._going_to = ""
            self._keys, self._display = message.keys, message.display
            self._start = message.offset
            self._affixes, self._misses = message.affixes, message.misses
            keep, self._keep_assembly = self._keep_assembly, None
            row = 0 if message.cursor_row is None else message.cursor_row
            if row < 0:
                row = message.keys.num_rows - 1
            if keep is not None:  # rows reloaded under the cursor: it stays on its request
                found = pc.index(message.keys["assembly_id"], keep).as_py()
                table = self._table()
                row = found if found >= 0 else (table.cursor_row if table is not None else 0)
            # rows reloaded under the cursor keep the view; a new query starts at its row
            self._show_table(row=max(row, 0), keep_view=keep is not None)
        self._update_status()
        painted = threading.Event()
        self.call_after_refresh(painted.set)
        self.load_findings(message.generation, message.offset, message.keys, painted)

    def on_findings_loaded(self, message: FindingsLoaded) -> None:
        display = self._display
        if message.generation != self._generation or display is None:
            return
        begin = message.offset - self._start
        end = begin + len(message.markers)
        if begin < 0 or end > display.num_rows:
            return  # the page it belongs to was replaced
        column = display["findings"]
        markers = pa.chunked_array(
            [column.slice(0, begin).combine_chunks(), message.markers,
             column.slice(end).combine_chunks()], pa.string())
        self._display = display.set_column(display.column_names.index("findings"),
                                           "findings", markers)
        found = pc.any(pc.not_equal(message.markers, "")).as_py()
        if found or "findings" in [c.key for c, _ in self._shown]:
            self._show_table()
            self._update_status()

    def on_assemblies_failed(self, message: AssembliesFailed) -> None:
        if message.generation != self._generation:
            return
        self._loading_more = self._loading_back = False
        self._show_error(message.error)

    def _fit(self) -> list[tuple[Column, int]]:
        assert self._display is not None
        return fit_columns(self._display, self.size.width or self.app.size.width,
                           self.query_state.column)

    def _show_table(self, row: int | None = None, shift: int = 0,
                    keep_view: bool = True) -> None:
        """Show the loaded rows in the one table, in place: its rows and columns change, the
        widget stays (a click on it while rows arrive lands on a table that is there). The
        cursor stays on its column when columns come or go; on its row and the view where
        it was (``keep_view``), else it goes to ``row``; ``shift`` rows came before the
        loaded ones: the view and the cursor move down by as many, so nothing on screen
        moves."""
        assert self._display is not None
        table = self._table()
        if table is None:
            return
        rows = self._display.num_rows
        had_focus = self.focused is None or self.focused is table
        old = [c.key for c, _ in self._shown]
        cursor, scroll_y = table.cursor_coordinate, table.scroll_y
        self._shown = self._fit()
        if not rows:  # the headers of the main columns, over the reason
            self._shown = [(c, len(c.label) + 2) for c in COLUMNS if c.rank <= 3]
        keys = [c.key for c, _ in self._shown]
        column = cursor.column
        if 0 <= column < len(old) and old[column] in BY_KEY:
            column = keys.index(old[column]) if old[column] in keys else 0
        # the cursor is moved once, where it goes: a stop on the way (row 0 of the last
        # page) would read the page before it
        refill(table, self._shown_rows(), column_widths=[w for _, w in self._shown],
               keep_view=True)
        if rows:
            target = min(row if row is not None else cursor.row + shift, rows - 1)
            if not keep_view:  # rows of a new query: the view starts at the top
                table.scroll_to(0, 0, animate=False, immediate=True)
            table.move_cursor(row=target, column=column, animate=False)
            if shift:
                table.scroll_to(y=scroll_y + shift, animate=False, immediate=True)
            if row is not None:
                self._prefetch_later(target)  # the cursor starts resting here
        else:
            table.move_cursor(row=0, column=0, animate=False)
        self._show_empty(table, rows)
        if had_focus and self.focused is not table:
            # at once, not at the next idle: a key typed meanwhile (/) may move the focus
            self.set_focus(table)

    def _show_empty(self, table: DataTable, rows: int) -> None:
        """The table shown (the loading line hidden); an empty one is its header over why
        nothing matches."""
        self.query_one("#requests-loading").display = False
        table.display = True
        empty = self.query_one("#requests-empty", Static)
        table.styles.height = None if rows else 1
        if not rows:
            why = ("; ".join(f"no request has {m}" for m in self._misses)
                   if self._misses else "no request matches every term")
            empty.update(one_line(f"No requests match: {why}."))
        empty.display = not rows

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
        reveal = bool(getattr(self.app, "reveal", False))
        ids = getattr(self, "_id_text", None)
        if ids is None or (ids.reveal, ids.affixes) != (reveal, self._affixes):
            ids = self._id_text = IdText(reveal, self._affixes)  # judged once per store
        note = ids.affixes_note()
        if note is not None:
            # the list drops what every id shares: say what, so an id can be typed whole
            # (``contextlens show <prefix>r3<suffix>``); short, it stays on a 160-column line;
            # masked where secret-shaped, as the ids are
            parts.append(note)
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
        if self._going_to:
            parts.append(f"going to the {self._going_to} request…")
        if self._start:
            parts.append(f"rows {self._start + 1:,}–{self._start + loaded:,} loaded")
        elif loaded < self._matched:
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
            if table is not None and table.display:
                self.set_focus(table)

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
        row = event.coordinate.row
        self._prefetch_later(row)
        keys = self._keys
        if keys is None or not keys.num_rows:
            return
        loaded, counts = keys.num_rows, (self._matched, self._total)
        near_end = row >= loaded - PREFETCH_ROWS
        if near_end and self._start + loaded < self._matched and not self._loading_more:
            self._loading_more = True
            self.load_more(self._generation, self.query_state, "append",
                           self._row_key(loaded - 1), self._start + loaded, counts)
            self._update_status()
        if row < PREFETCH_ROWS and self._start > 0 and not self._loading_back:
            self._loading_back = True
            self.load_more(self._generation, self.query_state, "prepend", self._row_key(0),
                           None, counts)
            self._update_status()

    def _row_key(self, row: int) -> RowKey:
        assert self._keys is not None
        return (self._keys["assembly_id"][row].as_py(), self._keys["export_id"][row].as_py())

    def _highlighted_key(self) -> RowKey | None:
        table = self._table()
        if table is None or self._keys is None or not 0 <= table.cursor_row < self._keys.num_rows:
            return None
        return self._row_key(table.cursor_row)

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
        from ..widgets.assembly_view import assembly_content

        self._prefetch_timer = None
        app = lens_app(self)
        reveal = bool(app.reveal)
        try:
            app.contents.get(
                (assembly_id, reveal),
                lambda: assembly_content(app.answers(), assembly_id, reveal),
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
            lens_app(self).open_assembly(keys[0])

    # ------------------------------------------------------------------ actions

    def action_focus_filter(self) -> None:
        filter_input = self.query_one("#filter", Input)
        if self.focused is filter_input:
            raise SkipAction()  # a / typed in the filter is text
        # at once, not at the next idle as focus() would: the keys queued behind the /
        # go where the focus is when each is handled
        self.set_focus(filter_input)

    def action_leave_filter(self) -> None:
        table = self._table()
        if table is not None and table.display:
            self.set_focus(table)

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
            lens_app(self).open_conversation(keys[1], keys[0])

    def action_sort(self) -> None:
        table = self._table()
        if table is not None:
            self._sort_by(table.cursor_column)

    def action_reload(self) -> None:
        self.reload()

    def action_verify(self) -> None:
        lens_app(self).verify_from_list()

    def action_compare(self) -> None:
        """Compare two policy versions over the requests the current filter selects."""
        q = self.query_state
        lens_app(self).pick_compare(q.flt, q.text)

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
            self._show_table()
