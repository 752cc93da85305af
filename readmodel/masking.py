"""What may be shown: the one home of masking.

Two rules, applied once, here, to every field that comes from a log before it is cut or
formatted anywhere:

- a record of a restricted privacy class (``ingest.contract.RESTRICTED_PRIVACY``) shows a
  placeholder instead of its content;
- any other text has its secret-looking values replaced (``ingest.secrets``, built on
  detect-secrets).

``Masker(reveal=True)`` shows everything; a reveal is a per-call choice and is never stored.
A ``Masker`` counts what it masked, so a view can say "3 masked".
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ingest.contract import RESTRICTED_PRIVACY
from ingest.text import clip
from ingest.secrets import mask_secrets, mask_then_cut

from .results import ProvenanceLink, frozen_row

__all__ = [
    "LABEL_WIDTH",
    "Masker",
    "is_restricted",
    "masked_labels",
    "masked_link",
    "masked_list_page",
    "masked_placeholder",
    "masked_record",
    "masked_request",
    "masked_side",
]

# text columns of the request list that come from logs
_LIST_TEXT = ("assembly_id", "conversation_id", "branch_id", "participant_id", "model",
              "provider", "policy_version", "assembler_version", "scenario")
_TAGS_TYPE = pa.list_(pa.string())
_SIDE_KEYS = ("decision", "rendering", "reason_code", "position", "tokens", "detail",
              "policy_family")

# A record's one-line label, as shown and printed: masked first, then cut to this width.
LABEL_WIDTH = 100


@lru_cache(maxsize=1)
def _restricted() -> pa.Array:
    # made on first use, not at import: pyarrow imports pandas (a third of a second) on the
    # first ``pa.array`` of a Python list, which a request list with nothing to mask never makes
    return pa.array(sorted(RESTRICTED_PRIVACY), pa.string())


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

    def text(self, value: Any, privacy_class: str | None = None,
             limit: int | None = None) -> str:
        """``value`` as text, masked unless revealed (None -> ""); with ``limit``, cut to
        that many characters (ending with …) after masking, never before."""
        if value is None:
            return ""
        text = value if isinstance(value, str) else str(value)
        if self.reveal:
            return clip(text, limit)
        if is_restricted(privacy_class):
            self._count()
            return masked_placeholder(str(privacy_class))
        result = mask_secrets(text) if limit is None else mask_then_cut(text, limit)
        if result.count:
            self._count()
        return result.text

    def optional(self, value: Any, privacy_class: str | None = None,
                 limit: int | None = None) -> str | None:
        """``text`` that keeps None as None."""
        return None if value is None else self.text(value, privacy_class, limit)

    def values(self, values: list[Any] | None) -> list[str]:
        """A list of texts (tags, ids), each masked."""
        return [self.text(v) for v in values or []]

    def column(self, values: pa.Array | pa.ChunkedArray,
               privacy: pa.Array | pa.ChunkedArray | None = None,
               limit: int | None = None) -> pa.Array:
        """A string column masked: restricted rows get the placeholder (columnar), the rest
        through the secret detector. Nulls stay null."""
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        if (self.reveal and limit is None) or len(values) == 0:
            return values
        out = values.to_pylist()  # bounded by the caller: one page or one assembly
        classes = privacy.to_pylist() if privacy is not None else [None] * len(out)
        shown = [self.optional(v, c, limit) for v, c in zip(out, classes, strict=True)]
        if shown == out and values.type == pa.string():
            # nothing masked or cut: the column as it came, the same values. (``pa.array``
            # of a list imports pandas, a third of a second a request list need not pay.)
            return values
        return pa.array(shown, pa.string())

    def restricted_mask(self, privacy: pa.Array | pa.ChunkedArray) -> pa.Array:
        """True where a row's privacy class is restricted (columnar)."""
        return pc.fill_null(pc.is_in(privacy, _restricted()), False)


# ---------------------------------------------------------------------- rows


def masked_request(row: Mapping[str, Any], masker: Masker) -> Mapping[str, Any]:
    out = dict(row)
    out["tags"] = masker.values(row.get("tags"))
    return frozen_row(out)

def masked_labels(labels: pa.ChunkedArray, privacy: pa.Array, masker: Masker) -> pa.Array:
    """Labels quote record content: restricted classes get the placeholder, the rest pass
    the secret detector; then each is cut to ``LABEL_WIDTH``."""
    return masker.column(pc.fill_null(labels, ""), privacy, LABEL_WIDTH)


def masked_list_page(page: pa.Table, masker: Masker) -> pa.Table:
    if masker.reveal or not page.num_rows:
        return page
    out = page
    for name in _LIST_TEXT:
        if name in out.column_names:
            i = out.schema.get_field_index(name)
            out = out.set_column(i, name, masker.column(out[name]))
    if "tags" in out.column_names:
        i = out.schema.get_field_index("tags")
        listed = out["tags"].to_pylist()
        tags = [None if t is None else masker.values(t) for t in listed]
        # nothing masked: the same values cast, not rebuilt (``pa.array`` imports pandas)
        column = (out["tags"].cast(_TAGS_TYPE) if tags == listed
                  else pa.array(tags, _TAGS_TYPE))
        out = out.set_column(i, "tags", column)
    return out

def masked_side(row: Mapping[str, Any] | None, masker: Masker) -> Mapping[str, Any] | None:
    if row is None:
        return None
    out = {k: row.get(k) for k in ("record_kind", "record_id") + _SIDE_KEYS}
    out["detail"] = masker.optional(out.get("detail"))
    return frozen_row(out)

def masked_record(row: Mapping[str, Any], masker: Masker) -> Mapping[str, Any]:
    return frozen_row({**row, "detail": masker.optional(row.get("detail"))})

def masked_link(link: Mapping[str, Any], masker: Masker) -> ProvenanceLink:
    privacy = link.get("privacy_class")
    label = link.get("label")
    if not link.get("broken"):
        label = masker.text(label, privacy, LABEL_WIDTH)
    return ProvenanceLink(
        kind=str(link.get("kind")), id=str(link.get("id")), label=str(label or ""),
        broken=bool(link.get("broken")), depth=int(link.get("depth") or 0),
        via=link.get("via"), privacy_class=privacy,
    )
