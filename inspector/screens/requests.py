"""The request list: every recorded context assembly, filtered, sorted and paged with SQL.

The table holds pages of ``PAGE_ROWS`` rows fetched from ``Store.list_assemblies``; moving
the cursor near the last loaded row fetches the next page. Counts are "N of M": N requests
match the filter, M are in the store.
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

from ingest.timefmt import table_time_column

from ..widgets.arrow_table import arrow_table, token_bar
from ..widgets.assembly_view import assembly_content
from ..widgets.footer import KeysFooter
from ..widgets.safe import one_line, safe_column

PAGE_ROWS = 500
DETAILS_MAX_REQUESTS = 10_000  # stores up to this size get the request #, tools, preview
MARKERS = {"safety": "⚠", "error": "✗", "warning": "!", "info": "i"}
MARKER_LEGEND = "lint: " + " ".join(f"{m} {k}" for k, m in MARKERS.items())
FILTER_PAUSE = 0.3  # seconds of no typing before the filter runs its query
_INVALID = object()  # a filter text that does not parse
PREFETCH_PAUSE = 0.15  # seconds the cursor rests on a request before it is loaded ahead
PREFETCH_ROWS = 20  # fetch the next page when the cursor is this close to the last row

@dataclass(frozen=True)
class Column:
    """A list column: ``key`` in the display table, ``label`` shown, ``sort`` the store
    column it sorts by (None: not sortable), ``rank`` how useful it is (0 most: as the
    terminal narrows, the highest ranks go first), ``cap`` the widest it is shown (longer
    values end with …), ``flex`` it takes the width left over."""

    key: str
    label: str
    sort: str | None
    rank: int
    cap: int | None = None
    flex: bool = False


COLUMNS: tuple[Column, ...] = (
    Column("time", "time (UTC)", "assembled_at", 0),
    Column("no", "#", "assembled_at", 6),
    Column("request", "request", "assembly_id", 1, cap=24),
    Column("model", "model", "model", 2, cap=22),
    Column("policy", "policy", "policy_version", 2, cap=10),
    Column("incl", "incl", "included_count", 3),
    Column("omit", "omit", "omitted_count", 3),
    Column("tokens", "tokens", "assembled_tokens", 3),
    Column("findings", "lint", None, 3),
    Column("tools", "tools", None, 7),
    Column("budget", "budget use", "assembled_tokens", 8),
    Column("baseline", "baseline", "baseline_tokens", 9),
    Column("scenario", "scenario", "scenario", 5, cap=26),
    Column("runtime", "runtime", "runtime_kind", 10, cap=16),
    Column("participant", "participant", "participant_id", 11, cap=18),
    Column("tags", "tags", None, 12, cap=30),
    Column("preview", "last user or tool message", None, 4, cap=120, flex=True),
)
BY_KEY = {c.key: c for c in COLUMNS}
# columns whose one value on every row is said once in the status line instead
CONSTANT_ELSEWHERE = ("runtime", "participant")
FLEX_MIN = 16  # the preview is shown only if it gets this many columns
CELL_PADDING = 2  # the table pads each cell by one column on each side
SCROLLBAR = 2
ARROWS = {True: "↓", False: "↑"}

FILTER_HINT = (
    "filter: tag:x scenario:x policy:v4 runtime:chat participant:p reason:stale "
    "-key:value or text"
)


def id_affixes(ids: Any) -> tuple[str, str]:
    """The ``:``-separated segments every id of ``ids`` starts and ends with (a
    transcript's ``22582fdc81:`` and ``:asm``), to show ids without them. Columnar: the
    common prefix of all strings is that of the least and the greatest."""
    if len(ids) < 2:
        return "", ""

    def common(values: Any) -> str:
        bounds = pc.min_max(values)
        low, high = bounds["min"].as_py() or "", bounds["max"].as_py() or ""
        n = 0
        while n < min(len(low), len(high)) and low[n] == high[n]:
            n += 1
        cut = low[:n].rfind(":")
        return low[: cut + 1] if cut >= 0 else ""

    prefix = common(ids)
    suffix = common(pc.utf8_reverse(ids))[::-1]
    return prefix, suffix


def short_ids(ids: Any, prefix: str, suffix: str) -> Any:
    """``ids`` without ``prefix`` and ``suffix`` where they have both (columnar)."""
    if not (prefix or suffix) or len(ids) == 0:
        return ids
    both = pc.and_(pc.starts_with(ids, prefix), pc.ends_with(ids, suffix))
    core = pc.utf8_slice_codeunits(ids, len(prefix))
    if suffix:
        core = pc.utf8_slice_codeunits(core, 0, -len(suffix))
    return pc.if_else(both, core, ids)


def display_page(page: pa.Table, details: pa.Table | None = None,
                 affixes: tuple[str, str] = ("", "")) -> pa.Table:
    """Every column the list can show (keyed by ``Column.key``), computed columnar from a
    ``list_assemblies`` page and its ``ReadModel.request_details``."""
    tags = pc.fill_null(pc.binary_join(page["tags"], ", "), "")
    # the scenario has its own column; the other tags stay
    tags = pc.replace_substring_regex(tags, r"(^|, )scenario:[^,]*", "")
    tags = pc.utf8_ltrim(tags, characters=", ")
    rows = page.num_rows
    model = page["model"] if "model" in page.column_names else pa.nulls(rows, pa.string())
    # a dated model name without its date: claude-sonnet-4-5-20250929 -> claude-sonnet-4-5
    model = pc.replace_substring_regex(pc.fill_null(model, ""), r"-\d{8}$", "")
    if details is None:
        details = pa.table({"request_no": pa.nulls(rows, pa.int64()),
                            "tool_calls": pa.nulls(rows, pa.int64()),
                            "preview": pa.nulls(rows, pa.string())})
    return pa.table(
        {
            "time": table_time_column(page["assembled_at"]),
            "no": details["request_no"],
            "request": short_ids(page["assembly_id"], *affixes),
            "model": model,
            "policy": page["policy_version"],
            "incl": page["included_count"],
            "omit": page["omitted_count"],
            "tokens": page["assembled_tokens"],
            # filled in once the page's lint is in (``finding_markers``); until then, and
            # on a page with no finding, the column is empty and so not shown
            "findings": pa.array([""] * rows, pa.string()),
            "tools": details["tool_calls"],
            "budget": token_bar(page["assembled_tokens"], page["token_budget"]),
            "baseline": page["baseline_tokens"],
            "scenario": pc.fill_null(page["scenario"], ""),
            "runtime": page["runtime_kind"],
            "participant": page["participant_id"],
            "tags": tags,
            "preview": pc.fill_null(details["preview"], ""),
        }
    )


def finding_markers(found: pa.Table) -> pa.Array:
    """A list row's lint and safety marker, from ``ReadModel.request_findings``: ``⚠3``
    when the model was shown something it should not have been (3 findings in all), else
    the worst severity and how many (``✗1`` error, ``!3`` warning, ``i1`` info), empty if
    none. Short, so the column costs the list no other column (``MARKER_LEGEND`` says it)."""
    n = pc.cast(found["findings"], pa.string())
    worst = pc.fill_null(found["worst"], "")
    symbol = pc.case_when(
        pc.make_struct(pc.greater(found["safety"], 0), pc.equal(worst, "error"),
                       pc.equal(worst, "warning"), pc.equal(worst, "info")),
        *(pa.scalar(MARKERS[k], pa.string()) for k in ("safety", "error", "warning", "info")),
        pa.scalar(None, pa.string()),
    )
    return pc.fill_null(pc.binary_join_element_wise(symbol, n, ""), "")


def _content_width(values: Any) -> int:
    """The widest value of a display column, as shown (0 for a column with nothing)."""
    if len(values) == 0:
        return 0
    if pa.types.is_integer(values.type):
        widest = pc.max(pc.abs(pc.fill_null(values, 0))).as_py() or 0
        return len(str(widest)) if widest else 0
    text = values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
    return int(pc.max(pc.utf8_length(pc.fill_null(text, ""))).as_py() or 0)


def cut(values: Any, width: int) -> Any:
    """Text values longer than ``width`` cut to it, ending with … (columnar); others as is."""
    if not pa.types.is_string(values.type) or len(values) == 0:
        return values
    long = pc.fill_null(pc.greater(pc.utf8_length(values), width), False)
    if not pc.any(long).as_py():
        return values
    short = pc.binary_join_element_wise(pc.utf8_slice_codeunits(values, 0, width - 1), "…", "")
    return pc.if_else(long, short, values)


def constant_value(values: Any) -> str | None:
    """The one value every row has (None when rows differ or there are fewer than two)."""
    if len(values) < 2 or pc.count_distinct(values, mode="all").as_py() != 1:
        return None
    value = values[0].as_py()
    return None if value in (None, "") else str(value)


def fit_columns(display: pa.Table, width: int, sort_key: str) -> list[tuple[Column, int]]:
    """The columns to show in ``width`` terminal columns, in list order, each with its
    width: never an empty column nor a ``CONSTANT_ELSEWHERE`` one with one value; then the
    most useful (lowest rank) that fit, the flexible preview taking what is left."""
    natural: dict[str, int] = {}
    for col in COLUMNS:
        content = _content_width(display[col.key])
        if content == 0 or (col.key in CONSTANT_ELSEWHERE
                            and constant_value(display[col.key]) is not None):
            continue
        header = len(col.label) + (2 if col.key == sort_key else 0)
        natural[col.key] = max(header, min(content, col.cap or content))
    order = list(BY_KEY)
    kept = sorted(natural, key=lambda k: (BY_KEY[k].rank, order.index(k)))
    room = max(width - SCROLLBAR, 20)

    def need(keys: list[str]) -> int:
        return sum(min(FLEX_MIN, natural[k]) if BY_KEY[k].flex else natural[k]
                   for k in keys) + CELL_PADDING * len(keys)

    while len(kept) > 1 and need(kept) > room:
        kept.pop()  # the least useful goes first
    left = room - need(kept)
    out = []
    for col in COLUMNS:
        if col.key in kept:
            w = natural[col.key]
            if col.flex:
                w = min(w, min(FLEX_MIN, w) + left)
            out.append((col, w))
    return out


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
        Binding("R", "reload", "Reload"),
        Binding("V", "verify", "Verify"),
        Binding("C", "compare", "Compare versions", show=False),
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

    @work(thread=True, exclusive=True, group="requests")
    def load_page(self, generation: int, query: ListQuery, offset: int) -> None:
        answers = self.app.answers()  # type: ignore[attr-defined]
        reveal = bool(self.app.reveal)  # type: ignore[attr-defined]
        self.queries_run += 1
        try:
            counts = None if offset == 0 or not self._total else (self._matched, self._total)
            result = answers.requests(
                query.flt,
                sort=query.sort,
                descending=query.descending,
                limit=PAGE_ROWS,
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
        label = source if store.startswith(source) else f"{source} · {store}"
        app.source_label = label  # type: ignore[attr-defined]
        app.watch_reveal(app.reveal)  # type: ignore[attr-defined]

    async def on_assemblies_loaded(self, message: AssembliesLoaded) -> None:
        if message.generation != self._generation:
            return  # a newer query replaced this one
        self._matched, self._total = message.matched, message.total
        old_table = self._table()
        cursor = old_table.cursor_coordinate if old_table is not None else Coordinate(0, 0)
        if message.offset == 0 or self._keys is None or self._display is None:
            self._keys, self._display = message.keys, message.display
            self._affixes, self._misses = message.affixes, message.misses
            cursor = Coordinate(0, cursor.column)
        else:
            self._keys = pa.concat_tables([self._keys, message.keys])
            self._display = pa.concat_tables([self._display, message.display])
        self._loading_more = False
        await self._show_table(cursor)
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
            await self._show_table(cursor)
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

    async def _show_table(self, cursor: Coordinate) -> None:
        assert self._display is not None
        holder = self.query_one("#requests-holder")
        had_focus = self.focused is None or isinstance(self.focused, DataTable)
        await holder.remove_children()
        old = [c.key for c, _ in self._shown]
        self._shown = self._fit()
        if not self._display.num_rows:  # the headers of the main columns, over the reason
            self._shown = [(c, len(c.label) + 2) for c in COLUMNS if c.rank <= 3]
        if 0 <= cursor.column < len(old) and old[cursor.column] in BY_KEY:
            # the cursor stays on its column when columns come or go
            keys = [c.key for c, _ in self._shown]
            column = old[cursor.column]
            cursor = Coordinate(cursor.row, keys.index(column) if column in keys else 0)
        q = self.query_state
        # escaped before cut, so what is cut is what is shown
        shown = pa.table({c.key: cut(safe_column(self._display[c.key]), w)
                          for c, w in self._shown})
        shown = shown.rename_columns(
            [f"{c.label} {ARROWS[q.descending]}" if c.key == q.column else c.label
             for c, _ in self._shown])
        table = arrow_table(
            shown,
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

    def _table(self) -> DataTable | None:
        tables = self.query("#requests-table").results(DataTable)
        return next(iter(tables), None)

    def _update_status(self) -> None:
        q = self.query_state
        loaded = self._display.num_rows if self._display is not None else 0
        parts = [f"{self._matched:,} of {self._total:,} requests"]
        parts.append(f"sorted by {BY_KEY[q.column].label} {ARROWS[q.descending]}")
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
        if self._parse(value) is not _INVALID and value != self.query_state.text:
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

    def _parse(self, text: str) -> Any:
        """The parsed filter (None for no filter), or ``_INVALID`` with the error shown."""
        from ingest.filters import parse_filter

        try:
            flt = parse_filter(text) if text.strip() else None
        except ContextlensError as err:
            self._show_error(str(err))
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
        self.app.open_verify()  # type: ignore[attr-defined]

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
