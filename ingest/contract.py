"""The export contract (v1): every table, column, type and enumeration in one place.

(Long on purpose: the contract is the one definition the writer, the validator, the store's
DDL and the docs are generated from or checked against; split, it would have two homes.)

This module is the single source of truth. The Arrow schemas that the writer and the
validator use, and the pydantic models used at the edges (one row checked at a time, never
on a hot path), are both generated from ``TABLES`` below; ``docs/export-format.md`` states
the same contract in prose and a test keeps the two in step.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import Enum
import hashlib
import json
from typing import Any, Iterable, Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, create_model

from .sql import registered, scratch_connection

SCHEMA_VERSION = "1"

# --------------------------------------------------------------------------- enumerations

ENUMS: dict[str, tuple[str, ...]] = {
    "participant_kind": ("model", "user", "moderator", "subagent"),
    "message_role": ("system", "user", "assistant", "tool"),
    "runtime_kind": (
        "chat",
        "multi_model",
        "autonomous_discussion",
        "subagent_child",
        "parent_resume",
        "scheduled_task",
        "branch_send",
    ),
    "model_run_status": ("running", "succeeded", "failed", "timed_out", "cancelled"),
    "tool_call_status": ("pending", "succeeded", "failed", "deferred"),
    "privacy_class": (
        "public",
        "internal",
        "user_private",
        "oauth_derived",
        "google_derived",
        "secret_adjacent",
    ),
    "visibility_scope": ("participant_private", "branch", "conversation", "audit_only"),
    "freshness_class": ("volatile", "session", "bounded", "durable", "permanent"),
    "retention_class": ("keep", "archive", "redact", "hash_only", "delete"),
    "promotion_policy": ("auto", "explicit", "never"),
    "checkpoint_kind": ("continuation", "parent_resume"),
    "record_kind": (
        "message",
        "tool_call",
        "tool_artifact",
        "tool_memory",
        "skill_state",
        "checkpoint",
    ),
    "decision": ("included", "omitted"),
    "rendering": (
        "verbatim",
        "compact_memory",
        "stale_marker",
        "reference",
        "rehydrated_raw",
        "summary",
        "revalidation_hint",
        # transcripts: a tool result a runtime cleared in place (a placeholder is sent)
        "cleared",
    ),
    "policy_family": (
        "branch",
        "ownership",
        "visibility",
        "privacy",
        "freshness",
        "promotion",
        "rehydration",
        "contradiction",
        "recovery",
        "retention",
        "window",
        "budget",
    ),
    "reason_code": (
        # reasons a record is included
        "in_window",
        "lineage",
        "conversation_shared",
        "compact_memory",
        "stale_marker",
        "conflict_both_sides",
        "recovery_protected",
        "rehydrated_exact",
        "promoted_child_output",
        "checkpoint_restore",
        "skill_active",
        "speaker_context",
        # transcripts: sent as a placeholder after a runtime cleared it in place
        # (Claude Code's microcompaction, SWE-agent's last_n_observations)
        "elided",
        # reasons a record is omitted
        "outside_window",
        "sibling_branch",
        "participant_private",
        "audit_only",
        "child_not_promoted",
        "privacy_restricted",
        "provider_restricted",
        "stale",
        "superseded",
        "over_budget",
        "byte_budget_exceeded",
        "raw_replaced_by_memory",
        "not_yet_created",
        "retention_removed",
        "broken_provenance",
        "redundant",
        "owner_unknown",
        # transcripts: records dropped by a runtime's own compaction
        "compacted",
        # transcripts: records the runtime's own record shows outside the context it sent
        # (a Letta agent's evicted messages, messages an inspect_ai model call was not sent)
        "evicted",
    ),
    "policy_outcome": ("allow", "deny", "mark", "protect", "rehydrate", "replace"),
}

# Claude Code's text for a tool result it cleared in place (microcompaction)
CLEARED_PLACEHOLDER = "[Old tool result content cleared]"
# Transcript facts: an extra JSON text column that transcript adapters write on messages,
# tool_calls, tool_artifacts and model_runs (not part of the contract; absent from other
# exports). It holds what a runtime policy needs to replay a transcript request from the
# graph alone (replay/runtimes.py): a record's thread and its prompt order in it, a model
# run's history bounds and the runtime settings it ran with. docs/transcripts.md lists the keys.
TRANSCRIPT_FACTS = "transcript_facts"
TRANSCRIPT_FACT_TABLES: tuple[str, ...] = ("messages", "tool_calls", "tool_artifacts", "model_runs")

# a record rendered ``cleared`` says in its detail what was sent instead: '...; sent as "<text>"'
SENT_AS = '; sent as "'


def sent_as(text: str) -> str:
    """The detail clause naming the placeholder a runtime sent for a cleared record."""
    return f'{SENT_AS}{text}"'


def cleared_text(detail: str | None) -> str:
    """What a record rendered ``cleared`` was sent as, from its detail."""
    head, found, tail = (detail or "").rpartition(SENT_AS)
    if found and tail.endswith('"'):
        return tail[:-1]
    return "[content cleared by the runtime]"

INCLUDED_REASONS = frozenset(ENUMS["reason_code"][:ENUMS["reason_code"].index("outside_window")])
OMITTED_REASONS = frozenset(ENUMS["reason_code"]) - INCLUDED_REASONS

# Optional columns added to contract v1 after its first exports: an export without one
# still loads and reads it as null (docs/export-format.md, Versioning).
ADDED_COLUMNS: frozenset[tuple[str, str]] = frozenset({("context_assemblies", "context_limit")})

# Privacy classes that are masked on screen and in exports unless the user reveals them.
RESTRICTED_PRIVACY = frozenset({"oauth_derived", "google_derived", "secret_adjacent"})


def _enum(name: str) -> type[Enum]:
    return Enum(name, {v: v for v in ENUMS[name]}, type=str)  # type: ignore[return-value]


# --------------------------------------------------------------------------- columns


@dataclass(frozen=True)
class Column:
    """One column of an export table.

    ``kind`` is one of: str, int, float, bool, ts (UTC timestamp), list (list of strings),
    json (a string holding JSON). ``enum`` names an entry of ``ENUMS``.
    """

    name: str
    kind: str
    nullable: bool = False
    enum: str | None = None

    @property
    def arrow_type(self) -> pa.DataType:
        return ARROW_TYPES[self.kind]


ARROW_TYPES: dict[str, pa.DataType] = {
    "str": pa.string(),
    "json": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "ts": pa.timestamp("us", tz="UTC"),
    "list": pa.list_(pa.string()),
}

# DuckDB column types for the same kinds, used when the store creates empty tables.
DUCKDB_TYPES: dict[str, str] = {
    "str": "VARCHAR",
    "json": "VARCHAR",
    "int": "BIGINT",
    "float": "DOUBLE",
    "bool": "BOOLEAN",
    "ts": "TIMESTAMPTZ",
    "list": "VARCHAR[]",
}


def _cols(spec: str) -> tuple[Column, ...]:
    """Parse a compact column spec: ``name:kind[?][=enum]`` separated by whitespace."""
    out = []
    for token in spec.split():
        name, rest = token.split(":")
        enum = None
        if "=" in rest:
            rest, enum = rest.split("=")
        nullable = rest.endswith("?")
        kind = rest.rstrip("?")
        assert kind in ARROW_TYPES, (name, kind)
        assert enum is None or enum in ENUMS, (name, enum)
        out.append(Column(name, kind, nullable, enum))
    return tuple(out)


@dataclass(frozen=True)
class ForeignKey:
    column: str
    table: str
    target: str
    # A dangling reference in a "soft" key is a warning (shown as broken provenance);
    # in a hard key it is an error.
    soft: bool = False


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    foreign_keys: tuple[ForeignKey, ...] = ()

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema(
            [pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in self.columns]
        )


TABLES: dict[str, Table] = {}


def _table(name: str, spec: str, pk: tuple[str, ...], fks: tuple[ForeignKey, ...] = ()) -> None:
    TABLES[name] = Table(name, _cols(spec), pk, fks)


_table(
    "conversations",
    "conversation_id:str title:str owner_id:str created_at:ts",
    ("conversation_id",),
)
_table(
    "branches",
    "branch_id:str conversation_id:str parent_branch_id:str? fork_message_id:str? "
    "name:str created_at:ts",
    ("branch_id",),
    (
        ForeignKey("conversation_id", "conversations", "conversation_id"),
        ForeignKey("parent_branch_id", "branches", "branch_id"),
        ForeignKey("fork_message_id", "messages", "message_id", soft=True),
    ),
)
_table(
    "participants",
    "participant_id:str conversation_id:str label:str kind:str=participant_kind "
    "provider:str? model:str?",
    ("participant_id",),
    (ForeignKey("conversation_id", "conversations", "conversation_id"),),
)
_table(
    "messages",
    "message_id:str conversation_id:str branch_id:str parent_message_id:str? "
    "role:str=message_role participant_id:str? model_run_id:str? speaker_label:str? "
    "content:str content_tokens:int visibility_scope:str=visibility_scope created_at:ts",
    ("message_id",),
    (
        ForeignKey("conversation_id", "conversations", "conversation_id"),
        ForeignKey("branch_id", "branches", "branch_id"),
        ForeignKey("parent_message_id", "messages", "message_id", soft=True),
        ForeignKey("participant_id", "participants", "participant_id"),
        ForeignKey("model_run_id", "model_runs", "model_run_id", soft=True),
    ),
)
_table(
    "model_runs",
    "model_run_id:str conversation_id:str branch_id:str participant_id:str "
    "trigger_message_id:str? runtime_kind:str=runtime_kind parent_model_run_id:str? "
    "subagent_batch_id:str? provider:str model:str status:str=model_run_status "
    "started_at:ts ended_at:ts?",
    ("model_run_id",),
    (
        ForeignKey("conversation_id", "conversations", "conversation_id"),
        ForeignKey("branch_id", "branches", "branch_id"),
        ForeignKey("participant_id", "participants", "participant_id"),
        ForeignKey("trigger_message_id", "messages", "message_id", soft=True),
        ForeignKey("parent_model_run_id", "model_runs", "model_run_id", soft=True),
    ),
)
_table(
    "tool_calls",
    "tool_call_id:str model_run_id:str tool_name:str arguments_json:json "
    "status:str=tool_call_status retryable:bool parallel_group:str? requested_at:ts "
    "completed_at:ts?",
    ("tool_call_id",),
    (ForeignKey("model_run_id", "model_runs", "model_run_id", soft=True),),
)
_table(
    "tool_artifacts",
    "artifact_id:str tool_call_id:str tool_name:str status:str=tool_call_status "
    "result_preview:str error:str? byte_size:int sha256:str storage_ref:str? "
    "content_type:str content_tokens:int privacy_class:str=privacy_class "
    "visibility_scope:str=visibility_scope owner_participant_id:str "
    "owner_model_run_id:str shared_with:list branch_id:str "
    "retention_class:str=retention_class created_at:ts",
    ("artifact_id",),
    (
        ForeignKey("tool_call_id", "tool_calls", "tool_call_id", soft=True),
        ForeignKey("owner_model_run_id", "model_runs", "model_run_id", soft=True),
        ForeignKey("branch_id", "branches", "branch_id"),
    ),
)
_table(
    "tool_memories",
    "memory_id:str conversation_id:str branch_id:str source_artifact_ids:list "
    "source_tool_names:list summary:str structured_json:json? content_tokens:int "
    "confidence:float trust_source:str ambiguity_notes:str? "
    "privacy_class:str=privacy_class freshness_class:str=freshness_class observed_at:ts "
    "stale_after:ts? revalidation_tools:list provenance_locators:list conflicts_with:list "
    "supersedes:list superseded_by:str? promotion_policy:str=promotion_policy "
    "promoted:bool visibility_scope:str=visibility_scope owner_participant_id:str? "
    "owner_model_run_id:str? created_at:ts",
    ("memory_id",),
    (
        ForeignKey("conversation_id", "conversations", "conversation_id"),
        ForeignKey("branch_id", "branches", "branch_id"),
        # every element of the list must name an artifact; a missing one is broken provenance
        ForeignKey("source_artifact_ids", "tool_artifacts", "artifact_id", soft=True),
        ForeignKey("superseded_by", "tool_memories", "memory_id", soft=True),
    ),
)
_table(
    "skill_states",
    "skill_state_id:str model_run_id:str loaded_skills:list active_profiles:list "
    "direct_tools:list content_tokens:int created_at:ts",
    ("skill_state_id",),
    (ForeignKey("model_run_id", "model_runs", "model_run_id", soft=True),),
)
_table(
    "checkpoints",
    "checkpoint_id:str model_run_id:str kind:str=checkpoint_kind state_json:json "
    "content_tokens:int created_at:ts",
    ("checkpoint_id",),
    (ForeignKey("model_run_id", "model_runs", "model_run_id", soft=True),),
)
_table(
    "context_assemblies",
    "assembly_id:str model_run_id:str conversation_id:str branch_id:str participant_id:str "
    "runtime_kind:str=runtime_kind provider:str model:str policy_version:str "
    "assembler_version:str assembled_at:ts token_budget:int byte_budget:int context_limit:int? "
    "exact_evidence_ids:list baseline_tokens:int assembled_tokens:int "
    "baseline_message_count:int assembled_message_count:int raw_artifact_count:int "
    "selected_memory_count:int rehydrated_artifact_count:int graph_query_ms:float "
    "policy_eval_ms:float serialization_ms:float selection_hash:str payload_sha256:str? "
    "tags:list",
    ("assembly_id",),
    (
        ForeignKey("model_run_id", "model_runs", "model_run_id", soft=True),
        ForeignKey("conversation_id", "conversations", "conversation_id"),
        ForeignKey("branch_id", "branches", "branch_id"),
        ForeignKey("participant_id", "participants", "participant_id"),
    ),
)
_table(
    "assembly_records",
    "assembly_id:str record_kind:str=record_kind record_id:str decision:str=decision "
    "rendering:str?=rendering position:int? policy_family:str=policy_family "
    "reason_code:str=reason_code detail:str tokens:int",
    ("assembly_id", "record_kind", "record_id"),
    (ForeignKey("assembly_id", "context_assemblies", "assembly_id"),),
)
_table(
    "policy_decisions",
    "decision_id:str assembly_id:str step:int record_kind:str=record_kind record_id:str "
    "policy_family:str=policy_family outcome:str=policy_outcome reason_code:str=reason_code "
    "detail:str",
    ("decision_id",),
    (ForeignKey("assembly_id", "context_assemblies", "assembly_id"),),
)

# Where each record kind lives: table and id column.
RECORD_TABLES: dict[str, tuple[str, str]] = {
    "message": ("messages", "message_id"),
    "tool_call": ("tool_calls", "tool_call_id"),
    "tool_artifact": ("tool_artifacts", "artifact_id"),
    "tool_memory": ("tool_memories", "memory_id"),
    "skill_state": ("skill_states", "skill_state_id"),
    "checkpoint": ("checkpoints", "checkpoint_id"),
}

TABLE_ORDER: tuple[str, ...] = tuple(TABLES)

# --------------------------------------------------------------------------- column roles
#
# What a column holds decides how its values are checked for secrets before they are shown
# (readmodel/masking.py):
# - "text": free text from a log (content, titles, labels, previews, details, errors, JSON,
#   locators): the whole secret detector (``ingest.secrets.mask_secrets``: token shapes,
#   key-named values, entropy);
# - "identifier": ids, tags, model, provider, tool and skill names, versions, digests:
#   known secret shapes only (``ingest.secrets.identifier_pattern``, one vectorized regular
#   expression), never entropy (a random run id is an id, not a key);
# - "enum" (a value of ``ENUMS``) and "number" (ints, floats, booleans, times): never
#   checked, nothing a log writes there can be a secret.
# A column name has one role in every table that has it.

FREE_TEXT_COLUMNS = frozenset({
    "title", "name", "label", "speaker_label", "content", "arguments_json", "result_preview",
    "error", "storage_ref", "summary", "structured_json", "ambiguity_notes",
    "provenance_locators", "state_json", "detail",
})
COLUMN_ROLES = ("text", "identifier", "enum", "number")


def column_role(column: Column) -> str:
    """``column``'s role: "text", "identifier", "enum" or "number" (see above)."""
    if column.enum is not None:
        return "enum"
    if column.kind in ("int", "float", "bool", "ts"):
        return "number"
    if column.kind == "json" or column.name in FREE_TEXT_COLUMNS:
        return "text"
    return "identifier"


