"""The diff of two assemblies of one request: side A against side B, record by record.

Side A is the recorded assembly or a replay under another version; side B is a replay under
the chosen version. Safety findings (``replay/safety.py``: regressions B has and A has not,
fixes, and findings in a recorded side) come first, in their own block ("safety: none" when
there are none); then every record side by side, the regressed records first. ``f`` hides or shows the unchanged records; the panel under the table says why
each side decided as it did. On a terminal too narrow for a column per field (80 or 100
columns), each side is one column (``table_layout``): both sides always show.

Pipeline: ``DiffComputed`` (the diff and the record labels) -> ``ChangeExplained`` (the
why-sentences of the highlighted record on both sides).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from rich.cells import cell_len
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static
from textual.worker import get_current_worker
from textual_fastdatatable import DataTable

from ingest.errors import ContextlensError
from readmodel import RECORDED, DiffView, EffectiveBudget
from readmodel.ids import NO_AFFIXES, store_id_affixes

from ..lens_app import lens_app
from ..widgets.arrow_table import arrow_table
from ..widgets.assembly_view import budget_line
from ..widgets.id_text import IdText
from ..widgets.record_panel import KIND_SHORT, decision_summary
from ..widgets.safe import one_line, safe_text

CHANGE_ORDER = (
    "newly_included",
    "newly_omitted",
    "rendering_changed",
    "reason_changed",
    "moved",
    "unchanged",
)
CHANGE_STYLES = {
    "newly_included": "green",
    "newly_omitted": "yellow",
    "rendering_changed": "cyan",
    "reason_changed": "magenta",
    "moved": "blue",
    "unchanged": "dim",
}
SAFETY_MARK = "⚠ "
FULL_CELL = 40  # the widest a cell of the full table is shown
SCROLLBAR = 2
CELL_PADDING = 2  # the table pads each cell by one column on each side
MIN_CELL = 6  # a narrowed column keeps this many cells (its text ends with …)
# the full table's columns that may be cut to fit (with …), and the cells each keeps: a
# rendering or a reason still reads; ids, positions and tokens are never cut
WIDE_SHRINKABLE = frozenset({"A", "A reason", "B", "B reason"})
WIDE_FLOOR = 12


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """An attribute of a dataclass result, or a key of its JSON form."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def side_cells(side: dict[str, Any] | None) -> tuple[str, str, int | None, int | None]:
    """(shown as, reason, position, tokens) of one side of a change."""
    if side is None:
        return "absent", "", None, None
    tokens = side.get("tokens")
    if side.get("decision") == "included":
        return str(side.get("rendering") or "included"), str(side.get("reason_code") or ""), side.get("position"), tokens
    return "omitted", str(side.get("reason_code") or ""), None, tokens


def tokens_cell(a: int | None, b: int | None) -> str:
    if a == b:
        return "" if a is None else f"{a}"
    return f"{'—' if a is None else a} → {'—' if b is None else b}"


def change_rows(
    changes: list[dict[str, Any]],
    safety_keys: set[tuple[str, str]],
    labels: dict[tuple[str, str], str],
    affixes: tuple[str, str] = NO_AFFIXES,
    ids: IdText | None = None,
) -> pa.Table:
    """The table the screen shows: one row per change, A then B. One assembly's records
    (bounded), so a Python pass is fine here. Record ids as every screen shows them
    (``IdText``: masked when ``ids`` is not given)."""
    ids = ids if ids is not None else IdText(False, affixes)
    cols: dict[str, list[Any]] = {name: [] for name in (
        "change", "kind", "record", "A", "A reason", "A #", "B", "B reason", "B #", "tokens", "label"
    )}
    for change in changes:
        key = (change["record_kind"], change["record_id"])
        a_shown, a_reason, a_pos, a_tok = side_cells(change.get("a"))
        b_shown, b_reason, b_pos, b_tok = side_cells(change.get("b"))
        cols["change"].append((SAFETY_MARK if key in safety_keys else "") + str(change["change"]))
        cols["kind"].append(change["record_kind"])
        cols["record"].append(ids(change["record_id"], None))
        cols["A"].append(a_shown)
        cols["A reason"].append(a_reason)
        cols["A #"].append(a_pos)
        cols["B"].append(b_shown)
        cols["B reason"].append(b_reason)
        cols["B #"].append(b_pos)
        cols["tokens"].append(tokens_cell(a_tok, b_tok))
        cols["label"].append(one_line(labels.get(key, ""), 80))
    types = {"A #": pa.int64(), "B #": pa.int64()}
    return pa.table({name: pa.array(values, types.get(name, pa.string())) for name, values in cols.items()})


