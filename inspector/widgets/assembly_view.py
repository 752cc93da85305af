"""What the assembly screen's tabs and header show of the read model's answers: the
Context and Trace tables, the omitted rows, the record panel's content and the recorded
token line. Columnar where a table is built; one assembly's records are bounded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from rich.text import Text

from ingest.errors import ContextlensError
from readmodel import AssemblyView, EffectiveBudget, ReadModel, RecordWhy, TokenAccounting
from readmodel.ids import NO_AFFIXES, short_ids, store_id_affixes
from readmodel.masking import Masker, masked_ids

from .record_panel import RecordDetail

__all__ = ["AssemblyContent", "assembly_content", "budget_line", "explain", "record_detail",
           "recorded_tokens_line", "records_display", "shown_ids", "token_shape_line"]

SHAPE_WIDTH = 24  # cells of the prompt's stacked bar
# one colour per record kind in the stacked bar (kinds not listed share the last)
KIND_STYLES = {
    "message": "dodger_blue2", "tool_artifact": "magenta", "tool_memory": "yellow",
    "tool_call": "cyan", "checkpoint": "green", "skill_state": "red",
}
OTHER_STYLE = "bright_white"
OMITTED_CELLS = 12  # the omitted bar, on the prompt's scale, is cut here
OVERHEAD_STYLE = "grey50"


@dataclass(frozen=True)
class AssemblyContent:
    """Everything the assembly screen shows when it opens: the request row, the tabs'
    tables, and the record panel for the first record (the one the cursor starts on)."""

    request: Mapping[str, Any]
    included: pa.Table  # display table, prompt order; kind/id kept
    omitted: list[dict[str, Any]]  # rows sorted by reason_code, record_kind, record_id
    trace: pa.Table
    membership: dict[tuple[str, str], dict[str, Any]]
    tokens: TokenAccounting
    first: tuple[str, str] | None  # the record the cursor starts on
    first_detail: RecordDetail | None  # its panel
    budget: EffectiveBudget | None = None  # the token budget it was assembled under
    # what every id of the store starts and ends with, dropped where ids are shown
    # (``readmodel.ids``: as the request list shows them)
    affixes: tuple[str, str] = NO_AFFIXES
    # the request as the header shows it: ids, tags and names masked unless revealed
    # (``request`` keeps the real ids, to open its conversation by)
    shown_request: Mapping[str, Any] | None = None
    reveal: bool = False


def assembly_content(answers: ReadModel, assembly_id: str, reveal: bool,
                     explain_first: bool = True) -> AssemblyContent:
    """The read model's answers for an assembly screen, ready to show, with the first
    record's panel unless ``explain_first`` is False (a ContextlensError from
    ``ReadModel.assembly`` propagates: the assembly cannot be shown)."""
    view = answers.assembly(assembly_id, reveal=reveal)
    included, omitted, trace, membership, tokens = records_display(view)
    if included.num_rows:
        first: tuple[str, str] | None = (included["kind"][0].as_py(), included["id"][0].as_py())
    else:
        first = next(iter(membership), None)
    detail = None
    if explain_first and first is not None:
        detail = explain(answers, assembly_id, *first, reveal)
    return AssemblyContent(view.request, included, omitted, trace, membership, tokens,
                           first, detail, view.budget, store_id_affixes(answers),
                           masked_ids(dict(view.request), Masker(reveal)), reveal)


def shown_ids(table: pa.Table, column: str, affixes: tuple[str, str],
              reveal: bool = False) -> pa.Table:
    """``table`` with the record ids of ``column`` as they are shown: secret-shaped ones
    masked unless ``reveal`` (``readmodel.masking.masked_ids``, columnar), the store's id
    prefix dropped; the screen keeps the whole ids to select by."""
    if column not in table.column_names:
        return table
    index = table.schema.get_field_index(column)
    ids = masked_ids(table[column], Masker(reveal))
    if affixes[0]:
        ids = short_ids(ids, affixes[0])
    return table.set_column(index, column, ids)


def budget_line(budget: EffectiveBudget | None, label: str = "budget") -> Text:
    """``budget 900 (model limit; policy 6,000) - reserve 500 = 400``: the effective token
    budget in a few words (``EffectiveBudget.short``), the model's limit in bold where it
    set the budget; a runtime policy's says it keeps none; an unknown one says so."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{label} ", style="dim")
    if budget is None:
        line.append("unknown (the policy version is not in the registry)", style="dim")
        return line
    capped = budget.capped_by == "context_limit"
    line.append(budget.short(), style="bold yellow" if capped else "")
    return line


def explain(answers: ReadModel, assembly_id: str, kind: str, record_id: str,
            reveal: bool) -> RecordDetail:
    """The record panel's content for one record (a record that cannot be loaded says so)."""
    try:
        why = answers.why(assembly_id, record_id, record_kind=kind, reveal=reveal)
    except ContextlensError as err:
        return RecordDetail(kind=kind, record_id=record_id, exists=False, decision=None,
                            why=f"Could not load {kind} {record_id}: {err}", content="",
                            privacy_class=None)
    return record_detail(why)


