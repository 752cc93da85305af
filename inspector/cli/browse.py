"""The commands that look at what was recorded: ``open`` and ``serve`` (the inspector, in the
terminal or a web browser), ``list``, ``show``, ``why`` and ``policies``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ingest.errors import ContextlensError

from ..console import (
    body, budget_sentence, emit_json, json_default, print_table, progress_printer, stream_json_array, stream_table, vis,
)
from ..stores import resolve_store
from .options import (
    RECORD_FIELDS_INCLUDED, RECORD_FIELDS_OMITTED, _Answers, _registry, _warn, db_option,
    format_option, json_option, policies_option, reveal_option, shown_ids,
)


def _run_app(
    path: str | None,
    reveal: bool,
    assembly: str | None,
    fmt: str | None = None,
    policies_dir: str | None = None,
    engine: str = "local",
    address: str | None = None,
    follow: bool = False,
) -> None:
    kwargs: dict[str, Any] = {"policies_dir": Path(policies_dir)} if policies_dir else {}
    if engine == "ray":  # the app's compare runs on Ray over PATH's Parquet export
        from readmodel.distributed import find_exports, require_ray

        from ..stores import bundled_export

        require_ray()
        source = Path(path) if path else bundled_export()
        if not (source / "manifest.json").is_file():
            raise ContextlensError(f"{source}: --engine ray opens an export folder (its "
                                   "Parquet files are what Ray reads), not a store or a transcript")
        kwargs.update(ray_exports=find_exports([source]), ray_address=address)
    elif address:
        raise ContextlensError("--address needs --engine ray")
    source = _transcript_named(path, fmt)
    if follow:
        if source is None:
            raise ContextlensError(
                f"{path}: --follow follows a transcript file, not a store or an export folder"
                if path else "--follow needs the transcript file to follow")
        db, kwargs["follower"] = _first_follow_store(source, fmt)
    else:
        db = resolve_store(path, progress_printer(), fmt=fmt, warn=_warn)
        from readmodel import open_model

        # a damaged or foreign file is one line here, not a traceback from the first worker
        open_model(db).close()
    if source is not None:
        kwargs.update(source_path=source, source_format=fmt)
    if policies_dir:  # fail on a bad registry before the screen takes over
        from readmodel import load_registry

        load_registry(policies_dir)
    from ..app import ContextLensApp

    app = ContextLensApp(db_path=db, reveal=reveal, initial_assembly=assembly, **kwargs)
    app.run()
    if app.return_code:  # the app ended on an error (Textual printed it): not a success
        raise SystemExit(app.return_code)


def _transcript_named(path: str | None, fmt: str | None) -> Path | None:
    """The transcript file ``path`` names, or None for the sample, a store or an export."""
    from ..stores import is_export_dir, is_store_file

    if path is None:
        return None
    p = Path(path)
    str(p).encode("utf-8")  # a name that is not UTF-8 is named before anything opens it
    if fmt == "export" or is_export_dir(p) or p.is_dir() or (fmt is None and is_store_file(p)):
        return None
    return p


def _first_follow_store(source: Path, fmt: str | None) -> tuple[Path, Any]:
    """The followed file's first store, and its follower. A file that holds no complete
    line yet (a journal ``collect`` has just started) is waited for."""
    import time

    from ingest.adapters.files import require_regular_file
    from ingest.follow import POLL_SECONDS, Follower

    from ..stores import cache_name, follow_dir

    if not source.exists():
        raise ContextlensError(f"{source}: no such file or folder")
    require_regular_file(source)
    follower = Follower(source, follow_dir(source), fmt, name=cache_name(source.name))
    said = False
    while True:
        update = follower.update()
        if update is not None:
            for w in update.warnings:
                _warn(w)
            return update.store, follower
        if not said:
            click.echo(f"waiting for {vis(str(source))} to hold a complete line "
                       "(Ctrl+C to stop)", err=True)
            said = True
        time.sleep(POLL_SECONDS)


@click.command("open")
@click.argument("path", required=False)
@click.option("--assembly", metavar="ID", help="Open this assembly directly.")
@format_option
@click.option("--policies", "policies_dir", metavar="DIR", help="Policy folder for replay (default: the bundled one).")
@reveal_option
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where the app's compare (C) runs. ray: on a Ray cluster over PATH, an "
                   "export folder (pip install 'contextlens[ray]').")
@click.option("--address", metavar="auto|ray://HOST:PORT",
              help="With --engine ray: the Ray cluster (default: a local instance).")
@click.option("--follow", is_flag=True,
              help="Keep PATH, a transcript still being written, in step: new requests show "
                   "as their lines are written (F in the app starts and stops it).")
def open_cmd(path: str | None, assembly: str | None, fmt: str | None, policies_dir: str | None,
             reveal: bool, engine: str, address: str | None, follow: bool) -> None:
    """Open the inspector on PATH: an export folder, a store file or a transcript
    (Claude Code, OpenAI chat, Anthropic Messages); default: the bundled sample."""
    if assembly:
        # Fail before the screen takes over if the id is unknown.
        from readmodel import open_model

        model = open_model(resolve_store(path, progress_printer(), fmt=fmt, warn=_warn))
        try:
            model.request(assembly)
        finally:
            model.close()
    _run_app(path, reveal=reveal, assembly=assembly, fmt=fmt, policies_dir=policies_dir,
             engine=engine, address=address, follow=follow)


@click.command()
@click.argument("path", required=False)
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True,
              help="The port to listen on.")
@click.option("--host", default="localhost", show_default=True,
              help="The interface to listen on (localhost: this machine only).")
@format_option
@click.option("--policies", "policies_dir", metavar="DIR", help="Policy folder for replay (default: the bundled one).")
def serve(path: str | None, port: int, host: str, fmt: str | None, policies_dir: str | None) -> None:
    """Serve the inspector on PATH (as `open` takes it) to a web browser, with
    textual-serve: each browser tab runs its own app. Masked as in the terminal; a reveal
    asks in the page and lasts for that tab. Open the URL it prints: its token is this
    run's, and the server refuses any request without it, or naming another host or site.
    Bundles are not written from the browser (contextlens bundle writes them)."""
    import os
    import shlex

    # the store is made (an export or transcript ingested) once, here, so a failure is one
    # line now and each tab opens it at once
    db = resolve_store(path, progress_printer(), fmt=fmt, warn=_warn)
    argv = [*_isolated_python(), "-m", "inspector.cli", "open", str(db.resolve())]
    if policies_dir:
        from readmodel import load_registry

        load_registry(policies_dir)
        argv += ["--policies", str(Path(policies_dir).resolve())]
    from ..served import SERVED_ENV
    from ..web import LocalServer

    # each tab's app inherits it (textual-serve copies this environment): no bundle is
    # written from the browser
    os.environ[SERVED_ENV] = "1"
    name = Path(path).name if path else "sample"
    server = LocalServer(shlex.join(argv), host=host, port=port, title=f"contextlens {name}",
                         listening=lambda url: click.echo(
                             f"contextlens: serving {name} on {url} (ctrl+c stops)"))
    try:
        server.serve()
    except OSError as err:  # the port is taken, the host is not this machine's, ...
        raise ContextlensError(f"cannot serve on {host}:{port}: {_bind_error(err)}") from None


def _isolated_python() -> list[str]:
    """The interpreter each tab's app runs with: this one, isolated from the working folder
    and PYTHONPATH, so a click.py (or an inspector/) lying where serve was started cannot
    replace a module of the app. This very interpreter rather than the `contextlens` script:
    it is the environment running serve, however serve was started (the script, -m, another
    one on PATH). -I, but keeping the user's site-packages when this process uses them (a
    `pip install --user`): they are installed packages, not the working folder. One line,
    exit 2, if the app cannot be imported that way (contextlens found only through the
    working folder or PYTHONPATH), rather than every tab ending at once."""
    import site
    import subprocess

    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    python = ([sys.executable, "-E", "-P"] if user_site and user_site in sys.path
              else [sys.executable, "-I"])
    check = subprocess.run([*python, "-c", "import inspector.cli"], capture_output=True,
                           text=True, stdin=subprocess.DEVNULL)
    if check.returncode != 0:
        why = (check.stderr.strip().splitlines() or ["no error shown"])[-1]
        raise ContextlensError(
            "cannot serve: the app does not import outside this folder and PYTHONPATH "
            f"(install contextlens, e.g. pip install -e .): {why}")
    return python


def _bind_error(err: OSError) -> str:
    """Why the port could not be listened on, in the system's words ("address already in
    use"), without aiohttp's "error while attempting to bind on address (...)" around it."""
    import errno
    import os

    if err.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
        return os.strerror(err.errno).lower()
    return str(err.strerror or err)


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


