"""One assembly: context in prompt order, omissions by reason, the decision trace, the
prompt as the model saw it, and a record panel with the why-sentence and provenance.

(One screen, one module, over 500 lines: its four tabs and the record panel are driven by the
one message pipeline below; the widgets it shows live in ``inspector/widgets``.)

Pipeline: ``RecordsLoaded`` (the request row, records, trace and, when it was loaded ahead,
the first record's panel) -> ``RecordSelected`` (a highlighted record) -> ``RecordExplained``
(its panel), and ``PromptRendered`` when the Prompt tab is first shown. An assembly the
request list loaded ahead is filled in before the screen is shown: one layout, one paint.
"""

from __future__ import annotations

import textwrap
from dataclasses import replace
from typing import Any, Callable

from typing import Mapping

import pyarrow as pa
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Header, Log, Static, TabbedContent, TabPane, Tree
from textual.worker import get_current_worker
from textual_fastdatatable import DataTable

from ingest.errors import ContextlensError
from ingest.tags import times_unrecorded
from ingest.timefmt import table_time
from readmodel import EffectiveBudget, TokenAccounting
from readmodel.ids import NO_AFFIXES, short_id
from readmodel.masking import Masker, masked_ids

from ..lens_app import lens_app
from ..widgets.arrow_table import arrow_table, refill
from ..widgets.footer import KeysFooter
from ..widgets.id_text import IdText
from ..widgets.assembly_view import (AssemblyContent, assembly_content, budget_line, explain,
                                     recorded_tokens_line, shown_ids, token_shape_line)
from ..widgets.omitted_tree import OmittedTree
from ..widgets.record_panel import KIND_SHORT, ProvenanceList, RecordDetail, RecordPanel
from ..widgets.safe import one_line, readable, safe_text

TABS = ("context", "omitted", "trace", "prompt")
# seconds an opened request waits for its records before its screen shows "loading…" (the
# request list stays on screen meanwhile)
SHOW_WAIT = 0.1
FINDINGS_PAUSE = 0.3  # seconds after the records show before the lint of the request runs
PROMPT_WIDTH = 110  # prompt bodies are wrapped to this many columns
# what the record panel says when the active tab has no record under its cursor
NO_RECORD = {
    "context": "No record highlighted: move the cursor to a record.",
    "omitted": "No omitted record highlighted: move the cursor to a record under a reason.",
    "trace": "No decision highlighted: move the cursor to a row.",
    "prompt": "The prompt shows no records to pick: pick one on Context, Omitted or Trace.",
}


# ---------------------------------------------------------------------- messages


class AssemblyFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class RecordsLoaded(Message):
    def __init__(self, assembly_id: str, content: AssemblyContent) -> None:
        super().__init__()
        self.assembly_id = assembly_id
        self.content = content


class RecordSelected(Message):
    def __init__(self, kind: str, record_id: str, walk: bool = False) -> None:
        super().__init__()
        self.kind = kind
        self.record_id = record_id
        self.walk = walk  # reached by walking provenance, not by moving the cursor


class RecordExplained(Message):
    def __init__(self, detail: RecordDetail) -> None:
        super().__init__()
        self.detail = detail


class FindingsLoaded(Message):
    """The lint and safety findings of the shown assembly (``ReadModel.lint``)."""

    def __init__(self, assembly_id: str, findings: list[dict[str, Any]]) -> None:
        super().__init__()
        self.assembly_id = assembly_id
        self.findings = findings


class PromptRendered(Message):
    def __init__(self, lines: list[str], parts: int, masked: int) -> None:
        super().__init__()
        self.lines = lines
        self.parts = parts
        self.masked = masked


SEVERITY_STYLES = {"error": "bold red", "warning": "bold yellow", "info": "cyan"}


