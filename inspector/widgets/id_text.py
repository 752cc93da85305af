"""Ids as every screen displays them: secret-shaped ones masked unless revealed
(``readmodel.masking.masked_ids``, the one rule of every output path), the store's id affixes
dropped (``readmodel.ids``), on one line (``one_line``: separators escaped, cut with …).

A screen keeps the real ids to look records up by and to navigate with; only what it
displays goes through here. The detector costs about a tenth of a millisecond per value, so
each distinct value is judged once per ``IdText``; a worker can ``warm`` it with a
screen's ids, leaving the UI thread only lookups.
"""

from __future__ import annotations

from typing import Any, Iterable

from readmodel.ids import NO_AFFIXES, short_id, short_text
from readmodel.masking import Masker, masked_ids

from .safe import one_line, safe_text

__all__ = ["IdText", "app_reveal"]


def app_reveal(widget: Any) -> bool:
    """Whether the app of ``widget`` shows restricted content now (False outside an app)."""
    try:
        return bool(getattr(widget.app, "reveal", False))
    except Exception:  # noqa: BLE001 - no active app (a widget built outside one)
        return False


class IdText:
    """Ids and id-naming prose for one reveal state and one store's affixes."""

    def __init__(self, reveal: bool, affixes: tuple[str, str] = NO_AFFIXES) -> None:
        self.reveal = reveal
        self.affixes = affixes
        self._masker = Masker(reveal)
        self._seen: dict[str, str] = {}

    def masked(self, value: Any) -> str:
        """``value`` as text, secret-shaped parts masked unless revealed (None -> "")."""
        text = "" if value is None else str(value)
        if self.reveal or not text:
            return text
        shown = self._seen.get(text)
        if shown is None:
            shown = self._seen[text] = masked_ids(text, self._masker)
        return shown

    def warm(self, values: Iterable[Any]) -> "IdText":
        """Judge ``values`` now (from a worker), so displaying them later only looks up."""
        for value in values:
            self.masked(value)
        return self

    def __call__(self, value: Any, limit: int | None = 120, *, assembly: bool = False) -> str:
        """One id on one line: masked, without the store's affixes (an assembly id loses
        both, any other id the prefix), cut at ``limit``."""
        return one_line(short_id(self.masked(value), self.affixes, prefix_only=not assembly),
                        limit)

    def prose(self, text: Any) -> str:
        """Text that names ids (an error, a sentence), made safe to show (``safe_text``):
        secret-shaped values in it masked, its ids without the store's prefix."""
        return safe_text(short_text(self.masked(text), self.affixes))

    def affixes_note(self) -> str | None:
        """``ids short for P…S`` (what the shown ids leave out, masked), None without any."""
        prefix, suffix = self.affixes
        if not (prefix or suffix):
            return None
        return (f"ids short for {one_line(self.masked(prefix), 40)}…"
                f"{one_line(self.masked(suffix), 20)}")
