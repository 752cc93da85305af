"""The commands that replay recorded assemblies under a policy: ``replay`` and ``diff`` (one
request), ``bisect`` (the version that changed a record), ``verify`` (every request under its
own version) and ``compare`` (every request under two)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click


from ..console import (
    JsonResults, budget_sentence, clear_progress, emit_json, json_default, print_compare, print_diff, print_table,
    progress_printer, vis,
)
from .options import (
    RECORD_FIELDS_INCLUDED, RECORD_FIELDS_OMITTED, LazyChoice, _Answers, _engine_answers,
    db_option, engine_options, json_option, policies_option, reveal_option, shown_ids,
    workers_option,
)


def _record_kinds() -> tuple[str, ...]:
    from ingest.contract import RECORD_TABLES

    return tuple(RECORD_TABLES)


@click.command()
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
        "budget": result.budget.to_json() if result.budget is not None else None,
        "included": [{k: r.get(k) for k in RECORD_FIELDS_INCLUDED} for r in result.included],
        "omitted": [{k: r.get(k) for k in RECORD_FIELDS_OMITTED} for r in result.omitted],
    }
    out = shown_ids(out, reveal)
    if as_json:
        emit_json(out)
        return
    click.echo(
        f"replay of {vis(out['assembly_id'])} under {vis(policy_version)}: {out['assembled_tokens']} tokens "
        f"(history replay {out['baseline_tokens']}), selection {out['selection_hash'][:16]}…"
    )
    click.echo(budget_sentence(out["budget"]))
    click.echo(f"\nincluded ({len(out['included'])}), in prompt order:")
    print_table(out["included"], RECORD_FIELDS_INCLUDED)
    click.echo(f"\nomitted ({len(out['omitted'])}):")
    print_table(out["omitted"], RECORD_FIELDS_OMITTED)


@click.command()
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
    out = shown_ids(out, reveal)
    if as_json:
        emit_json(out)
        return
    print_diff(out)


@click.command()
@click.argument("assembly_id")
@click.argument("record_id")
@click.option("--good", default=None, metavar="V1",
              help="The version to start from (default: the registry's first).")
@click.option("--bad", default=None, metavar="V2",
              help="The version whose state is the bad one (default: the recorded version).")
@click.option("--kind", "record_kind", default=None,
              type=LazyChoice(_record_kinds),  # the contract's record kinds
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
        emit_json(shown_ids(result.to_json()))  # bisect has no --reveal: its ids are masked
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
    click.echo(f"bisect {vis(result.record_kind)} {vis(shown_ids(result.record_id))} of "
               f"{vis(shown_ids(result.assembly_id))}, {vis(result.good)} .. {vis(result.bad)} "
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


@click.command()
@db_option
@policies_option
@click.option("--filter", "filter_expr", metavar="EXPR", help="Only the requests matching this filter.")
@click.option("--strict", is_flag=True, help="Also fail (exit 1) when a request cannot be replayed.")
@workers_option
@engine_options
@json_option
def verify(db: str | None, policies_dir: str | None, filter_expr: str | None, strict: bool,
           workers: int | None, engine: str, address: str | None, exports: tuple[str, ...],
           as_json: bool) -> None:
    """Replay every recorded assembly under its own policy version and compare it with the
    recorded rows: faithful, drifted, inconsistent or not replayable.

    Exits 1 when any drifted or is inconsistent (with --strict, also when any is not
    replayable), 0 otherwise. Details: docs/cli.md.
    """
    from ingest.filters import parse_filter

    flt = parse_filter(filter_expr) if filter_expr else None
    progress = None if as_json else progress_printer("requests")
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
        # verify has no --reveal: the ids of every verdict are masked
        found = lambda item: out.add(shown_ids(item.to_json()))  # noqa: E731
    else:
        found = print_verdict if progress is None else _after_progress(print_verdict)
    stage = "verifying partitions (ray)" if engine == "ray" else "verifying"
    with _engine_answers(engine, db, exports, policies_dir, address) as answers:
        result = answers.verify(
            flt,
            progress=(lambda done, total: progress(stage, done, total)) if progress else None,
            on_verdict=found, workers=workers,
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
                       f"({vis(shown_ids(runtime))}, policy observed): its own policy is not modelled yet, "
                       "so they are counted, not replayed")
        click.echo(f"checked {result.checked}: {result.faithful} faithful, {result.drifted} drifted, "
                   f"{result.inconsistent} inconsistent, {result.not_replayable} not replayable")
    if result.failed(strict):
        sys.exit(1)


def _compare_scope(answers: Any, a: str, b: str, flt: Any) -> Any:
    """The filter a compare runs over (readmodel.applicable): in a store of an export and
    transcripts, the requests of A's and B's family; what was left out goes to stderr."""
    from readmodel.applicable import compare_scope

    scope = compare_scope(answers, a, b, flt)
    if scope.note:
        click.echo(f"note: {vis(scope.note)}", err=True)
    return scope.flt


def _after_progress(show: Any) -> Any:
    def shown(item: Any) -> None:
        clear_progress()
        show(item)
    return shown


def _print_verdict(item: Any) -> None:
    head = (f"{item.verdict.upper().replace('_', ' ')} {vis(shown_ids(item.assembly_id))} "
            f"(policy {vis(shown_ids(item.policy_version))}, "
            f"assembler {vis(shown_ids(item.assembler_version))})")
    if item.problems:
        head += f": {'; '.join(item.problems)}"
        if item.hash_mismatch:
            head += f" (stored {vis(item.recorded_hash[:12])}…, rows {item.recomputed_hash[:12]}…)"
    elif not item.replayable:
        head += f": no policy {vis(item.policy_version)} to replay it"
    else:
        head += f": {item.differences()}"
    click.echo(head)
    for group, title in (("in_recording", "sent"), ("regressions", "the replay would expose"),
                         ("fixes", "the replay would withhold")):
        found = getattr(item.safety, group)
        if found:
            listed = ", ".join(f"{vis(f['finding'])} {vis(shown_ids(f['record_id']))}"
                               for f in found)
            click.echo(f"  safety, {title}: {listed}")
    for rec in item.records:
        fields = "; ".join(f"{f.field} {_shown(f.recorded)} → {_shown(f.replayed)}"
                           for f in rec.fields)
        click.echo(f"  {vis(rec.record_kind)} {vis(shown_ids(rec.record_id))}: {fields}")


def _shown(value: Any) -> str:
    """A recorded or replayed value on a verify line ("-" for none, e.g. no such record)."""
    return "-" if value is None else vis(str(value))


@click.command()
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
@workers_option
@engine_options
@reveal_option
@json_option
def compare(a: str, b: str, db: str | None, policies_dir: str | None, filter_expr: str | None,
            out_file: Path | None, force: bool, strict: bool, workers: int | None, engine: str,
            address: str | None, exports: tuple[str, ...], reveal: bool, as_json: bool) -> None:
    """Replay every request (or those matching --filter) under policy A and policy B and
    aggregate what changes, safety regressions first. A is a version or `recorded` (the
    recorded assemblies). Exits 1 with --strict when B regresses safety.

    Without --workers, one process per free CPU: the CPUs this process may use, less the
    busier of the load average over the last minute and what other programs use right
    now, rounded (2 CPUs with another program keeping one busy: 1 process). Details:
    docs/cli.md."""
    from ingest.filters import parse_filter

    flt = parse_filter(filter_expr) if filter_expr else None
    progress = progress_printer("requests")
    stage = "comparing partitions (ray)" if engine == "ray" else "comparing"
    with _engine_answers(engine, db, exports, policies_dir, address) as answers:
        if engine != "ray":  # the requests A and B apply to; said when others are left out
            flt = _compare_scope(answers, a, b, flt)
        result = answers.compare(
            a, b, flt, out=out_file, force=force, reveal=reveal,
            workers=workers,
            progress=(lambda done, total: progress(stage, done, total)) if progress else None,
        )
    out = shown_ids(result.to_json(), reveal)
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
