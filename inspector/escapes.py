"""Terminal escape sequences in log text: removed for reading, never interpreted.

A tool's output often carries colours and cursor moves (``\\x1b[1m$ deploy\\x1b[0m``). Shown
as visible escapes they are safe but unreadable, so text bodies (a message, a tool result,
a label quoting them) lose whole sequences before display; whatever control character is
left is still shown escaped (``ingest.text.visible_text``). Identifiers are never stripped:
two ids that differ only by a sequence must not look alike. The app's ``e`` key shows the
escaped form instead (``set_escapes_shown``); the command line's ``--json`` prints the
exact text.
"""

from __future__ import annotations

import re

__all__ = ["CUT_SEQUENCE_RE2", "READABLE_COLUMNS", "SEQUENCES_RE2", "escapes_shown", "set_escapes_shown",
           "strip_sequences"]

# ECMA-48 sequences, whole: CSI (ESC [ or 0x9b, parameters, intermediates, final byte),
# control strings (OSC, DCS, SOS, PM, APC) up to their terminator, and two-byte escapes
# (ESC, intermediates, a final byte that does not open one of the above). Written in the
# syntax Python's re and RE2 (pyarrow.compute) share.
SEQUENCES_RE2 = (
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[\x20-\x2f]*[\x30-\x4f\x51-\x57\x59\x5a\x5c\x60-\x7e]"
)
SEQUENCE_RE = re.compile(SEQUENCES_RE2)
# the start of a sequence whose end a shortened text lost (``… 41s \x1b[3…``), removed too
CUT_SEQUENCE_RE2 = r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*(…?)$|\x1b(…?)$"
_CUT_SEQUENCE_RE = re.compile(CUT_SEQUENCE_RE2)
# the columns of our tables that quote log text bodies (shown readable)
READABLE_COLUMNS = frozenset({"label", "detail", "preview", "content", "text", "summary"})

_mode = {"escapes_shown": False}


def set_escapes_shown(shown: bool) -> None:
    """Show terminal escape sequences in text bodies as escapes (True) or remove them for
    reading (False, the default)."""
    _mode["escapes_shown"] = bool(shown)


def escapes_shown() -> bool:
    return _mode["escapes_shown"]


def strip_sequences(text: str) -> str:
    """``text`` without its terminal escape sequences (and the start of one a shortening
    cut off at its end), CRLF line ends made LF (any other lone control character stays,
    to be shown escaped)."""
    if "\x1b" not in text and "\r" not in text and not re.search("[\x90-\x9f]", text):
        return text
    text = _CUT_SEQUENCE_RE.sub(r"\1\2", SEQUENCE_RE.sub("", text))
    return text.replace("\r\n", "\n")


