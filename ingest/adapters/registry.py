"""The adapter registry: every transcript format is an :class:`Adapter` plugin.

Adapters are registered under the entry point group ``contextlens.adapters`` (the
built-ins in contextlens's own pyproject.toml, others by any installed package), by format
name. ``detect_format`` asks the built-ins first, in a fixed order, then the other plugins
by name; ``adapt`` runs the adapter of the named or detected format. See
docs/transcripts.md, "Writing an adapter".
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import ContextlensError
from .assembly_rows import scratch_beside
from .builder import AdaptResult
from .files import Sample, read_sample, require_regular_file
from .tokens import DEFAULT_ESTIMATOR, TokenEstimator

ENTRY_POINT_GROUP = "contextlens.adapters"
EXPORT = "export"  # an export folder: nothing to convert, not an adapter

# The built-in adapters, in the order ``format_names`` lists them. They are also registered
# as entry points; this table keeps them available when the installed metadata is older
# than the code (an editable install not reinstalled).
BUILTIN: dict[str, str] = {
    "claude-code": "ingest.adapters.claude_code:ClaudeCodeAdapter",
    "openai-chat": "ingest.adapters.openai_chat:OpenAIChatAdapter",
    "anthropic-messages": "ingest.adapters.anthropic_messages:AnthropicMessagesAdapter",
    "gemini-cli": "ingest.adapters.gemini_cli:GeminiCliAdapter",
    "codex": "ingest.adapters.codex:CodexAdapter",
    "inspect-ai": "ingest.adapters.inspect_ai:InspectAiAdapter",
    "letta": "ingest.adapters.letta:LettaAdapter",
    "esaa": "ingest.adapters.esaa:EsaaAdapter",
    "otel": "ingest.adapters.otel:OtelAdapter",
}
# Detection order of the built-ins: Claude Code lines are the most specific; an Anthropic
# request body would also pass for an OpenAI conversation, so Anthropic is asked first; a
# Gemini CLI session (typed messages, no roles) matches neither of those.
# Formats with keys of their own (inspect_ai logs, Letta agent files, ESAA event logs) are
# asked before the chat formats (a Letta file holds OpenAI-shaped messages). OpenTelemetry
# spans (OTLP's "resourceSpans", a Phoenix export's Parquet) share keys with none: asked first.
DETECT_ORDER = ("otel", "claude-code", "codex", "gemini-cli", "inspect-ai", "letta", "esaa",
                "anthropic-messages", "openai-chat")


@runtime_checkable
class Adapter(Protocol):
    """One transcript format.

    ``name`` is the format name (``--format NAME``; the entry point must have the same
    name) and ``description`` one line for listings. ``sniff`` decides on a bounded
    :class:`~ingest.adapters.files.Sample` of the file: None if the file is this format,
    else a short reason why not (shown when no format matches). ``adapt`` writes the export
    folder ``out_dir`` (replacing it) from the transcript at ``path`` and returns its
    :class:`AdaptResult`; bad input is a ContextlensError naming the file.
    """

    name: str
    description: str

    def sniff(self, sample: Sample) -> str | None: ...

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult: ...


def _load(name: str, value: str, load: Any) -> Adapter:
    """The adapter object an entry point names (a class is instantiated), checked."""
    try:
        obj = load()
    except Exception as err:
        raise ContextlensError(
            f"adapter plugin '{name}' ({value}) failed to load: {type(err).__name__}: {err}"
        ) from None
    try:
        adapter = obj() if isinstance(obj, type) else obj
    except Exception as err:
        raise ContextlensError(
            f"adapter plugin '{name}' ({value}) failed to start: {type(err).__name__}: {err}"
        ) from None
    missing = [
        a for a in ("sniff", "adapt") if not callable(getattr(adapter, a, None))
    ] + [a for a in ("name", "description") if not isinstance(getattr(adapter, a, None), str)]
    if missing:
        raise ContextlensError(
            f"adapter plugin '{name}' ({value}) is not an adapter: it lacks {', '.join(missing)}"
        )
    if adapter.name != name:
        raise ContextlensError(
            f"adapter plugin '{name}' ({value}) calls itself '{adapter.name}'; "
            "the entry point and the adapter's name must be the same"
        )
    return adapter


def _import(value: str) -> Any:
    module, _, attr = value.partition(":")
    return getattr(importlib.import_module(module), attr)


def _plugin_entry_points(strict: bool = True) -> dict[str, Any]:
    """Entry points of the group that are not the built-ins, by name (first one wins for a
    name registered twice). A third-party plugin may not take a built-in name: an error,
    or (``strict=False``) left out."""
    from importlib.metadata import entry_points

    try:
        eps = list(entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # broken metadata of another package must not break the built-ins
        return {}
    found: dict[str, Any] = {}
    for ep in sorted(eps, key=lambda e: e.name):
        if ep.name in BUILTIN and ep.value == BUILTIN[ep.name]:
            continue
        if ep.name in BUILTIN or ep.name == EXPORT:
            if not strict:
                continue
            raise ContextlensError(
                f"adapter plugin '{ep.name}' ({ep.value}) takes the name of a built-in format"
            )
        found.setdefault(ep.name, ep)
    return found


def _builtin(name: str) -> Adapter:
    return _load(name, BUILTIN[name], lambda: _import(BUILTIN[name]))


def format_names() -> list[str]:
    """Every format name, for ``--format`` choices: the built-ins, ``export``, then the
    installed plugins by name. Reads entry point names only: no plugin code is imported,
    so a broken plugin fails when it is used, not here."""
    return [*BUILTIN, EXPORT, *_plugin_entry_points(strict=False)]


def available_adapters() -> dict[str, Adapter]:
    """Every adapter by format name: the built-ins first, then the plugins by name. A plugin
    that fails to load is a ContextlensError naming it."""
    found = {name: _builtin(name) for name in BUILTIN}
    for name, ep in _plugin_entry_points().items():
        found[name] = _load(name, ep.value, ep.load)
    return found


def get_adapter(name: str) -> Adapter:
    """The adapter of format ``name``; an unknown name is a ContextlensError listing the
    known ones."""
    if name in BUILTIN:
        return _builtin(name)
    plugins = _plugin_entry_points()
    if name in plugins:
        return _load(name, plugins[name].value, plugins[name].load)
    raise ContextlensError(f"unknown format {name!r} (known: {', '.join(format_names())})")


def _sniff(adapter: Adapter, sample: Sample) -> str | None:
    try:
        r = adapter.sniff(sample)
    except ContextlensError:
        raise
    except Exception as err:  # a sniffer must never crash detection
        return f"unexpected structure ({type(err).__name__})"
    return None if r is None else str(r)


def _tried(reasons: dict[str, str]) -> str:
    """Every format tried and why it refused the file, formats that refused it for the
    same reason named together (a file that is not JSON is that for every JSON format):
    ``claude-code, codex: not JSON nor JSON lines (…); export: not a folder …``."""
    same: dict[str, list[str]] = {}
    for name in format_names():
        if name in reasons:
            same.setdefault(reasons[name], []).append(name)
    return "; ".join(f"{', '.join(names)}: {reason}" for reason, names in same.items())


def detect_format(path: Path) -> str:
    """Name the format of ``path`` (one of ``format_names()``), or raise ContextlensError
    naming the file and, for every format tried, why it did not match."""
    path = Path(path)
    if not path.exists():
        raise ContextlensError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / "manifest.json").is_file():
            return EXPORT
        if (path / "manifest.json").exists():  # a FIFO or device: refused by what it is
            require_regular_file(path / "manifest.json")
        raise ContextlensError(
            f"{path}: a folder without manifest.json is not an export; "
            "for a transcript, pass the file itself (tried: export)"
        )
    sample = read_sample(path)
    reasons: dict[str, str] = {EXPORT: "not a folder with manifest.json"}
    for name in DETECT_ORDER:
        reason = _sniff(_builtin(name), sample)
        if reason is None:
            return name
        reasons[name] = reason
    # plugins are loaded only when no built-in matched: a broken one cannot stop those
    for name, ep in _plugin_entry_points().items():
        reason = _sniff(_load(name, ep.value, ep.load), sample)
        if reason is None:
            return name
        reasons[name] = reason
    tried = _tried(reasons)
    from .lookalikes import closest, explain

    looks = explain(sample, reasons)
    if looks is not None:
        raise ContextlensError(f"{path}: {looks} (tried {tried})")
    near = closest(sample, reasons)
    if near is not None:
        raise ContextlensError(f"{path}: not a known transcript format, {near} (tried {tried})")
    raise ContextlensError(f"{path}: not a known transcript format (tried {tried})")


def adapt(
    path: Path,
    out_dir: Path,
    fmt: str | None = None,
    estimator: TokenEstimator | None = None,
) -> AdaptResult:
    """Convert the transcript at ``path`` into an export folder ``out_dir`` (replaced if it
    exists) that ``ingest.store.ingest`` accepts. ``fmt`` overrides detection."""
    path = Path(path)
    out_dir = Path(out_dir)
    if fmt is None:
        fmt = detect_format(path)
    if fmt == EXPORT:
        if not (path.is_dir() and (path / "manifest.json").is_file()):
            raise ContextlensError(f"{path}: not an export folder (no manifest.json)")
        return AdaptResult(path, EXPORT, [])
    adapter = get_adapter(fmt)
    if path.is_dir():
        raise ContextlensError(f"{path}: not a file (format {fmt} reads one transcript file)")
    st = require_regular_file(path, f"format {fmt} reads one transcript file")
    if st.st_size == 0:
        raise ContextlensError(f"{path}: empty file, nothing to adapt as {fmt}")
    result = _run(adapter, fmt, path, out_dir, estimator or DEFAULT_ESTIMATOR)
    if not result.stats.get("rows.messages") and not result.stats.get("requests"):
        shutil.rmtree(result.export_dir, ignore_errors=True)
        detail = "; ".join(result.warnings[:3])
        raise ContextlensError(
            f"{path}: no {fmt} messages or requests found" + (f" ({detail})" if detail else "")
        )
    return result


def _run(
    adapter: Adapter, fmt: str, path: Path, out_dir: Path, estimator: TokenEstimator
) -> AdaptResult:
    try:
        with scratch_beside(out_dir):  # a long session's assembly rows spill beside the export
            result = adapter.adapt(path, out_dir, estimator)
    except ContextlensError:
        raise
    except RecursionError:
        raise ContextlensError(f"{path}: nested too deeply to adapt as {fmt}") from None
    except UnicodeEncodeError as err:
        raise ContextlensError(
            f"{path}: holds text that is not valid Unicode ({err.reason}), cannot adapt as {fmt}"
        ) from None
    except Exception as err:
        if fmt in BUILTIN:
            raise  # a bug of contextlens: reported as an internal error
        raise ContextlensError(
            f"adapter plugin '{fmt}' failed on {path}: {type(err).__name__}: {err}"
        ) from None
    if not isinstance(result, AdaptResult):
        raise ContextlensError(
            f"adapter plugin '{fmt}' returned {type(result).__name__}, not an AdaptResult"
        )
    return result