def _side_cell(shown: str, reason: str, pos: int | None, change: str, other_pos: int | None) -> str:
    """One side of a change in one cell, for a narrow table: what the change is about (the
    reason of a reason change, the rendering or "omitted: reason" otherwise), and the
    position where the two sides place the record differently."""
    if change == "reason_changed" or shown == "omitted":
        text = f"omitted: {reason}" if shown == "omitted" else reason
    else:
        text = shown
    if pos is not None and (pos != other_pos or change == "moved"):
        text += f" #{pos}"
    return text


def compact_rows(full: pa.Table) -> pa.Table:
    """``change_rows`` for a narrow terminal: each side in one column (``_side_cell``), the
    kind said short; the why panel under the table has each side's reason in full."""
    cols = full.to_pydict()
    a_cells, b_cells = [], []
    for i, change in enumerate(cols["change"]):
        name = change.removeprefix(SAFETY_MARK)
        a_cells.append(_side_cell(cols["A"][i], cols["A reason"][i], cols["A #"][i], name,
                                  cols["B #"][i]))
        b_cells.append(_side_cell(cols["B"][i], cols["B reason"][i], cols["B #"][i], name,
                                  cols["A #"][i]))
    return pa.table({
        "change": cols["change"],
        "kind": [KIND_SHORT.get(k, k) for k in cols["kind"]],
        "record": cols["record"],
        "A": pa.array(a_cells, pa.string()),
        "B": pa.array(b_cells, pa.string()),
        "tokens": cols["tokens"],
        "label": cols["label"],
    })


def _natural_widths(table: pa.Table, cap: int | None = None) -> list[int]:
    """Each column's widest cell or header, as shown (capped at ``cap``)."""
    widths = []
    for name in table.column_names:
        values = ["" if v is None else str(v) for v in table[name].to_pylist()]
        widest = max([cell_len(name)] + [cell_len(v) for v in values])
        widths.append(min(widest, cap) if cap else widest)
    return widths


def fit_widths(natural: list[int], room: int, floors: list[int]) -> list[int]:
    """``natural`` narrowed, the widest column first, until they fit ``room`` (never below
    ``floors``)."""
    widths = list(natural)
    while sum(widths) > room:
        shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not shrinkable:
            break
        widths[max(shrinkable, key=lambda i: widths[i])] -= 1
    return widths


def table_layout(full: pa.Table, width: int) -> tuple[pa.Table, list[int | None] | None]:
    """The records table for a terminal ``width`` wide: the full table when it fits (the
    label shrinks first: it takes what is left, cut with …, or is left out; then the
    renderings and reasons, widest first, to ``WIDE_FLOOR``; ids, positions and tokens
    stay whole); else the narrow one (``compact_rows``), its columns narrowed to fit, the
    label given what is left (or left out: the why panel's title shows it)."""
    room = max(width - SCROLLBAR, 20)
    wide = _wide_widths(full, room)
    if wide is not None:
        return wide
    compact = compact_rows(full)
    natural = _natural_widths(compact)
    names = compact.column_names[:-1]
    floors = [max(min(w, MIN_CELL), len(name) if name != "change" else MIN_CELL)
              for w, name in zip(natural[:-1], names)]
    fixed = fit_widths(natural[:-1], room - CELL_PADDING * len(names), floors)
    label = room - sum(fixed) - CELL_PADDING * len(natural)
    if label < MIN_CELL:
        return compact.drop_columns(["label"]), list(fixed)
    return compact, [*fixed, min(label, natural[-1])]


