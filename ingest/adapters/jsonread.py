"""Reading transcript JSON with bounds: JSON lines with malformed lines as warnings, and
nesting too deep or a lone UTF-16 surrogate as one error naming file and line."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import ContextlensError

if TYPE_CHECKING:  # pragma: no cover
    from .builder import Builder


def iter_jsonl(path: Path, data: bytes, b: "Builder") -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) per non-blank line; a malformed line is a warning naming
    file and line, and is skipped. A line nested too deeply, or holding a lone surrogate,
    is an error naming file and line."""
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield n, parse_line(path, n, raw)
        except (ValueError, UnicodeDecodeError) as err:
            b.warn(f"{path.name} line {n}: malformed JSON skipped ({json_error(err)})")


def json_error(err: ValueError | UnicodeDecodeError) -> str:
    """Why a text is not JSON, short and whole: the parser's message with the line and
    column it stopped at (a cut ``str(err)`` could end in the middle of "(char 19463)"),
    or the byte that is not UTF-8."""
    if isinstance(err, json.JSONDecodeError):
        where = f"line {err.lineno} column {err.colno}"
        # "Unterminated string starting at" names where the string began
        return f"{err.msg} {where}" if err.msg.endswith(" at") else f"{err.msg} at {where}"
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 at byte {err.start}"
    text = str(err)
    return text if len(text) <= 80 else text[:79] + "…"


# --------------------------------------------------------------------------- bounded parsing

# A \uXXXX escape of a UTF-16 surrogate, with the backslashes before it (an even number
# means the backslash itself was escaped and this is plain text); a high surrogate followed
# by a low one is a valid pair.
_SURROGATE_ESCAPE = re.compile(
    rb"(?P<bs>\\+)u[dD](?:(?P<hi>[89abAB][0-9a-fA-F]{2})(?P<lo>\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    rb"|[c-fC-F][0-9a-fA-F]{2})"
)


def lone_surrogate(data: bytes) -> int | None:
    """Offset in ``data`` (JSON text) of the first escape of a lone UTF-16 surrogate, such as
    ``\\ud800``: JSON allows it, but it is not text, and nothing downstream can store it."""
    if b"\\u" not in data:
        return None
    for m in _SURROGATE_ESCAPE.finditer(data):
        if len(m.group("bs")) % 2 and (m.group("hi") is None or m.group("lo") is None):
            return m.start() + len(m.group("bs")) - 1
    return None


def check_text(path: Path, data: bytes, line: int | None = None) -> None:
    """A ContextlensError naming file and line if ``data`` escapes a lone surrogate."""
    at = lone_surrogate(data)
    if at is None:
        return
    n = line if line is not None else data.count(b"\n", 0, at) + 1
    escape = data[at: at + 6].decode("ascii", "replace")
    raise ContextlensError(
        f"{path} line {n}: JSON string holds a lone UTF-16 surrogate ({escape}), which is not text"
    )


def _too_deep(path: Path, data: bytes, line: int | None = None) -> ContextlensError:
    """The error for JSON nested deeper than the parser can follow, naming the line: the one
    given, else the first line that alone is too deep (a JSON lines file)."""
    if line is None:
        for n, raw in enumerate(io.BytesIO(data), start=1):
            try:
                json.loads(raw)
            except RecursionError:
                line = n
                break
            except (ValueError, UnicodeDecodeError):
                continue
    where = f"{path} line {line}" if line is not None else f"{path}"
    return ContextlensError(f"{where}: JSON nested too deeply to read")


def loads_document(path: Path, data: bytes, verify_text: bool = True) -> Any:
    """``data`` parsed as one JSON value; ValueError / UnicodeDecodeError when it is not
    JSON. Too deep a nesting, or (with ``verify_text``) a lone surrogate, is a
    ContextlensError naming the file and line."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise _too_deep(path, data) from None
    if verify_text:
        check_text(path, data)
    return value


def read_document(path: Path, data: bytes, what: str,
                  sniff: Callable[[Any], str | None]) -> Any:
    """``data`` as one JSON document of the format ``what`` names ("a Letta agent file"),
    checked by the format's ``sniff`` (None: it is one; else why not): otherwise one
    ContextlensError, ``<path>: not <what> (<why>)``."""
    try:
        doc = loads_document(path, data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ContextlensError(f"{path}: not {what} (not JSON: {json_error(err)})") from None
    why = sniff(doc)
    if why is not None:
        raise ContextlensError(f"{path}: not {what} ({why})")
    return doc


def parse_line(path: Path, n: int, raw: bytes, verify_text: bool = True) -> Any:
    """One JSON line (line number ``n``), with the errors of :func:`loads_document`."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise _too_deep(path, raw, n) from None
    if verify_text:
        check_text(path, raw, n)
    return value
