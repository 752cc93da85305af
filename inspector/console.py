"""What the command line prints: aligned text tables of escaped data, JSON for scripts,
a progress bar on a terminal. Every value from a log goes through ``vis`` (or JSON escaping)
before it reaches the terminal."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import click

from ingest.text import clip, escape_char, json_safe, visible_text
from ingest.timefmt import table_time

from .escapes import READABLE_COLUMNS, strip_sequences

__all__ = ["JsonResults", "budget_sentence", "cell", "clear_progress", "dumps", "emit_json", "json_default", "print_compare",
           "print_diff", "print_table", "progress_printer", "stream_json_array", "stream_table", "vis"]


def json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(obj: Any) -> str:
    # U+2028/U+2029 end a line for many readers (and JavaScript) though json.dumps keeps
    # them raw: escaped, so a value from a log never starts a line of the output
    return _safe_json(json.dumps(obj, default=json_default, ensure_ascii=False, indent=2))


def emit_json(obj: Any) -> None:
    click.echo(dumps(obj))


# What ends or splits a line and ``visible_text`` keeps (it escapes \r, \x85, \x0b, \x0c
# and \x1c-\x1e): a value printed on a line shows these escaped, so a log can never start
# an output line of its own (an id ``x\nverify: faithful``) nor shift a table's columns.
_LINE_BREAKS = re.compile("[\n\t\u2028\u2029]")
# the same, folded for reading in log text quoted on a line (a label, a why-sentence)
_FOLD = re.compile("\r\n|[\n\r\x85\u2028\u2029]")


def _one_line(text: str) -> str:
    return _LINE_BREAKS.sub(lambda m: escape_char(m.group()), text)


def vis(value: Any) -> str:
    """A value from a log (an id, a tag, a name) as it is printed on a line: exact, every
    unsafe character and every line or column break a visible escape (``\x0a``)."""
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return table_time(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(_one_line(visible_text(str(v))) for v in value)
    return _one_line(visible_text(str(value)))


def _folded(value: Any) -> Any:
    """Log text on one line for reading: newlines shown as ⏎, tabs as spaces."""
    if not isinstance(value, str):
        return value
    return _FOLD.sub(" ⏎ ", strip_sequences(value)).replace("\t", " ")


def body(value: Any) -> str:
    """Log text quoted in a line (a provenance label, a lint detail, a why-sentence): its
    terminal escape sequences removed for reading, on one line (newlines shown as ⏎), the
    rest escaped as ``vis`` does (``--json`` prints the exact text)."""
    return vis(_folded(value))


def cell(value: Any, column: str, width: int | None) -> str:
    """One table cell: escaped data on one line, cut with … at ``width``. In a column that
    quotes log text (a label, a detail) terminal escape sequences are removed first and
    newlines shown as ⏎, for reading; an id's are escaped exactly (``vis``). (``--json``
    prints the exact text.)"""
    if isinstance(value, str) and column in READABLE_COLUMNS:
        value = _folded(value)
    return clip(vis(value), width)


def _to_terminal() -> bool:
    """Whether stdout is a terminal (a pipe or a file is not: tables there are whole)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _cell_limit(column: str, max_width: int | None) -> int | None:
    """How wide a cell of ``column`` may be before the table is fitted: on a terminal
    ``max_width``; piped, ids and names whole (a script reads them), log text quoted in
    a preview column (a label, a detail: kilobytes of a tool's output) still cut."""
    return max_width if _to_terminal() or column in READABLE_COLUMNS else None


def _fit_terminal(widths: list[int], columns: list[str], indent: int = 0) -> list[int]:
    """``widths`` narrowed to the terminal (the widest column first, never below its
    header nor 8 cells); as they are when piped, or when even that would not fit (the
    lines then wrap, every cell readable, rather than every id cut to nothing)."""
    if not _to_terminal():
        return widths
    import shutil

    room = shutil.get_terminal_size().columns - indent - 2 * (len(widths) - 1)
    widths = list(widths)
    floors = [max(len(c), min(w, 8)) for c, w in zip(columns, widths)]
    if sum(floors) > room:
        return widths
    while sum(widths) > room:
        shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def _table_cells(rows: list[dict[str, Any]], columns: list[str],
                 max_width: int | None) -> list[list[str]]:
    return [[cell(r.get(c), c, _cell_limit(c, max_width)) for c in columns] for r in rows]