def _roles_by_name() -> dict[str, str]:
    roles: dict[str, str] = {}
    for table in TABLES.values():
        for column in table.columns:
            role = column_role(column)
            assert roles.setdefault(column.name, role) == role, (table.name, column.name)
    return roles


COLUMN_ROLE_BY_NAME: dict[str, str] = _roles_by_name()
# the columns, by name, whose values are identifiers (checked for known secret shapes only)
IDENTIFIER_COLUMNS = frozenset(n for n, r in COLUMN_ROLE_BY_NAME.items() if r == "identifier")

# --------------------------------------------------------------------------- pydantic models

_PY_TYPES: dict[str, Any] = {
    "str": str,
    "json": str,
    "int": int,
    "float": float,
    "bool": bool,
    "ts": dt.datetime,
    "list": list[str],
}


def _model_for(table: Table) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for c in table.columns:
        py: Any = _enum(c.enum) if c.enum else _PY_TYPES[c.kind]
        if c.nullable:
            fields[c.name] = (Optional[py], None)
        else:
            fields[c.name] = (py, ...)
    name = "".join(p.capitalize() for p in table.name.split("_")) + "Row"
    return create_model(  # type: ignore[call-overload]
        name,
        __config__=ConfigDict(extra="allow", strict=False, use_enum_values=True),
        **fields,
    )


