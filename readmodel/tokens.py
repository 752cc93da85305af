"""Token accounting of one request: the one place that says where its tokens went."""

from __future__ import annotations

from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ingest.tags import (
    ESTIMATOR_RESIDUAL_TOKENS,
    FIXED_OVERHEAD_TOKENS,
    calibration,
    int_tag,
    recorded_tokens,
    unattributed_tokens,
)

from .results import TokenAccounting

__all__ = ["token_accounting"]


def token_accounting(row: Mapping[str, Any], records: pa.Table) -> TokenAccounting:
    """Recorded (or assembled) tokens beside the records' estimate, by kind."""
    included = records.filter(pc.equal(records["decision"], "included"))
    omitted = records.filter(pc.equal(records["decision"], "omitted"))
    estimate = int(pc.sum(included["tokens"]).as_py() or 0)
    by_kind: dict[str, int] = {}
    if included.num_rows:
        grouped = included.group_by("record_kind", use_threads=False).aggregate([("tokens", "sum")])
        by_kind = dict(zip(grouped["record_kind"].to_pylist(),
                           (int(v or 0) for v in grouped["tokens_sum"].to_pylist()), strict=True))
    tags = row.get("tags") or []
    recorded = recorded_tokens(tags)
    assembled = int(row.get("assembled_tokens") or 0)
    unattributed = None
    if recorded:
        unattributed = unattributed_tokens(tags)
        if unattributed is None:
            unattributed = assembled - estimate
    return TokenAccounting(
        recorded=recorded,
        assembled_tokens=assembled,
        token_budget=int(row.get("token_budget") or 0),
        baseline_tokens=int(row.get("baseline_tokens") or 0),
        included_estimate=estimate,
        omitted_tokens=int(pc.sum(omitted["tokens"]).as_py() or 0),
        unattributed=unattributed,
        by_kind=dict(sorted(by_kind.items())),
        fixed_overhead=int_tag(tags, FIXED_OVERHEAD_TOKENS) if recorded else None,
        estimator_residual=int_tag(tags, ESTIMATOR_RESIDUAL_TOKENS) if recorded else None,
        calibration=calibration(tags),
    )
