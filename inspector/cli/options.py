"""What the commands share: the options they take (--db, --json, --policies, --reveal,
--format, the engine options), the read model they ask (``_Answers``, ``_RayAnswers``), and
how an error or warning line is printed (``_said``, ``_warn``)."""

from __future__ import annotations


from pathlib import Path
from typing import Any, Callable, Iterable

import click

from ingest.errors import ContextlensError
from ingest.text import clip, one_line

from ..console import progress_printer
from ..stores import resolve_store


_TYPED: list[str] = []  # the command line's arguments (main sets them)


LONGEST_QUOTED = 400  # characters of an argument an error line quotes back (a path fits)


def _said(message: str) -> str:
    """An error or warning line: it may quote log content, so secrets are masked (there is
    no reveal for messages) and control characters escaped. The paths the user typed (and
    their file names) are theirs, not log content: they are kept as typed even when they
    look random (``…_mj7khqpMM4GBCfVQozKgzB.eval``), so the line still names the file."""
    import re

    from ingest.secrets import mask_text

    for arg in _TYPED:  # an argument quoted back is cut: a 100,000-character id is no line
        if len(arg) > LONGEST_QUOTED and arg in message:
            message = message.replace(arg, clip(arg, LONGEST_QUOTED))
    typed = {a for a in _TYPED if len(a) > 3 and not a.startswith("-")}
    typed |= {Path(a).name for a in typed if len(Path(a).name) > 3}
    keep = sorted((a for a in typed if a in message), key=len, reverse=True)
    if not keep:
        return one_line(mask_text(message))
    pattern = re.compile("|".join(re.escape(a) for a in keep))
    parts, kept = pattern.split(message), pattern.findall(message)
    out = [mask_text(parts[0])]
    for path, part in zip(kept, parts[1:]):
        out += [path, mask_text(part)]
    return one_line("".join(out))  # one line: a newline in a typed name is shown as ⏎


def shown_ids(value: Any, reveal: bool = False) -> Any:
    """``value`` (a result's JSON, a row, a list of ids, one id) with its identifiers
    masked unless revealed: ``readmodel.masking.masked_ids``, the one rule for every path
    that shows an id (text and ``--json``)."""
    from readmodel.masking import Masker, masked_ids

    return masked_ids(value, Masker(reveal))


def _warn(message: str) -> None:
    click.echo(f"warning: {_said(message)}", err=True)


class _Answers:
    """The read model over the store named by ``--db`` (closed on exit)."""

    def __init__(self, db: str | None, policies_dir: str | None = None) -> None:
        from readmodel import open_model

        registry = _registry(policies_dir) if policies_dir else None
        self.model = open_model(resolve_store(db, progress_printer(), warn=_warn), registry)

    def __enter__(self):
        return self.model

    def __exit__(self, *_: Any) -> None:
        self.model.close()


class _RayAnswers:
    """The read model on Ray over Parquet exports (``--engine ray``): ``--export`` folders,
    else ``--db`` (an export or a folder of exports; default: the bundled sample)."""

    def __init__(self, db: str | None, exports: tuple[str, ...], policies_dir: str | None,
                 address: str | None) -> None:
        from readmodel.distributed import RayReadModel

        from ..stores import bundled_export

        paths = [*([db] if db else []), *exports] or [str(bundled_export())]
        registry = _registry(policies_dir) if policies_dir else None
        self.model = RayReadModel(paths, registry, address)

    def __enter__(self):
        return self.model

    def __exit__(self, *_: Any) -> None:
        pass


def _engine_answers(engine: str, db: str | None, exports: tuple[str, ...],
                    policies_dir: str | None, address: str | None) -> Any:
    if engine != "ray":
        if address or exports:
            raise ContextlensError(f"{'--address' if address else '--export'} needs --engine ray")
        return _Answers(db, policies_dir)
    return _RayAnswers(db, exports, policies_dir, address)


def workers_option(command: Any) -> Any:
    """--workers N: processes (Ray tasks with --engine ray) working at once."""
    return click.option(
        "--workers", type=click.IntRange(min=1), metavar="N",
        help="Processes (or Ray tasks) working at once (default: one per free CPU, the CPUs "
             "this process may use less those other programs keep busy, at least 1; a store "
             "of one chunk, about 8,000 requests, is worked in this process).")(command)


def engine_options(command: Any) -> Any:
    """--engine, --address and --export, for the commands that can run on Ray."""
    command = click.option(
        "--export", "exports", multiple=True, metavar="DIR",
        help="With --engine ray: an export folder, or a folder of exports, to read (repeatable;"
             " --db names one too).")(command)
    command = click.option(
        "--address", metavar="auto|ray://HOST:PORT",
        help="With --engine ray: the Ray cluster to run on (default: a local instance).")(command)
    return click.option(
        "--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
        help="local: the store, on this process. ray: the Parquet exports, partitioned by "
             "conversation across a Ray cluster (pip install 'contextlens[ray]').")(command)


db_option = click.option(
    "--db",
    "db",
    metavar="FILE",
    help="A store file or an export folder (default: the bundled sample).",
)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
policies_option = click.option(
    "--policies",
    "policies_dir",
    metavar="DIR",
    help="A folder of policy TOML files (default: the bundled sample_data/policies).",
)


reveal_option = click.option(
    "--reveal",
    is_flag=True,
    help="Show restricted privacy classes and secret-looking values (never persisted).",
)


class LazyChoice(click.Choice):
    """``click.Choice`` whose choices are read when first needed (a value to check, a
    command's --help), not when the command is defined: the command line starts without
    importing what lists them (the adapters: pyarrow and the contract)."""

    def __init__(self, choices_of: Callable[[], Iterable[str]], case_sensitive: bool = True) -> None:
        self._choices_of = choices_of
        self._choices: tuple[str, ...] | None = None
        self.case_sensitive = case_sensitive

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        if self._choices is None:
            self._choices = tuple(self._choices_of())
        return self._choices

    @choices.setter
    def choices(self, value: Iterable[str]) -> None:
        self._choices = tuple(value)


def _format_names() -> list[str]:
    from ingest.adapters import format_names

    return format_names()


format_option = click.option(
    "--format",
    "fmt",
    type=LazyChoice(_format_names),
    default=None,
    help="The input's format (default: detected).",
)


# the columns of a record in show's and replay's tables
RECORD_FIELDS_INCLUDED = ["record_kind", "record_id", "position", "rendering", "reason_code", "policy_family", "tokens"]
RECORD_FIELDS_OMITTED = ["record_kind", "record_id", "reason_code", "policy_family", "detail", "tokens"]


def _registry(policies_dir: str | None):
    from readmodel import load_registry

    return load_registry(policies_dir)
