"""What may be shown: the one home of masking.

Two rules, applied once, here, to every field that comes from a log before it is cut or
formatted anywhere:

- a record of a restricted privacy class (``ingest.contract.RESTRICTED_PRIVACY``) shows a
  placeholder instead of its content;
- any other text has its secret-looking values replaced (``ingest.secrets``, built on
  detect-secrets);
- an identifier (a column the contract calls one, ``ingest.contract.column_role``: ids, tags,
  model, tool and skill names) has a secret of a known shape replaced (``masked_ids``), found
  by one regular expression over the whole column; enumerations and numbers are never
  checked.

``Masker(reveal=True)`` shows everything; a reveal is a per-call choice and is never stored.
A ``Masker`` counts what it masked, so a view can say "3 masked".
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ingest.contract import IDENTIFIER_COLUMNS, RESTRICTED_PRIVACY
from ingest.text import clip
from ingest.secrets import identifier_pattern, mask_identifier, mask_secrets, mask_then_cut

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
    "masked_ids",
    "ID_FIELDS",
]

# Identifier fields (ids, tags, model, tool and skill names) that come from logs: every
# output path shows them through ``masked_ids``, so a secret-shaped id (a key pasted as a
# tag, a token as a run id) is masked wherever it is displayed. By name, in an Arrow table,
# a row, or a JSON document at any depth: the contract's identifier columns
# (``ingest.contract.IDENTIFIER_COLUMNS``) and the fields answers make of them.
ID_FIELDS = IDENTIFIER_COLUMNS | frozenset({
    "scenario", "id", "record", "tool_names", "example_requests", "export_id", "a_label",
    "b_label", "label_a", "label_b",
})
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

    def identifier(self, value: Any) -> str:
        """An identifier as shown (None -> ""): a secret of a known shape in it masked,
        unless revealed (``ingest.secrets.mask_identifier``); never cut."""
        if self.reveal:
            return "" if value is None else value if isinstance(value, str) else str(value)
        result = mask_identifier(value)
        if result.count:
            self._count()
        return result.text

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
    """A request row to show: its tags masked as identifiers (the other ids are masked
    where they are displayed, ``masked_ids``: the app opens the conversation by the real
    id)."""
    out = dict(row)
    out["tags"] = [masker.identifier(v) for v in row.get("tags") or []]
    return frozen_row(out)

def masked_labels(labels: pa.ChunkedArray, privacy: pa.Array, masker: Masker) -> pa.Array:
    """Labels quote record content: restricted classes get the placeholder, the rest pass
    the secret detector; then each is cut to ``LABEL_WIDTH``."""
    return masker.column(pc.fill_null(labels, ""), privacy, LABEL_WIDTH)


def masked_list_page(page: pa.Table, masker: Masker) -> pa.Table:
    """A page of the request list with its identifier columns masked (``masked_ids``)."""
    return masked_ids(page, masker)


def _masked_strings(values: pa.Array, masker: Masker) -> pa.Array:
    """A string array of identifiers masked, columnar: one regular expression
    (``identifier_pattern``, RE2 in Arrow) picks the values that may hold a secret of a
    known shape, usually none; each distinct one of those is judged once by the detector
    and the answers are spread back with ``take``. Nothing masked: the same array."""
    if len(values) == 0 or values.null_count == len(values):
        return values
    hits = pc.match_substring_regex(values, identifier_pattern())
    if not pc.any(hits).as_py():
        return values
    candidates = pc.unique(pc.filter(values, hits))
    texts = candidates.to_pylist()
    shown = [masker.identifier(t) for t in texts]
    if shown == texts:
        return values
    where = pc.index_in(values, candidates)
    # ``pa.array`` of a Python list imports pandas (a third of a second): only here, where
    # something is masked, is it paid
    masked = pc.take(pa.array(shown, pa.string()), where)
    return pc.if_else(pc.is_null(where), values, masked)


def _masked_column(column: pa.Array | pa.ChunkedArray, masker: Masker
                   ) -> pa.Array | pa.ChunkedArray:
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = values.type
    if pa.types.is_large_string(kind):
        values = values.cast(pa.string())
        kind = pa.string()
    if pa.types.is_string(kind):
        out = _masked_strings(values, masker)
        return column if out is values else out
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and (
            pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type)):
        flat = values.values.cast(pa.string())
        out = _masked_strings(flat, masker)
        if out is flat:
            return column
        return pa.ListArray.from_arrays(values.offsets.cast(pa.int32()), out,
                                        mask=values.is_null()).cast(_TAGS_TYPE)
    return column


def _id_strings(column: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """The strings of an identifier column (a list column's elements), or None if it holds
    none."""
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = values.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        values = values.values  # every element (of a slice: more, never fewer)
        kind = values.type
    if pa.types.is_large_string(kind):
        return values.cast(pa.string())
    return values if pa.types.is_string(kind) else None


def _any_may_hold_secret(table: pa.Table, names: list[str]) -> bool:
    """Whether any value of those columns may hold a secret: the identifier pattern over
    all of them at once (RE2 compiles it on each call, which costs more than matching a
    page of ids)."""
    strings = [a for a in (_id_strings(table[n]) for n in names) if a is not None and len(a)]
    if not strings:
        return False
    every = strings[0] if len(strings) == 1 else pa.concat_arrays(strings)
    return bool(pc.any(pc.match_substring_regex(every, identifier_pattern())).as_py())


def masked_ids(value: Any, masker: Masker) -> Any:
    """The one way an identifier reaches a display: ids, tags, model, tool and skill names
    (``ID_FIELDS``) with secrets of a known shape masked, unless revealed (never for their
    entropy alone: ``ingest.secrets.identifier_pattern``).

    ``value`` is an Arrow table (its ``ID_FIELDS`` columns, columnar: one regular
    expression over each, the detector on the few values it picks), an Arrow array (all of
    it), a mapping or a JSON document (the
    values under ``ID_FIELDS`` keys, at any depth), a list of texts, or one text. Returns a
    copy; the caller keeps the real ids to look things up by (the app opens a request by
    its real id)."""
    if masker.reveal or value is None:
        return value
    if isinstance(value, pa.Table):
        names = [n for n in value.column_names if n in ID_FIELDS]
        if not _any_may_hold_secret(value, names):
            return value  # the usual answer, in one pass
        out = value
        for name in names:
            i = out.schema.get_field_index(name)
            original = out[name]
            column = _masked_column(original, masker)
            if column is not original:
                out = out.set_column(i, name, column)
        return out
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        return _masked_column(value, masker)
    if isinstance(value, str):
        return masker.identifier(value)
    if isinstance(value, (list, tuple)):
        return [masked_ids(v, masker) if isinstance(v, (str, Mapping, list, tuple)) else v
                for v in value]
    if isinstance(value, Mapping):
        out_map: dict[str, Any] = {}
        for k, v in value.items():
            if k in ID_FIELDS and isinstance(v, (str, list, tuple)):
                out_map[k] = masked_ids(v, masker)
            elif isinstance(v, (Mapping, list, tuple)):
                out_map[k] = _nested_ids(v, masker)
            else:
                out_map[k] = v
        return out_map
    return value


def _nested_ids(value: Any, masker: Masker) -> Any:
    """A nested document: its mappings' ``ID_FIELDS`` masked, other texts left as they are
    (content has its own masking, by privacy class, before it is cut)."""
    if isinstance(value, Mapping):
        return masked_ids(value, masker)
    if isinstance(value, (list, tuple)):
        return [_nested_ids(v, masker) for v in value]
    return value

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
