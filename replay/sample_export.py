"""The sample export: the committed story sample, and large synthetic exports for benchmarks.

``write_sample(out_dir, seed=7)`` writes the story sample (four conversations, every story
of DESIGN.md section 7, the v5 freshness incident and a drifted assembler build), byte for
byte the same for a given seed. ``write_scale(out_dir, N, drift=0.01)`` writes N assemblies
of about 24 records each whose recorded rows are the reference assembler's (replicas of
template conversations, generated column by column with Arrow), a known fraction of them
drifted on purpose and listed in ``drift.json``. ``write_big_assembly`` writes one request
over a conversation of about 2,000 candidates.

Files in ``out_dir`` that are not part of an export (``__init__.py`` in ``sample_data/``)
are kept: the export is written beside ``out_dir`` and its entries are moved in.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest.contract import TABLES
from ingest.interrupts import WriteFailed
from ingest.writer import ExportWriter

if TYPE_CHECKING:  # pragma: no cover
    from .sample.scale import ScaleResult
    from .snapshot import Request

SAMPLE_CREATED_AT = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
PRODUCER = "contextlens-sample/1"
ASSEMBLER_VERSION = "ref-1.0.0"
DRIFT_ASSEMBLER_VERSION = "ref-1.0.0-bad"
DEFAULT_DRIFT = 0.01  # the fraction of a scale export's assemblies recorded with drift

# scenario tag names (without the "scenario:" prefix) the story sample carries
SCENARIOS: tuple[str, ...] = (
    "deferred_document_picker", "multi_tool_file_generation", "stale_connected_app_memory",
    "multi_skill_runtime_state", "participant_visibility", "contradiction_supersession",
    "broken_provenance", "exact_raw_csv_rehydration", "branch_isolation", "retry_critical_errors",
    "google_derived_privacy", "subagent_continuation", "autonomous_discussion_attribution",
    "child_subagent_artifacts", "parent_resume", "scheduled_task", "branch_send",
    "incident_calendar_freshness", "drift_supersession", "token_budget_growth",
    "rehydration_byte_budget",
)

# context windows (input tokens) of the sample's models, recorded as context_limit
MODEL_CONTEXT: dict[str, int] = {
    "claude-sonnet-4-5": 200_000, "claude-haiku-4-5": 200_000, "claude-opus-4-1": 200_000,
    "gpt-4.1": 1_047_576,
}

# the contract's hash rule, importable from here by the sample's callers
from ingest.contract import selection_hash  # noqa: E402,F401


def recorded_request(req: Any, run: dict[str, Any], policy: Any, assembler_version: str) -> "Request":
    """The Request a generated request was assembled for: its run's facts, and the budgets
    the recorded runtime used (the policy's, the token budget capped by the model's window)."""
    from .snapshot import Request

    limit = req.context_limit if req.context_limit is not None else MODEL_CONTEXT[run["model"]]
    return Request(
        assembly_id=req.assembly_id, model_run_id=req.model_run_id,
        conversation_id=run["conversation_id"], branch_id=run["branch_id"],
        participant_id=run["participant_id"], runtime_kind=run["runtime_kind"],
        provider=run["provider"], model=run["model"], assembled_at=req.assembled_at,
        policy_version=req.policy_version, assembler_version=assembler_version,
        token_budget=min(policy.budget.token_budget, limit),
        byte_budget=policy.rehydration.byte_budget,
        exact_evidence_ids=list(req.exact_evidence_ids), tags=list(req.tags),
        context_limit=limit)


def write_sample(out_dir: Path, seed: int = 7, scale: int | None = None,
                 drift: float = DEFAULT_DRIFT) -> Path:
    """Write the story sample (``scale=None``) or a synthetic export of ``scale`` assemblies
    (see ``write_scale``) into ``out_dir``; returns ``out_dir``."""
    out_dir = Path(out_dir)
    if scale is None:
        return _write_into(out_dir, f"sample-seed{seed}", lambda w: _fill_story(w, seed))
    write_scale(out_dir, scale, seed=seed, drift=drift)
    return out_dir


def write_scale(out_dir: Path, scale: int, seed: int = 7, drift: float = DEFAULT_DRIFT) -> "ScaleResult":
    """Write ``scale`` assemblies whose recorded rows are the reference assembler's, with
    ``round(scale * drift)`` of them drifted on purpose (chosen by ``seed``); the drifted
    ids are listed in ``out_dir/drift.json``. Same seed, same bytes."""
    from .sample.scale import DRIFT_FILE, fill_scale

    if scale < 1:
        raise ValueError("scale must be at least 1")
    if not 0.0 <= drift <= 1.0:
        raise ValueError("drift must be a fraction between 0 and 1")
    found: list[Any] = []

    def fill(w: ExportWriter) -> dict[str, Any]:
        found.append(fill_scale(w, scale, seed, drift))
        return {DRIFT_FILE: found[0].to_json()}

    _write_into(Path(out_dir), f"scale-{scale}-seed{seed}", fill)
    return found[0]


def write_big_assembly(out_dir: Path, candidates: int = 2000, seed: int = 1) -> str:
    """An export of one conversation with about ``candidates`` candidate records and one
    faithful request at its end (for benchmarks); returns the request's assembly id."""
    from .sample.scale import fill_big_assembly

    found: list[str] = []

    def fill(w: ExportWriter) -> None:
        found.append(fill_big_assembly(w, candidates, seed))

    _write_into(Path(out_dir), f"big-{candidates}-seed{seed}", fill)
    return found[0]


