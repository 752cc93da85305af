"""Errors that reach the user as one clear line and a non-zero exit code."""

from __future__ import annotations

from .text import clip


def cut(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters with a trailing …: untrusted ids and values of
    any size are quoted this way in messages."""
    return clip(text, limit)


class ContextlensError(Exception):
    """A problem the user can act on. ``str(err)`` is the one-line message.

    ``exit_code`` is 2 for bad input (a file, table, column, row, key or id that is wrong)
    and may be set otherwise by the caller.
    """

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ValidationError(ContextlensError):
    """The export breaks its contract. The message names file, table, column, row, value."""


class NotFoundError(ContextlensError):
    """An id the user named does not exist in the store."""


class StoreBusyError(ContextlensError):
    """Another process is writing the store."""