def _wide_widths(full: pa.Table, room: int) -> tuple[pa.Table, list[int | None] | None] | None:
    """The full table and its column widths when it fits ``room`` (``table_layout``), else
    None. Every column but the label at its natural width: no widths, the table sizes
    itself (the label runs to the edge)."""
    natural = _natural_widths(full, FULL_CELL)
    names = full.column_names[:-1]  # the label last: what is left of the room
    if sum(w + CELL_PADDING for w in natural[:-1]) <= room:
        return full, None
    floors = [min(w, WIDE_FLOOR) if name in WIDE_SHRINKABLE else w
              for w, name in zip(natural[:-1], names)]
    fixed = fit_widths(natural[:-1], room - CELL_PADDING * len(names), floors)
    if sum(fixed) + CELL_PADDING * len(names) > room:
        return None  # even narrowed, the columns up to the tokens do not fit
    label = room - sum(fixed) - CELL_PADDING * len(natural)
    if label < MIN_CELL:
        return full.drop_columns(["label"]), list(fixed)
    return full, [*fixed, min(label, natural[-1])]


def diff_header(assembly_id: str, diff: Any, affixes: tuple[str, str] = NO_AFFIXES,
                narrow: bool = False, ids: IdText | None = None) -> Text:
    """Both sides, their tokens and the changes by class; ``narrow`` (an 80-column
    terminal) with shorter separators, so the counts stay on their line. Ids as ``ids``
    shows them (masked when not given)."""
    ids = ids if ids is not None else IdText(False, affixes)
    summary = _get(diff, "summary") or {}
    counts = summary.get("counts") or {}
    a_label, b_label = _get(diff, "a_label", "A"), _get(diff, "b_label", "B")
    sep = " · " if narrow else "  ·  "
    # narrow: each line cut with … rather than wrapped (the rows keep the screen's height)
    text = Text(no_wrap=True, overflow="ellipsis") if narrow else Text()
    text.append(f"diff {ids(assembly_id, None, assembly=True)}", style="bold")
    text.append("   A = ", style="dim")
    text.append(ids.prose(a_label), style="bold")
    text.append("   B = ", style="dim")
    text.append(ids.prose(b_label), style="bold")
    tok_a, tok_b = int(summary.get("tokens_a") or 0), int(summary.get("tokens_b") or 0)
    delta = tok_b - tok_a
    text.append("\n")
    text.append(f"tokens {tok_a:,} → {tok_b:,}", style="bold")
    text.append(f" ({'+' if delta > 0 else ''}{delta:,})" if delta else " (same)")
    rec_a, rec_b = summary.get("record_tokens_a"), summary.get("record_tokens_b")
    if rec_a is not None and (rec_a, rec_b) != (tok_a, tok_b):
        # a transcript's request: the rest is its system prompt and tools, in no record
        text.append(f", {int(rec_a):,} → {int(rec_b or 0):,} in records", style="dim")
    if "included_a" in summary:
        # narrow: "incl", as the request list's column, to keep the line's counts whole
        text.append(f"{sep}{'incl' if narrow else 'included'} {summary.get('included_a')} → "
                    f"{summary.get('included_b')}")
    # the classes that occur, in diff order (an empty class would only take room)
    for name in CHANGE_ORDER:
        n = int(counts.get(name) or 0)
        if n:
            text.append(sep)
            text.append(f"{name} ", style="dim" if name == "unchanged" else "")
            text.append(str(n), style="dim" if name == "unchanged" else f"bold {CHANGE_STYLES[name]}")
    for line in budget_lines(diff):
        text.append("\n")
        text.append_text(line)
    if summary.get("over_context_window"):
        # B would not have been accepted: more than the model's context window
        text.append("\n")
        text.append(f"over_context_window: B sends {int(tok_b or 0):,} tokens, past the model's "
                    "context window: the request would have failed", style="bold red")
    return text


def budget_lines(diff: Any) -> list[Text]:
    """Each side's effective token budget, one line when both read the same; none for a
    diff that carries no budgets (one computed elsewhere, before they were kept)."""
    a, b = _get(diff, "budget_a"), _get(diff, "budget_b")
    if isinstance(diff, dict):  # the JSON form
        sides = diff.get("budget") or {}
        a, b = (EffectiveBudget(**sides[k]) if sides.get(k) else None for k in ("a", "b"))
    if a is None and b is None:
        return []
    if a is not None and b is not None and a.short() == b.short():
        return [budget_line(a, "budget (A and B)")]
    return [budget_line(a, "budget A"), budget_line(b, "budget B")]