def findings_line(findings: list[dict[str, Any]],
                  affixes: tuple[str, str] = NO_AFFIXES, ids: IdText | None = None) -> Text:
    """``⚠ lint stale_as_current: memory mem-014, mem-015 · …``: each rule with its records,
    the most severe first (``contextlens lint`` has the details); ids as ``ids`` shows
    them (masked when not given)."""
    ids = ids if ids is not None else IdText(False, affixes)
    # each rule's records by kind, the kind said once (an 80-column line keeps more ids)
    by_rule: dict[tuple[str, str], dict[str, list[str]]] = {}
    for f in findings:
        kind = str(f.get("record_kind"))
        record = ids(f.get("record_id"), None)
        by_rule.setdefault((str(f.get("severity")), str(f.get("rule"))), {}).setdefault(
            str(KIND_SHORT.get(kind, kind)), []).append(record)
    line = Text()
    line.append("⚠ lint", style="bold red" if any(s == "error" for s, _ in by_rule) else "bold")
    for k, ((severity, rule), kinds) in enumerate(by_rule.items()):
        records = ", ".join(f"{kind} {', '.join(ids)}" for kind, ids in kinds.items())
        line.append("  ·  " if k else " ")
        line.append(safe_text(rule), style=SEVERITY_STYLES.get(severity, ""))
        line.append(f": {one_line(records, 200)}")
    return line


# ---------------------------------------------------------------------- the screen


