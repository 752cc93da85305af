"""The ``contextlens`` command line. Every answer the app gives also exists here, as text
for people and as ``--json`` for scripts.

Errors reach the user as one line on stderr and a non-zero exit code (2 for bad input or an
unknown id), never a traceback. Content from logs is escaped before it is printed.

This module holds the group, its entry point ``main`` and the error handling; the commands
live in ``browse`` (open, serve, list, show, why, policies), ``replays`` (replay, diff,
bisect, verify, compare) and ``data`` (ingest, sample, bundle, report, lint), what they share
in ``options``; ``collect`` (the OTLP/HTTP receiver) has its own module.
"""

from __future__ import annotations

import os
import sys
from typing import Any

try:
    # Only click and the commands' definitions: what a command needs (DuckDB, Arrow, the
    # read model, Textual) is imported in its body, so `--help` and a typo answer at once
    import click

    from ingest.errors import ContextlensError

    from .browse import _run_app, list_cmd, open_cmd, policies, serve, show, why
    from .collect import collect
    from .data import bundle, ingest, lint, report, sample
    from .options import _TYPED, _said
    from .replays import bisect, compare, diff, replay, verify
    from .sessions import run_sessions_app, sessions
except KeyboardInterrupt:  # Ctrl+C while the command line starts: as main() says it
    sys.stderr.write("aborted\n")
    sys.exit(130)


class _Interrupted(Exception):
    """Ctrl+C during a command, taken from click: it would print a blank line first."""


class _Group(click.Group):
    """The group, with Ctrl+C handed to ``main`` as it is (see ``_Interrupted``)."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise _Interrupted from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted from None


def _query_interrupted(err: BaseException) -> bool:
    """DuckDB's answer to Ctrl+C during a query: the query stops with this RuntimeError
    (the KeyboardInterrupt is spent)."""
    return isinstance(err, RuntimeError) and str(err) == "Query interrupted"


def _aborted() -> None:
    """Ctrl+C: one line on stderr (over a progress bar or the terminal's ``^C``, on a
    terminal) and the shell's code for SIGINT."""
    from ..console import clear_progress

    clear_progress()
    click.echo("aborted", err=True)
    sys.exit(130)


@click.group(cls=_Group, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="contextlens")
@click.option("--sessions", "show_sessions", is_flag=True,
              help="Open the inspector on the agent sessions on this machine (enter opens one).")
@click.pass_context
def cli(ctx: click.Context, show_sessions: bool) -> None:
    """Inspect and replay LLM context assembly.

    With no command, opens the inspector on the bundled sample.
    """
    if show_sessions and ctx.invoked_subcommand is not None:
        raise click.UsageError("--sessions opens the inspector; it takes no command")
    if ctx.invoked_subcommand is None:
        if show_sessions:
            run_sessions_app()
        else:
            _run_app(None, reveal=False, assembly=None)


for _command in (open_cmd, serve, list_cmd, show, why, policies,
                 replay, diff, bisect, verify, compare,
                 ingest, sample, bundle, report, lint, sessions, collect):
    cli.add_command(_command)


# ----------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> None:
    """Console entry point: turn every known error into one line and an exit code."""
    _TYPED[:] = list(argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="contextlens", standalone_mode=False)
    except (click.exceptions.Abort, _Interrupted, KeyboardInterrupt):
        _aborted()
    except click.UsageError as err:
        # one line, as every other error: what is wrong, and where the usage is
        where = err.ctx.command_path if err.ctx is not None else "contextlens"
        click.echo(f"contextlens: error: {_said(err.format_message())} (see {where} --help)",
                   err=True)
        sys.exit(err.exit_code)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except ContextlensError as err:
        click.echo(f"contextlens: error: {_said(str(err))}", err=True)
        sys.exit(err.exit_code)
    except Exception as err:  # a bug of ours: still one line, the traceback on request
        if _query_interrupted(err):
            _aborted()
        if isinstance(err, UnicodeEncodeError) and "surrogates not allowed" in str(err):
            # a name given that is not UTF-8 (Python keeps its bytes as surrogates, which
            # no file or DuckDB path takes): the user's to rename, not a bug
            shown = str(err.object[err.start:err.end]).encode("utf-8", "surrogateescape")
            click.echo("contextlens: error: a file or folder name that is not valid UTF-8 "
                       f"(byte {shown.hex()}): rename it", err=True)
            sys.exit(2)
        if os.environ.get("CONTEXTLENS_DEBUG"):
            raise
        click.echo(
            f"contextlens: internal error: {type(err).__name__}: {_said(str(err))}"
            " (set CONTEXTLENS_DEBUG=1 for the traceback)",
            err=True,
        )
        sys.exit(1)

