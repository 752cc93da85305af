"""The ``contextlens`` command line. Every answer the app gives also exists here, as text
for people and as ``--json`` for scripts.

Errors reach the user as one line on stderr and a non-zero exit code (2 for bad input or an
unknown id), never a traceback. Content from logs is escaped before it is printed.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click

from ingest.errors import ContextlensError, cut

from ..console import (
    JsonResults, body, clear_progress, emit_json, json_default, print_compare, print_diff, print_table,
    progress_printer, stream_json_array, vis,
)
from ..report import print_token_report
from .browse import _run_app, list_cmd, open_cmd, policies, serve, show, why
from .options import (
    _TYPED, RECORD_FIELDS_INCLUDED, RECORD_FIELDS_OMITTED, _Answers, _engine_answers,
    _said, _warn, db_option, engine_options, format_option, json_option, policies_option,
    reveal_option,
)

# ----------------------------------------------------------------------------- commands


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="contextlens")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Inspect and replay LLM context assembly.

    With no command, opens the inspector on the bundled sample.
    """
    if ctx.invoked_subcommand is None:
        _run_app(None, reveal=False, assembly=None)


for _command in (open_cmd, serve, list_cmd, show, why, policies):
    cli.add_command(_command)


@cli.command()
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
                "export_id": result.export_id,
                "db": str(result.db_path),
                "changed": result.changed,
                "rows": result.rows,
                "warnings": [_said(w) for w in result.warnings],
            }
        )
        return
    verb = "ingested" if result.changed else "already up to date:"
    total = sum(result.rows.values())
    click.echo(f"{verb} export {vis(cut(result.export_id))} into {result.db_path} ({total} rows)")
    for w in result.warnings:
        _warn(w)


@cli.command()
@click.argument("assembly_id")
@click.option("--policy", "policy_version", required=True, metavar="V", help="Policy version to replay under.")
@db_option
@policies_option
@reveal_option
@json_option
def replay(assembly_id: str, policy_version: str, db: str | None, policies_dir: str | None,
           reveal: bool, as_json: bool) -> None:
    """Re-run the assembly of ASSEMBLY_ID under policy V (no model call)."""
    with _Answers(db, policies_dir) as answers:
        result = answers.replay(assembly_id, policy_version, reveal=reveal)
    out = {
        "assembly_id": result.assembly_id,
        "policy_version": result.policy_version,
        "assembler": result.assembler,
        "selection_hash": result.selection_hash,
        "assembled_tokens": result.assembled_tokens,
        "baseline_tokens": result.baseline_tokens,
        "included": [{k: r.get(k) for k in RECORD_FIELDS_INCLUDED} for r in result.included],
        "omitted": [{k: r.get(k) for k in RECORD_FIELDS_OMITTED} for r in result.omitted],
    }
    if as_json:
        emit_json(out)
        return
    click.echo(
        f"replay of {vis(assembly_id)} under {vis(policy_version)}: {out['assembled_tokens']} tokens "
        f"(history replay {out['baseline_tokens']}), selection {out['selection_hash'][:16]}…"
    )
    click.echo(f"\nincluded ({len(out['included'])}), in prompt order:")
    print_table(out["included"], RECORD_FIELDS_INCLUDED)
    click.echo(f"\nomitted ({len(out['omitted'])}):")
    print_table(out["omitted"], RECORD_FIELDS_OMITTED)


@cli.command()
@click.argument("assembly_id")
@click.option("--policy", "policy_version", required=True, metavar="V", help="Policy version for side B.")
@click.option("--against", default="recorded", show_default=True, metavar="recorded|V2", help="Side A: the recorded assembly, or a replay under V2.")
@db_option
@policies_option
@reveal_option
@json_option
def diff(assembly_id: str, policy_version: str, against: str, db: str | None,
         policies_dir: str | None, reveal: bool, as_json: bool) -> None:
    """What changes for ASSEMBLY_ID under policy V, against the recording or another version."""
    with _Answers(db, policies_dir) as answers:
        out = answers.diff(assembly_id, policy_version, against=against, reveal=reveal).to_json()
    if as_json:
        emit_json(out)
        return
    print_diff(out)


@cli.command()
@click.argument("assembly_id")
@click.argument("record_id")
@click.option("--good", default=None, metavar="V1",
              help="The version to start from (default: the registry's first).")
@click.option("--bad", default=None, metavar="V2",
              help="The version whose state is the bad one (default: the recorded version).")
@click.option("--kind", "record_kind", default=None, metavar="KIND",
              help="The record's kind, when records of two kinds share the id.")
@db_option
@policies_option
@json_option
def bisect(assembly_id: str, record_id: str, good: str | None, bad: str | None,
           record_kind: str | None, db: str | None, policies_dir: str | None,
           as_json: bool) -> None:
    """At which policy version RECORD_ID of ASSEMBLY_ID first takes its --bad state (its
    decision, rendering and reason), and which policy key(s) changed to do it."""
    with _Answers(db, policies_dir) as answers:
        result = answers.bisect(assembly_id, record_id, good=good, bad=bad,
                                record_kind=record_kind)
    if as_json:
        emit_json(result.to_json())
        return
    _print_bisect(result)


