"""Incident bundles: one request, with what it needs, as an export folder a colleague opens.

``write_bundle(model, assembly_id, out_dir, policy=None, reveal=False, force=False)`` writes

- the request's export slice (``Store.export_slice``: the conversation as of the request,
  the request's row, records and trace, and every row they name), valid under the export
  contract, so ``contextlens list --db DIR``, ``verify``, ``diff`` and ``open DIR`` work on it;
- the blobs its artifacts name and the policy files of the registry in use;
- ``report.md`` (``readmodel.bundle_report``): what was sent and omitted and why, the
  safety findings, the replay under ``policy`` with its diff, and the commands that
  reproduce it.

Unless ``reveal``, the slice is masked by the read model's rules (``readmodel.masking``):
records of a restricted privacy class carry the placeholder instead of their content and
no blob; other text has its secret-looking values replaced. A secret-shaped id that rows
join on (an assembly, record or participant id...) is replaced by its pseudonym
``masked-id-<12 hex of its sha256>``, the same in every table, and the stored
``selection_hash`` of a request whose record ids changed is recomputed over the renamed
rows. Masking keeps every other value a replay reads (times, token counts, byte sizes, and
the length of a tool call's arguments, from which its tokens are counted), so the bundle
replays as the store does.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from ingest.contract import selection_hash
from ingest.errors import ContextlensError
from ingest.safe_files import POLICY_CAP, read_text_capped
from ingest.secrets import find_secrets

from .masking import Masker, is_restricted, masked_ids

if TYPE_CHECKING:  # pragma: no cover
    from ingest.store import ExportSlice

    from .model import ReadModel

__all__ = ["BundleResult", "REPORT_NAME", "default_folder", "mask_slice", "pseudonym",
           "write_bundle"]

REPORT_NAME = "report.md"

# text columns that come from logs, per table (a table with privacy_class masks a row of a
# restricted class whole)
_TEXT: dict[str, tuple[str, ...]] = {
    "conversations": ("title",),
    "branches": ("name",),
    "participants": ("label",),
    "messages": ("content", "speaker_label"),
    "tool_artifacts": ("result_preview", "error"),
    "tool_memories": ("summary", "ambiguity_notes"),
    "assembly_records": ("detail",),
    "policy_decisions": ("detail",),
}
_LISTS: dict[str, tuple[str, ...]] = {
    "context_assemblies": ("tags",),
    "tool_memories": ("provenance_locators",),
}
# names from logs (models, tools, skills), masked where secret-shaped as every displayed id is
# (``masking.masked_ids``, columnar); ids that rows join on get pseudonyms instead (below)
_NAMES: dict[str, tuple[str, ...]] = {
    "participants": ("provider", "model"),
    "model_runs": ("provider", "model"),
    "context_assemblies": ("provider", "model"),
    "tool_calls": ("tool_name",),
    "tool_artifacts": ("tool_name",),
    "tool_memories": ("source_tool_names", "revalidation_tools"),
    "skill_states": ("loaded_skills", "active_profiles", "direct_tools"),
}
# the ids rows join on (each table's primary key and the columns and lists naming another
# row), in every table: a secret-shaped one is replaced by one pseudonym everywhere, so the
# bundle's rows still find each other and it replays as the store does
_JOIN_KEYS = frozenset({
    "conversation_id", "owner_id", "branch_id", "parent_branch_id", "fork_message_id",
    "participant_id", "message_id", "parent_message_id", "model_run_id",
    "trigger_message_id", "parent_model_run_id", "subagent_batch_id", "tool_call_id",
    "artifact_id", "owner_participant_id", "owner_model_run_id", "shared_with", "memory_id",
    "source_artifact_ids", "conflicts_with", "supersedes", "superseded_by", "skill_state_id",
    "checkpoint_id", "assembly_id", "exact_evidence_ids", "record_id", "decision_id",
})
PSEUDONYM_PREFIX = "masked-id-"
# JSON text: (column, keep its length) -- a tool call's tokens are counted from the length
# of its arguments (``replay.assembler.call_tokens``)
_JSON: dict[str, tuple[tuple[str, bool], ...]] = {
    "tool_calls": (("arguments_json", True),),
    "tool_memories": (("structured_json", False),),
    "checkpoints": (("state_json", False),),
}


@dataclass(frozen=True)
class BundleResult:
    """What ``write_bundle`` wrote."""

    out: Path
    report: Path
    assembly_id: str
    policy: str | None
    revealed: bool
    rows: dict[str, int]
    blobs: int
    withheld_blobs: tuple[str, ...]  # artifact ids whose body was left out (restricted)
    missing_blobs: tuple[str, ...]  # artifact ids whose body the store could not read
    policies: tuple[str, ...]
    masked: int

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out), "report": str(self.report), "assembly_id": self.assembly_id,
            "policy": self.policy, "revealed": self.revealed, "rows": dict(self.rows),
            "blobs": self.blobs, "withheld_blobs": list(self.withheld_blobs),
            "missing_blobs": list(self.missing_blobs), "policies": list(self.policies),
            "masked": self.masked,
        }


@dataclass
class _Blobs:
    bodies: list[bytes] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def write_bundle(
    model: "ReadModel",
    assembly_id: str,
    out_dir: str | Path,
    policy: str | None = None,
    reveal: bool = False,
    force: bool = False,
    command: Callable[[list[str]], str] | None = None,
) -> BundleResult:
    """Write the incident bundle of ``assembly_id`` to ``out_dir`` (see the module).

    ``policy`` names a version to replay the request under in the report. An existing
    non-empty ``out_dir`` is refused unless ``force`` (and then only an export folder is
    replaced). ``command(args)`` spells a contextlens command line for the report."""
    out = Path(out_dir)
    registry = model.registry
    if policy is not None:
        registry.get(policy)  # an unknown version fails before anything is written
    if out.exists() and not out.is_dir():
        raise ContextlensError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ContextlensError(f"{out} exists and is not empty (--force replaces it)")
    store = model.store
    piece = store.export_slice(assembly_id)
    masker = Masker(reveal)
    tables = mask_slice(piece.tables, masker)
    blobs = _blobs(store, piece, tables, masker)
    policies = _policy_texts(registry)
    # the id the bundle knows the request by (its commands and export id name it)
    bundle_id = assembly_id if reveal or not _secret_shaped(assembly_id) else pseudonym(assembly_id)

    from .bundle_report import bundle_report

    report = bundle_report(
        model, assembly_id, out, policy=policy, reveal=reveal, rows=piece.rows(),
        blobs=len(blobs.bodies), withheld=blobs.withheld, missing=blobs.missing,
        policies=sorted(policies), masked=masker.masked, command=command,
        **({"command_id": bundle_id} if bundle_id != assembly_id else {}),
    )
    from ingest.reexport import write_export

    export_id = f"bundle-{_safe(bundle_id)}"
    write_export(out, export_id, "contextlens bundle", tables, blobs=blobs.bodies,
                 policies=policies, files={REPORT_NAME: report}, replace=force)
    return BundleResult(
        out=out, report=out / REPORT_NAME, assembly_id=assembly_id, policy=policy,
        revealed=reveal, rows=piece.rows(), blobs=len(blobs.bodies),
        withheld_blobs=tuple(blobs.withheld), missing_blobs=tuple(blobs.missing),
        policies=tuple(sorted(policies)), masked=masker.masked,
    )


def default_folder(base: Path, assembly_id: str) -> Path:
    """Where a bundle of ``assembly_id`` goes when the user names no folder: ``base/bundle-<id>``
    (a secret-shaped id by its pseudonym)."""
    shown = pseudonym(assembly_id) if _secret_shaped(assembly_id) else assembly_id
    return base / f"bundle-{_safe(shown)}"


def pseudonym(value: str) -> str:
    """What a masked bundle calls a secret-shaped id: ``masked-id-`` and 12 hex digits of its
    sha256 (48 bits: no two ids of a bundle meet, and nothing of the secret is readable)."""
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return PSEUDONYM_PREFIX + digest[:12]


def _secret_shaped(value: str) -> bool:
    return bool(find_secrets(value))


def _safe(text: str) -> str:
    """An export id from an assembly id: its safe characters, and a hash when any were not."""
    kept = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_.") else "_"
                   for ch in text)[:60]
    if kept != text:
        kept += "-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return kept


# ---------------------------------------------------------------------- masking


def mask_slice(tables: dict[str, pa.Table], masker: Masker) -> dict[str, pa.Table]:
    """The slice's tables with log text masked as the read model masks it (nothing changes
    when ``masker.reveal``)."""
    if masker.reveal:
        return dict(tables)
    tables = _pseudonymized(tables)
    out = {}
    for name, table in tables.items():
        if not table.num_rows:
            out[name] = table
            continue
        privacy = (table["privacy_class"].to_pylist() if "privacy_class" in table.column_names
                   else [None] * table.num_rows)
        for col in _TEXT.get(name, ()):
            values = [masker.optional(v, p) for v, p in zip(table[col].to_pylist(), privacy)]
            table = _set(table, col, values)
        for col in _LISTS.get(name, ()):
            values = [None if v is None else [masker.text(x) for x in v]
                      for v in table[col].to_pylist()]
            table = _set(table, col, values)
        for col in _NAMES.get(name, ()):
            if col in table.column_names:
                i = table.schema.get_field_index(col)
                shown = masked_ids(table[col], masker)
                if shown is not table[col]:
                    table = table.set_column(i, table.schema.field(i),
                                             shown.cast(table.schema.field(i).type))
        for col, keep_length in _JSON.get(name, ()):
            values = [_json_masked(v, p, masker, keep_length)
                      for v, p in zip(table[col].to_pylist(), privacy)]
            table = _set(table, col, values)
        out[name] = table
    return out


def _id_columns(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c in _JOIN_KEYS]


def _flat(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The strings of an id column (a list column's elements), as one string array."""
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
        values = values.flatten()
    if pa.types.is_null(values.type):
        return pa.array([], pa.string())
    return values.cast(pa.string())


