"""The request list's columns: what each shows, how useful it is, and how a page of the
store's rows becomes the table's columns (columnar, Arrow compute) and which fit the
terminal. The list screen (``inspector/screens/requests.py``) loads pages and shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.timefmt import NOT_RECORDED, table_time_column

from readmodel.ids import short_ids

from .arrow_table import token_bar

MARKERS = {"safety": "⚠", "error": "✗", "warning": "!", "info": "i"}
MARKER_LEGEND = "lint: " + " ".join(f"{m} {k}" for k, m in MARKERS.items())


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
    Column("model", "model", "model", 4, cap=22),
    Column("policy", "policy", "policy_version", 2, cap=18),  # chat-full-history whole
    Column("incl", "incl", "included_count", 3),
    Column("omit", "omit", "omitted_count", 3),
    Column("tokens", "tokens", "assembled_tokens", 2),  # what a request cost: before its model
    Column("findings", "lint", None, 1),  # safety markers: kept as long as the request id
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
            # a made-up time (the log records none) comes as null: say so
            "time": table_time_column(page["assembled_at"], missing=NOT_RECORDED),
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