class AssemblyScreen(Screen[None]):
    """One recorded context assembly and the records it weighed."""

    BINDINGS = [
        # the tabs show their keys themselves (1 Context …): the footer need not
        Binding("1", "tab('context')", "Context", show=False),
        Binding("2", "tab('omitted')", "Omitted", show=False),
        Binding("3", "tab('trace')", "Trace", show=False),
        Binding("4", "tab('prompt')", "Prompt", show=False),
        Binding("p", "focus_provenance", "Provenance"),
        Binding("c", "conversation", "Conversation"),
        Binding("r", "replay", "Replay…"),
        Binding("u", "bundle", "Bundle…"),
        Binding("escape", "back", "Back"),
        # the record panel's own key, from anywhere on the screen (the highlighted record)
        Binding("b", "bisect", "Bisect record", show=False),
    ]

    def __init__(self, assembly_id: str) -> None:
        super().__init__()
        self._reset(assembly_id)
        self._show: Callable[[], Any] | None = None  # shows this screen (show_assembly)
        self._show_timer: Timer | None = None

    def _reset(self, assembly_id: str) -> None:
        """Forget the shown assembly; ``assembly_id`` is the next one."""
        self.assembly_id = assembly_id
        self.assembly: Mapping[str, Any] | None = None
        self._shown_request: Mapping[str, Any] | None = None  # the header's: ids masked
        self.membership: dict[tuple[str, str], dict[str, Any]] = {}
        self._included: pa.Table | None = None
        self._trace: pa.Table | None = None
        self._selected: tuple[str, str] | None = None
        self._walk: list[tuple[str, str]] = []
        self._prompt_requested = False
        self._tokens: TokenAccounting | None = None
        self._budget: EffectiveBudget | None = None
        self._loaded = False  # the records (and with them the budget) are in
        self._omitted_rows: list[dict[str, Any]] | None = None
        self._built: set[str] = set()  # tabs whose content has been built
        self._keep_cursors: dict[str, int] | None = None  # restored once records are back
        self._findings: list[dict[str, Any]] | None = None  # lint, once looked up
        # the store's id affixes: ids shown as the request list shows them (readmodel.ids)
        self._affixes: tuple[str, str] = NO_AFFIXES
        timer = getattr(self, "_findings_timer", None)
        if timer is not None:
            timer.stop()
        self._findings_timer: Timer | None = None

    def ids(self) -> IdText:
        """How this screen displays ids now: masked unless the app reveals, without the
        store's affixes (one ``IdText`` per reveal state and store, so each id is judged
        once)."""
        reveal = bool(lens_app(self).reveal)
        ids = getattr(self, "_id_text", None)
        if ids is None or (ids.reveal, ids.affixes) != (reveal, self._affixes):
            ids = self._id_text = IdText(reveal, self._affixes)
        return ids

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Header()
        shown = masked_ids(self.assembly_id, Masker(bool(lens_app(self).reveal)))
        yield Static(f"assembly {one_line(shown, 120)} · loading…", id="assembly-header", markup=False)
        with Vertical(id="assembly-body"):
            with TabbedContent(id="tabs", initial="tab-context"):
                with TabPane("1 Context", id="tab-context"):
                    yield Static("Loading records…", classes="placeholder", markup=False)
                with TabPane("2 Omitted", id="tab-omitted"):
                    yield OmittedTree(id="omitted-tree")
                with TabPane("3 Trace", id="tab-trace"):
                    yield Static("Loading the decision trace…", classes="placeholder", markup=False)
                with TabPane("4 Prompt", id="tab-prompt"):
                    yield Static("", id="prompt-status", markup=False)
                    yield Log(id="prompt-log", auto_scroll=False, highlight=False)
            yield RecordPanel(id="record-panel")
        yield KeysFooter()

    def on_mount(self) -> None:
        self._fit_panel(*self.app.size)
        header = self.query_one("#assembly-header")
        header.styles.text_wrap = "nowrap"  # each line cut with … (the records keep the rows)
        header.styles.text_overflow = "ellipsis"
        self.watch(self.app, "reveal", self._reveal_changed, init=False)
        self._load()

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        """Textual restyles every widget of a screen each time it is shown again, for a
        stylesheet or theme changed while it was hidden; this screen is shown again for
        every request opened, so the restyle happens only when the app's CSS did change
        since the last one (a widget changed meanwhile restyles itself)."""
        styled = self.app._css_update_count  # noqa: SLF001 - bumped by every CSS/theme change
        if getattr(self, "_styled_at", None) == styled:
            unstyled = events.ScreenResume()
            unstyled.refresh_styles = False
            super()._on_screen_resume(unstyled)
            event.prevent_default()  # Screen's own handler would restyle every widget
        self._styled_at = styled

    def show_assembly(self, assembly_id: str, show: Callable[[], Any] | None = None) -> None:
        """Show another assembly in this (already composed) screen: the app reuses one
        assembly screen, so opening a request costs its data, not a new screen. Call it
        while the screen is hidden; ``show`` (which shows the screen) is called once the
        records are in its widgets, or after ``SHOW_WAIT`` seconds with the screen saying
        it is loading: the first frame of the screen is then its records, not a loading
        screen followed by a second frame."""
        self.workers.cancel_all()
        self._reset(assembly_id)
        self._stop_show_timer()
        self._show = show
        self.remove_class("-failed")
        self.query_one("#prompt-log", Log).clear()
        self.query_one("#prompt-status", Static).update("")
        self.query_one("#omitted-tree", Tree).clear()
        self.query_one("#tabs", TabbedContent).active = "tab-context"
        if self._load():
            return
        self.query_one("#assembly-header", Static).update(
            f"assembly {self.ids()(assembly_id, 120, assembly=True)} · loading…")
        # the last assembly's records go at once; the Context table is kept, emptied, to be
        # refilled in place
        for table in self.query("#context-table").results(DataTable):
            refill(table, table.backend.source_data.slice(0, 0))
        self.query_one("#tab-trace", TabPane).remove_children()
        self.query_one(RecordPanel).show_message("Loading records…")
        if show is not None:
            self._show_timer = self.set_timer(SHOW_WAIT, self._show_now)

    def _show_now(self) -> None:
        """Show the screen if ``show_assembly`` was asked to (once)."""
        self._stop_show_timer()
        show, self._show = self._show, None
        if show is not None:
            show()

    def _stop_show_timer(self) -> None:
        timer, self._show_timer = self._show_timer, None
        if timer is not None:
            timer.stop()

    def _load(self) -> bool:
        """Show the assembly's content: at once if the request list loaded it ahead (True),
        else from a worker (False)."""
        reveal = bool(lens_app(self).reveal)
        content = lens_app(self).contents.peek((self.assembly_id, reveal))
        if content is not None:
            # handled before the screen's next layout, so it is shown filled in
            self.post_message(RecordsLoaded(self.assembly_id, content))
            return True
        self.open_assembly()
        return False

    def _reveal_changed(self, _reveal: bool) -> None:
        # the same records come back, masked or not: the cursors stay on them
        self._keep_cursors = self._cursors()
        self._prompt_requested = False
        self.query_one("#prompt-log", Log).clear()
        self._load()
        if self._current_tab() == "prompt":
            self._request_prompt()

    # ------------------------------------------------------------------ workers

    @property
    def findings_pending(self) -> bool:
        """True while the request's lint waits for its pause."""
        return self._findings_timer is not None

    def _find(self, assembly_id: str) -> None:
        self._findings_timer = None
        if assembly_id == self.assembly_id and self._findings is None:
            self.load_findings(assembly_id)

    @work(thread=True, exclusive=True, group="findings")
    def load_findings(self, assembly_id: str) -> None:
        """The lint rules and safety invariants over this one request."""
        from ingest.filters import AssemblyFilter, Term

        answers = lens_app(self).answers()
        reveal = bool(lens_app(self).reveal)
        try:
            found = answers.lint(AssemblyFilter((Term("id", assembly_id),)), reveal=reveal)
        except ContextlensError:
            return  # the screen works without them
        if not get_current_worker().is_cancelled:
            self.post_message(FindingsLoaded(
                assembly_id, [f for f in found if f.get("assembly_id") in (None, assembly_id)]))

    def on_findings_loaded(self, message: FindingsLoaded) -> None:
        if message.assembly_id == self.assembly_id:
            self._findings = message.findings
            self._render_header()

    @work(thread=True, exclusive=True, group="assembly")
    def open_assembly(self) -> None:
        """Load the assembly's records (the first record's panel follows once they are on
        screen: the records do not wait for it)."""
        assembly_id = self.assembly_id
        answers = lens_app(self).answers()
        reveal = bool(lens_app(self).reveal)
        try:
            content = assembly_content(answers, assembly_id, reveal, explain_first=False)
        except ContextlensError as err:
            self.post_message(AssemblyFailed(str(err)))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(RecordsLoaded(assembly_id, content))

    def _explain_first(self, content: AssemblyContent) -> None:
        if content.first is not None and self._selected == content.first:
            self.explain_record(*content.first, opened=content)

    @work(thread=True, exclusive=True, group="record")
    def explain_record(self, kind: str, record_id: str,
                       opened: AssemblyContent | None = None) -> None:
        """Explain a record for the panel; for the first record of ``opened`` (records
        just loaded), the whole is kept too, so opening it again shows it at once."""
        assembly_id = self.assembly_id
        answers = lens_app(self).answers()
        reveal = bool(lens_app(self).reveal)
        detail = explain(answers, assembly_id, kind, record_id, reveal)
        if opened is not None:
            lens_app(self).contents.get(
                (assembly_id, reveal), lambda: replace(opened, first_detail=detail))
        if not get_current_worker().is_cancelled:
            self.post_message(RecordExplained(detail))

    @work(thread=True, exclusive=True, group="prompt")
    def load_prompt(self) -> None:
        answers = lens_app(self).answers()
        reveal = bool(lens_app(self).reveal)
        try:
            prompt = answers.prompt(self.assembly_id, reveal=reveal)
        except ContextlensError as err:
            self.post_message(PromptRendered([f"Could not render the prompt: {err}"], 0, 0))
            return
        lines: list[str] = []
        for part in prompt.parts:
            # the header names the speaker (untrusted): one line, cut to the width
            rule = f"── #{part.position} {one_line(part.header, PROMPT_WIDTH - 30)} · {part.tokens} tok "
            lines.append(rule.ljust(PROMPT_WIDTH, "─"))
            for body_line in readable(part.body).split("\n"):
                wrapped = textwrap.wrap(
                    body_line, PROMPT_WIDTH, replace_whitespace=False, drop_whitespace=False
                )
                lines.extend(wrapped or [""])
            lines.append("")
        if not get_current_worker().is_cancelled:
            self.post_message(PromptRendered(lines, len(prompt.parts), prompt.masked))

    # ------------------------------------------------------------------ message handlers

    def _render_header(self) -> None:
        """Three lines, each cut to the terminal rather than wrapped, most telling first:
        who and under which policy; when and where; the prompt's tokens as a picture."""
        a = self._shown_request
        if a is None:
            return
        affixes = self._affixes
        narrow = self.app.size.width < 120  # an 80- or 100-column terminal

        def short(value: Any, limit: int, assembly: bool = False) -> str:
            return one_line(short_id(value, affixes, prefix_only=not assembly), limit)

        header = Text(no_wrap=True, overflow="ellipsis")
        header.append(f"assembly {short(a.get('assembly_id'), 120, assembly=True)}", style="bold")
        header.append(f"  ·  policy {one_line(a.get('policy_version'), 40)}", style="bold")
        if not narrow:  # the model, said next, matters more on a short line
            header.append(f" (assembler {one_line(a.get('assembler_version'), 40)})", style="dim")
        header.append(f"  ·  {one_line(a.get('provider'), 40)}/{one_line(a.get('model'), 60)}")
        header.append(f"  ·  {safe_text(a.get('runtime_kind'))} · {short(a.get('participant_id'), 80)}")
        header.append("\n")
        used, budget = int(a.get("assembled_tokens") or 0), int(a.get("token_budget") or 0)
        if self._budget is not None and not self._budget.has_budget:
            # a runtime policy keeps no budget: the recorded figure is the model's window
            header.append(f"tokens {used:,} of the {budget:,} model window", style="bold")
        else:
            header.append(f"tokens {used:,} of {budget:,} budget", style="bold")
        baseline = int(a.get("baseline_tokens") or 0)
        if not narrow or baseline != used:  # a baseline equal to the tokens says nothing new
            header.append(f" (baseline {baseline:,})")
        header.append(f"  ·  {a.get('included_count', '?')} in, {a.get('omitted_count', '?')} out"
                      if narrow else
                      f"  ·  {a.get('included_count', '?')} included, "
                      f"{a.get('omitted_count', '?')} omitted")
        when = a.get("assembled_at")
        if times_unrecorded(a.get("tags")):
            header.append("  ·  time not recorded (the log's order kept)", style="dim")
        elif when is not None:
            header.append(f"  ·  {safe_text(table_time(when))} UTC")
        header.append(f"  ·  conversation {short(a.get('conversation_id'), 80)}")
        header.append(f" / {short(a.get('branch_id'), 60)}", style="dim")
        note = self.ids().affixes_note()
        if note is not None:
            # as the request list: what the ids shown leave out, so one can be typed whole
            header.append(f"  ·  {note}", style="dim")
        if self._loaded:
            header.append("\n")
            header.append_text(budget_line(self._budget))
        shape = token_shape_line(self._tokens)
        if shape is not None:
            header.append("\n")
            header.append_text(shape)
        recorded = recorded_tokens_line(self._tokens)
        if recorded is not None:
            header.append("\n")
            header.append_text(recorded)
        if self._findings:
            header.append("\n")
            header.append_text(findings_line(self._findings, affixes, self.ids()))
        self.query_one("#assembly-header", Static).update(header)

    def on_resize(self, event: events.Resize) -> None:
        self._fit_panel(event.size.width, event.size.height)
        self._render_header()  # what a header line holds depends on the width

    def _fit_panel(self, width: int, height: int) -> None:
        """The record panel takes a third of a short terminal (the records keep the rest)
        and the provenance pane at most 38% of a narrow one (the why-sentence the rest)."""
        panel = self.query_one("#record-panel")
        panel.styles.height = min(14, max(8, height // 3))
        for box in self.query("#provenance-box"):
            box.styles.width = min(62, max(30, width * 38 // 100))

    def on_assembly_failed(self, message: AssemblyFailed) -> None:
        self.add_class("-failed")
        self.query_one("#assembly-header", Static).update(
            Text(self.ids().prose(message.error), style="bold red"))  # it names the id
        self.query_one(RecordPanel).show_message(message.error)
        self._show_now()

    async def on_records_loaded(self, message: RecordsLoaded) -> None:
        if message.assembly_id != self.assembly_id:
            return  # another assembly was opened meanwhile
        content = message.content
        self._affixes = content.affixes
        self.assembly = content.request
        self._shown_request = content.shown_request or content.request
        self.membership = content.membership
        self._tokens = content.tokens
        self._budget = content.budget
        self._loaded = True
        self._render_header()
        if self._findings is None:
            # once the records are on screen and the cursor stays: never in their way
            assembly_id = self.assembly_id
            self._findings_timer = self.set_timer(FINDINGS_PAUSE, lambda: self._find(assembly_id))
        self._included = content.included
        self._trace = content.trace
        tables = list(self.query("#context-table").results(DataTable))
        if tables:  # kept from the last assembly: refilled in place
            table = tables[0]
            refill(table, shown_ids(content.included, "id", self._affixes, content.reveal))
        else:
            context_pane = self.query_one("#tab-context", TabPane)
            await context_pane.remove_children()
            table = arrow_table(shown_ids(content.included, "id", self._affixes, content.reveal),
                                id="context-table", max_column_content_width=70)
            await context_pane.mount(table)
        # the Trace table and the Omitted tree are built when their tab is first shown:
        # opening an assembly pays only for what is on screen
        self._omitted_rows = content.omitted
        self._built = set()
        await self._build_tab(self._current_tab())
        keep, self._keep_cursors = self._keep_cursors, None
        if keep:
            self._restore_cursors(keep)
        if self._selected is not None:  # the reveal changed: explain the record again
            self._select(*self._selected)
        elif content.first is not None:
            self._selected = content.first
            if content.first_detail is not None:
                self.query_one(RecordPanel).show(content.first_detail, self.membership,
                                                 self._affixes)
            else:  # once the records are on screen
                self.call_after_refresh(self._explain_first, content)
        if self._current_tab() == "context":
            table.focus()
        # the header and panel may change height: lay the screen out before its next frame,
        # so the first frame that shows these records is complete
        self.refresh(layout=True)
        self._show_now()

    async def _build_tab(self, tab: str) -> None:
        """Fill the Trace table or the Omitted tree the first time its tab is shown."""
        if tab in self._built:
            return
        if tab == "trace" and self._trace is not None:
            self._built.add(tab)
            trace_pane = self.query_one("#tab-trace", TabPane)
            await trace_pane.remove_children()
            await trace_pane.mount(arrow_table(shown_ids(self._trace, "record", self._affixes,
                                                         bool(lens_app(self).reveal)),
                                               id="trace-table", max_column_content_width=70))
        elif tab == "omitted" and self._omitted_rows is not None:
            self._built.add(tab)
            self._fill_omitted(self._omitted_rows)

    def _cursors(self) -> dict[str, int]:
        """Where each tab's cursor is (row or tree line)."""
        out = {f"{name}-table": table.cursor_row for name in ("context", "trace")
               for table in self.query(f"#{name}-table").results(DataTable)}
        out["omitted-tree"] = self.query_one("#omitted-tree", Tree).cursor_line
        return out

    def _restore_cursors(self, keep: dict[str, int]) -> None:
        for name in ("context", "trace"):
            for table in self.query(f"#{name}-table").results(DataTable):
                row = keep.get(f"{name}-table")
                if row is not None and 0 < row < table.row_count:
                    table.move_cursor(row=row, animate=False)
        line = keep.get("omitted-tree")
        if "omitted" in self._built and line is not None and line >= 0:
            self.query_one("#omitted-tree", Tree).cursor_line = line

    def _fill_omitted(self, rows: list[dict[str, Any]]) -> None:
        # each row's id as shown beside the whole one (its data, to select by)
        ids = self.ids()
        shown = [{**r, "shown_id": ids(r["record_id"], None)} for r in rows]
        self.query_one("#omitted-tree", OmittedTree).show_groups(shown)

    def on_prompt_rendered(self, message: PromptRendered) -> None:
        log = self.query_one("#prompt-log", Log)
        log.clear()
        log.write_lines(message.lines, scroll_end=False)
        status = f"{message.parts} parts as the model received them"
        if message.masked:
            status += f" · {message.masked} masked (v to reveal)"
        self.query_one("#prompt-status", Static).update(status)

    def on_record_explained(self, message: RecordExplained) -> None:
        detail = message.detail
        if self._selected != (detail.kind, detail.record_id):
            return  # the cursor moved on
        self.query_one(RecordPanel).show(detail, self.membership, self._affixes)

    def on_record_selected(self, message: RecordSelected) -> None:
        if (message.kind, message.record_id) != self._selected:
            # a cursor landing on the record already in the panel explains nothing again
            self._select(message.kind, message.record_id)

    def _select(self, kind: str, record_id: str) -> None:
        self._selected = (kind, record_id)
        self.explain_record(kind, record_id)

    # ------------------------------------------------------------------ widget events

    # A table or tree outside the active tab also reports its cursor (when it is
    # mounted); only the active tab's cursor selects the record in the panel.

    @on(DataTable.RowHighlighted, "#context-table")
    def context_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self._current_tab() == "context":
            self._select_row_of("context", event.cursor_row)

    @on(DataTable.RowHighlighted, "#trace-table")
    def trace_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self._current_tab() == "trace":
            self._select_row_of("trace", event.cursor_row)

    def _select_row_of(self, tab: str, row: int) -> None:
        table, kind_col, id_col = (
            (self._included, "kind", "id") if tab == "context" else (self._trace, "kind", "record")
        )
        if table is not None and 0 <= row < table.num_rows:
            self._walk.clear()
            self.post_message(
                RecordSelected(table[kind_col][row].as_py(), table[id_col][row].as_py())
            )

    def _select_under_cursor(self, tab: str) -> None:
        """Select the record under the cursor of ``tab``'s table or tree; with none there,
        the panel says so (it never keeps a record picked on another tab)."""
        if tab in ("context", "trace"):
            for table in self.query(f"#{tab}-table").results(DataTable):
                if table.row_count:
                    self._select_row_of(tab, table.cursor_row)
                    return
        elif tab == "omitted":
            node = self.query_one("#omitted-tree", Tree).cursor_node
            data = (node.data if node is not None else None) or {}
            if "kind" in data:
                self._walk.clear()
                self.post_message(RecordSelected(data["kind"], data["id"]))
                return
        self._selected = None
        self._walk.clear()
        message = NO_RECORD.get(tab, NO_RECORD["context"])
        if tab == "omitted" and self.assembly and self.assembly.get("omitted_count") == 0:
            message = "Nothing was omitted from this request: every candidate was sent."
        self.query_one(RecordPanel).show_message(message)

    @on(DataTable.RowSelected)
    def row_selected(self, _event: DataTable.RowSelected) -> None:
        self.action_focus_provenance()

    @on(Tree.NodeHighlighted, "#omitted-tree")
    def omitted_highlighted(self, _event: Tree.NodeHighlighted) -> None:
        if self._current_tab() == "omitted":
            self._select_under_cursor("omitted")

    @on(Tree.NodeSelected, "#omitted-tree")
    def omitted_selected(self, event: Tree.NodeSelected) -> None:
        if "kind" in (event.node.data or {}):
            self.action_focus_provenance()

    @on(RecordPanel.LinkChosen)
    def link_chosen(self, event: RecordPanel.LinkChosen) -> None:
        link = event.link
        if link.get("broken"):
            self.notify(
                f"{safe_text(link.get('kind'))} {self.ids()(link.get('id'), 80)} is missing from the export "
                "(broken provenance): there is no record to open.",
                severity="warning",
                markup=False,
            )
            return
        target = (str(link["kind"]), str(link["id"]))
        if target == self._selected:
            return
        if link.get("kind") == "model_run":
            self.notify("Model runs are shown on the conversation screen (c).")
            return
        if self._selected is not None:
            self._walk.append(self._selected)
        self._select(*target)

    @on(ProvenanceList.WalkedBack)
    def walked_back(self, _event: ProvenanceList.WalkedBack) -> None:
        if self._walk:
            self._select(*self._walk.pop())

    @on(TabbedContent.TabActivated, "#tabs")
    async def tab_activated(self, _event: TabbedContent.TabActivated) -> None:
        tab = self._current_tab()
        await self._build_tab(tab)
        if tab == "prompt":
            self._request_prompt()
        self._select_under_cursor(tab)
        if tab == "omitted":
            self.call_after_refresh(self._show_top_of_omitted)
        focus_target = {
            "context": "#context-table",
            "omitted": "#omitted-tree",
            "trace": "#trace-table",
            "prompt": "#prompt-log",
        }[tab]
        for widget in self.query(focus_target):
            widget.focus()

    def _show_top_of_omitted(self) -> None:
        """Scroll the omitted tree to its top when the cursor stays in view, so the
        first reason's header is not hidden above the cursor."""
        tree = self.query_one("#omitted-tree", Tree)
        if 0 <= tree.cursor_line < tree.scrollable_content_region.height - 1:
            tree.scroll_home(animate=False)

    def _request_prompt(self) -> None:
        if not self._prompt_requested:
            self._prompt_requested = True
            self.query_one("#prompt-status", Static).update("Rendering the prompt…")
            self.load_prompt()

    def _current_tab(self) -> str:
        active = self.query_one("#tabs", TabbedContent).active
        return active.removeprefix("tab-") if active else "context"

    # ------------------------------------------------------------------ actions

    def action_tab(self, name: str) -> None:
        self.query_one("#tabs", TabbedContent).active = f"tab-{name}"

    def action_focus_provenance(self) -> None:
        self.query_one(RecordPanel).provenance_list.focus()

    def action_bisect(self) -> None:
        self.query_one(RecordPanel).action_bisect()

    def action_back(self) -> None:
        focused = self.focused
        if isinstance(focused, ProvenanceList):
            self.call_later(self.tab_activated, None)
            return
        self.app.pop_screen()

    def action_conversation(self) -> None:
        if self.assembly is not None:
            lens_app(self).open_conversation(
                self.assembly["conversation_id"], self.assembly_id
            )

    def action_bundle(self) -> None:
        """Write an incident bundle of this assembly (asks for the folder)."""
        lens_app(self).open_bundle(self.assembly_id)

    def action_replay(self) -> None:
        """Pick a policy version; the diff screen replays this assembly under it."""
        lens_app(self).pick_replay(
            self.assembly_id, (self.assembly or {}).get("policy_version")
        )