def _pseudonyms(tables: dict[str, pa.Table]) -> tuple[pa.Array, pa.Array]:
    """(secret-shaped ids, their pseudonyms): every distinct id of the slice judged once."""
    parts = [_flat(t[c]) for t in tables.values() for c in _id_columns(t)]
    if not parts:
        return pa.array([], pa.string()), pa.array([], pa.string())
    distinct = pc.unique(pa.concat_arrays(parts)).drop_null()
    secret = [v for v in distinct.to_pylist() if _secret_shaped(v)]
    return pa.array(secret, pa.string()), pa.array([pseudonym(v) for v in secret], pa.string())


def _renamed(values: pa.Array, keys: pa.Array, names: pa.Array) -> pa.Array:
    """``values`` (strings) with each of ``keys`` replaced by its name in ``names``."""
    kind = values.type
    found = pc.index_in(values.cast(pa.string()), value_set=keys)
    return pc.coalesce(pc.take(names, found), values.cast(pa.string())).cast(kind)


def _pseudonymized(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The slice with every secret-shaped join key replaced by its pseudonym (columnar:
    one ``index_in`` per column over the distinct secret ids), and each request whose
    records were renamed given the ``selection_hash`` of its renamed rows, when its stored
    hash was that of the recorded ones (an inconsistent recording stays inconsistent)."""
    keys, names = _pseudonyms(tables)
    if not len(keys):
        return tables
    out: dict[str, pa.Table] = {}
    for name, table in tables.items():
        for col in _id_columns(table):
            i = table.schema.get_field_index(col)
            column = table[col].combine_chunks()
            kind = column.type
            if pa.types.is_list(kind) or pa.types.is_large_list(kind):
                if pa.types.is_null(kind.value_type):
                    continue
                inner = _renamed(column.values, keys, names)
                renamed = type(column).from_arrays(column.offsets, inner, mask=column.is_null())
            elif pa.types.is_null(kind):
                continue
            else:
                renamed = _renamed(column, keys, names)
            table = table.set_column(i, table.schema.field(i), renamed.cast(kind))
        out[name] = table
    return _rehashed(tables, out)


def _rehashed(before: dict[str, pa.Table], after: dict[str, pa.Table]) -> dict[str, pa.Table]:
    assemblies = after.get("context_assemblies")
    records = before.get("assembly_records")
    if assemblies is None or records is None or "selection_hash" not in assemblies.column_names:
        return after
    renamed = after["assembly_records"]

    def rows_of(table: pa.Table, aid: str) -> list[dict[str, Any]]:
        return table.filter(pc.equal(table["assembly_id"], aid)).to_pylist()

    # a bundle holds one request (and the few its trace names): one hash per request
    old_ids = before["context_assemblies"]["assembly_id"].to_pylist()
    new_ids = assemblies["assembly_id"].to_pylist()
    stored = assemblies["selection_hash"].to_pylist()
    hashes = []
    for old, new, recorded in zip(old_ids, new_ids, stored):
        if recorded is not None and recorded == selection_hash(rows_of(records, old)):
            recorded = selection_hash(rows_of(renamed, new))
        hashes.append(recorded)
    i = assemblies.schema.get_field_index("selection_hash")
    after["context_assemblies"] = assemblies.set_column(
        i, assemblies.schema.field(i), pa.array(hashes, assemblies.schema.field(i).type))
    return after


def _set(table: pa.Table, col: str, values: list[Any]) -> pa.Table:
    i = table.schema.get_field_index(col)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def _json_masked(value: str | None, privacy: str | None, masker: Masker,
                 keep_length: bool) -> str | None:
    """JSON text with its secrets masked, still valid JSON (and as long, with
    ``keep_length``). A restricted record's JSON is dropped (null)."""
    if value is None:
        return None
    if is_restricted(privacy):
        masker.text(value, privacy)  # counted
        return None
    masked = masker.text(value)
    if masked == value:
        return value
    if not keep_length:
        return masked if _is_json(masked) else json.dumps(masked)
    if len(masked) <= len(value) and _is_json(masked):
        return masked + " " * (len(value) - len(masked))  # JSON allows trailing blanks
    # the markers are longer than the values they replace: blank the values in place
    chars = list(value)
    for span in find_secrets(value):
        chars[span.start:span.end] = "*" * (span.end - span.start)
    starred = "".join(chars)
    if _is_json(starred):
        return starred
    return "{}" + " " * max(len(value) - 2, 0)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------- blobs and policies


def _blobs(store: Any, piece: "ExportSlice", tables: dict[str, pa.Table], masker: Masker) -> _Blobs:
    """The bodies the slice's artifacts name, read (and checked) from the store's export.
    Masked: a restricted artifact's body is withheld (its storage_ref cleared) and a text
    body has its secrets replaced (the artifact then names the masked body by its sha256;
    its byte_size, which a replay budgets, stays the recorded one); a body that is not text
    cannot be checked for secrets and is withheld too."""
    out = _Blobs()
    arts = tables.get("tool_artifacts")
    if arts is None or not arts.num_rows:
        return out
    rows = arts.to_pylist()
    changed = False
    for row in rows:
        ref = row.get("storage_ref")
        if not ref:
            continue
        try:
            body = store.read_blob(piece.export_id, ref, row.get("sha256"))
        except ContextlensError:
            out.missing.append(row["artifact_id"])
            continue
        if not masker.reveal:
            if is_restricted(row.get("privacy_class")):
                out.withheld.append(row["artifact_id"])
                row["storage_ref"] = None
                changed = True
                continue
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                out.withheld.append(row["artifact_id"])
                row["storage_ref"] = None
                changed = True
                continue
            masked = masker.text(text)
            if masked != text:
                body = masked.encode("utf-8")
        sha = hashlib.sha256(body).hexdigest()
        if row.get("sha256") != sha or ref != f"blobs/{sha}":
            row["sha256"], row["storage_ref"] = sha, f"blobs/{sha}"
            changed = True
        out.bodies.append(body)
    if changed:
        tables["tool_artifacts"] = pa.Table.from_pylist(rows, schema=arts.schema)
    return out


def _policy_texts(registry: Any) -> dict[str, str]:
    """version -> TOML text of the registry's versions, from its folder (an in-memory
    registry has none to copy)."""
    folder = Path(getattr(registry, "folder", "") or "")
    out: dict[str, str] = {}
    if not folder.is_dir():
        return out
    for version in registry.versions():
        path = folder / f"{version}.toml"
        if path.is_file() and not path.is_symlink():
            out[version] = read_text_capped(path, POLICY_CAP, "a policy file")
    return out


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)
