"""Compare two policy versions (or a version against the recording) over the requests the
list's filter selects: safety regressions first, then the aggregates (requests affected,
records newly in, out and re-rendered by kind, reason and privacy class, tokens), a
histogram of the per-request token deltas, and the most-changed requests; Enter on one
opens its diff.

``ComparePicker`` chooses the two sides: two lists side by side, A and B (tab between
them, Up/Down choose, Enter compares A → B; the session's last choice is chosen again).
The compare runs in a thread worker with a progress bar that says how many requests are
done, at what rate and how long is left (``readmodel.progress``); Escape stops it.

Pipeline: ``CompareProgressed`` (from the callback) -> ``CompareFinished`` or
``CompareFailed``.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

import pyarrow as pa
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, OptionList, ProgressBar, Static
from textual.widgets.option_list import Option
from textual.worker import get_current_worker
from textual_fastdatatable import DataTable

from ingest.errors import ContextlensError
from readmodel import RECORDED, CompareCancelled, CompareResult, PolicyInfo
from readmodel.ids import NO_AFFIXES, short_ids, store_id_affixes
from readmodel.masking import Masker, masked_ids
from readmodel.progress import ProgressClock

from ..lens_app import lens_app
from ..widgets.arrow_table import arrow_table, refill
from ..widgets.id_text import IdText
from ..widgets.safe import one_line, safe_text
from .replay import PolicyPicker, ReplayChoice, policy_prompt

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


# the last choice of each app (its session): the picker opens on it again
_LAST_CHOICE: "WeakKeyDictionary[Any, ReplayChoice]" = WeakKeyDictionary()


class VersionList(OptionList):
    """One side's list of versions: the highlighted option is the side's choice (Up/Down
    choose; its options' ids are ``side-<version>``)."""

    @property
    def value(self) -> str | None:
        option = self.highlighted_option
        return option.id.removeprefix("side-") if option is not None and option.id else None

    @value.setter
    def value(self, version: str) -> None:
        self.highlighted = self.get_option_index(f"side-{version}")


class ComparePicker(PolicyPicker):
    """Two lists side by side: side A (the recording or a replay under a version) and side
    B (the version to compare under, highlighted first). Tab and shift+tab move between
    them, Up/Down choose within one, Enter in either compares A → B; the last choice of
    the session is chosen again at the next opening."""

    BINDINGS = [
        Binding("enter", "choose", "Compare A → B", show=False),
        Binding("a", "focus_against", "Side A", show=False),
        Binding("escape", "cancel", "Cancel"),
    ]

    DEFAULT_CSS = """
    ComparePicker #compare-sides { height: 1fr; }
    ComparePicker .compare-side { height: 1fr; }
    ComparePicker #side-a-column { width: 2fr; max-width: 40; margin-right: 1; }
    ComparePicker #side-b-column { width: 3fr; }
    ComparePicker .side-title { text-style: bold; color: $text-muted; }
    ComparePicker .compare-side:focus-within .side-title { color: $accent; }
    ComparePicker #compare-choice { margin-top: 1; }
    /* nothing to compare: side B says why, side A has nothing to offer either */
    ComparePicker.-empty #side-a-column { display: none; }
    """

    VERB = "compares"

    # the keys that choose or run, as the lists' actions: typed before the versions are
    # loaded they are kept and applied once they are (else they would move an empty list)
    EARLY_KEYS = {"up": "cursor_up", "down": "cursor_down", "home": "first", "end": "last",
                  "pageup": "page_up", "pagedown": "page_down", "enter": "select"}

    def __init__(self, filter_text: str = "") -> None:
        super().__init__("", None)
        self.filter_text = filter_text
        self._early: list[tuple[OptionList, str]] = []  # (list, action) typed before loading

    def applicable(self, answers: Any) -> list[PolicyInfo]:
        """The versions that replay the filtered requests (``readmodel.applicable``), family
        by family: a store of an export and transcripts offers each; the compare runs over
        the requests of the family chosen (the title says how many each has)."""
        from readmodel.applicable import policy_choices, store_policies

        found = store_policies(answers, self.filter_text.strip() or None)
        if not found.families:
            # nothing to offer: say why rather than show an empty side B
            self.post_message(NothingToCompare(self.nothing_to_compare(found.not_modelled)))
        if len(found.families) > 1:
            self.post_message(ScopeLoaded(found.families))
        return policy_choices(answers, found)

    def nothing_to_compare(self, not_modelled: int) -> str:
        """Why no version is offered, in one line: no request is selected, or none that a
        policy version replays (recorded by a runtime whose rule is not modelled)."""
        from readmodel.applicable import NOT_MODELLED

        if not_modelled:
            return ("no policy version replays the "
                    + ("requests the filter selects" if self.filter_text.strip() else
                       "store's requests")
                    + f" (recorded under {NOT_MODELLED}): nothing to compare")
        if self.filter_text.strip():
            return "no request matches the filter: nothing to compare"
        return "no request in this store: nothing to compare"

    def on_nothing_to_compare(self, message: "NothingToCompare") -> None:
        # before PoliciesLoaded (posted after it by the same worker): the lists stay empty,
        # enter chooses nothing, and the keys typed meanwhile are not kept for a list to come
        self.add_class("-empty")
        self._early = []
        versions = self.query_one("#policy-versions", OptionList)
        versions.clear_options()
        versions.add_option(Option(Text(message.reason, style="bold"), disabled=True))
        self.query_one("#replay-hint", Static).update(
            "esc: cancel" + (" (then / changes the list's filter)" if self.filter_text.strip()
                             else ""))

    def on_scope_loaded(self, message: "ScopeLoaded") -> None:
        # a store of several families: say which requests each side's family covers
        words = ", ".join(
            f"{f.requests:,} under {f.name if f.runtime else 'the registry’s versions'}"
            for f in message.families)
        if not self.query("#compare-scope"):
            self.query_one("#replay-dialog").mount(Static(Text(
                f"These requests: {words}. A compare runs over those its versions apply to.",
                style="dim"), id="compare-scope"), before=self.query_one("#compare-sides"))

    def compose(self) -> ComposeResult:
        with Vertical(id="replay-dialog"):
            title = Text()
            title.append("Compare ", style="bold")
            title.append("the filtered requests" if self.filter_text.strip() else "every request",
                         style="bold")
            if self.filter_text.strip():
                title.append(f"  (filter: {one_line(self.filter_text, 60)})", style="dim")
            yield Static(title, classes="dialog-title")
            with Horizontal(id="compare-sides"):
                # in the focus chain's order: A, then B (tab goes A → B, shift+tab back)
                with Vertical(id="side-a-column", classes="compare-side"):
                    yield Static("A: compare against", classes="side-title", markup=False)
                    yield VersionList(id="side-a", markup=False)
                with Vertical(id="side-b-column", classes="compare-side"):
                    yield Static("B: compare under", classes="side-title", markup=False)
                    versions = OptionList(id="policy-versions", markup=False)
                    versions.add_option(Option(Text("Loading the policy registry…", style="dim"),
                                               disabled=True))
                    yield versions
            yield Static("", id="compare-choice", markup=False)
            yield Static(self.hint(typed=False), id="replay-hint", markup=False)

    def hint(self, typed: bool) -> str:
        """The keys, exactly (``typed``: tab also reaches the box for a version with
        changed keys, after side B)."""
        box = " · type: a version with changed keys (B)" if typed else ""
        return (f"tab / shift+tab: side A ⇄ side B · ↑↓: choose · enter: compare A → B{box} · "
                "esc: cancel")

    def on_policies_loaded(self, message: Any) -> None:
        message.prevent_default()  # the replay picker's handler (one side A list) is not run
        if self.has_class("-empty"):
            return  # said once, in side B (on_nothing_to_compare)
        self.policies = message.policies
        names = [p.version for p in self.policies]
        versions = self.query_one("#policy-versions", OptionList)
        versions.clear_options()
        options: list[Option | None] = []
        for index, policy in enumerate(self.policies):
            if index:
                options.append(None)  # a separator line between versions
            options.append(Option(policy_prompt(policy, None), id=f"policy-{policy.version}"))
        versions.add_options(options)
        family = next((p.version for p in self.policies if p.runtime), None)
        if family is not None and not self.query("#typed-version"):
            self.query_one("#replay-dialog").mount(
                Input(placeholder=f"or type B with changed keys: {family}:key=value,…  "
                                  f"(enter compares)", id="typed-version",
                      select_on_focus=False),  # letters typed on the list are kept
                after=self.query_one("#compare-sides"))
            self.query_one("#replay-hint", Static).update(self.hint(typed=True))
        side_a = self.query_one("#side-a", VersionList)
        side_a.clear_options()
        side_a.add_options([Option(Text("the recorded assemblies"), id=f"side-{RECORDED}")]
                           + [Option(Text(f"a replay under {safe_text(v)}"), id=f"side-{v}")
                              for v in names])
        last = _LAST_CHOICE.get(self.app)
        side_a.value = last.against if last is not None and last.against in names else RECORDED
        b = last.version if last is not None and last.version in names else (names or [None])[0]
        if b is not None:
            versions.highlighted = versions.get_option_index(f"policy-{b}")
        self._show_choice()
        early, self._early = self._early, []
        for option_list, action in early:
            if action == "select":
                self.action_choose()  # enter in either list compares A → B
                return
            getattr(option_list, f"action_{action}")()

    def on_key(self, event: Any) -> None:
        """Before the versions are loaded, keep the keys that choose in a list or run."""
        focused = self.focused
        if (not self.policies and not self.has_class("-failed") and not self.has_class("-empty")
                and isinstance(focused, OptionList)
                and event.key in self.EARLY_KEYS):
            event.stop()
            event.prevent_default()  # nor the replay picker's on_key
            self._early.append((focused, self.EARLY_KEYS[event.key]))

    def side_a(self) -> str:
        return self.query_one("#side-a", VersionList).value or RECORDED

    @on(OptionList.OptionHighlighted)
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show_choice()

    @on(Input.Changed, "#typed-version")
    def _typed(self, _event: Input.Changed) -> None:
        self._show_choice()

    def _side_b(self) -> str | None:
        """Side B: the typed version while its box has focus and text, else the
        highlighted one."""
        box = next(self.query("#typed-version").results(Input), None)
        if box is not None and self.focused is box and box.value.strip():
            return box.value.strip()
        return self.highlighted_version()

    def _show_choice(self) -> None:
        """What enter runs, said before it runs (A → B)."""
        if not self.policies:
            return
        a, b = self.side_a(), self._side_b()
        text = Text()
        text.append("enter compares ", style="dim")
        text.append("A ", style="bold")
        text.append("the recording" if a == RECORDED else safe_text(a))
        text.append(" → ", style="bold")
        text.append("B ", style="bold")
        text.append(safe_text(b) if b else "?")
        self.query_one("#compare-choice", Static).update(text)

    def on_descendant_focus(self, _event: Any) -> None:
        self._show_choice()  # the typed version is B while its box has focus

    @on(OptionList.OptionSelected, "#side-a")
    def _side_a_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.action_choose()

    def _choose(self, option_id: str | None) -> None:
        version = self._version_of(option_id)
        if version is not None:
            self._run(ReplayChoice(version, self.side_a()))

    @on(Input.Submitted, "#typed-version")
    def typed_version(self, event: Input.Submitted) -> None:
        event.stop()
        event.prevent_default()  # the replay picker's handler (its side A) is not run
        version = event.value.strip()
        if version:
            self._run(ReplayChoice(version, self.side_a()))

    def _run(self, choice: ReplayChoice) -> None:
        _LAST_CHOICE[self.app] = choice
        self.dismiss(choice)

    def action_focus_against(self) -> None:
        self.query_one("#side-a", VersionList).focus()


class NothingToCompare(Message):
    """No version applies to the filtered requests (``reason``: why, in one line)."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class ScopeLoaded(Message):
    """The filtered requests are of several policy families (an export and transcripts)."""

    def __init__(self, families: tuple[Any, ...]) -> None:
        super().__init__()
        self.families = families


class CompareFinished(Message):
    def __init__(self, result: CompareResult, affixes: tuple[str, str] = NO_AFFIXES) -> None:
        super().__init__()
        self.result = result
        self.affixes = affixes  # what every request id of the store shares (readmodel.ids)


class CompareFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def safety_text(result: CompareResult, affixes: tuple[str, str] = NO_AFFIXES,
                ids: IdText | None = None) -> Text:
    """The safety block: each group's findings, their requests and records; ids as ``ids``
    shows them (the result's are masked as it was run; ``ids`` masks them again when the
    app masks since)."""
    ids = ids if ids is not None else IdText(False, affixes)
    text = Text()
    groups = [(key, title, style, result.safety.get(key) or ())
              for key, title, style in SAFETY_TITLES]
    if not any(items for *_, items in groups):
        text.append("safety: none", style="bold green")
        return _over_window(text, result, affixes, ids)
    text.append("safety", style="bold")
    for key, title, style, items in groups:
        if not items:
            continue
        total = sum(g["findings"] for g in items)
        text.append(f"\n{title}: {total}", style=style)
        for g in items:
            text.append(f"\n  {safe_text(g['finding'])}", style="bold")
            text.append(f": {g['findings']} in {g['requests']} requests, e.g. "
                        f"{', '.join(ids(r, 40, assembly=True) for r in g['example_requests'])}")
            records = ", ".join(f"{ids(r['record_id'], None)} "
                                f"({r['requests']})"
                                for r in g["records"])
            text.append(f"\n    {one_line(records, 300)}", style="dim")
    return _over_window(text, result, affixes, ids)


def _over_window(text: Text, result: CompareResult,
                 affixes: tuple[str, str] = NO_AFFIXES, ids: IdText | None = None) -> Text:
    """After safety, the requests B sends past the model's context window (they would have
    failed), with a few of them."""
    ids = ids if ids is not None else IdText(False, affixes)
    over = result.over_context_window or {}
    if over.get("requests"):
        examples = ", ".join(f"{ids(e['assembly_id'], 40, assembly=True)} "
                             f"({e['tokens_b']:,} > {e['context_limit']:,})"
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


def most_changed_table(result: CompareResult, affixes: tuple[str, str] = NO_AFFIXES,
                       reveal: bool = False) -> pa.Table:
    """The most-changed requests, each id shown as the request list shows it (masked
    unless ``reveal``: ``masked_ids``, columnar)."""
    columns = {label: pa.array([row[key] for row in result.most_changed],
                               pa.string() if key == "assembly_id" else pa.int64())
               for label, key in MOST_CHANGED_COLUMNS}
    label = next(label for label, key in MOST_CHANGED_COLUMNS if key == "assembly_id")
    columns[label] = short_ids(masked_ids(columns[label], Masker(reveal)), *affixes)
    return pa.table(columns)


def bin_label(lo: int, hi: int) -> str:
    """A bin of integer deltas (``hi`` exclusive): ``0``, ``+5``, ``-200…-101``."""
    def signed(v: int) -> str:
        return f"{v:+d}" if v else "0"
    return signed(lo) if hi - lo == 1 else f"{signed(lo)}…{signed(hi - 1)}"


HISTOGRAM_BAR = 16  # the longest bar, in cells


def histogram_text(histogram: Any) -> Text:
    """The per-request token deltas, one row per bin (``replay.compare.histogram_bins``:
    fitted to the data, the CLI's): every bin labelled, zero's own bin in bold, a bar and
    the count; as wide as its longest row."""
    text = Text()
    text.append("requests by token delta (B − A)", style="bold")
    if not histogram:
        text.append("\nno requests", style="dim")
        return text
    labels = [bin_label(b["lo"], b["hi"]) for b in histogram]
    width = max(len(label) for label in labels)
    counts = [f"{b['count']:,}" for b in histogram]
    count_width = max(len(c) for c in counts)
    most = max(b["count"] for b in histogram) or 1
    for b, label, count in zip(histogram, labels, counts):
        zero = b["lo"] == 0 and b["hi"] == 1
        cells = max(1 if b["count"] else 0, round(HISTOGRAM_BAR * b["count"] / most))
        text.append("\n")
        text.append(f"{label:>{width}} ", style="bold" if zero else "")
        text.append("┼" if zero else "│", style="dim")
        text.append("█" * cells, style="bold yellow" if zero else "cyan")
        text.append(" " * (HISTOGRAM_BAR - cells + 1))
        text.append(f"{count:>{count_width}}", style="" if b["count"] else "dim")
    return text


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
    #compare-progress Bar { width: 1fr; max-width: 100; }
    #compare-body { height: 1fr; }
    #compare-report { width: 1fr; padding: 0 1; }
    #compare-safety { height: auto; padding: 0 1; margin-bottom: 1; }
    CompareScreen.-regressed #compare-safety { border-left: thick $error; }
    #compare-aggregates { height: auto; padding: 0 1; }
    #compare-histogram-box { width: auto; height: auto; max-height: 100%; }
    #compare-histogram { width: auto; height: auto; padding: 0 1; }
    /* the most-changed table: its rows (10 and a header) on a tall terminal, half of what
       is left on a short one */
    #compare-holder { height: 1fr; max-height: 12; min-height: 5; }
    #compare-table { height: 1fr; }
    #compare-status { height: 1; padding: 0 1; background: $panel; color: $text; }
    """

    def __init__(self, a: str, b: str, flt: Any = None, filter_text: str = "") -> None:
        super().__init__()
        self.a, self.b = a, b
        self.flt = flt
        self.filter_text = filter_text
        self.result: CompareResult | None = None
        self.running = False
        self.cancelled = False
        self._seen = (0, 0)  # (done, total) of the last progress report
        self._clock = ProgressClock()  # the run's start: rate and time left
        self._run = 0  # which run is on screen (R starts another)
        self._affixes: tuple[str, str] = NO_AFFIXES  # the store's (CompareFinished)

    def compose(self) -> ComposeResult:
        yield Header()
        title = (f"Compare {'the recording' if self.a == RECORDED else self.a} → {self.b} over "
                 + (f"the requests matching {one_line(self.filter_text, 60)}"
                    if self.filter_text.strip() else "every request"))
        if lens_app(self).ray_exports is not None:
            title += " · on Ray"
        yield Static(title, id="compare-title", markup=False)
        yield ProgressBar(id="compare-progress", show_eta=False)
        with Horizontal(id="compare-body"):
            with VerticalScroll(id="compare-report"):
                yield Static("Replaying…", id="compare-safety", markup=False)
                yield Static("", id="compare-aggregates", markup=False)
            # sized to its rows, beside the safety summary (scrolls on a short terminal)
            with VerticalScroll(id="compare-histogram-box"):
                yield Static("", id="compare-histogram")
        yield Vertical(id="compare-holder")
        yield Static("", id="compare-status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "reveal", self._reveal_changed, init=False)
        self.start()

    def _reveal_changed(self, reveal: bool) -> None:
        """Masked again: the ids of a result run revealed are shown masked (a result run
        masked stays so until R: it holds no more)."""
        if self.result is not None and not reveal:
            self._show_ids(self.result)

    def _show_ids(self, result: CompareResult) -> None:
        """The safety block and the most-changed table, ids as the app shows them now."""
        reveal = bool(lens_app(self).reveal)
        self.query_one("#compare-safety", Static).update(
            safety_text(result, self._affixes, IdText(reveal, self._affixes)))
        for table in self.query("#compare-table").results(DataTable):
            refill(table, most_changed_table(result, self._affixes, reveal), keep_view=True)

    def start(self) -> None:
        self.running, self.cancelled, self.result = True, False, None
        self._run += 1  # a late progress report of a run stopped before this one is ignored
        self.set_class(True, "-running")
        self.set_class(False, "-regressed")
        self.query_one("#compare-progress", ProgressBar).update(total=None, progress=0)
        self.query_one("#compare-safety", Static).update("Replaying…")
        self.query_one("#compare-aggregates", Static).update("")
        self.query_one("#compare-holder").remove_children()
        # a rerun stopped half-way must not show the last run's histogram
        self.query_one("#compare-histogram", Static).update("")
        self._clock = ProgressClock()
        self._seen = (0, 0)
        self.query_one("#compare-status", Static).update("esc: stop the compare")
        self.run_compare()

    # ------------------------------------------------------------------ the worker

    @work(thread=True, exclusive=True, group="compare")
    def run_compare(self) -> None:
        worker = get_current_worker()
        on_ray = lens_app(self).ray_exports is not None
        last = [-1]
        run = self._run

        def progress(done: int, total: int) -> None:
            step = max(total // PROGRESS_STEPS, 1)
            # the first report at once (the count to do), then at most PROGRESS_STEPS
            if last[0] < 0 or done == total or done - last[0] >= step:
                last[0] = done
                self.app.call_from_thread(self._progressed, done, total, run)

        reveal = bool(lens_app(self).reveal)
        try:
            answers = lens_app(self).compare_answers()
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
            # the ids shortened as the list shortens them: the store is the same on Ray
            self.post_message(CompareFinished(result, store_id_affixes(lens_app(self).answers())))

    def _progressed(self, done: int, total: int, run: int) -> None:
        if not self.is_attached or not self.running or run != self._run:
            return
        self._seen = (done, total)
        self.query_one("#compare-progress", ProgressBar).update(total=max(total, 1), progress=done)
        # on Ray the count is of partitions (whole conversations), the unit Ray schedules
        on_ray = lens_app(self).ray_exports is not None
        report = self._clock.report(done, total)
        self.query_one("#compare-safety", Static).update(
            "Replaying… " + (report.text("partitions on Ray", "partitions") if on_ray
                             else report.text("requests")))

    # ------------------------------------------------------------------ results

    async def on_compare_finished(self, message: CompareFinished) -> None:
        self.running = False
        result = self.result = message.result
        self.set_class(False, "-running")
        self.set_class(bool(result.safety["regressions"]), "-regressed")
        bar = self.query_one("#compare-progress", ProgressBar)
        bar.update(total=max(result.requests, 1), progress=max(result.requests, 1))
        self._affixes = message.affixes
        reveal = bool(lens_app(self).reveal)
        self.query_one("#compare-safety", Static).update(
            safety_text(result, message.affixes, IdText(reveal, message.affixes)))
        self.query_one("#compare-aggregates", Static).update(aggregates_text(result))
        self.query_one("#compare-histogram", Static).update(
            histogram_text(result.tokens["per_request"]["histogram"]))
        holder = self.query_one("#compare-holder")
        await holder.remove_children()
        if result.most_changed:
            table = arrow_table(most_changed_table(result, message.affixes, reveal),
                                id="compare-table",
                                max_column_content_width=40)
            await holder.mount(table)
            table.focus()
            status = "enter: diff of the highlighted request · R: compare again · esc: back"
        else:
            await holder.mount(Static("No request changes between the two sides.",
                                      classes="placeholder", markup=False))
            status = "R: compare again · esc: back"
        self.query_one("#compare-status", Static).update(status)

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
        lens_app(self).open_diff(self.result.most_changed_keys[row], self.b, self.a)

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
            unit = "partitions" if lens_app(self).ray_exports is not None else "requests"
            self.query_one("#compare-safety", Static).update(
                f"Compare stopped after {done:,} of {total:,} {unit}." if total else "Compare stopped.")
            self.query_one("#compare-status", Static).update("R: compare again · esc: back")
            return
        self.app.pop_screen()