def print_table(rows: list[dict[str, Any]], columns: list[str], max_width: int = 48) -> None:
    """A plain, aligned text table (no markup: every cell is escaped data), fitted to the
    terminal; piped, at its natural width (``_cell_limit``)."""
    for line in _table_lines(rows, columns, max_width, indent=0):
        click.echo(line)


def stream_table(batches: Iterable[list[dict[str, Any]]], columns: list[str],
                 max_width: int = 48) -> int:
    """``print_table`` for rows that arrive in batches: the column widths are set by the
    first batch and each batch is printed as it comes. On a terminal later cells are cut
    to those widths; piped, a longer cell is printed whole (its row is then wider).
    Returns how many rows were printed."""
    widths: list[int] | None = None
    shown = 0
    fit = _to_terminal()
    for rows in batches:
        cells = _table_cells(rows, columns, max_width)
        if widths is None:
            widths = _fit_terminal(
                [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)],
                columns)
            click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
        for row in cells:
            click.echo("  ".join((clip(v, w) if fit else v).ljust(w)
                                 for v, w in zip(row, widths)).rstrip())
        shown += len(rows)
    if widths is None:
        click.echo("  ".join(columns))
    return shown


# Piped or to a file, JSON is for a program: compact (no indentation, which only Python's
# own encoder writes, six times slower than its C encoder), one element of an array a line.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=json_default)


def _safe_json(text: str) -> str:
    """``text`` with DEL, C1, bidi characters and U+2028/U+2029 escaped (as ``dumps``)."""
    if text.isascii() and "\x7f" not in text:
        return text  # nothing to escape: two scans in C, not a regular expression's
    return json_safe(text).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def stream_json_array(batches: Iterable[list[dict[str, Any]]]) -> int:
    """A JSON array written as the batches arrive: on a terminal indented as ``dumps``,
    element by element; piped or to a file compact, one element a line, a batch at a
    time (the same values, keys and order: only the whitespace differs). Returns its
    length."""
    n = 0
    # the opening bracket waits for the first batch: an error before any (a missing store,
    # a bad filter) leaves stdout empty, not a JSON text that never closes
    if not _to_terminal():
        encode = _COMPACT.encode
        for rows in batches:
            if rows:
                text = _safe_json(",\n".join(map(encode, rows)))
                click.echo(("," if n else "[") + "\n" + text, nl=False)
                n += len(rows)
        click.echo("\n]" if n else "[]")
        return n
    for rows in batches:
        for row in rows:
            click.echo(("," if n else "[") + "\n  " + dumps(row).replace("\n", "\n  "), nl=False)
            n += 1
    click.echo("\n]" if n else "[]")
    return n


class JsonResults:
    """A JSON object written as it is computed: the array ``key`` element by element
    (``add``), then the other members (``close``), e.g. counts known only at the end. The
    output is one valid JSON document and memory holds one element at a time. Nothing is
    written before the first element (or the close): an error before it leaves stdout
    empty, not a JSON text that never closes."""

    def __init__(self, key: str) -> None:
        self.count = 0
        self.head = "{\n  " + json.dumps(key) + ": ["

    def add(self, item: Any) -> None:
        click.echo((self.head if not self.count else ",") + "\n    "
                   + dumps(item).replace("\n", "\n    "), nl=False)
        self.count += 1

    def close(self, members: Mapping[str, Any]) -> None:
        click.echo("\n  ]" if self.count else self.head + "]", nl=False)
        for key, value in members.items():
            click.echo(",\n  " + json.dumps(key) + ": " + dumps(value).replace("\n", "\n  "),
                       nl=False)
        click.echo("\n}")