SAFETY_GROUPS = (
    ("regressions", "regressions", "findings B has and A has not"),
    ("fixes", "fixes", "findings A has and B has not"),
    ("in_recording", "in the recording", "findings in what was actually sent"),
)


def safety_groups(diff: Any) -> dict[str, list[dict[str, Any]]]:
    """The diff's safety findings per group (regressions, fixes, in_recording)."""
    safety = _get(diff, "safety") if diff is not None else None
    return {key: list(_get(safety, key) or []) if safety is not None else []
            for key, _, _ in SAFETY_GROUPS}


def safety_alarm(groups: dict[str, list[dict[str, Any]]]) -> bool:
    """Whether the findings are leaks (a regression, or one in a recording)."""
    return bool(groups["regressions"] or groups["in_recording"])


def safety_text(groups: dict[str, list[dict[str, Any]]],
                affixes: tuple[str, str] = NO_AFFIXES, ids: IdText | None = None) -> Text:
    """The safety block: every group with findings, or "safety: none". Each finding's
    records by kind, the kind said once (``memory mem-014, mem-015``), ids as ``ids``
    shows them (masked when not given)."""
    ids = ids if ids is not None else IdText(False, affixes)
    text = Text()
    if not any(groups.values()):
        text.append("safety: none", style="dim")
        return text
    first = True
    for key, title, meaning in SAFETY_GROUPS:
        items = groups[key]
        if not items:
            continue
        if not first:
            text.append("\n")
        first = False
        mark = SAFETY_MARK if key != "fixes" else ""
        text.append(f"{mark}safety {title}: {len(items)}", style="bold")
        text.append(f"  ({meaning})", style="dim")
        # one line per finding, naming its records: the records table keeps the rows
        by_finding: dict[str, dict[str, list[str]]] = {}
        for item in items:
            kind = str(item.get("record_kind") or "")
            record = ids(item.get("record_id"), None)
            by_finding.setdefault(str(item.get("finding") or ""), {}).setdefault(
                KIND_SHORT.get(kind, kind), []).append(record)
        for finding, kinds in by_finding.items():
            records = ", ".join(f"{kind} {', '.join(ids)}" for kind, ids in kinds.items())
            text.append("\n  ")
            text.append(safe_text(finding), style="bold")
            text.append(f"  {one_line(records, 400)}")
    return text


@dataclass(frozen=True)
class SideWhy:
    label: str
    decision: dict[str, Any] | None  # the side's assembly_records row, None if absent
    why: str
    trace: list[dict[str, Any]]
    sent: str | None = None  # the text the model receives on this side (a changed rendering)


# ---------------------------------------------------------------------- messages


class DiffComputed(Message):
    def __init__(self, diff: Any, labels: dict[tuple[str, str], str],
                 affixes: tuple[str, str] = NO_AFFIXES, ids: IdText | None = None) -> None:
        super().__init__()
        self.diff = diff
        self.labels = labels
        self.affixes = affixes  # the store's id affixes (readmodel.ids)
        # how ids are displayed, judged by the worker (the UI thread only looks them up)
        self.ids = ids if ids is not None else IdText(False, affixes)


class DiffFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ChangeExplained(Message):
    def __init__(self, kind: str, record_id: str, content: str, privacy: str | None,
                 sides: list[SideWhy]) -> None:
        super().__init__()
        self.kind = kind
        self.record_id = record_id
        self.content = content
        self.privacy = privacy
        self.sides = sides


# ---------------------------------------------------------------------- the screen


