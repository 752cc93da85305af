"""What may be shown: the one home of masking.

Two rules, applied once, here, to every field that comes from a log before it is cut or
formatted anywhere:

- a record of a restricted privacy class (``ingest.contract.RESTRICTED_PRIVACY``) shows a
  placeholder instead of its content;
- any other text has its secret-looking values replaced (the detector of
  ``replay.render.mask_secrets``).

``Masker(reveal=True)`` shows everything; a reveal is a per-call choice and is never stored.
A ``Masker`` counts what it masked, so a view can say "3 masked".
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.contract import RESTRICTED_PRIVACY
from replay.render import mask_secrets

__all__ = ["Masker", "is_restricted", "masked_placeholder"]

_RESTRICTED = pa.array(sorted(RESTRICTED_PRIVACY), pa.string())


def masked_placeholder(privacy_class: str) -> str:
    return f"[masked: {privacy_class} content; reveal to show]"


def is_restricted(privacy_class: str | None) -> bool:
    return privacy_class in RESTRICTED_PRIVACY


class Masker:
    """Masks text for one answer; ``masked`` counts the values it changed."""

    def __init__(self, reveal: bool = False) -> None:
        self.reveal = reveal
        self.masked = 0
        self._lock = threading.Lock()

    def _count(self, n: int = 1) -> None:
        with self._lock:
            self.masked += n

    def text(self, value: Any, privacy_class: str | None = None) -> str:
        """``value`` as text, masked unless revealed (None -> "")."""
        if value is None:
            return ""
        text = value if isinstance(value, str) else str(value)
        if self.reveal:
            return text
        if is_restricted(privacy_class):
            self._count()
            return masked_placeholder(str(privacy_class))
        shown = mask_secrets(text)
        if shown != text:
            self._count()
        return shown

    def optional(self, value: Any, privacy_class: str | None = None) -> str | None:
        """``text`` that keeps None as None."""
        return None if value is None else self.text(value, privacy_class)

    def values(self, values: list[Any] | None) -> list[str]:
        """A list of texts (tags, ids), each masked."""
        return [self.text(v) for v in values or []]

    def column(self, values: pa.Array | pa.ChunkedArray,
               privacy: pa.Array | pa.ChunkedArray | None = None) -> pa.Array:
        """A string column masked: restricted rows get the placeholder (columnar), the rest
        through the secret detector. Nulls stay null."""
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        if self.reveal or len(values) == 0:
            return values
        out = values.to_pylist()  # bounded by the caller: one page or one assembly
        classes = privacy.to_pylist() if privacy is not None else [None] * len(out)
        shown = [self.optional(v, c) for v, c in zip(out, classes, strict=True)]
        return pa.array(shown, pa.string())

    def restricted_mask(self, privacy: pa.Array | pa.ChunkedArray) -> pa.Array:
        """True where a row's privacy class is restricted (columnar)."""
        return pc.fill_null(pc.is_in(privacy, _RESTRICTED), False)
