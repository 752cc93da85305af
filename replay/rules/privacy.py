"""Stage 5, privacy and provider: a raw artifact of a class in privacy.raw_blocked_classes,
and an artifact or memory of a class the request's provider blocks
(privacy.providers.<provider>.blocked_classes), are not sent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.contract import ENUMS

from ._kit import flags
from .family import Family

if TYPE_CHECKING:  # pragma: no cover
    from ..assembler import _Run
    from ..columnar import Rows
    from ..policy import Policy
    from ..visibility import Decision, RequestView

FAMILY = Family("privacy", ("privacy",), ("privacy_restricted", "provider_restricted"),
                {"privacy_restricted": "privacy.raw_blocked_classes"})

PRIVACY = ENUMS["privacy_class"]


def decide(view: "RequestView", kind: str, row: dict[str, Any]) -> "Decision | None":
    """A record's stage 5 decision (None, or a deny)."""
    if kind not in ("tool_artifact", "tool_memory"):
        return None
    cls = row["privacy_class"]
    if kind == "tool_artifact" and cls in view.rules.raw_blocked:
        return (5, "privacy", "deny", "privacy_restricted",
                f"raw {cls} body is never sent; a safe summary of it may be sent instead")
    if cls in view.rules.provider_blocked:
        return (5, "privacy", "deny", "provider_restricted", f"{cls} data is not sent to {view.provider}")
    return None


def reference(run: "_Run") -> None:
    for c in run.live():
        d = decide(run.view, c.kind, c.row)
        if d is not None:
            c.add(*d)
            c.child = False


def columnar(s: "Rows") -> None:
    privacy = s.cand["privacy"]
    m5 = s.alive & (s.is_art | s.is_mem)
    raw = m5 & s.is_art & s.P["raw_blocked"][s.pol, privacy]
    s.add(raw, 5, "privacy", "privacy_restricted", True)
    s.add(m5 & ~raw & s.A["blocked_here"][s.a, privacy], 5, "privacy", "provider_restricted", True)


def provider_rules(policies: "list[Policy]", pidx: np.ndarray, providers: Any,
                   codes_of: Any) -> np.ndarray:
    """Per assembly, the privacy classes its policy blocks for its provider (the policy
    matches the provider's name in any case, so each distinct name is asked once).
    ``codes_of``: ``replay.columnar._Codes``."""
    named = pc.fill_null(providers, "")
    names = pa.array(pc.unique(named).to_pylist(), pa.string())
    codes = codes_of(names)
    table = np.zeros((max(len(policies), 1) * codes.size, len(PRIVACY) + 1), dtype=bool)
    for pi, policy in enumerate(policies):
        for name, code in zip(names.to_pylist(), codes(names).tolist()):
            rule = policy.privacy.rule_for(name)
            if rule is not None:
                blocked = set(rule.blocked_classes)
                table[pi * codes.size + code, :len(PRIVACY)] = [v in blocked for v in PRIVACY]
    return table[pidx * codes.size + codes(named)]


def settings(policies: list["Policy"]) -> dict[str, np.ndarray]:
    return {"raw_blocked": flags(policies, PRIVACY, lambda p: p.privacy.raw_blocked_classes)}