def clear_progress() -> None:
    """Wipe a progress bar's line on a terminal before printing a result under it."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()


def progress_printer(unit: str | None = None) -> Callable[[str, int, int], None] | None:
    """A progress bar on stderr when it is a terminal; nothing when piped (stdout holds the
    answer alone, and a log file gets no bar). With ``unit`` ("requests"), the line also
    says the rate so far and the time left (``readmodel.progress``, as the app says it),
    timed from each stage's first report."""
    if not sys.stderr.isatty():
        return None
    clock: Any = None
    if unit is not None:
        from readmodel.progress import ProgressClock

        clock = ProgressClock()
    last: dict[str, Any] = {"stage": None}

    def progress(stage: str, done: int, total: int) -> None:
        if clock is not None and stage != last["stage"]:
            clock.restart()
        said = clock.report(done, total).text(unit) if clock is not None else f"{done}/{total}"
        head = clip(stage, 28)
        # one terminal line, redrawn in place (a longer one would wrap and leave copies;
        # the 3 cells left free keep the terminal's ^C on it): the bar takes what the words
        # leave, up to 30 cells
        room = _stderr_columns() - 3
        width = max(0, min(30, room - len(head) - len(said) - 2))
        filled = min(int(width * done / total), width) if total else width
        bar = "█" * filled + "░" * (width - filled)
        line = f"{head} {bar} {said}" if width else f"{head} {said}"
        sys.stderr.write("\r" + clip(line, room) + "\x1b[K")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()
        last["stage"] = stage

    return progress


def _stderr_columns() -> int:
    """The width of the terminal stderr is on (80 when it does not say)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


SAFETY_GROUP_TITLES = (
    ("regressions", "regressions (B has, A has not)"),
    ("fixes", "fixes (A has, B has not)"),
    ("in_recording", "in the recording (sent)"),
)


def print_safety(safety: dict[str, Any]) -> None:
    """A diff's safety findings, or "safety: none"."""
    groups = [(key, title, safety.get(key) or []) for key, title in SAFETY_GROUP_TITLES]
    if not any(items for _, _, items in groups):
        click.echo("safety: none")
        return
    click.echo("safety:")
    for _key, title, items in groups:
        if not items:
            continue
        click.echo(f"  {title}: {len(items)}")
        for f in items:
            click.echo(f"    {vis(f['finding'])}  {vis(f['record_kind'])} {vis(f['record_id'])}")


def budget_sentence(budget: Mapping[str, Any] | None) -> str:
    """An effective budget's JSON (``EffectiveBudget.to_json``) as its one-line sentence;
    None (the registry lacks the side's policy version) says so."""
    from readmodel import EffectiveBudget

    if budget is None:
        return "token budget unknown (its policy version is not in the registry)"
    return vis(EffectiveBudget(**budget).sentence())


def print_diff(d: dict[str, Any], changes_only: bool = True) -> None:
    print_safety(d.get("safety") or {})
    summary = d["summary"]
    in_records = ""
    if (summary.get("record_tokens_a"), summary.get("record_tokens_b")) not in (
            (None, None), (summary["tokens_a"], summary["tokens_b"])):
        # a transcript's request: the rest is its system prompt and tools, in no record
        in_records = (f" ({summary['record_tokens_a']} -> {summary['record_tokens_b']} "
                      "of them in records)")
    click.echo(f"\n{vis(d['a_label'])} -> {vis(d['b_label'])}: tokens {summary['tokens_a']} -> "
               f"{summary['tokens_b']}{in_records}")
    budget = d.get("budget") or {}
    for side in ("a", "b"):
        click.echo(f"  {side.upper()}: {budget_sentence(budget.get(side))}")
    if summary.get("over_context_window"):
        limit = (budget.get("b") or {}).get("context_limit")
        click.echo(f"  over_context_window: B sends {summary['tokens_b']:,} tokens, past the model's "
                   f"context window of {limit:,}: the request would have failed")
    counts = summary["counts"]
    click.echo("  " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items()))
    rows = []
    for c in d["changes"]:
        if changes_only and c["change"] == "unchanged":
            continue
        a, b = c.get("a") or {}, c.get("b") or {}
        rows.append(
            {
                "change": c["change"],
                "record_kind": c["record_kind"],
                "record_id": c["record_id"],
                "a": f"{a.get('decision', '-')}/{a.get('rendering') or a.get('reason_code') or '-'}",
                "b": f"{b.get('decision', '-')}/{b.get('rendering') or b.get('reason_code') or '-'}",
                "b_reason": b.get("reason_code"),
            }
        )
    if rows:
        click.echo("")
        print_table(rows, ["change", "record_kind", "record_id", "a", "b", "b_reason"])


