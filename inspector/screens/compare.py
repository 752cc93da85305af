"""Compare two policy versions (or a version against the recording) over the requests the
list's filter selects: safety regressions first, then the aggregates (requests affected,
records newly in, out and re-rendered by kind, reason and privacy class, tokens), a
histogram of the per-request token deltas, and the most-changed requests; Enter on one
opens its diff.

``ComparePicker`` chooses the two sides (the replay policy picker, for many requests).
The compare runs in a thread worker with a progress bar; Escape stops it.

Pipeline: ``CompareProgressed`` (from the callback) -> ``CompareFinished`` or
``CompareFailed``.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, OptionList, ProgressBar, Select, Static
from textual.widgets.option_list import Option
from textual.worker import get_current_worker
from textual_fastdatatable import DataTable
from textual_plotext import PlotextPlot

from ingest.errors import ContextlensError
from readmodel import RECORDED, CompareCancelled, CompareResult, PolicyInfo

from ..widgets.arrow_table import arrow_table
from ..widgets.safe import one_line, safe_text
from .replay import PolicyPicker

PROGRESS_STEPS = 200  # at most this many progress updates per run

SAFETY_TITLES = (
    ("regressions", "regressions (B has, A has not)", "bold red"),
    ("fixes", "fixes (A has, B has not)", "bold green"),
    ("in_recording", "in the recording (sent)", "bold yellow"),
)
CHANGE_TITLES = (
    ("newly_included", "newly included", "A's reason"),
    ("newly_omitted", "newly omitted", "B's reason"),
    ("rerendered", "re-rendered", "B's reason"),
)
MOST_CHANGED_COLUMNS = (
    ("assembly", "assembly_id"), ("safety +", "safety_regressions"), ("safety −", "safety_fixes"),
    ("in", "newly_included"), ("out", "newly_omitted"), ("re-rendered", "rerendered"),
    ("tokens A", "tokens_a"), ("tokens B", "tokens_b"), ("delta", "delta"),
)


class ComparePicker(PolicyPicker):
    """The policy picker, choosing side B (the highlighted version) and side A (the
    recording or another version) for a compare over many requests."""

    BINDINGS = [
        Binding("enter", "choose", "Compare under version", show=False),
        Binding("a", "focus_against", "Compare against…"),
        Binding("escape", "cancel", "Cancel"),
    ]

    VERB = "compares"

    def __init__(self, filter_text: str = "") -> None:
        super().__init__("", None)
        self.filter_text = filter_text

    def applicable(self, answers: Any) -> list[PolicyInfo]:
        """The versions that replay the filtered requests (``readmodel.applicable``), family
        by family: a store of an export and transcripts offers each; the compare runs over
        the requests of the family chosen (the title says how many each has)."""
        from readmodel.applicable import policy_choices, store_policies

        found = store_policies(answers, self.filter_text.strip() or None)
        if len(found.families) > 1:
            self.post_message(ScopeLoaded(found.families))
        return policy_choices(answers, found)

    def on_scope_loaded(self, message: "ScopeLoaded") -> None:
        # a store of several families: say which requests each side's family covers
        words = ", ".join(
            f"{f.requests:,} under {f.name if f.runtime else 'the registry’s versions'}"
            for f in message.families)
        if not self.query("#compare-scope"):
            self.query_one("#replay-dialog").mount(Static(Text(
                f"These requests: {words}. A compare runs over those its versions apply to.",
                style="dim"), id="compare-scope"), before=self.query_one("#against-row"))

    def compose(self) -> ComposeResult:
        with Vertical(id="replay-dialog"):
            title = Text()
            title.append("Compare ", style="bold")
            title.append("the filtered requests" if self.filter_text.strip() else "every request",
                         style="bold")
            if self.filter_text.strip():
                title.append(f"  (filter: {one_line(self.filter_text, 60)})", style="dim")
            yield Static(title, classes="dialog-title")
            # side A first: its list opens over the versions, not over the footer
            with Horizontal(id="against-row"):
                yield Label("compare against (side A)", id="against-label")
                yield Select[str]([(self._recorded_label(), RECORDED)], value=RECORDED,
                                  allow_blank=False, id="against", compact=True)
            versions = OptionList(id="policy-versions", markup=False)
            versions.add_option(Option(Text("Loading the policy registry…", style="dim"), disabled=True))
            yield versions
            yield Static(self.hint(typed=False), id="replay-hint", markup=False)

    def _recorded_label(self) -> str:
        return "the recorded assemblies"


class ScopeLoaded(Message):
    """The filtered requests are of several policy families (an export and transcripts)."""

    def __init__(self, families: tuple[Any, ...]) -> None:
        super().__init__()
        self.families = families


class CompareFinished(Message):
    def __init__(self, result: CompareResult) -> None:
        super().__init__()
        self.result = result


class CompareFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def safety_text(result: CompareResult) -> Text:
    """The safety block: each group's findings, their requests and records."""
    text = Text()
    groups = [(key, title, style, result.safety.get(key) or ())
              for key, title, style in SAFETY_TITLES]
    if not any(items for *_, items in groups):
        text.append("safety: none", style="bold green")
        return _over_window(text, result)
    text.append("safety", style="bold")
    for key, title, style, items in groups:
        if not items:
            continue
        total = sum(g["findings"] for g in items)
        text.append(f"\n{title}: {total}", style=style)
        for g in items:
            text.append(f"\n  {safe_text(g['finding'])}", style="bold")
            text.append(f": {g['findings']} in {g['requests']} requests, e.g. "
                        f"{', '.join(one_line(r, 40) for r in g['example_requests'])}")
            records = ", ".join(f"{safe_text(r['record_id'])} ({r['requests']})"
                                for r in g["records"])
            text.append(f"\n    {one_line(records, 300)}", style="dim")
    return _over_window(text, result)


