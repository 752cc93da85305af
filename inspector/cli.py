"""The ``contextlens`` command line. Every answer the app gives also exists here, as text
for people and as ``--json`` for scripts.

Errors reach the user as one line on stderr and a non-zero exit code (2 for bad input or an
unknown id), never a traceback. Content from logs is escaped before it is printed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

import click

from ingest.errors import ContextlensError

from .stores import resolve_store

# ----------------------------------------------------------------------------- output helpers

# json.dumps escapes C0 controls itself; these it would leave raw with ensure_ascii=False.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(obj: Any) -> str:
    text = json.dumps(obj, default=_json_default, ensure_ascii=False, indent=2)
    return _JSON_UNSAFE.sub(lambda m: "\\u%04x" % ord(m.group()), text)


def emit_json(obj: Any) -> None:
    click.echo(dumps(obj))


def _vis(value: Any) -> str:
    from replay.render import visible_text

    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, list):
        return ", ".join(visible_text(str(v)) for v in value)
    return visible_text(str(value))


def print_table(rows: list[dict[str, Any]], columns: list[str], max_width: int = 48) -> None:
    """A plain, aligned text table (no markup: every cell is escaped data)."""
    cells = [[_vis(r.get(c))[:max_width] for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def _progress_printer() -> Callable[[str, int, int], None] | None:
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


def _open_store(db: str | None):
    from ingest.store import Store

    return Store.open(resolve_store(db, _progress_printer()))


def _rows(table: Any) -> list[dict[str, Any]]:
    return table.to_pylist()


# ----------------------------------------------------------------------------- commands

db_option = click.option(
    "--db",
    "db",
    metavar="FILE",
    help="A store file or an export folder (default: the bundled sample).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
reveal_option = click.option(
    "--reveal",
    is_flag=True,
    help="Show restricted privacy classes and secret-looking values (never persisted).",
)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="contextlens")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Inspect and replay LLM context assembly.

    With no command, opens the inspector on the bundled sample.
    """
    if ctx.invoked_subcommand is None:
        _run_app(None, reveal=False, assembly=None)


def _run_app(path: str | None, reveal: bool, assembly: str | None) -> None:
    db = resolve_store(path, _progress_printer())
    from .app import ContextLensApp

    ContextLensApp(db_path=db, reveal=reveal, initial_assembly=assembly).run()


@cli.command("open")
@click.argument("path", required=False)
@click.option("--assembly", metavar="ID", help="Open this assembly directly.")
@reveal_option
def open_cmd(path: str | None, assembly: str | None, reveal: bool) -> None:
    """Open the inspector on PATH: an export folder or a store file (default: the sample)."""
    if assembly:
        # Fail before the screen takes over if the id is unknown.
        with _open_store(path) as store:
            store.assembly(assembly)
    _run_app(path, reveal=reveal, assembly=assembly)


@cli.command()
@click.argument("export_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--db", "db", metavar="FILE", required=True, help="The store file to write.")
@json_option
def ingest(export_dir: Path, db: str, as_json: bool) -> None:
    """Validate EXPORT_DIR and load it into the store FILE (atomically)."""
    from ingest.store import ingest as do_ingest

    if not export_dir.exists():
        raise ContextlensError(f"{export_dir}: no such folder")
    result = do_ingest(export_dir, Path(db), progress=None if as_json else _progress_printer())
    if as_json:
        emit_json(
            {
                "export_id": result.export_id,
                "db": str(result.db_path),
                "changed": result.changed,
                "rows": result.rows,
                "warnings": result.warnings,
            }
        )
        return
    verb = "ingested" if result.changed else "already up to date:"
    total = sum(result.rows.values())
    click.echo(f"{verb} export {_vis(result.export_id)} into {result.db_path} ({total} rows)")
    for w in result.warnings:
        click.echo(f"warning: {_vis(w)}", err=True)


LIST_COLUMNS = [
    "assembly_id",
    "assembled_at",
    "scenario",
    "runtime_kind",
    "participant_id",
    "policy_version",
    "included_count",
    "omitted_count",
    "assembled_tokens",
    "baseline_tokens",
]


@cli.command("list")
@db_option
@click.option("--filter", "filter_expr", metavar="EXPR", help="e.g. 'scenario:incident policy:v5 reason:stale'")
@click.option("--sort", default="assembled_at", show_default=True, help="Column to sort by.")
@click.option("--desc", is_flag=True, help="Sort descending.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many rows.")
@json_option
def list_cmd(db: str | None, filter_expr: str | None, sort: str, desc: bool, limit: int | None, as_json: bool) -> None:
    """List recorded requests (context assemblies)."""
    from ingest.filters import parse_filter

    flt = parse_filter(filter_expr)
    with _open_store(db) as store:
        table = store.list_assemblies(flt, sort=sort, descending=desc, limit=limit)
        total = store.count_assemblies(None)
        matched = store.count_assemblies(flt)
    rows = _rows(table)
    if as_json:
        emit_json(rows)
        return
    print_table(rows, LIST_COLUMNS, max_width=36)
    click.echo(f"{len(rows)} shown, {matched} of {total} requests match")


RECORD_FIELDS_INCLUDED = ["record_kind", "record_id", "position", "rendering", "reason_code", "policy_family", "tokens"]
RECORD_FIELDS_OMITTED = ["record_kind", "record_id", "reason_code", "policy_family", "detail", "tokens"]