# ---------------------------------------------------------------------------- placement
def _export_entries() -> set[str]:
    names = {"manifest.json", "blobs", "policies", "drift.json"}
    for t in TABLES:
        names.update({f"{t}.parquet", t})
    return names


def _write_into(out_dir: Path, export_id: str, fill: Any) -> Path:
    stage = out_dir.parent / f".{out_dir.name}.sample-tmp"
    if stage.exists():
        shutil.rmtree(stage)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        writer = ExportWriter(stage, export_id=export_id, producer=PRODUCER,
                              created_at=SAMPLE_CREATED_AT, overwrite=True)
        with writer:
            side = fill(writer)
        # files beside the export (not part of it): what a generator wants its callers to know
        for name, content in sorted((side or {}).items()):
            (stage / name).write_text(json.dumps(content, indent=1) + "\n")
    except (OSError, WriteFailed) as err:
        # a full disk: one line naming the folder asked for, and no staging folder left
        shutil.rmtree(stage, ignore_errors=True)
        raise WriteFailed(out_dir, err.reason if isinstance(err, WriteFailed) else err) from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)  # Ctrl+C, SIGTERM: nothing left either
        raise
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in sorted(_export_entries()):
        old = out_dir / name
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        elif old.exists() or old.is_symlink():
            old.unlink()
    for entry in sorted(stage.iterdir()):
        os.replace(entry, out_dir / entry.name)
    stage.rmdir()
    return out_dir


# ---------------------------------------------------------------------------- story sample
def _fill_story(w: ExportWriter, seed: int) -> None:
    from .assembler import ReferenceAssembler
    from .policy import PolicyRegistry
    from .sample.drift import InvertedSupersessionAssembler
    from .sample.policies import POLICY_TOML
    from .sample.stories import build
    from .verify import stored_totals
    from .snapshot import Request, Snapshot

    g = build(seed)
    for version, text in POLICY_TOML.items():
        w.add_policy(version, text)
    for sha in sorted(g.blobs):
        w.add_blob(g.blobs[sha])

    registry = PolicyRegistry.from_texts(POLICY_TOML)
    snapshot = Snapshot(g.tables)
    builds = {ASSEMBLER_VERSION: ReferenceAssembler(),
              DRIFT_ASSEMBLER_VERSION: InvertedSupersessionAssembler()}
    runs = {r["model_run_id"]: r for r in g.tables["model_runs"]}
    assemblies: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    for req in sorted(g.requests, key=lambda r: r.assembly_id):
        policy = registry.get(req.policy_version)
        run = runs[req.model_run_id]
        request = recorded_request(req, run, policy, req.assembler_version)
        out = builds[req.assembler_version].assemble(snapshot, request, policy)
        assemblies.append({
            "assembly_id": req.assembly_id, "model_run_id": req.model_run_id,
            "conversation_id": request.conversation_id, "branch_id": request.branch_id,
            "participant_id": request.participant_id, "runtime_kind": request.runtime_kind,
            "provider": request.provider, "model": request.model,
            "policy_version": req.policy_version, "assembler_version": req.assembler_version,
            "assembled_at": req.assembled_at,
            "token_budget": request.token_budget,
            "byte_budget": request.byte_budget,
            "context_limit": request.context_limit,
            "exact_evidence_ids": req.exact_evidence_ids,
            "baseline_tokens": out.baseline_tokens,
            "baseline_message_count": out.baseline_message_count,
            # assembled_tokens and the counts, as verify reads them off the records
            **stored_totals(out.records, req.tags),
            "graph_query_ms": round(g.rng.uniform(1.5, 9.0), 2),
            "policy_eval_ms": round(g.rng.uniform(0.4, 3.0), 2),
            "serialization_ms": round(g.rng.uniform(0.2, 1.5), 2),
            "selection_hash": out.selection_hash,
            "payload_sha256": None,
            "tags": req.tags,
        })
        records.extend(sorted(out.records, key=lambda r: (r["record_kind"], r["record_id"])))
        decisions.extend(out.decisions)

    for name in ("conversations", "branches", "participants", "messages", "model_runs",
                 "tool_calls", "tool_artifacts", "tool_memories", "skill_states", "checkpoints"):
        w.write(name, g.tables.get(name, []))
    w.write("context_assemblies", assemblies)
    w.write("assembly_records", records)
    w.write("policy_decisions", decisions)