def _state_words(state: Any) -> str:
    if state is None:
        return "not a candidate"
    if state["decision"] == "included":
        return f"included as {vis(state['rendering'])} ({vis(state['reason_code'])})"
    return f"{vis(state['decision'])} ({vis(state['reason_code'])})"


def _value(value: Any) -> str:
    return "(absent)" if value is None else vis(json.dumps(value, default=json_default))


def _print_bisect(result: Any) -> None:
    click.echo(f"bisect {vis(result.record_kind)} {vis(result.record_id)} of "
               f"{vis(result.assembly_id)}, {vis(result.good)} .. {vis(result.bad)} "
               "(registry order)")
    for step in result.tried:
        mark = "  <- first bad" if step["version"] == result.version else ""
        click.echo(f"  {vis(step['version']):<8} {_state_words(step['state'])}{mark}")
    click.echo(f"first bad version: {vis(result.version)} (after {vis(result.previous)})")
    if result.first_seen != result.version:
        click.echo(f"the state flips back and forth; chosen: {vis(result.rule)}")
    how = "alone" if result.alone else "only together"
    for k in result.keys:
        click.echo(f"flipped by {vis(k['key'])}: {_value(k['before'])} -> {_value(k['after'])}"
                   f" ({how})")
    chosen = {k["key"] for k in result.keys}
    others = [c for c in result.changed if c["key"] not in chosen]
    if others:
        click.echo("also changed, not flipping it alone: " + ", ".join(
            f"{vis(c['key'])} {_value(c['before'])} -> {_value(c['after'])}" for c in others))


@cli.command()
@db_option
@policies_option
@click.option("--filter", "filter_expr", metavar="EXPR", help="Only the requests matching this filter.")
@click.option("--strict", is_flag=True, help="Also fail (exit 1) when a request cannot be replayed.")
@engine_options
@json_option
def verify(db: str | None, policies_dir: str | None, filter_expr: str | None, strict: bool,
           engine: str, address: str | None, exports: tuple[str, ...], as_json: bool) -> None:
    """Replay every recorded assembly under its own policy version and compare it with the
    recorded rows: faithful, drifted, inconsistent or not replayable.

    Exits 1 when any drifted or is inconsistent (with --strict, also when any is not
    replayable), 0 otherwise. Details: docs/cli.md.
    """
    from ingest.filters import parse_filter

    flt = parse_filter(filter_expr) if filter_expr else None
    progress = None if as_json else progress_printer()
    # each non-faithful assembly is printed as it is found, the counts after them: the first
    # lines come at once and memory does not grow with the store
    observed: Counter[str] = Counter()  # runtime -> requests counted, not listed one by one

    def print_verdict(item: Any) -> None:
        if item.runtime_only:
            observed[item.assembler_version] += 1
        else:
            _print_verdict(item)

    if as_json:
        out = JsonResults("results")
        found = lambda item: out.add(item.to_json())  # noqa: E731
    else:
        found = print_verdict if progress is None else _after_progress(print_verdict)
    stage = "verifying partitions (ray)" if engine == "ray" else "verifying"
    with _engine_answers(engine, db, exports, policies_dir, address) as answers:
        result = answers.verify(
            flt,
            progress=(lambda done, total: progress(stage, done, total)) if progress else None,
            on_verdict=found,
        )
    if result.missing_policies:
        click.echo(vis(result.missing_policies), err=True)
    if as_json:
        counts = result.to_json()
        del counts["results"]
        out.close(counts)
    else:
        for runtime, n in sorted(observed.items()):
            click.echo(f"NOT REPLAYABLE {n} request{'s' if n != 1 else ''} recorded by a runtime "
                       f"({vis(runtime)}, policy observed): its own policy is not modelled yet, "
                       "so they are counted, not replayed")
        click.echo(f"checked {result.checked}: {result.faithful} faithful, {result.drifted} drifted, "
                   f"{result.inconsistent} inconsistent, {result.not_replayable} not replayable")
    if result.failed(strict):
        sys.exit(1)


def _after_progress(show: Any) -> Any:
    def shown(item: Any) -> None:
        clear_progress()
        show(item)
    return shown


def _print_verdict(item: Any) -> None:
    head = (f"{item.verdict.upper().replace('_', ' ')} {vis(item.assembly_id)} "
            f"(policy {vis(item.policy_version)}, assembler {vis(item.assembler_version)})")
    if item.problems:
        head += f": {'; '.join(item.problems)} (stored {vis(item.recorded_hash[:12])}…, " \
                f"rows {item.recomputed_hash[:12]}…)"
    elif not item.replayable:
        head += f": no policy {vis(item.policy_version)} to replay it"
    else:
        n = len(item.records)
        head += f": {n} record{'s' if n != 1 else ''} differ{'s' if n == 1 else ''}"
    click.echo(head)
    for group, title in (("in_recording", "sent"), ("regressions", "the replay would expose"),
                         ("fixes", "the replay would withhold")):
        found = getattr(item.safety, group)
        if found:
            listed = ", ".join(f"{vis(f['finding'])} {vis(f['record_id'])}" for f in found)
            click.echo(f"  safety, {title}: {listed}")
    for rec in item.records:
        fields = "; ".join(f"{f.field} {_shown(f.recorded)} → {_shown(f.replayed)}"
                           for f in rec.fields)
        click.echo(f"  {vis(rec.record_kind)} {vis(rec.record_id)}: {fields}")