def _time_shown(row: dict[str, Any]) -> dict[str, Any]:
    """A list row whose time the log does not record (null) says so, as wide as a time
    (the first batch sets the column's width)."""
    if row.get("assembled_at") is None:
        from ingest.timefmt import NOT_RECORDED, TABLE_WIDTH

        row["assembled_at"] = NOT_RECORDED.ljust(TABLE_WIDTH)
    return row


# The zones whose times ``datetime.isoformat`` writes with ``+00:00``
_UTC_ZONES = frozenset({"UTC", "Etc/UTC", "+00:00"})


def _iso_times(column: Any) -> Any:
    """A UTC time column as the strings ``datetime.isoformat`` makes of its values (the
    JSON of a row: ``YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00``), columnar; None where that is
    not sure (another zone or unit, a year before 1000), so the caller converts the rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if not (pa.types.is_timestamp(kind) and kind.tz in _UTC_ZONES and kind.unit in ("s", "ms", "us")):
        return None
    if column.null_count == len(column):
        return None
    if pc.min(pc.year(column)).as_py() < 1000:
        return None  # strftime's %Y would not pad it to four digits
    # (Arrays only, no Python scalar: converting one makes pyarrow import pandas.)
    exact = column.cast(pa.timestamp("us", tz=kind.tz))
    seconds = pc.floor_temporal(exact, unit="second")
    whole = pc.strftime(seconds.cast(pa.timestamp("s", tz=kind.tz)), format="%Y-%m-%dT%H:%M:%S+00:00")
    # %S of a time in microseconds has the six digits of its fraction
    fraction = pc.strftime(exact, format="%Y-%m-%dT%H:%M:%S+00:00")
    return pc.if_else(pc.equal(exact, seconds), whole, fraction)


def _json_rows(table: Any) -> list[dict[str, Any]]:
    """``pylist(table)`` as JSON will show it: times already written as ``isoformat`` does
    (columnar: no ``datetime`` made and formatted per row)."""
    from readmodel.rows import pylist

    for i, name in enumerate(table.column_names):
        shown = _iso_times(table.column(i))
        if shown is not None:
            table = table.set_column(i, name, shown)
    return pylist(table)


@click.command("list")
@db_option
@click.option("--filter", "filter_expr", metavar="EXPR", help="e.g. 'scenario:incident policy:v5 reason:stale'")
@click.option("--sort", default="assembled_at", show_default=True, help="Column to sort by.")
@click.option("--desc", is_flag=True, help="Sort descending.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many rows.")
@reveal_option
@json_option
def list_cmd(db: str | None, filter_expr: str | None, sort: str, desc: bool, limit: int | None,
             reveal: bool, as_json: bool) -> None:
    """List recorded requests (context assemblies)."""
    from ingest.filters import parse_filter

    from readmodel.rows import pylist
    from readmodel.times import untimed_requests

    flt = parse_filter(filter_expr)
    with _Answers(db) as answers:
        # printed as the store streams it: the first rows appear at once, and memory stays
        # that of one batch however large the store (``pylist``: rows without pandas)
        tables = answers.request_stream(flt, sort=sort, descending=desc, limit=limit, reveal=reveal)
        if as_json:
            stream_json_array(_json_rows(t) for t in tables)
            return
        batches = (pylist(t) for t in tables)
        shown = stream_table(([_time_shown(r) for r in rows] for rows in batches),
                             LIST_COLUMNS, max_width=36)
        matched, total = answers.request_counts(flt)
        untimed = untimed_requests(answers, flt)
    click.echo(f"{shown} shown, {matched} of {total} requests match")
    if untimed:  # their made-up times are kept for the order, never shown
        line = (f"time not recorded for {'all of them' if untimed == matched else f'{untimed} of them'}"
                " (the log records none)")
        if sort == "assembled_at":
            line += ": listed in the log's order" + (", after the timed ones" if untimed < matched else "")
        click.echo(line)


@click.command()
@click.argument("assembly_id")
@db_option
@policies_option
@reveal_option
@json_option
def show(assembly_id: str, db: str | None, policies_dir: str | None, reveal: bool,
         as_json: bool) -> None:
    """What one request put in the prompt, and what it left out and why."""
    from readmodel.times import recorded_time

    with _Answers(db, policies_dir) as answers:
        view = answers.assembly(assembly_id, reveal=reveal)
    assembly = shown_ids(dict(view.request), reveal)
    assembly["assembled_at"] = recorded_time(view.request)  # a made-up time is not shown
    included = shown_ids([{k: r[k] for k in RECORD_FIELDS_INCLUDED + ["label"]}
                          for r in view.included().to_pylist()], reveal)
    omitted = shown_ids([{k: r[k] for k in RECORD_FIELDS_OMITTED + ["label"]}
                         for r in view.omitted().to_pylist()], reveal)
    tokens = view.tokens
    if as_json:
        emit_json({"assembly": assembly, "tokens": tokens.to_json(),
                   "budget": view.budget.to_json() if view.budget is not None else None,
                   "included": included, "omitted": omitted,
                   "unattributed_tokens": tokens.unattributed})
        return
    click.echo(
        f"assembly {vis(assembly.get('assembly_id'))}  {vis(assembly.get('runtime_kind'))}  participant {vis(assembly.get('participant_id'))}"
        f"  policy {vis(assembly.get('policy_version'))}  {vis(assembly.get('provider'))}/{vis(assembly.get('model'))}"
    )
    budget = view.budget
    # a runtime policy (a transcript's) keeps no budget: its recorded token_budget is the
    # model's context window, and is named so
    of = (f"of the model's context window {tokens.token_budget}"
          if budget is not None and not budget.has_budget else f"of budget {tokens.token_budget}")
    click.echo(
        f"tokens {tokens.assembled_tokens} {of}"
        f" (history replay would send {tokens.baseline_tokens})  tags {vis(assembly.get('tags'))}"
    )
    click.echo(budget_sentence(budget.to_json() if budget is not None else None))
    if tokens.recorded:
        click.echo(f"recorded input {tokens.assembled_tokens:,} tokens; {tokens.unattributed_sentence()}")
    click.echo(f"\nincluded ({len(included)}), in prompt order:")
    print_table(included, RECORD_FIELDS_INCLUDED + ["label"])
    click.echo(f"\nomitted ({len(omitted)}):")
    print_table(omitted, RECORD_FIELDS_OMITTED)


@click.command()
@click.argument("assembly_id")
@click.argument("record_id")
@click.option("--policy", "policy_version", default=None, metavar="V",
              help="Explain the record in a replay under V (default: the recording).")
@db_option
@policies_option
@reveal_option
@json_option
def why(assembly_id: str, record_id: str, policy_version: str | None, db: str | None,
        policies_dir: str | None, reveal: bool, as_json: bool) -> None:
    """Why RECORD_ID was (or was not) in ASSEMBLY_ID's prompt, with its provenance."""
    from readmodel import RECORDED

    with _Answers(db, policies_dir) as answers:
        answer = answers.why(assembly_id, record_id, side=policy_version or RECORDED, reveal=reveal)
    if as_json:
        emit_json(shown_ids(answer.to_json(), reveal))
        return
    click.echo(body(answer.sentence))
    if answer.budget is not None:
        click.echo(f"\nbudget ({vis(answer.policy_version)}): {vis(answer.budget.sentence())}")
    click.echo("\ndecision trace:")
    print_table(shown_ids([dict(t) for t in answer.trace], reveal),
                ["step", "policy_family", "outcome", "reason_code", "detail"], max_width=70)
    click.echo("\nprovenance:")
    for link in answer.provenance:
        mark = "✗ missing " if link.broken else ""
        indent = "  " * link.depth
        click.echo(f"{indent}{mark}{vis(link.kind)} {vis(shown_ids(link.id, reveal))}  "
                   f"{body(link.label)}")