COMPARE_SAFETY_TITLES = (
    ("regressions", "regressions (B has, A has not)"),
    ("fixes", "fixes (A has, B has not)"),
    ("in_recording", "in the recording (sent)"),
)
COMPARE_CHANGE_TITLES = (
    ("newly_included", "newly included", "A's reason"),
    ("newly_omitted", "newly omitted", "B's reason"),
    ("rerendered", "re-rendered", "B's reason"),
)


def _requests(n: int) -> str:
    return f"{n} request{'s' if n != 1 else ''}"


def _signed(n: Any) -> str:
    return "-" if n is None else f"{n:+d}" if isinstance(n, int) else str(n)


def budget_tally_sentence(entry: Mapping[str, Any]) -> str:
    """One policy version's budgets over a compare's requests (an entry of
    ``CompareResult.budget``): its budget and reserve, and where the model's limit capped it."""
    n = entry["requests"]
    if not entry["known"]:
        return f"token budget unknown, not in the registry ({_requests(n)})"
    if entry["policy_budget"] is None:
        lo, hi = entry.get("context_limit_min"), entry.get("context_limit_max")
        window = ("" if lo is None else f"; the model's context window {lo:,}" if lo == hi
                  else f"; the model's context window {lo:,} to {hi:,}")
        return f"no token budget, a runtime policy ({_requests(n)}{window})"
    text = (f"token budget {entry['policy_budget']:,}, reserve {entry['reserve_tokens']:,} "
            f"({_requests(n)}")
    if entry["capped"]:
        text += (f"; the model's context limit is below it in {entry['capped']}, down to "
                 f"{entry['lowest_budget']:,}")
    if entry["no_context_limit"]:
        text += f"; no model context limit recorded in {entry['no_context_limit']}"
    return text + ")"


