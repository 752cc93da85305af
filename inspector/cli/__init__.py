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
import signal
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
    """DuckDB's answer to Ctrl+C during a query: the query stops with the RuntimeError
    "Query interrupted" (the KeyboardInterrupt is spent), or, when the signal lands while
    DuckDB calls back into Python (reading a registered Arrow object), an error that ends
    in the KeyboardInterrupt's name; either may come wrapped in one of our errors."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        text = str(err)
        if isinstance(err, KeyboardInterrupt) or text == "Query interrupted" or (
                text.rstrip().endswith("KeyboardInterrupt:")):
            return True
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    return False


def _aborted() -> None:
    """Ctrl+C: one line on stderr (over a progress bar or the terminal's ``^C``, on a
    terminal) and the shell's code for SIGINT."""
    _stopped("aborted", 130)


def _terminated() -> None:
    """SIGTERM: as Ctrl+C, with its own word and the shell's code for SIGTERM."""
    _stopped("terminated", 143)


def _stopped(line: str, code: int) -> None:
    from ..console import clear_progress

    # a second signal while the line is written must not turn it into a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    clear_progress()
    click.echo(line, err=True)
    sys.exit(code)


def _by_sigterm() -> bool:
    """Whether the signal that stopped the command was SIGTERM (inside a DuckDB query the
    exception its handler raised comes back as DuckDB's "Query interrupted")."""
    from ingest.interrupts import last_signal

    return last_signal() == signal.SIGTERM


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
    from ingest.interrupts import handlers_restored, raise_on_sigterm

    # the handlers as they were once it returns (main is also called in a test's process)
    with handlers_restored(signal.SIGINT, signal.SIGTERM):
        raise_on_sigterm()  # SIGTERM as Ctrl+C: cleaned up, one line (ingest.interrupts)
        _main(argv)


def _main(argv: list[str] | None) -> None:
    from ingest.interrupts import IngestInterrupted, Terminated

    _TYPED[:] = list(argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="contextlens", standalone_mode=False)
    except Terminated:
        _terminated()
    except (click.exceptions.Abort, _Interrupted, KeyboardInterrupt):
        if _by_sigterm():
            _terminated()
        _aborted()
    except IngestInterrupted as err:
        # the line says whether the export was stored; the code is the signal's
        _stopped(_said(str(err)), err.exit_code)
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
        if _query_interrupted(err):  # a query stopped by the signal, reported as our error
            if _by_sigterm():
                _terminated()
            _aborted()
        click.echo(f"contextlens: error: {_said(str(err))}", err=True)
        sys.exit(err.exit_code)
    except Exception as err:  # a bug of ours: still one line, the traceback on request
        if _by_sigterm():  # whatever a library made of the exception SIGTERM raised
            _terminated()
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