@click.command()
@policies_option
@click.option("--db", "db", metavar="FILE",
              help="Only the policy families that apply to this store's requests (a store "
                   "file, an export folder or a transcript), with their request counts.")
@json_option
def policies(policies_dir: str | None, db: str | None, as_json: bool) -> None:
    """List policy versions, their descriptions and what each changes from its parent."""
    from readmodel import ReadModel

    if db is not None:
        _applicable_policies(db, policies_dir, as_json)
        return
    model = ReadModel(None, _registry(policies_dir))  # type: ignore[arg-type]
    out = [p.to_json() for p in model.policies()]
    runtimes = [p.to_json() for p in model.runtime_policies()]
    if as_json:
        emit_json(out + runtimes)
        return
    for p in out:
        parent = f" (extends {p['extends']})" if p["extends"] else ""
        click.echo(f"{vis(p['version'])}{parent}: {vis(p['description'])}")
        for c in p["changes"]:
            was, now = (json.dumps(v, default=json_default) for v in (c["parent"], c["value"]))
            click.echo(f"    {vis(c['key'])}: {vis(was)} -> {vis(now)}")
    click.echo("\nruntime policies (transcripts; VERSION or VERSION:key=value,...):")
    for r in runtimes:
        click.echo(f"{vis(r['version'])}: {vis(r['description'])}")
        for c in r["changes"]:
            default = "as recorded" if c["parent"] is None else json.dumps(c["parent"])
            click.echo(f"    {vis(c['key'])} (default {vis(default)}): {vis(c['value'])}")


def _applicable_policies(db: str, policies_dir: str | None, as_json: bool) -> None:
    """``policies --db``: the families of the store's requests (readmodel.applicable)."""
    from readmodel.applicable import store_policies

    with _Answers(db, policies_dir) as answers:
        found = store_policies(answers)
    if as_json:
        emit_json(found.to_json())
        return
    for f in found.families:
        recorded = ", ".join(f"{vis(v)} {n}" for v, n in f.recorded)
        click.echo(f"{f.requests} request{'s' if f.requests != 1 else ''} recorded under "
                   f"{recorded}: replay under {vis(f.offer())}")
    if found.not_modelled:
        click.echo(f"{found.not_modelled} request{'s' if found.not_modelled != 1 else ''} "
                   "recorded under observed: no policy version replays them")
    if not found.families and not found.not_modelled:
        click.echo("no requests")
