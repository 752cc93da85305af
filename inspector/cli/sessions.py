"""``contextlens sessions``: the agent sessions on this machine, found where each runtime
writes them (``ingest.sessions``), newest first; ``contextlens open PATH`` opens one."""

from __future__ import annotations

import click

from ingest.text import clip
from ingest.timefmt import table_time

from ..console import emit_json, print_table, progress_printer, vis
from ..stores import resolve_store
from .options import LazyChoice, _warn, json_option, reveal_option

PROJECT_WIDTH = 40  # a project folder, cut in the table (the path is printed whole)
COLUMNS = ["last written (UTC)", "started (UTC)", "runtime", "requests", "size", "project", "first prompt", "path"]


def _runtimes() -> list[str]:
    from ingest.sessions import RUNTIMES

    return list(RUNTIMES)


@click.command("sessions")
@click.option("--runtime", type=LazyChoice(_runtimes), default=None,
              help="Only this runtime's sessions (the format that reads them).")
@reveal_option
@json_option
def sessions(runtime: str | None, reveal: bool, as_json: bool) -> None:
    """The agent sessions on this machine, newest first: Claude Code (its projects folder,
    honouring CLAUDE_CONFIG_DIR), Codex CLI (CODEX_HOME), Gemini CLI (GEMINI_CLI_HOME),
    inspect_ai (INSPECT_LOG_DIR, else ./logs) and mini-swe-agent's last run. Open one with
    `contextlens open PATH`."""
    from readmodel import local_sessions
    from readmodel.sessions import size_text

    found = local_sessions(runtime=runtime, reveal=reveal)
    for note in found.notes:
        _warn(note)
    if as_json:
        emit_json([row.to_json() for row in found.rows])
        return
    if not found.rows:
        click.echo("no agent sessions found; looked in " + "; ".join(vis(p) for p in found.looked_in))
        return
    table = [{
        "last written (UTC)": table_time(row.last_written),
        "started (UTC)": table_time(row.started),
        "runtime": row.runtime,
        "requests": "-" if row.requests is None else f"{row.requests:,}",
        "size": size_text(row.size),
        "project": clip(vis(row.project), PROJECT_WIDTH),
        "first prompt": row.first_prompt,
        "path": row.path,
    } for row in found.rows]
    # the path is the column to copy: printed whole; the rest are already one line and cut
    print_table(table, COLUMNS, max_width=1 << 16)
    n = len(found.rows)
    masked = f" ({found.masked} values masked; --reveal shows them)" if found.masked else ""
    click.echo(f"{n} session{'s' if n != 1 else ''}{masked}; open one with: contextlens open PATH")


def run_sessions_app() -> None:
    """``contextlens --sessions``: the inspector on the bundled sample, the Sessions screen
    over it; enter on a session opens it in place of the sample."""
    from ..app import ContextLensApp

    app = ContextLensApp(db_path=resolve_store(None, progress_printer(), warn=_warn),
                         open_sessions=True)
    app.run()
    if app.return_code:  # the app ended on an error (Textual printed it): not a success
        raise SystemExit(app.return_code)