# ``ROW_MODELS``: a pydantic model per table (the row checks of the tests), made on first use
# (module ``__getattr__``): creating the 13 models costs a tenth of a second that every
# command importing the contract (``contextlens list`` among them) would pay for nothing.
_row_models: dict[str, type[BaseModel]] | None = None


def __getattr__(name: str) -> Any:
    global _row_models
    if name != "ROW_MODELS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _row_models is None:
        _row_models = {table: _model_for(t) for table, t in TABLES.items()}
    return _row_models


class TableManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rows: int
    # sha256 over the table's files, in sorted relative-path order (see docs/export-format.md)
    sha256: str
    files: list[str]


class Manifest(BaseModel):
    """manifest.json at the root of an export folder."""

    model_config = ConfigDict(extra="allow")
    export_id: str
    schema_version: str
    producer: str
    created_at: dt.datetime
    tables: dict[str, TableManifest]


# --------------------------------------------------------------------------- selection hash

# The fields of a record that make up an assembly's selection (docs/export-format.md).
SELECTION_FIELDS = ("record_kind", "record_id", "decision", "rendering", "position")


def selection_hash(rows: Iterable[Mapping[str, Any] | Sequence[Any]] | pa.Table) -> str:
    """sha256 of the canonical JSON of [record_kind, record_id, decision, rendering, position]
    for every record of one assembly, sorted by (record_kind, record_id).

    ``rows`` are assembly_records rows (dicts or an Arrow table with those columns) or
    5-item sequences in that order. Equal selections hash equally on any machine.
    """
    if isinstance(rows, pa.Table):
        rows = rows.select(list(SELECTION_FIELDS)).to_pylist()
    items = []
    for row in rows:
        if type(row) is dict or isinstance(row, Mapping):
            pos = row["position"]
            items.append([row["record_kind"], row["record_id"], row["decision"], row["rendering"],
                          int(pos) if pos is not None else None])
        else:
            item = list(row)
            if item[4] is not None:
                item[4] = int(item[4])
            items.append(item)
    items.sort(key=_kind_id)
    text = json.dumps(items, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _kind_id(item: list[Any]) -> tuple[Any, Any]:
    return (item[0], item[1])


# The canonical JSON of a string is the string in quotes when it is printable ASCII without
# a quote or a backslash (json.dumps escapes nothing else); an assembly with any other
# character in a hashed string is hashed by the Python function. So is one with a repeated
# (record_kind, record_id), whose order the input rows decide; a collision of DuckDB's hash()
# only sends an assembly there needlessly.
_JSON_STR = """coalesce('"' || {0} || '"', 'null')"""
_HASHES_SQL = f"""
WITH r AS (
    SELECT assembly_id::VARCHAR AS a, record_kind::VARCHAR AS k, record_id::VARCHAR AS i,
           decision::VARCHAR AS d, rendering::VARCHAR AS g, position::BIGINT AS p
    FROM records
)
SELECT a AS assembly_id,
       sha256('[' || string_agg(
           '[' || {_JSON_STR.format('k')} || ',' || {_JSON_STR.format('i')} || ','
               || {_JSON_STR.format('d')} || ',' || {_JSON_STR.format('g')} || ','
               || coalesce(p::VARCHAR, 'null') || ']',
           ',' ORDER BY k, i) || ']') AS selection_hash,
       NOT bool_or(k IS NULL OR i IS NULL
                   OR regexp_matches(concat(k, i, d, g), '[^ !#-\\[\\]-~]'))
           AND count(*) = count(DISTINCT hash(k, i)) AS exact
FROM r GROUP BY a ORDER BY a
"""
_HASHES_SCHEMA = pa.schema([("assembly_id", pa.string()), ("selection_hash", pa.string())])


def selection_hashes(records: pa.Table) -> pa.Table:
    """``selection_hash`` of every assembly of ``records`` (assembly_records rows: at least
    assembly_id and the ``SELECTION_FIELDS``) at once: a table (assembly_id, selection_hash)
    ordered by assembly_id, one row per assembly that has records, byte-identical to
    ``selection_hash`` of each assembly's rows.

    DuckDB writes the canonical JSON of an assembly whose hashed strings are printable ASCII
    without quotes or backslashes and whose (record_kind, record_id) pairs are unique; any
    other assembly (a character JSON escapes; a repeated pair, whose order the input rows
    decide) is hashed by ``selection_hash`` itself.
    """
    missing = [c for c in ("assembly_id", *SELECTION_FIELDS) if c not in records.column_names]
    if missing:
        raise ValueError(f"selection_hashes: records lack column(s) {', '.join(missing)}")
    records = records.select(["assembly_id", *SELECTION_FIELDS])
    if records.num_rows == 0:
        return _HASHES_SCHEMA.empty_table()
    position = records.schema.field("position").type
    if not (pa.types.is_integer(position) or pa.types.is_null(position)):
        # the Python function truncates a float position; SQL would round it
        return _python_hashes(records, None)
    con = scratch_connection()
    with registered(con, records=records):
        out = con.sql(_HASHES_SQL).to_arrow_table()
    exact = out.column("exact")
    if pc.all(exact).as_py():
        return out.select(["assembly_id", "selection_hash"]).cast(_HASHES_SCHEMA)
    inexact = out.filter(pc.invert(exact)).column("assembly_id")
    fixed = _python_hashes(records, inexact)
    kept = out.filter(exact).select(["assembly_id", "selection_hash"]).cast(_HASHES_SCHEMA)
    return pa.concat_tables([kept, fixed]).sort_by("assembly_id")




def _python_hashes(records: pa.Table, assembly_ids: pa.ChunkedArray | None) -> pa.Table:
    """``selection_hash`` per assembly of ``records`` (only ``assembly_ids``, or all),
    each assembly's rows in their input order."""
    if assembly_ids is not None:
        records = records.filter(pc.is_in(records.column("assembly_id"),
                                          value_set=assembly_ids.combine_chunks()))
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in records.to_pylist():
        groups.setdefault(row["assembly_id"], []).append(row)
    ids = sorted(groups)
    return pa.table({"assembly_id": ids, "selection_hash": [selection_hash(groups[a]) for a in ids]},
                    schema=_HASHES_SCHEMA)
