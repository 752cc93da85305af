"""``contextlens report tokens`` as a table: thousands separators, and each scenario's
assembled tokens as a bar against what replaying its history would have sent."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ingest.text import one_line

BAR_CELLS = 16
ALL = "(all)"  # the report's own total row, set apart by a rule


def token_bar(part: int, whole: int, cells: int = BAR_CELLS) -> str:
    """``█████░░░…``: ``part`` of ``whole`` in ``cells`` cells (full when whole is 0)."""
    filled = cells if whole <= 0 else min(cells, round(cells * part / whole))
    if part > 0 and filled == 0:
        filled = 1  # a non-zero share stays visible
    return "█" * filled + "░" * (cells - filled)


def print_token_report(rows: list[dict[str, Any]], console: Console | None = None) -> None:
    """Per scenario (the total last): requests, baseline and assembled tokens, a bar of
    assembled against baseline, and the reduction. Numbers are never cut; a long scenario
    name is, to fit ``console`` (a terminal's width). Scenario names are log data: plain
    text, never markup."""
    cells = []
    for r in rows:
        base, sent = int(r["baseline_tokens"] or 0), int(r["assembled_tokens"] or 0)
        cells.append((r.get("scenario"), f"{int(r['assemblies'] or 0):,}", f"{base:,}",
                      f"{sent:,}", token_bar(sent, base), f"{100 * float(r['reduction'] or 0):.1f}%"))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("scenario", no_wrap=True, overflow="ellipsis", min_width=8)
    for i, name in enumerate(("requests", "baseline", "assembled"), 1):
        widest = max([len(name)] + [len(c[i]) for c in cells])
        table.add_column(name, justify="right", no_wrap=True, min_width=widest)
    table.add_column("assembled of baseline", no_wrap=True,
                     min_width=max(BAR_CELLS, len("assembled of baseline")))
    table.add_column("reduction", justify="right", no_wrap=True, min_width=9)
    for k, (scenario, *values) in enumerate(cells):
        name = Text(one_line(scenario)) if scenario else Text("(no scenario)", style="dim")
        last_before_total = k + 1 < len(cells) and cells[k + 1][0] == ALL
        table.add_row(name, *values, end_section=last_before_total)
    # each column: a space of padding either side and a one-space rule between
    numbers = sum(c.min_width or 0 for c in table.columns[1:]) + 3 * len(table.columns) + 2
    if console is None:
        # the numbers always whole: a pipe (80 columns to rich) gets the width they need
        console = Console(highlight=False, soft_wrap=False)
        console.width = max(console.width, numbers + 8)
    # the scenario name takes what the numbers leave, cut with …
    table.columns[0].max_width = max(8, console.width - numbers)
    console.print(table)