def _shown(value: Any) -> str:
    """A recorded or replayed value on a verify line ("-" for none, e.g. no such record)."""
    return "-" if value is None else vis(str(value))


@cli.command()
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
            stream_json_array(([f] for f in findings))
        else:
            for f in findings:
                where = f.get("assembly_id") or f.get("message_id") or "-"
                record = f"{f.get('record_kind') or ''} {f.get('record_id') or ''}".strip()
                click.echo(f"{f['severity']:<7}  {vis(f['rule'])}  {vis(where)}  {vis(record)}  {body(f['detail'])}")
            click.echo(f"{counts['error']} errors, {counts['warning']} warnings, {counts['info']} notes")
    if counts["error"]:
        sys.exit(1)


@cli.command()
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@db_option
@policies_option
@click.option("--filter", "filter_expr", metavar="EXPR", help="Only the requests matching this filter.")
@click.option("--out", "out_file", metavar="FILE.parquet", type=click.Path(path_type=Path),
              help="Also write one row per request to this Parquet file.")
@click.option("--force", is_flag=True, help="Replace the --out file if it exists.")
@click.option("--strict", is_flag=True,
              help="Exit 1 when B has any safety regression against A (a gate before shipping B).")
@engine_options
@reveal_option
@json_option
def compare(a: str, b: str, db: str | None, policies_dir: str | None, filter_expr: str | None,
            out_file: Path | None, force: bool, strict: bool, engine: str, address: str | None,
            exports: tuple[str, ...], reveal: bool, as_json: bool) -> None:
    """Replay every request (or those matching --filter) under policy A and policy B and
    aggregate what changes, safety regressions first. A is a version or `recorded` (the
    recorded assemblies). Exits 1 with --strict when B regresses safety. Details:
    docs/cli.md."""
    from ingest.filters import parse_filter

    flt = parse_filter(filter_expr) if filter_expr else None
    progress = progress_printer()
    stage = "comparing partitions (ray)" if engine == "ray" else "comparing"
    with _engine_answers(engine, db, exports, policies_dir, address) as answers:
        result = answers.compare(
            a, b, flt, out=out_file, force=force, reveal=reveal,
            progress=(lambda done, total: progress(stage, done, total)) if progress else None,
        )
    out = result.to_json()
    if as_json:
        emit_json(out)
    else:
        print_compare(out)
        if out_file is not None:
            click.echo(f"\nwrote one row per request ({result.requests}) to {out_file}")
    if strict and result.regressions:
        if not as_json:
            click.echo(f"\n--strict: {result.regressions} safety regressions under {vis(b)}", err=True)
        sys.exit(1)


@cli.group()
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
    print_token_report(rows)


@cli.command()
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
        emit_json(result.to_json())
        return
    rows = sum(result.rows.values())
    click.echo(f"wrote bundle of {vis(assembly_id)} to {vis(str(result.out))} ({rows} rows, "
               f"{result.blobs} blobs, policies {vis(', '.join(result.policies) or 'none')})")
    click.echo("revealed: restricted content and secrets are in it" if result.revealed
               else f"masked: {result.masked} values (--reveal keeps them)")
    click.echo(f"report: {vis(str(result.report))}")


@cli.command()
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Folder to write the export to.")
@click.option("--seed", default=7, show_default=True, help="Random seed (same seed, same bytes).")
@click.option("--scale", type=click.IntRange(min=1), default=None, help="Write N synthetic assemblies instead of the stories.")
@click.option("--drift", type=click.FloatRange(0.0, 1.0), default=None, metavar="FRACTION",
              help="With --scale: the fraction of assemblies recorded with drift on purpose (default 0.01).")
def sample(out_dir: Path, seed: int, scale: int | None, drift: float | None) -> None:
    """Write the sample export (the stories), or a large synthetic one with --scale whose
    recorded rows are the reference assembler's, a known fraction drifted on purpose."""
    from replay.sample_export import DEFAULT_DRIFT, write_sample, write_scale

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


# ----------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> None:
    """Console entry point: turn every known error into one line and an exit code."""
    _TYPED[:] = list(argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="contextlens", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except ContextlensError as err:
        click.echo(f"contextlens: error: {_said(str(err))}", err=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as err:  # a bug of ours: still one line, the traceback on request
        if os.environ.get("CONTEXTLENS_DEBUG"):
            raise
        click.echo(
            f"contextlens: internal error: {type(err).__name__}: {_said(str(err))}"
            " (set CONTEXTLENS_DEBUG=1 for the traceback)",
            err=True,
        )
        sys.exit(1)

