"""Token counts calibrated on what the runtime recorded: the one home of that rule.

A transcript records each request's real input size (its usage) but not the size of each
part, so the adapters estimate the parts (``tokens.py``). For a model whose tokenizer is
not public the estimate can be far off (Claude's tokens run about 1.9x the default
bytes/4 estimate), and the gap would grow with the conversation and be reported as
"unattributed". The recording itself tells how far off: between two consecutive requests of
one chain where the history only grew, the recorded input grew by the real size of what
was added, and the estimate grew by its estimated size. Their ratio over every such pair,

    factor = sum(recorded growth) / sum(estimated growth),

scales every estimated count of the transcript (records, baseline, estimated requests).
What the records still do not explain is then split, per chain (one agent or subagent of
one conversation), into

- the **fixed overhead**: the fewest unexplained tokens of any request of the chain
  (system prompt, tool schemas, injected context: sent with every request; usually the
  first request's, but a session that starts mid-way sent history its file lacks first), and
- the **estimator residual**: the rest, which a perfect count would make zero.

Both go into each recorded request's tags, with the factor and the number of request pairs
it was fitted on (``tokens:calibrated`` tags), so every screen can say how the numbers were
made. Too little growth to fit (fewer than MIN_PAIRS pairs or MIN_GROWTH estimated tokens)
leaves the estimate as it is (factor 1, tag ``tokens:uncalibrated``). Counts made with the
model's own tokenizer (``tokens.exact_estimator``: OpenAI models) are not scaled (tag
``tokens:exact:<encoding>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..tags import (
    CALIBRATION,
    ESTIMATOR_RESIDUAL_TOKENS,
    FIXED_OVERHEAD_TOKENS,
    TOKENS_EXACT,
    TOKENS_RECORDED,
    TOKENS_UNCALIBRATED,
    UNATTRIBUTED_TOKENS,
    tag,
)

__all__ = ["Calibration", "calibrate", "scaled"]

MIN_PAIRS = 3
MIN_GROWTH = 500  # estimated tokens added over all pairs
FACTOR_RANGE = (0.25, 8.0)  # outside it the pairs are not measuring the estimator
_TOKEN_COLUMNS = {
    "messages": "content_tokens",
    "tool_artifacts": "content_tokens",
    "tool_memories": "content_tokens",
    "skill_states": "content_tokens",
    "checkpoints": "content_tokens",
}


@dataclass(frozen=True)
class Calibration:
    factor: float  # 1.0 when not fitted
    pairs: int  # request pairs it was fitted on (0 when not fitted)

    @property
    def fitted(self) -> bool:
        return self.pairs > 0


def calibrate(rows: dict[str, list[dict[str, Any]]], unattributed: dict[str, int],
              exact: str | None = None) -> Calibration:
    """Fit the factor on the recorded requests of ``rows`` (a Builder's rows), scale every
    estimated token count by it, and split each recorded request's unexplained tokens into
    fixed overhead and estimator residual (tags). ``unattributed`` (assembly id -> tokens)
    is updated in place. ``exact`` names the model's tokenizer when the counts came from it:
    nothing is fitted or scaled then, only split."""
    assemblies = rows.get("context_assemblies", [])
    by_assembly: dict[str, list[dict[str, Any]]] = {}
    for r in rows.get("assembly_records", []):
        by_assembly.setdefault(r["assembly_id"], []).append(r)
    chains: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for a in assemblies:
        if TOKENS_RECORDED in a["tags"]:
            chains.setdefault((a["conversation_id"], a["participant_id"]), []).append(a)
    for chain in chains.values():
        chain.sort(key=lambda a: (a["assembled_at"], a["assembly_id"]))

    grown = added = pairs = 0
    for chain in chains.values():
        for a, b in zip(chain, chain[1:]):
            before = _sent(by_assembly.get(a["assembly_id"], []))
            after = _sent(by_assembly.get(b["assembly_id"], []))
            if not before or not before <= after:
                continue  # something was dropped or cleared: not pure growth
            recorded = b["assembled_tokens"] - a["assembled_tokens"]
            estimated = (_included(by_assembly.get(b["assembly_id"], []))
                         - _included(by_assembly.get(a["assembly_id"], [])))
            if recorded > 0 and estimated > 0:
                grown += recorded
                added += estimated
                pairs += 1
    cal = Calibration(1.0, 0)
    if exact is not None:
        _split(assemblies, chains, by_assembly, unattributed, tag(TOKENS_EXACT, exact),
               rows.get("tool_artifacts", []))
        return cal
    if pairs >= MIN_PAIRS and added >= MIN_GROWTH:
        factor = grown / added
        if FACTOR_RANGE[0] <= factor <= FACTOR_RANGE[1]:
            cal = Calibration(factor, pairs)
    if cal.fitted:
        _scale(rows, cal.factor)
    _split(assemblies, chains, by_assembly, unattributed,
           tag(CALIBRATION, f"x{cal.factor:.2f}/{cal.pairs}pairs") if cal.fitted else TOKENS_UNCALIBRATED,
           rows.get("tool_artifacts", []))
    return cal


def _sent(records: list[dict[str, Any]]) -> set[tuple[str, str, str | None]]:
    return {(r["record_kind"], r["record_id"], r["rendering"]) for r in records
            if r["decision"] == "included"}


def _included(records: list[dict[str, Any]]) -> int:
    return sum(int(r["tokens"]) for r in records if r["decision"] == "included")


def scaled(n: Any, factor: float) -> int:
    """One estimated count scaled by the fitted factor (every count of a transcript, and
    the runtime facts' counts, are scaled this one way)."""
    return int(round(int(n or 0) * factor))


def _scale(rows: dict[str, list[dict[str, Any]]], factor: float) -> None:
    for table, column in _TOKEN_COLUMNS.items():
        for r in rows.get(table, []):
            if r.get(column) is not None:
                r[column] = scaled(r[column], factor)
    for r in rows.get("assembly_records", []):
        r["tokens"] = scaled(r["tokens"], factor)
    for a in rows.get("context_assemblies", []):
        if TOKENS_RECORDED not in a["tags"]:
            # an estimated request: its records and its estimated overhead are all estimates
            # (a recorded request's baseline is set with its fixed overhead, in _split)
            a["assembled_tokens"] = scaled(a["assembled_tokens"], factor)
            a["baseline_tokens"] = scaled(a["baseline_tokens"], factor)


def _full(record: dict[str, Any], bodies: dict[str, int]) -> int:
    """What the history replay sends of a record: a tool result a runtime elided in place
    (rendering ``cleared``: a microcompaction's placeholder) in full, others as recorded."""
    if record["decision"] == "included" and record["rendering"] == "cleared":
        return max(int(record["tokens"]), bodies.get(record["record_id"], 0))
    return int(record["tokens"])


def _split(assemblies: list[dict[str, Any]], chains: dict[tuple[Any, Any], list[dict[str, Any]]],
           by_assembly: dict[str, list[dict[str, Any]]], unattributed: dict[str, int],
           how: str, rows_artifacts: list[dict[str, Any]]) -> None:
    """Tag every request with how its counts were made, and split each recorded one's
    unexplained tokens into its chain's fixed overhead and the estimator residual."""
    for a in assemblies:
        if TOKENS_RECORDED not in a["tags"]:
            # an estimated request's unattributed tokens are its estimated system prompt and
            # tools (scaled with it): every replay of it sends them too
            left = a["assembled_tokens"] - _included(by_assembly.get(a["assembly_id"], []))
            keep = [t for t in a["tags"] if not t.startswith(UNATTRIBUTED_TOKENS + ":")]
            a["tags"] = keep + [tag(UNATTRIBUTED_TOKENS, left), how]
    bodies = {r["artifact_id"]: int(r["content_tokens"] or 0) for r in rows_artifacts}
    for chain in chains.values():
        # the fixed overhead is what every request of the chain leaves unexplained at least:
        # the first request's, unless the session started mid-way (a resumed or sliced log
        # whose first request also carried history that is not in the file)
        lefts = [a["assembled_tokens"] - _included(by_assembly.get(a["assembly_id"], []))
                 for a in chain]
        overhead = max(min(lefts, default=0), 0)
        for a in chain:
            records = by_assembly.get(a["assembly_id"], [])
            left = a["assembled_tokens"] - _included(records)
            keep = [t for t in a["tags"] if not t.startswith(UNATTRIBUTED_TOKENS + ":")]
            a["tags"] = keep + [tag(UNATTRIBUTED_TOKENS, left), tag(FIXED_OVERHEAD_TOKENS, overhead),
                                tag(ESTIMATOR_RESIDUAL_TOKENS, left - overhead), how]
            # history replay sends every record in full (a result a runtime cleared in place
            # too: its whole body) and, like the request itself, what no record explains (the
            # overhead and the residual, which lies in the records' estimates): it sends the
            # recorded request, what it left out and what it elided
            a["baseline_tokens"] = sum(_full(r, bodies) for r in records) + left
            unattributed[a["assembly_id"]] = left