def recorded_tokens_line(tokens: TokenAccounting | None) -> Text | None:
    """``recorded N · records E · unattributed U = overhead O + residual R``
    for a request whose token count was recorded by its runtime (``(system prompt, tool
    schemas)`` when the split is not known); None otherwise (or while the records are not
    loaded yet)."""
    if tokens is None or not tokens.recorded:
        return None
    line = Text()
    line.append(f"recorded {tokens.assembled_tokens:,}", style="bold")
    line.append(" · records ")
    line.append(f"{tokens.included_estimate:,}")
    if tokens.unattributed is not None:
        line.append(f" · unattributed {tokens.unattributed:,}", style="bold yellow")
        if tokens.fixed_overhead is None or tokens.estimator_residual is None:
            line.append(" (system prompt, tools)", style="dim")
        else:
            # short enough for a 160-column header, where it is cut rather than wrapped
            line.append(f" = overhead {tokens.fixed_overhead:,}", style="dim")
            line.append(" (system prompt, tools)", style="dim")
            line.append(f" + residual {tokens.estimator_residual:,}", style="dim")
    if tokens.calibration:
        line.append(f" · estimates {tokens.calibration}", style="dim")
    return line


def token_shape_line(tokens: TokenAccounting | None, width: int = SHAPE_WIDTH) -> Text | None:
    """``prompt ████▓▓▓▒░░░ message 1,234 · tool_artifact 567 · overhead 89 · omitted ▒▒ 2,345``:
    the prompt's tokens stacked by record kind (and what its records do not explain, for
    a recorded count), scaled to the budget or the prompt, whichever is larger, with the
    omitted records' tokens beside it on the same scale. None while nothing is loaded."""
    if tokens is None:
        return None
    parts = [(kind, n, KIND_STYLES.get(kind, OTHER_STYLE)) for kind, n in tokens.by_kind.items()
             if n > 0]
    if tokens.unattributed:
        parts.append(("overhead", max(tokens.unattributed, 0), OVERHEAD_STYLE))
    sent = sum(n for _, n, _ in parts)
    scale = max(tokens.token_budget, sent, 1)
    line = Text()
    line.append("prompt ", style="bold")
    used = 0
    for _, n, style in parts:
        cells = max(1, round(n / scale * width)) if n else 0
        cells = min(cells, width - used)
        line.append("█" * cells, style=style)
        used += cells
    line.append("░" * (width - used), style="grey30")
    for kind, n, style in parts:
        line.append("  ■ ", style=style)
        line.append(f"{kind} {n:,}")
    if tokens.omitted_tokens:
        cells = min(max(1, round(tokens.omitted_tokens / scale * width)), OMITTED_CELLS)
        line.append("  │  omitted ", style="dim")
        line.append("▒" * cells, style="dim")
        line.append(f" {tokens.omitted_tokens:,}", style="dim")
    return line


def records_display(view: AssemblyView) -> tuple[pa.Table, list[dict[str, Any]], pa.Table,
                                                   dict[tuple[str, str], dict[str, Any]],
                                                   TokenAccounting]:
    """What the tabs show of an assembly view (columnar; the omitted rows and the membership
    map are bounded by one assembly's records)."""
    records = view.records
    is_included = pc.equal(records["decision"], "included")
    included = records.filter(is_included)
    omitted = records.filter(pc.invert(is_included))
    included_view = pa.table(
        {
            "pos": included["position"],
            "kind": included["record_kind"],
            "id": included["record_id"],
            "rendering": pc.fill_null(included["rendering"], ""),
            "reason": included["reason_code"],
            "tokens": included["tokens"],
            "label": included["label"],
        }
    )
    trace = view.trace
    trace_view = pa.table(
        {
            "step": trace["step"],
            "family": trace["policy_family"],
            "outcome": trace["outcome"],
            "reason": trace["reason_code"],
            "kind": trace["record_kind"],
            "record": trace["record_id"],
            "detail": trace["detail"],
        }
    )
    membership = {
        (row["record_kind"], row["record_id"]): row
        for row in records.select(
            ["record_kind", "record_id", "decision", "rendering", "position",
             "policy_family", "reason_code", "detail", "tokens"]
        ).to_pylist()
    }
    omitted_rows = omitted.select(
        ["record_kind", "record_id", "reason_code", "policy_family", "tokens", "label", "detail"]
    ).to_pylist()
    return included_view, omitted_rows, trace_view, membership, view.tokens


def record_detail(why: RecordWhy) -> RecordDetail:
    """The record panel's content from the read model's answer."""
    return RecordDetail(
        kind=why.record_kind,
        record_id=why.record_id,
        exists=why.exists,
        decision=dict(why.decision) if why.decision is not None else None,
        why=why.sentence,
        content=why.content[:2000],
        privacy_class=why.privacy_class,
        trace=[dict(t) for t in why.trace],
        provenance=[link.to_json() for link in why.provenance],
    )
