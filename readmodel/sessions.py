"""Which agent sessions are on this machine: ``ingest.sessions`` finds them, this masks them.

``contextlens sessions`` prints :func:`local_sessions`' rows and the app's Sessions screen
shows them; neither reads a session file or masks anything itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ingest.adapters.common import human_size
from ingest.sessions import RUNTIMES, find_sessions
from ingest.text import one_line

from .masking import Masker
from .results import SessionList, SessionRow

__all__ = ["PROMPT_WIDTH", "RUNTIMES", "local_sessions", "size_text"]

PROMPT_WIDTH = 80  # a row's first prompt, on one line, cut after masking


def size_text(size: int) -> str:
    """A session's size as people read it (``2.8 MB``)."""
    return human_size(size)


def local_sessions(runtime: str | None = None, reveal: bool = False,
                   env: Mapping[str, str] | None = None, home: Path | None = None,
                   cwd: Path | None = None) -> SessionList:
    """The agent sessions on this machine (of ``runtime``, an adapter format name, when
    given), newest first, their log text masked unless ``reveal``. ``env``, ``home`` and
    ``cwd`` default to this process's (``ingest.sessions.find_sessions``)."""
    found = find_sessions(runtime, env=env, home=home, cwd=cwd)
    masker = Masker(reveal=reveal)
    rows = []
    for s in found.sessions:
        prompt = None
        if s.first_prompt is not None:
            # masked whole first (a secret's detector reads its lines), then one line, cut
            folded = " ".join(masker.text(s.first_prompt).split())
            prompt = one_line(folded, PROMPT_WIDTH)
        rows.append(SessionRow(
            runtime=s.runtime, path=str(s.path), project=masker.optional(s.project),
            first_prompt=prompt, started=s.started, last_written=s.last_written,
            size=s.size, requests=s.requests,
        ))
    looked_in = tuple(f"{p.runtime}: {p.path}" for p in found.places)
    return SessionList(tuple(rows), looked_in, found.notes, masker.masked)