def _over_window(text: Text, result: CompareResult) -> Text:
    """After safety, the requests B sends past the model's context window (they would have
    failed), with a few of them."""
    over = result.over_context_window or {}
    if over.get("requests"):
        examples = ", ".join(f"{one_line(e['assembly_id'], 40)} ({e['tokens_b']:,} > {e['context_limit']:,})"
                             for e in over.get("examples") or ())
        n = over["requests"]
        text.append(f"\nover_context_window: {n:,} request{'s' if n != 1 else ''} past the model's context "
                    f"window under B (they would have failed), e.g. {examples}", style="bold red")
    return text


def aggregates_text(result: CompareResult) -> Text:
    """Requests affected, record changes by kind, reason and privacy class, tokens."""
    text = Text()
    text.append(f"{result.requests:,} requests compared, ")
    text.append(f"{result.affected:,} affected", style="bold")
    text.append(" (what the model receives differs)")
    records = result.records
    for key, title, reason in CHANGE_TITLES:
        block = records[key]
        text.append(f"\n{title}: {block['total']:,}", style="bold")
        if block["by"]:
            text.append(f"  (kind · {reason} · privacy class)", style="dim")
        for row in block["by"][:8]:
            text.append(f"\n  {row['count']:>6,}  {safe_text(row['record_kind'])} · "
                        f"{safe_text(row['reason'] or '-')} · {safe_text(row['privacy_class'] or '-')}")
        if len(block["by"]) > 8:
            text.append(f"\n  … {len(block['by']) - 8} more groups", style="dim")
    text.append(f"\nmoved {records['moved']['total']:,} · reason changed "
                f"{records['reason_changed']['total']:,}", style="dim")
    tokens = result.tokens
    per = tokens["per_request"]
    text.append(f"\ntokens {tokens['a']:,} → {tokens['b']:,} ({tokens['delta']:+,})", style="bold")
    if per["count"]:
        pct = per["percentiles"]
        text.append(f"\nper request: min {per['min']:+,} · p50 {pct['p50']:+,} · "
                    f"p95 {pct['p95']:+,} · max {per['max']:+,}")
    return text


def most_changed_table(result: CompareResult) -> pa.Table:
    return pa.table({label: pa.array([row[key] for row in result.most_changed],
                                     pa.string() if key == "assembly_id" else pa.int64())
                     for label, key in MOST_CHANGED_COLUMNS})


def bin_labels(histogram: Any) -> list[str]:
    return [f"{b['lo']:+d}" if b["hi"] - b["lo"] == 1 else f"{b['lo']:+d}…{b['hi'] - 1:+d}"
            for b in histogram]


LABELLED_BINS = 5  # at most this many bins named under the histogram (more do not fit)


