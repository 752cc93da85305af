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

import pyarrow as pa

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
from .assembly_rows import AssemblyRows

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


def calibrate(rows: dict[str, list[dict[str, Any]]], records: AssemblyRows,
              unattributed: dict[str, int], exact: str | None = None) -> Calibration:
    """Fit the factor on the recorded requests of ``rows`` (a Builder's rows) and their
    assembly ``records`` (its assembly rows, in DuckDB), scale every estimated token count by
    it, and split each recorded request's unexplained tokens into fixed overhead and
    estimator residual (tags). ``unattributed`` (assembly id -> tokens) is updated in place.
    ``exact`` names the model's tokenizer when the counts came from it: nothing is fitted or
    scaled then, only split."""
    assemblies = rows.get("context_assemblies", [])
    chains: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for a in assemblies:
        if TOKENS_RECORDED in a["tags"]:
            chains.setdefault((a["conversation_id"], a["participant_id"]), []).append(a)
    for chain in chains.values():
        chain.sort(key=lambda a: (a["assembled_at"], a["assembly_id"]))

    pairs_of = [(a["assembly_id"], b["assembly_id"]) for chain in chains.values()
                for a, b in zip(chain, chain[1:])]
    growing = _pure_growth(records, pairs_of) if pairs_of and exact is None else set()
    included = _included(records) if growing else {}
    grown = added = pairs = 0
    for chain in chains.values():
        for a, b in zip(chain, chain[1:]):
            if (a["assembly_id"], b["assembly_id"]) not in growing:
                continue  # something was dropped or cleared: not pure growth
            recorded = b["assembled_tokens"] - a["assembled_tokens"]
            estimated = included.get(b["assembly_id"], 0) - included.get(a["assembly_id"], 0)
            if recorded > 0 and estimated > 0:
                grown += recorded
                added += estimated
                pairs += 1
    cal = Calibration(1.0, 0)
    if exact is not None:
        _split(assemblies, chains, records, unattributed, tag(TOKENS_EXACT, exact),
               rows.get("tool_artifacts", []))
        return cal
    if pairs >= MIN_PAIRS and added >= MIN_GROWTH:
        factor = grown / added
        if FACTOR_RANGE[0] <= factor <= FACTOR_RANGE[1]:
            cal = Calibration(factor, pairs)
    if cal.fitted:
        _scale(rows, records, cal.factor)
    _split(assemblies, chains, records, unattributed,
           tag(CALIBRATION, f"x{cal.factor:.2f}/{cal.pairs}pairs") if cal.fitted else TOKENS_UNCALIBRATED,
           rows.get("tool_artifacts", []))
    return cal


_PAIRS = pa.schema([("a", pa.string()), ("b", pa.string())])