@cli.command()
@click.argument("assembly_id")
@db_option
@reveal_option
@json_option
def show(assembly_id: str, db: str | None, reveal: bool, as_json: bool) -> None:
    """What one request put in the prompt, and what it left out and why."""
    with _open_store(db) as store:
        assembly = store.assembly(assembly_id)
        records = _rows(store.assembly_records(assembly_id))
        privacy = {(r["record_kind"], r["record_id"]): r.get("privacy_class") for r in _rows(store.record_privacy(assembly_id))}
    if not reveal:
        _mask_labels(records, privacy)
    included = [{k: r[k] for k in RECORD_FIELDS_INCLUDED + ["label"] if k in r} for r in records if r["decision"] == "included"]
    omitted = [{k: r[k] for k in RECORD_FIELDS_OMITTED + ["label"] if k in r} for r in records if r["decision"] == "omitted"]
    if as_json:
        emit_json({"assembly": assembly, "included": included, "omitted": omitted})
        return
    click.echo(
        f"assembly {_vis(assembly_id)}  {_vis(assembly.get('runtime_kind'))}  participant {_vis(assembly.get('participant_id'))}"
        f"  policy {_vis(assembly.get('policy_version'))}  {_vis(assembly.get('provider'))}/{_vis(assembly.get('model'))}"
    )
    click.echo(
        f"tokens {assembly.get('assembled_tokens')} of budget {assembly.get('token_budget')}"
        f" (history replay would send {assembly.get('baseline_tokens')})  tags {_vis(assembly.get('tags'))}"
    )
    click.echo(f"\nincluded ({len(included)}), in prompt order:")
    print_table(included, RECORD_FIELDS_INCLUDED + ["label"])
    click.echo(f"\nomitted ({len(omitted)}):")
    print_table(omitted, RECORD_FIELDS_OMITTED)


def _mask_labels(rows: list[dict[str, Any]], privacy: dict[tuple[str, str], str | None]) -> None:
    """Labels quote record content: mask restricted classes and secret-looking values."""
    from replay.render import mask_value

    for r in rows:
        if r.get("label") is not None:
            r["label"] = mask_value(r["label"], privacy.get((r["record_kind"], r["record_id"])), False)


@cli.command()
@click.argument("assembly_id")
@click.argument("record_id")
@db_option
@reveal_option
@json_option
def why(assembly_id: str, record_id: str, db: str | None, reveal: bool, as_json: bool) -> None:
    """Why RECORD_ID was (or was not) in ASSEMBLY_ID's prompt, with its provenance."""
    from replay.explain import explain
    from replay.render import mask_value

    with _open_store(db) as store:
        assembly = store.assembly(assembly_id)
        rec = store.record_decision(assembly_id, record_id)
        record = store.record(rec["record_kind"], record_id)
        decisions = _rows(store.policy_decisions(assembly_id, record_id))
        provenance = store.provenance(rec["record_kind"], record_id)
    sentence = explain(assembly, rec, record, decisions, provenance)
    for link in provenance:  # each link is masked by its own record's privacy class
        link["label"] = mask_value(link.get("label"), link.get("privacy_class"), reveal)
    out = {
        "assembly_id": assembly_id,
        "record_kind": rec["record_kind"],
        "record_id": record_id,
        "decision": rec["decision"],
        "rendering": rec.get("rendering"),
        "reason_code": rec["reason_code"],
        "policy_family": rec["policy_family"],
        "detail": rec.get("detail"),
        "tokens": rec.get("tokens"),
        "explanation": sentence,
        "decisions": decisions,
        "provenance": provenance,
    }
    if as_json:
        emit_json(out)
        return
    click.echo(_vis(sentence))
    click.echo("\ndecision trace:")
    print_table(decisions, ["step", "policy_family", "outcome", "reason_code", "detail"], max_width=70)
    click.echo("\nprovenance:")
    for link in provenance:
        mark = "✗ missing " if link.get("broken") else ""
        indent = "  " * int(link.get("depth", 0))
        click.echo(f"{indent}{mark}{_vis(link['kind'])} {_vis(link['id'])}  {_vis(link.get('label'))}")


@cli.command()
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Folder to write the export to.")
@click.option("--seed", default=7, show_default=True, help="Random seed (same seed, same bytes).")
@click.option("--scale", type=click.IntRange(min=1), default=None, help="Write N synthetic assemblies instead of the stories.")
def sample(out_dir: Path, seed: int, scale: int | None) -> None:
    """Write the sample export (the stories), or a large synthetic one with --scale."""
    from replay.sample_export import write_sample

    path = write_sample(out_dir, seed=seed, scale=scale)
    click.echo(f"wrote sample export to {path}")


# ----------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> None:
    """Console entry point: turn every known error into one line and an exit code."""
    try:
        cli.main(args=argv, prog_name="contextlens", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except ContextlensError as err:
        from replay.render import visible_text

        click.echo(f"contextlens: error: {visible_text(str(err))}", err=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as err:  # a bug of ours: still one line, the traceback on request
        if os.environ.get("CONTEXTLENS_DEBUG"):
            raise
        from replay.render import visible_text

        click.echo(
            f"contextlens: internal error: {type(err).__name__}: {visible_text(str(err))}"
            " (set CONTEXTLENS_DEBUG=1 for the traceback)",
            err=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