def histogram_ticks(histogram: Any, rows: int = 8,
                    columns: int | None = None) -> tuple[list[int], list[str], list[int]]:
    """Where to name the bins, and the y ticks: only bins that hold requests are named
    (plotext, left to itself, thins its labels and names empty bins, so a bar can stand
    under another bin's name), no two names closer than the longest one on a plot of
    ``columns`` (plotext drops one of two colliding names, and which one it drops was not
    the same from one drawing to the next), and requests are counted in round whole
    numbers, at most one tick every other row of the ``rows`` the plot has (two ticks on
    one row hide one of them: 55, 33, 22 without 44)."""
    labels = bin_labels(histogram)
    held = [i for i, b in enumerate(histogram) if b["count"]]
    step = max(1, -(-len(held) // LABELLED_BINS))
    named = held[::step]
    if columns is not None and named:
        per_bin = columns / len(histogram)
        room = max(len(labels[i]) for i in named) + 1
        spaced = [named[0]]
        for i in named[1:]:
            if (i - spaced[-1]) * per_bin >= room:
                spaced.append(i)
        named = spaced
    top = max((b["count"] for b in histogram), default=0)
    most = max(2, rows // 2 + 1)  # ticks, 0 among them
    every = next(n for n in _round_steps() if n * (most - 1) >= top)
    return named, [labels[i] for i in named], list(range(0, top + every, every))


def _round_steps() -> Iterator[int]:
    """1, 2, 5, 10, 20, 50, …"""
    scale = 1
    while True:
        yield from (scale, 2 * scale, 5 * scale)
        scale *= 10


class CompareScreen(Screen[None]):
    """Side A against side B over the filtered requests, safety first."""

    BINDINGS = [
        Binding("enter", "open", "Open diff", show=False),
        Binding("R", "rerun", "Compare again"),
        Binding("escape", "back", "Stop / back"),
    ]

    DEFAULT_CSS = """
    #compare-title { padding: 0 1; text-style: bold; background: $boost; }
    #compare-progress { padding: 0 2; height: auto; }
    #compare-progress Bar { width: 100; }
    #compare-body { height: 1fr; }
    #compare-report { width: 3fr; padding: 0 1; }
    #compare-safety { height: auto; padding: 0 1; margin-bottom: 1; }
    CompareScreen.-regressed #compare-safety { border-left: thick $error; }
    #compare-aggregates { height: auto; padding: 0 1; }
    #compare-histogram { width: 2fr; min-width: 30; }
    #compare-holder { height: 10; }
    #compare-table { height: 1fr; }
    #compare-status { height: 1; padding: 0 1; background: $panel; color: $text; }
    """

    def __init__(self, a: str, b: str, flt: Any = None, filter_text: str = "") -> None:
        super().__init__()
        self._plotted: CompareResult | None = None  # the result the histogram shows
        self.a, self.b = a, b
        self.flt = flt
        self.filter_text = filter_text
        self.result: CompareResult | None = None
        self.running = False
        self.cancelled = False
        self._seen = (0, 0)  # (done, total) of the last progress report
        self._run = 0  # which run is on screen (R starts another)

    def compose(self) -> ComposeResult:
        yield Header()
        title = (f"Compare {'the recording' if self.a == RECORDED else self.a} → {self.b} over "
                 + (f"the requests matching {one_line(self.filter_text, 60)}"
                    if self.filter_text.strip() else "every request"))
        if self.app.ray_exports is not None:  # type: ignore[attr-defined]
            title += " · on Ray"
        yield Static(title, id="compare-title", markup=False)
        yield ProgressBar(id="compare-progress", show_eta=False)
        with Horizontal(id="compare-body"):
            with VerticalScroll(id="compare-report"):
                yield Static("Replaying…", id="compare-safety", markup=False)
                yield Static("", id="compare-aggregates", markup=False)
            yield PlotextPlot(id="compare-histogram")
        yield Vertical(id="compare-holder")
        yield Static("", id="compare-status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.start()

    def start(self) -> None:
        self.running, self.cancelled, self.result = True, False, None
        self._run += 1  # a late progress report of a run stopped before this one is ignored
        self.set_class(True, "-running")
        self.set_class(False, "-regressed")
        self.query_one("#compare-progress", ProgressBar).update(total=None, progress=0)
        self.query_one("#compare-safety", Static).update("Replaying…")
        self.query_one("#compare-aggregates", Static).update("")
        self.query_one("#compare-holder").remove_children()
        self._clear_plot()  # a rerun stopped half-way must not show the last run's histogram
        self._seen = (0, 0)
        self.query_one("#compare-status", Static).update("esc: stop the compare")
        self.run_compare()

    # ------------------------------------------------------------------ the worker

    @work(thread=True, exclusive=True, group="compare")
    def run_compare(self) -> None:
        worker = get_current_worker()
        on_ray = self.app.ray_exports is not None  # type: ignore[attr-defined]
        last = [-1]
        run = self._run

        def progress(done: int, total: int) -> None:
            step = max(total // PROGRESS_STEPS, 1)
            if done == total or done - last[0] >= step:
                last[0] = done
                self.app.call_from_thread(self._progressed, done, total, run)

        reveal = bool(self.app.reveal)  # type: ignore[attr-defined]
        try:
            answers = self.app.compare_answers()  # type: ignore[attr-defined]
            if on_ray:
                # Ray's tasks run to their end: esc leaves the screen and drops the result
                result = answers.compare(self.a, self.b, self.flt, progress=progress,
                                         reveal=reveal)
            else:
                # on every CPU here (a store of one chunk stays in this process)
                result = answers.compare(self.a, self.b, self.flt, progress=progress,
                                         cancelled=lambda: worker.is_cancelled, reveal=reveal,
                                         workers=None)
        except CompareCancelled:
            return
        except ContextlensError as err:
            self.post_message(CompareFailed(str(err)))
            return
        if not worker.is_cancelled:
            self.post_message(CompareFinished(result))

    def _progressed(self, done: int, total: int, run: int) -> None:
        if not self.is_attached or not self.running or run != self._run:
            return
        self._seen = (done, total)
        self.query_one("#compare-progress", ProgressBar).update(total=max(total, 1), progress=done)
        # on Ray the count is of partitions (whole conversations), the unit Ray schedules
        unit = "partitions on Ray" if self.app.ray_exports is not None else "requests"  # type: ignore[attr-defined]
        self.query_one("#compare-safety", Static).update(f"Replaying… {done:,} of {total:,} {unit}")

    # ------------------------------------------------------------------ results

    async def on_compare_finished(self, message: CompareFinished) -> None:
        self.running = False
        result = self.result = message.result
        self.set_class(False, "-running")
        self.set_class(bool(result.safety["regressions"]), "-regressed")
        bar = self.query_one("#compare-progress", ProgressBar)
        bar.update(total=max(result.requests, 1), progress=max(result.requests, 1))
        self.query_one("#compare-safety", Static).update(safety_text(result))
        self.query_one("#compare-aggregates", Static).update(aggregates_text(result))
        self._plot(result)
        holder = self.query_one("#compare-holder")
        await holder.remove_children()
        if result.most_changed:
            table = arrow_table(most_changed_table(result), id="compare-table",
                                max_column_content_width=40)
            await holder.mount(table)
            table.focus()
            status = "enter: diff of the highlighted request · R: compare again · esc: back"
        else:
            await holder.mount(Static("No request changes between the two sides.",
                                      classes="placeholder", markup=False))
            status = "R: compare again · esc: back"
        self.query_one("#compare-status", Static).update(status)

    def _clear_plot(self) -> PlotextPlot:
        self._plotted = None
        plot = self.query_one("#compare-histogram", PlotextPlot)
        plot.plt.clear_data()
        plot.plt.clear_figure()
        plot.refresh()
        return plot

    def on_resize(self) -> None:
        # the y ticks are spaced for the plot's height: drawn again at the new one
        if self._plotted is not None:
            self.call_after_refresh(self._plot, self._plotted)  # once laid out anew

    def _plot(self, result: CompareResult) -> None:
        plot = self._clear_plot()
        self._plotted = result
        plt = plot.plt
        histogram = result.tokens["per_request"]["histogram"]
        if histogram:
            plt.bar(list(range(len(histogram))), [b["count"] for b in histogram])
            # the plot's rows: the widget's less its title and the x axis with its labels
            # the plot's columns: the widget's less the y axis with its labels
            named, labels, yticks = histogram_ticks(histogram, max(plot.size.height - 4, 2),
                                                    max(plot.size.width - 6, 10))
            plt.xticks(named, labels)
            plt.yticks(yticks)
            plt.ylim(0, yticks[-1])
        plt.title("requests by token delta (B − A)")
        plot.refresh()

    def on_compare_failed(self, message: CompareFailed) -> None:
        self.running = False
        self.set_class(False, "-running")
        self.query_one("#compare-safety", Static).update(
            Text(f"Compare failed: {safe_text(message.error)}", style="bold red"))
        self.query_one("#compare-status", Static).update("R: compare again · esc: back")

    # ------------------------------------------------------------------ actions

    @on(DataTable.RowSelected, "#compare-table")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        self._open(event.cursor_row)

    def _open(self, row: int) -> None:
        if self.result is None or not 0 <= row < len(self.result.most_changed_keys):
            return
        self.app.open_diff(self.result.most_changed_keys[row], self.b, self.a)  # type: ignore[attr-defined]

    def action_open(self) -> None:
        for table in self.query("#compare-table").results(DataTable):
            self._open(table.cursor_row)

    def action_rerun(self) -> None:
        if not self.running:
            self.start()

    def action_back(self) -> None:
        """While it runs, stop the compare (and stay); else go back."""
        if self.running:
            self.running, self.cancelled = False, True
            self.app.workers.cancel_node(self)
            self.set_class(False, "-running")
            # the bar stops where the compare stopped (left without a total it would keep
            # moving as if still at work)
            done, total = self._seen
            self.query_one("#compare-progress", ProgressBar).update(total=max(total, 1), progress=done)
            unit = "partitions" if self.app.ray_exports is not None else "requests"  # type: ignore[attr-defined]
            self.query_one("#compare-safety", Static).update(
                f"Compare stopped after {done:,} of {total:,} {unit}." if total else "Compare stopped.")
            self.query_one("#compare-status", Static).update("R: compare again · esc: back")
            return
        self.app.pop_screen()
