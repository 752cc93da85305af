"""Stage 2, retention: an artifact whose retention_class is in retention.removed_classes
has no raw body to send."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ingest.contract import ENUMS

from ._kit import flags
from .family import Family

if TYPE_CHECKING:  # pragma: no cover
    from ..policy import Policy
    from ..assembler import _Run
    from ..columnar import Rows

FAMILY = Family("retention", ("retention",), ("retention_removed",),
                {"retention_removed": "retention.removed_classes"})


def detail(retention_class: str) -> str:
    return f"retention class {retention_class}: raw body not kept"


def reference(run: "_Run") -> None:
    removed = set(run.policy.retention.removed_classes)
    for c in run.live():
        if c.kind == "tool_artifact" and c.row["retention_class"] in removed:
            c.add(2, "retention", "deny", "retention_removed", detail(c.row["retention_class"]))


def columnar(s: "Rows") -> None:
    s.add(s.alive & s.is_art & s.P["removed"][s.pol, s.cand["retention"]], 2, "retention",
          "retention_removed", True)


def settings(policies: list["Policy"]) -> dict[str, np.ndarray]:
    return {"removed": flags(policies, ENUMS["retention_class"], lambda p: p.retention.removed_classes)}
