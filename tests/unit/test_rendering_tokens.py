"""A rendering costs the text the model receives: a stale marker or revalidation hint its
memory and its own words, a summary its record and the "[summary]" label, a reference its
whole text (the pointer and the preview, not the raw body it stands for). The words are
counted as the producer counted the record's content (the sample's ``tokens_of``).

Checked against what the prompt view shows (``render_prompt``) on the recorded sample, and
against the oracle's replays of generated graphs under every policy; the v4/v5 incident then
reads the right way round: v4's stale markers cost more than v5's bare memories.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from support.cli import run
from support.graphs import random_graph, random_requests
from support.stores import read_table

from ingest.store import Store
from replay.assembler import assemble
from replay.policy import load_registry
from replay.render import body_as, render_prompt
from replay.sample.graph import tokens_of

REGISTRY = load_registry(None)
WRAPPED = ("stale_marker", "revalidation_hint", "summary", "reference")
# the graph table and content column a prompt shows for each kind (ingest/store/assembly.py)
SOURCE = {"tool_memory": ("tool_memories", "memory_id", "summary"),
          "tool_artifact": ("tool_artifacts", "artifact_id", "result_preview"),
          "checkpoint": ("checkpoints", "checkpoint_id", "state_json")}


def expected_tokens(rendering: str, body: str, content: str, content_tokens: int) -> int:
    """What the model receives, counted: a reference's whole text; otherwise the record's
    own tokens and the words the rendering puts before its content."""
    if rendering == "reference":
        return tokens_of(body)
    assert body.endswith(content) and len(body) > len(content), (rendering, body)
    return content_tokens + tokens_of(body[:len(body) - len(content)])


def test_recorded_renderings_cost_what_the_prompt_shows(sample_db: Path, sample_export: Path) -> None:
    tokens = {}
    for table, key in (("tool_memories", "memory_id"), ("checkpoints", "checkpoint_id"),
                       ("skill_states", "skill_state_id"), ("tool_artifacts", "artifact_id")):
        rows = read_table(sample_export, table)
        tokens.update(zip(rows.column(key).to_pylist(), rows.column("content_tokens").to_pylist()))
    seen: set[str] = set()
    with Store.open(sample_db) as store:
        for aid in read_table(sample_export, "context_assemblies").column("assembly_id").to_pylist():
            for part in render_prompt(store, aid):
                if part.rendering not in WRAPPED:
                    continue
                seen.add(part.rendering)
                content = part.body.split("] ", 1)[1]  # every wrapper ends with "] "
                assert part.tokens == expected_tokens(part.rendering, part.body, content,
                                                      tokens[part.record_id]), (aid, part)
    assert {"stale_marker", "revalidation_hint", "summary"} <= seen


def _prompt_row(table_row: dict[str, Any], record: dict[str, Any], content_column: str) -> dict[str, Any]:
    """A replayed record as the prompt view's row (ingest/store/assembly.py ``prompt_records``)."""
    return {**table_row, "record_kind": record["record_kind"], "record_id": record["record_id"],
            "rendering": record["rendering"], "detail": record["detail"],
            "content": table_row.get(content_column)}


@pytest.mark.parametrize("seed", range(40))
def test_replayed_renderings_cost_their_text(seed: int) -> None:
    rnd = random.Random(seed)
    snap, first, _ = random_graph(rnd)
    rows = {(kind, r[key]): r for kind, (table, key, _c) in SOURCE.items()
            for r in snap.tables.get(table, [])}
    for version in REGISTRY.versions():
        for req in [first, *random_requests(rnd, snap, first, 2)]:
            for rec in assemble(snap, req, REGISTRY.get(version)).records:
                if rec["decision"] != "included" or rec["rendering"] not in WRAPPED:
                    continue
                if rec["record_kind"] == "skill_state":
                    continue  # its prompt text is built in SQL; the recorded sample covers it
                table_row = rows[(rec["record_kind"], rec["record_id"])]
                content_column = SOURCE[rec["record_kind"]][2]
                row = _prompt_row(table_row, rec, content_column)
                body = body_as(row, rec["rendering"])
                assert rec["tokens"] == expected_tokens(
                    rec["rendering"], body, row["content"] or "", int(table_row["content_tokens"])), rec


def test_the_incident_costs_more_under_v4_than_under_v5(capsys) -> None:
    """v5's widened freshness window sends the calendar memories bare; v4 wraps them in
    stale markers, which the model receives too: more tokens, not the same."""
    diff = json.loads(run(capsys, "diff", "asm-035", "--policy", "v4", "--json")[1])
    totals = diff["summary"]
    assert totals["tokens_b"] > totals["tokens_a"]
    marked = [c for c in diff["changes"] if c["change"] == "rendering_changed"]
    assert marked and all(c["b"]["rendering"] == "stale_marker" and c["b"]["tokens"] > c["a"]["tokens"]
                          for c in marked)
    assert totals["tokens_b"] - totals["tokens_a"] == sum(c["b"]["tokens"] - c["a"]["tokens"] for c in marked)

    code, out, err = run(capsys, "compare", "v4", "v5", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tokens"]["delta"] == doc["tokens"]["b"] - doc["tokens"]["a"] < 0, \
        "v5 sends the memories without the markers' words"