def print_compare(d: dict[str, Any]) -> None:
    """A compare (``CompareResult.to_json()``): safety first, then the aggregates, the
    token-delta distribution and the most-changed requests."""
    where = f" matching {vis(d['filter'])}" if d.get("filter") else ""
    click.echo(f"compare {vis(d['a'])} -> {vis(d['b'])} over {d['requests']} requests{where}")
    safety = d["safety"]
    if not any(safety.get(k) for k, _ in COMPARE_SAFETY_TITLES):
        click.echo("safety: none")
    else:
        click.echo("safety:")
    for key, title in COMPARE_SAFETY_TITLES:
        groups = safety.get(key)
        if not groups:
            continue
        total = sum(g["findings"] for g in groups)
        click.echo(f"  {title}: {total}")
        for g in groups:
            click.echo(f"    {vis(g['finding'])}: {g['findings']} in {_requests(g['requests'])}, "
                       f"e.g. {vis(g['example_requests'])}")
            for rec in g["records"]:
                click.echo(f"      {vis(rec['record_kind'])} {vis(rec['record_id'])} "
                           f"({_requests(rec['requests'])})")
    over = d.get("over_context_window") or {}
    if over.get("requests"):
        # after safety, the other finding a reviewer must see: requests that would have failed
        examples = ", ".join(f"{vis(e['assembly_id'])} ({e['tokens_b']:,} > {e['context_limit']:,})"
                             for e in over.get("examples") or [])
        click.echo(f"over_context_window: {_requests(over['requests'])} B sends past the model's "
                   f"context window (the request would have failed), e.g. {examples}")
    # each side's token budget (safety first, then what every count below was assembled under)
    budget = d.get("budget") or {}
    click.echo("")
    for side in ("a", "b"):
        entries = budget.get(side) or []
        head = f"budget {side.upper()} {vis(d[side])}"
        if len(entries) == 1 and entries[0]["policy_version"] == d[side]:
            click.echo(f"{head}: {budget_tally_sentence(entries[0])}")
            continue
        click.echo(f"{head}, by policy version:")
        for entry in entries:
            click.echo(f"  {vis(entry['policy_version'])}: {budget_tally_sentence(entry)}")
    click.echo(f"\nrequests: {d['requests']} compared, {d['affected']} affected "
               "(what the model receives differs)")
    records = d["records"]
    click.echo("records: " + ", ".join(f"{title} {records[key]['total']}"
                                       for key, title, _ in COMPARE_CHANGE_TITLES)
               + f" (moved {records['moved']['total']}, reason changed "
               f"{records['reason_changed']['total']})")
    for key, title, reason in COMPARE_CHANGE_TITLES:
        rows = records[key]["by"]
        if rows:
            click.echo(f"  {title}, by kind, {reason} and privacy class:")
            shown = [{"record_kind": r["record_kind"], "reason": r["reason"],
                      "privacy_class": r["privacy_class"], "count": r["count"]} for r in rows]
            for line in _table_lines(shown, ["record_kind", "reason", "privacy_class", "count"]):
                click.echo("    " + line)
    tokens = d["tokens"]
    per = tokens["per_request"]
    click.echo(f"\ntokens: {tokens['a']} -> {tokens['b']} ({_signed(tokens['delta'])})")
    if per["count"]:
        pct = ", ".join(f"{k} {_signed(v)}" for k, v in per["percentiles"].items())
        click.echo(f"  per request delta: min {_signed(per['min'])}, {pct}, "
                   f"max {_signed(per['max'])}, mean {per['mean']:+}")
        for line in _histogram_lines(per["histogram"]):
            click.echo("    " + line)
    if d["most_changed"]:
        click.echo("\nmost changed:")
        columns = ["assembly_id", "safety_regressions", "safety_fixes", "newly_included",
                   "newly_omitted", "rerendered", "tokens_a", "tokens_b", "delta"]
        if any(e["capped"] for entries in budget.values() for e in entries):
            columns += ["budget_a", "budget_b"]  # the budget differs by request: each one's
        for line in _table_lines(d["most_changed"], columns):
            click.echo("  " + line)


def _histogram_lines(histogram: list[dict[str, Any]], bar_width: int = 30) -> list[str]:
    """The token-delta histogram of a compare, one line per bin (the bins of
    ``replay.compare.histogram_bins``, as the app shows them): every bin labelled, zero's
    own bin marked ``┼``, the count, then a bar."""
    def signed(v: int) -> str:
        return f"{v:+d}" if v else "0"

    labels = [signed(b["lo"]) if b["hi"] - b["lo"] == 1
              else f"{signed(b['lo'])}..{signed(b['hi'] - 1)}" for b in histogram]
    width = max((len(label) for label in labels), default=0)
    count_width = max((len(str(b["count"])) for b in histogram), default=0)
    most = max((b["count"] for b in histogram), default=0) or 1
    lines = []
    for b, label in zip(histogram, labels):
        axis = "┼" if (b["lo"], b["hi"]) == (0, 1) else "│"
        bar = "█" * max(1 if b["count"] else 0, round(bar_width * b["count"] / most))
        lines.append(f"{label:>{width}} {axis} {b['count']:>{count_width}} {bar}".rstrip())
    return lines


def _table_lines(rows: list[dict[str, Any]], columns: list[str], max_width: int = 48,
                 indent: int = 2) -> list[str]:
    """The lines of ``print_table`` (each to be printed after ``indent`` spaces)."""
    cells = _table_cells(rows, columns, max_width)
    widths = _fit_terminal(
        [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)],
        columns, indent)
    lines = ["  ".join(clip(c, w).ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(clip(v, w).ljust(w) for v, w in zip(row, widths)).rstrip()
              for row in cells]
    return lines
