"""The commands that write or check the data itself: ``ingest`` (an export or transcript into
a store), ``sample`` (a sample export), ``bundle`` (an incident bundle), ``report tokens``
and ``lint`` (transcript mistakes and safety violations)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ingest.errors import ContextlensError, cut

from ..console import body, emit_json, progress_printer, stream_json_array, vis
from .options import (
    _Answers, _said, _warn, db_option, format_option, json_option, policies_option, reveal_option,
    shown_ids,
)


@click.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--db", "db", metavar="FILE", required=True, help="The store file to write.")
@format_option
@json_option
def ingest(source: Path, db: str, fmt: str | None, as_json: bool) -> None:
    """Validate SOURCE (an export folder or a transcript file) and load it into the store
    FILE, atomically."""
    from ingest.store import ingest as do_ingest

    from ..stores import export_for

    if not source.exists():
        raise ContextlensError(f"{source}: no such file or folder")
    adapt_warnings: list[str] = []
    export_dir = export_for(source, fmt, warn=adapt_warnings.append)
    result = do_ingest(export_dir, Path(db), progress=None if as_json else progress_printer())
    result.warnings[:0] = adapt_warnings
    if as_json:
        emit_json(
            {
                "export_id": shown_ids(result.export_id),
                "db": str(result.db_path),
                "changed": result.changed,
                "rows": result.rows,
                "warnings": [_said(w) for w in result.warnings],
            }
        )
        return
    verb = "ingested" if result.changed else "already up to date:"
    total = sum(result.rows.values())
    click.echo(f"{verb} export {vis(cut(shown_ids(result.export_id)))} into {result.db_path} ({total} rows)")
    for w in result.warnings:
        _warn(w)


@click.command()
@db_option
@click.option("--filter", "filter_expr", metavar="EXPR", help="Only the requests matching this filter.")
@reveal_option
@json_option
def lint(db: str | None, filter_expr: str | None, reveal: bool, as_json: bool) -> None:
    """Find transcript mistakes and safety violations in recorded assemblies.

    Exits 1 when any finding is an error, 0 otherwise. Rules: docs/lint.md.
    """
    from ingest.filters import parse_filter

    flt = parse_filter(filter_expr) if filter_expr else None
    counts = {"error": 0, "warning": 0, "info": 0}

    def counted(findings: Any) -> Any:
        for f in findings:
            counts[f["severity"]] = counts.get(f["severity"], 0) + 1
            yield f

    # each finding is printed as it is taken (no second copy of them all as one JSON text)
    with _Answers(db) as answers:
        findings = counted(answers.lint_stream(flt, reveal=reveal))
        if as_json:
            stream_json_array(([shown_ids(f, reveal)] for f in findings))
        else:
            for f in findings:
                f = shown_ids(f, reveal)
                where = f.get("assembly_id") or f.get("message_id") or "-"
                record = f"{f.get('record_kind') or ''} {f.get('record_id') or ''}".strip()
                click.echo(f"{f['severity']:<7}  {vis(f['rule'])}  {vis(where)}  {vis(record)}  {body(f['detail'])}")
            click.echo(f"{counts['error']} errors, {counts['warning']} warnings, {counts['info']} notes")
    if counts["error"]:
        sys.exit(1)


@click.group()
def report() -> None:
    """Reports over the whole store."""


@report.command("tokens")
@db_option
@json_option
def report_tokens(db: str | None, as_json: bool) -> None:
    """Per scenario: history-replay (baseline) tokens, assembled tokens and the reduction."""
    with _Answers(db) as answers:
        rows = [r.to_json() for r in answers.token_report()]
    if as_json:
        emit_json(rows)
        return
    console = None
    if not sys.stdout.isatty():
        from rich.console import Console

        # piped or to a file: no terminal to fit (rich would assume 80 columns), so the
        # table is printed at its natural width, every scenario name whole
        console = Console(highlight=False, soft_wrap=False, width=1 << 16)
    from ..report import print_token_report

    print_token_report(rows, console)


@click.command()
@click.argument("assembly_id")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), metavar="DIR",
              help="The folder to write the bundle to (new or empty).")
@click.option("--policy", "policy_version", default=None, metavar="V",
              help="Also replay the request under V: the report gets the diff and why on both sides.")
@click.option("--force", is_flag=True, help="Replace DIR when it holds an earlier bundle or export.")
@db_option
@policies_option
@reveal_option
@json_option
def bundle(assembly_id: str, out_dir: Path, policy_version: str | None, force: bool,
           db: str | None, policies_dir: str | None, reveal: bool, as_json: bool) -> None:
    """Write an incident bundle of ASSEMBLY_ID to DIR: the request with the rows, blobs and
    policies it needs (an export: `contextlens list --db DIR`, `open DIR`), masked unless
    --reveal, and report.md (what was sent and omitted and why, safety, the replay under
    --policy, the commands that reproduce it)."""
    from readmodel.bundle import write_bundle

    with _Answers(db, policies_dir) as answers:
        result = write_bundle(answers, assembly_id, out_dir, policy=policy_version,
                              reveal=reveal, force=force)
    if as_json:
        emit_json(shown_ids(result.to_json(), reveal))
        return
    rows = sum(result.rows.values())
    click.echo(f"wrote bundle of {vis(shown_ids(assembly_id, reveal))} to {vis(str(result.out))} ({rows} rows, "
               f"{result.blobs} blobs, policies {vis(', '.join(result.policies) or 'none')})")
    click.echo("revealed: restricted content and secrets are in it" if result.revealed
               else f"masked: {result.masked} values (--reveal keeps them)")
    click.echo(f"report: {vis(str(result.report))}")


@click.command()
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Folder to write the export to.")
@click.option("--seed", default=7, show_default=True, help="Random seed (same seed, same bytes).")
@click.option("--scale", type=click.IntRange(min=1), default=None, help="Write N synthetic assemblies instead of the stories.")
@click.option("--drift", type=click.FloatRange(0.0, 1.0), default=None, metavar="FRACTION",
              help="With --scale: the fraction of assemblies recorded with drift on purpose (default 0.01).")
@click.option("--force", is_flag=True, help="Replace what the --out folder holds.")
def sample(out_dir: Path, seed: int, scale: int | None, drift: float | None, force: bool) -> None:
    """Write the sample export (the stories), or a large synthetic one with --scale whose
    recorded rows are the reference assembler's, a known fraction drifted on purpose."""
    import math

    from replay.sample_export import DEFAULT_DRIFT, write_sample, write_scale

    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise ContextlensError(f"{out_dir}: exists and is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        # as bundle and compare --out: what is there is not replaced unless asked
        raise ContextlensError(f"{out_dir}: folder exists and is not empty (--force replaces it)")
    if drift is not None and math.isnan(drift):
        raise ContextlensError("--drift must be a fraction between 0 and 1, not nan")

    if scale is None:
        if drift is not None:
            raise ContextlensError("--drift needs --scale (the story sample has its own drift story)")
        path = write_sample(out_dir, seed=seed)
        click.echo(f"wrote sample export to {path}")
        return
    fraction = DEFAULT_DRIFT if drift is None else drift
    result = write_scale(out_dir, scale, seed=seed, drift=fraction)
    click.echo(f"wrote sample export to {out_dir}")
    n = len(result.drifted_ids)
    click.echo(f"drifted on purpose: {n} of {scale} assemblies ({n / scale:.2%}; --drift {fraction:g}),"
               f" listed in {out_dir / 'drift.json'}")