class DiffScreen(Screen[None]):
    """Side A against side B of one request, safety findings first."""

    BINDINGS = [
        Binding("f", "toggle_unchanged", "Changes only / all"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(
        self,
        assembly_id: str,
        version: str,
        against: str = RECORDED,
        diff: Any = None,
        note: str | None = None,
    ) -> None:
        """Replay ``assembly_id`` under ``version`` (B) against ``against`` (A: "recorded"
        or a version). A ``diff`` already computed (by verify) is shown as is, with
        ``note`` saying where it came from."""
        super().__init__()
        self.note = note
        self.assembly_id = assembly_id
        self.version = version
        self.against = against
        self.diff = diff
        self.changes_only = True
        self._labels: dict[tuple[str, str], str] = {}
        self._shown: list[dict[str, Any]] = []
        self._selected: tuple[str, str] | None = None
        self._affixes: tuple[str, str] = NO_AFFIXES
        self._ids: IdText | None = None  # how ids are displayed (DiffComputed)
        self._width: int | None = None  # the width the records table was laid out for

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Header()
        waiting = Text(f"diff {self.ids()(self.assembly_id, 120, assembly=True)} · "
                       f"replaying under {self.ids().prose(self.version)}…")
        yield Static(waiting, id="diff-header")
        yield Static("", id="diff-safety")
        yield Vertical(
            Static("Replaying… (the screen stays live; esc goes back)", classes="placeholder", markup=False),
            id="diff-holder",
        )
        with Vertical(id="change-panel"):
            yield Static("Highlight a record to see why each side decided as it did.", id="change-title")
            with Horizontal(id="change-sides"):
                with VerticalScroll(id="change-a-box"):
                    yield Static("", id="change-a")
                    yield Static("", id="change-a-trace", classes="change-trace")
                with VerticalScroll(id="change-b-box"):
                    yield Static("", id="change-b")
                    yield Static("", id="change-b-trace", classes="change-trace")
        yield Static("", id="diff-status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        for trace in self.query(".change-trace"):
            trace.styles.text_wrap = "nowrap"
            trace.styles.text_overflow = "ellipsis"
        self.watch(self.app, "reveal", self._reveal_changed, init=False)
        self.compute_diff()

    def _reveal_changed(self, _reveal: bool) -> None:
        self.compute_diff()

    def ids(self) -> IdText:
        """How this screen displays ids now: masked unless the app reveals (``IdText``)."""
        reveal = bool(lens_app(self).reveal)
        if self._ids is None or self._ids.reveal != reveal:
            self._ids = IdText(reveal, self._affixes)
        return self._ids

    # ------------------------------------------------------------------ workers

    def _side_specs(self) -> tuple[str, str]:
        return self.against, self.version

    @work(thread=True, exclusive=True, group="diff")
    def compute_diff(self) -> None:
        answers = lens_app(self).answers()
        reveal = bool(lens_app(self).reveal)
        try:
            if self.diff is None or isinstance(self.diff, DiffView):
                view = answers.diff(self.assembly_id, self.version, against=self.against,
                                    reveal=reveal)
            else:  # a diff computed elsewhere (verify's drift), shown as it is
                view = answers.diff_of(self.assembly_id, self.diff, self.against, self.version,
                                       reveal=reveal)
            affixes = store_id_affixes(answers)
        except ContextlensError as err:
            self.post_message(DiffFailed(str(err)))
            return
        ids = IdText(reveal, affixes).warm(
            [self.assembly_id, *(c["record_id"] for c in view.changes)])
        if not get_current_worker().is_cancelled:
            self.post_message(DiffComputed(view, dict(view.labels), affixes, ids))

    @work(thread=True, exclusive=True, group="explain")
    def explain_change(self, kind: str, record_id: str, labels: tuple[str, str]) -> None:
        answers = lens_app(self).answers()
        reveal = bool(lens_app(self).reveal)
        content, privacy = "", None
        try:
            sides = []
            for spec, label in zip(self._side_specs(), labels, strict=True):
                why = answers.why(self.assembly_id, record_id, record_kind=kind, side=spec,
                                  reveal=reveal)
                content, privacy = why.content, why.privacy_class
                decision = dict(why.decision) if why.decision is not None else None
                sentence = why.sentence if decision is not None else (
                    f"{kind} {record_id} was not a candidate on this side.")
                sides.append(SideWhy(label, decision, sentence, [dict(t) for t in why.trace]))
            renderings = [(s.decision or {}).get("rendering")
                          if (s.decision or {}).get("decision") == "included" else None
                          for s in sides]
            if len(set(renderings)) > 1:  # what the change does to the prompt, side by side
                texts = answers.rendered_as(self.assembly_id, kind, record_id, renderings,
                                            reveal=reveal,
                                            details=[(s.decision or {}).get("detail") for s in sides])
                sides = [replace(s, sent=t) for s, t in zip(sides, texts, strict=True)]
        except ContextlensError as err:
            sides = [SideWhy(label, None, f"Could not explain it: {err}", []) for label in labels]
        if not get_current_worker().is_cancelled:
            self.post_message(ChangeExplained(kind, record_id, content[:600], privacy, sides))

    # ------------------------------------------------------------------ message handlers

    async def on_diff_computed(self, message: DiffComputed) -> None:
        self.diff = message.diff
        self._labels = message.labels
        self._affixes = message.affixes
        self._ids = message.ids
        self._render_header()
        groups = safety_groups(self.diff)
        alarm = safety_alarm(groups)
        self.set_class(alarm, "-has-safety")
        block = self.query_one("#diff-safety", Static)
        block.set_class(alarm, "-safety")
        block.set_class(not alarm, "-clean")
        block.update(safety_text(groups, self._affixes, self.ids()))
        await self._show_rows()

    def _narrow(self) -> bool:
        return self.app.size.width < 100

    def _render_header(self) -> None:
        narrow = self._narrow()
        header = diff_header(self.assembly_id, self.diff, self._affixes, narrow, self.ids())
        if self.note:
            header.append("\n")
            header.append(self.ids().prose(self.note), style="italic")  # it names ids
        # narrow: the header's lines and the why's title cut with …, not wrapped, so the
        # records and both sides' why keep the rows of a 24-line terminal
        for name in ("#diff-header", "#change-title"):
            widget = self.query_one(name, Static)
            widget.styles.text_wrap = "nowrap" if narrow else "wrap"
            widget.styles.text_overflow = "ellipsis" if narrow else "fold"
        self.query_one("#diff-header", Static).update(header)

    async def on_resize(self, event: Any) -> None:
        """Another width may take the other table (``table_layout``) and header."""
        if self.diff is None or self.has_class("-failed"):
            return
        self._render_header()
        if self._width != self.app.size.width:
            await self._show_rows()

    def on_diff_failed(self, message: DiffFailed) -> None:
        self.add_class("-failed")
        self.query_one("#diff-header", Static).update(
            Text(f"Cannot diff {self.ids()(self.assembly_id, None, assembly=True)}: "
                 f"{self.ids().prose(message.error)}", style="bold red")  # it names ids
        )
        holder = self.query_one("#diff-holder")
        holder.remove_children()
        holder.mount(Static(Text(self.ids().prose(message.error)), classes="placeholder"))

    def on_change_explained(self, message: ChangeExplained) -> None:
        if self._selected != (message.kind, message.record_id):
            return  # the cursor moved on
        title = Text()
        record = self.ids()(message.record_id, None)
        title.append(f"{KIND_SHORT.get(message.kind, message.kind)} {record}", style="bold")
        if message.privacy:
            title.append(f"  ·  {message.privacy}", style="magenta")
        if message.content:
            title.append("  ·  ")
            title.append(one_line(message.content, 200))
        self.query_one("#change-title", Static).update(title)
        for side, box in zip(message.sides, ("a", "b"), strict=False):
            self.query_one(f"#change-{box}", Static).update(
                self._side_text(side, self._affixes, self.ids()))
            self.query_one(f"#change-{box}-trace", Static).update(self._trace_text(side))

    @staticmethod
    def _side_text(side: SideWhy, affixes: tuple[str, str] = NO_AFFIXES,
                   ids: IdText | None = None) -> Text:
        ids = ids if ids is not None else IdText(False, affixes)
        text = Text()
        text.append(ids.prose(side.label), style="bold")
        text.append("  ")
        place, style = decision_summary(side.decision)
        if side.decision is None:
            place = "not a candidate"
        text.append(place, style=style)
        if side.sent is not None:
            text.append("\nthe model receives: ", style="bold")
            text.append(safe_text(side.sent), style="italic")
        elif side.decision is not None and side.decision.get("decision") != "included":
            text.append("\nthe model receives nothing of it", style="bold")
        text.append("\n")
        text.append(ids.prose(side.why))  # ids as the table shows them
        return text

    @staticmethod
    def _trace_text(side: SideWhy) -> Text:
        """The side's decision trace, a line per step (cut, never wrapped to column 0)."""
        text = Text()
        if side.trace:
            text.append("decision trace", style="dim")
            for row in side.trace:
                outcome = str(row.get("outcome", ""))
                text.append(f"\n {row.get('step', ''):>3} ", style="dim")
                text.append(f"{safe_text(row.get('policy_family')):<13} ")
                text.append(f"{safe_text(outcome):<8} ", style="red" if outcome == "deny" else "green")
                text.append(f"{safe_text(row.get('reason_code')):<20} ")
                text.append(one_line(row.get("detail"), 160), style="dim")
        return text

    # ------------------------------------------------------------------ the table

    def _all_changes(self) -> list[dict[str, Any]]:
        return list(_get(self.diff, "changes") or []) if self.diff is not None else []

    async def _show_rows(self) -> None:
        changes = self._all_changes()
        shown = [c for c in changes if c["change"] != "unchanged"] if self.changes_only else changes
        self._shown = shown
        safety_keys = {
            (s.get("record_kind"), s.get("record_id"))
            for s in safety_groups(self.diff)["regressions"]
        }
        holder = self.query_one("#diff-holder")
        await holder.remove_children()
        self._width = self.app.size.width
        if shown:
            rows, widths = table_layout(
                change_rows(shown, safety_keys, self._labels, self._affixes,  # type: ignore[arg-type]
                            self.ids()),
                self._width)
            table = arrow_table(rows, id="diff-table", max_column_content_width=FULL_CELL,
                                column_widths=widths)
            await holder.mount(table)
            self._fit_rows(len(shown))
            keys = [(c["record_kind"], c["record_id"]) for c in shown]
            row = keys.index(self._selected) if self._selected in keys else 0
            table.move_cursor(row=row, animate=False)
            table.focus()
            self._select_row(row, force=True)  # labels may have changed (reveal)
        else:
            what = "No record changed" if changes else "No records on either side"
            await holder.mount(Static(
                f"{what}: both sides decide the same. f shows the {len(changes)} unchanged records.",
                classes="placeholder", markup=False,
            ))
        self._update_status()

    def _fit_rows(self, rows: int) -> None:
        """The records table as tall as its rows (with its header) up to half the screen;
        the why panel takes the rest."""
        holder = self.query_one("#diff-holder")
        height = self.app.size.height
        half = max(height // 2 - 4, 4)
        holder.styles.height = rows + 2 if rows + 2 <= half else "1fr"
        # a third of a short terminal (24 lines: the records keep 8 rows)
        panel = min(13, max(7, height // 3))
        self.query_one("#change-panel").styles.height = "1fr" if rows + 2 <= half else panel

    def _update_status(self) -> None:
        total = len(self._all_changes())
        changed = sum(1 for c in self._all_changes() if c["change"] != "unchanged")
        narrow = self._narrow()  # the status line in 80 columns
        if self.changes_only:
            status = (f"{changed} changed of {total} records · f: "
                      + ("all" if narrow else "show the unchanged too"))
        else:
            status = f"all {total} records ({changed} changed) · f: changes only"
        status += " · enter: read the why · esc: back"
        self.query_one("#diff-status", Static).update(status)

    def _select_row(self, row: int, force: bool = False) -> None:
        if not 0 <= row < len(self._shown):
            return
        change = self._shown[row]
        key = (change["record_kind"], change["record_id"])
        if key == self._selected and not force:
            return  # already shown (or on its way)
        self._selected = key
        labels = (str(_get(self.diff, "a_label", "A")), str(_get(self.diff, "b_label", "B")))
        self.explain_change(change["record_kind"], change["record_id"], labels)

    @on(DataTable.RowHighlighted, "#diff-table")
    def row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._select_row(event.cursor_row)

    @on(DataTable.RowSelected, "#diff-table")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter opens the highlighted record's why: the focus moves into side B's box, to
        scroll a long decision trace (esc comes back to the records)."""
        self._select_row(event.cursor_row)
        self.query_one("#change-b-box").focus()

    # ------------------------------------------------------------------ actions

    async def action_toggle_unchanged(self) -> None:
        self.changes_only = not self.changes_only
        if self.diff is not None:
            await self._show_rows()

    def action_back(self) -> None:
        focused = self.focused
        tables = self.query("#diff-table")  # none when no record changed
        if focused is not None and focused.id in ("change-a-box", "change-b-box") and tables:
            tables.first().focus()  # from the why back to the records
            return
        self.app.pop_screen()