def _pure_growth(records: AssemblyRows, pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """The pairs (a, b) of consecutive requests where ``a`` sent something and ``b`` sent
    all of it again, the same way (kind, id and rendering of every included row of ``a``
    among ``b``'s): the history only grew. A row is unique by (kind, id) in its assembly."""
    table = pa.table({"a": [a for a, _ in pairs], "b": [b for _, b in pairs]}, schema=_PAIRS)
    got = records.query(
        """WITH inc AS (SELECT assembly_id, record_kind, record_id, rendering FROM rec
                        WHERE decision = 'included'),
                p AS (SELECT DISTINCT a, b FROM pairs)
           SELECT p.a, p.b FROM p JOIN inc x ON x.assembly_id = p.a
           LEFT JOIN inc y ON y.assembly_id = p.b AND y.record_kind = x.record_kind
                AND y.record_id = x.record_id AND y.rendering IS NOT DISTINCT FROM x.rendering
           GROUP BY p.a, p.b HAVING count(*) = count(y.assembly_id)""", pairs=table)
    return {(a, b) for a, b in got}


def _included(records: AssemblyRows) -> dict[str, int]:
    """Per assembly, the tokens of its included rows (as scaled so far)."""
    return {aid: int(n) for aid, n in records.query(
        "SELECT assembly_id, sum(tokens) FROM scaled WHERE decision = 'included' "
        "GROUP BY assembly_id")}


def scaled(n: Any, factor: float) -> int:
    """One estimated count scaled by the fitted factor (every count of a transcript, and
    the runtime facts' counts, are scaled this one way)."""
    return int(round(int(n or 0) * factor))


def _scale(rows: dict[str, list[dict[str, Any]]], records: AssemblyRows, factor: float) -> None:
    for table, column in _TOKEN_COLUMNS.items():
        for r in rows.get(table, []):
            if r.get(column) is not None:
                r[column] = scaled(r[column], factor)
    records.scale(factor)  # the assembly rows' counts, in DuckDB
    for a in rows.get("context_assemblies", []):
        if TOKENS_RECORDED not in a["tags"]:
            # an estimated request: its records and its estimated overhead are all estimates
            # (a recorded request's baseline is set with its fixed overhead, in _split)
            a["assembled_tokens"] = scaled(a["assembled_tokens"], factor)
            a["baseline_tokens"] = scaled(a["baseline_tokens"], factor)


def _split(assemblies: list[dict[str, Any]], chains: dict[tuple[Any, Any], list[dict[str, Any]]],
           records: AssemblyRows, unattributed: dict[str, int],
           how: str, rows_artifacts: list[dict[str, Any]]) -> None:
    """Tag every request with how its counts were made, and split each recorded one's
    unexplained tokens into its chain's fixed overhead and the estimator residual."""
    # what the history replay sends of each record: a tool result a runtime elided in place
    # (rendering ``cleared``: a microcompaction's placeholder) in full, others as recorded
    bodies = {r["artifact_id"]: int(r["content_tokens"] or 0) for r in rows_artifacts}
    body_table = pa.table({"artifact_id": list(bodies), "body": list(bodies.values())},
                          schema=pa.schema([("artifact_id", pa.string()), ("body", pa.int64())]))
    sums = {aid: (int(inc or 0), int(full or 0)) for aid, inc, full in records.query(
        """SELECT s.assembly_id,
                  sum(s.tokens) FILTER (WHERE s.decision = 'included'),
                  sum(CASE WHEN s.decision = 'included' AND s.rendering = 'cleared'
                           THEN greatest(s.tokens, coalesce(b.body, 0)) ELSE s.tokens END)
           FROM scaled s LEFT JOIN bodies b ON b.artifact_id = s.record_id
           GROUP BY s.assembly_id""", bodies=body_table)}
    for a in assemblies:
        if TOKENS_RECORDED not in a["tags"]:
            # an estimated request's unattributed tokens are its estimated system prompt and
            # tools (scaled with it): every replay of it sends them too
            left = a["assembled_tokens"] - sums.get(a["assembly_id"], (0, 0))[0]
            keep = [t for t in a["tags"] if not t.startswith(UNATTRIBUTED_TOKENS + ":")]
            a["tags"] = keep + [tag(UNATTRIBUTED_TOKENS, left), how]
    for chain in chains.values():
        # the fixed overhead is what every request of the chain leaves unexplained at least:
        # the first request's, unless the session started mid-way (a resumed or sliced log
        # whose first request also carried history that is not in the file)
        lefts = [a["assembled_tokens"] - sums.get(a["assembly_id"], (0, 0))[0] for a in chain]
        overhead = max(min(lefts, default=0), 0)
        for a in chain:
            included, full = sums.get(a["assembly_id"], (0, 0))
            left = a["assembled_tokens"] - included
            keep = [t for t in a["tags"] if not t.startswith(UNATTRIBUTED_TOKENS + ":")]
            a["tags"] = keep + [tag(UNATTRIBUTED_TOKENS, left), tag(FIXED_OVERHEAD_TOKENS, overhead),
                                tag(ESTIMATOR_RESIDUAL_TOKENS, left - overhead), how]
            # history replay sends every record in full (a result a runtime cleared in place
            # too: its whole body) and, like the request itself, what no record explains (the
            # overhead and the residual, which lies in the records' estimates): it sends the
            # recorded request, what it left out and what it elided
            a["baseline_tokens"] = full + left
            unattributed[a["assembly_id"]] = left
