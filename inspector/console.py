"""What the command line prints: aligned text tables of escaped data, JSON for scripts,
a progress bar on a terminal. Every value from a log goes through ``vis`` (or JSON escaping)
before it reaches the terminal."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import click

from ingest.text import clip, json_safe, visible_text
from ingest.timefmt import table_time

__all__ = ["JsonResults", "clear_progress", "dumps", "emit_json", "json_default", "print_diff",
           "print_table", "progress_printer", "stream_json_array", "stream_table", "vis"]


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
    return json_safe(json.dumps(obj, default=json_default, ensure_ascii=False, indent=2))


def emit_json(obj: Any) -> None:
    click.echo(dumps(obj))


def vis(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return table_time(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(visible_text(str(v)) for v in value)
    return visible_text(str(value))


def print_table(rows: list[dict[str, Any]], columns: list[str], max_width: int = 48) -> None:
    """A plain, aligned text table (no markup: every cell is escaped data)."""
    cells = [[clip(vis(r.get(c)), max_width) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def stream_table(batches: Iterable[list[dict[str, Any]]], columns: list[str],
                 max_width: int = 48) -> int:
    """``print_table`` for rows that arrive in batches: the column widths are set by the
    first batch (later cells are cut to them), and each batch is printed as it comes.
    Returns how many rows were printed."""
    widths: list[int] | None = None
    shown = 0
    for rows in batches:
        cells = [[clip(vis(r.get(c)), max_width) for c in columns] for r in rows]
        if widths is None:
            widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
            click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
        for row in cells:
            click.echo("  ".join(clip(v, w).ljust(w) for v, w in zip(row, widths)).rstrip())
        shown += len(rows)
    if widths is None:
        click.echo("  ".join(columns))
    return shown


def stream_json_array(batches: Iterable[list[dict[str, Any]]]) -> int:
    """A JSON array written element by element as the batches arrive. Returns its length."""
    n = 0
    click.echo("[", nl=False)
    for rows in batches:
        for row in rows:
            click.echo(("," if n else "") + "\n  " + dumps(row).replace("\n", "\n  "), nl=False)
            n += 1
    click.echo("\n]" if n else "]")
    return n


class JsonResults:
    """A JSON object written as it is computed: the array ``key`` element by element
    (``add``), then the other members (``close``), e.g. counts known only at the end. The
    output is one valid JSON document and memory holds one element at a time."""

    def __init__(self, key: str) -> None:
        self.count = 0
        click.echo("{\n  " + json.dumps(key) + ": [", nl=False)

    def add(self, item: Any) -> None:
        click.echo(("," if self.count else "") + "\n    " + dumps(item).replace("\n", "\n    "),
                   nl=False)
        self.count += 1

    def close(self, members: Mapping[str, Any]) -> None:
        click.echo("\n  ]" if self.count else "]", nl=False)
        for key, value in members.items():
            click.echo(",\n  " + json.dumps(key) + ": " + dumps(value).replace("\n", "\n  "),
                       nl=False)
        click.echo("\n}")


def clear_progress() -> None:
    """Wipe a progress bar's line on a terminal before printing a result under it."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()


def progress_printer() -> Callable[[str, int, int], None] | None:
    """A progress bar on stderr when it is a terminal; nothing when piped."""
    if not sys.stderr.isatty():
        return None
    last: dict[str, Any] = {"stage": None}

    def progress(stage: str, done: int, total: int) -> None:
        width = 30
        filled = int(width * done / total) if total else width
        bar = "█" * filled + "░" * (width - filled)
        sys.stderr.write(f"\r{stage[:28]:<28} {bar} {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()
        last["stage"] = stage

    return progress


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


def print_diff(d: dict[str, Any], changes_only: bool = True) -> None:
    print_safety(d.get("safety") or {})
    summary = d["summary"]
    click.echo(f"\n{vis(d['a_label'])} -> {vis(d['b_label'])}: tokens {summary['tokens_a']} -> {summary['tokens_b']}")
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
