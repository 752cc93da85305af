"""The policy rules, one module per family, each holding side by side: its reason codes and
deciding keys (``FAMILY``), its detail sentences, its step of the reference assembler
(``reference``: over ``replay.assembler._Run``, one assembly) and its columnar form
(``columnar``: over ``replay.columnar.Rows``, every assembly of a chunk at once), with any
SQL fact it needs.

``STAGES`` is the order they run in; ``replay.assembler`` and ``replay.columnar`` walk it.
A rule's change touches its family's module (docs/architecture.md, "Add a family")."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import (branch, budget, contradiction, freshness, privacy, recovery, rehydration, retention,
               visibility, window)
from .family import Family

__all__ = ["FAMILIES", "POLICY_FAMILIES", "REASONS", "STAGES", "Family", "policy_keys",
           "policy_settings"]

MODULES = (window, retention, branch, visibility, privacy, contradiction, freshness,
           rehydration, recovery, budget)
FAMILIES: tuple[Family, ...] = tuple(m.FAMILY for m in MODULES)

# (stage, family, reference step, columnar step) in the order they run. Stage 8 is two
# families' (promotion, then rehydration: disjoint records). The budget's columnar form is
# replay.columnar's budget pass (None here).
STAGES: tuple[tuple[int, Family, Callable[[Any], None], Callable[[Any], None] | None], ...] = (
    (1, window.FAMILY, window.reference_created, window.columnar_created),
    (2, retention.FAMILY, retention.reference, retention.columnar),
    (3, branch.FAMILY, branch.reference, branch.columnar),
    (4, visibility.FAMILY, visibility.reference, visibility.columnar),
    (5, privacy.FAMILY, privacy.reference, privacy.columnar),
    (6, contradiction.FAMILY, contradiction.reference, contradiction.columnar),
    (7, freshness.FAMILY, freshness.reference, freshness.columnar),
    (8, visibility.FAMILY, visibility.reference_promotion, visibility.columnar_promotion),
    (8, rehydration.FAMILY, rehydration.reference, rehydration.columnar),
    (9, recovery.FAMILY, recovery.reference, recovery.columnar),
    (10, window.FAMILY, window.reference, window.columnar),
    (11, budget.FAMILY, budget.reference, None),
)

# every policy_family value and reason code the families write (a code may be written by
# several families: redundant, stale_marker, lineage)
POLICY_FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(f for fam in FAMILIES for f in fam.families))
REASONS: tuple[str, ...] = tuple(dict.fromkeys(r for fam in FAMILIES for r in fam.reasons))


def policy_keys() -> dict[str, str]:
    """Reason code -> the policy key that decides it, from every family (a reason two
    families write has one key at most)."""
    out: dict[str, str] = {}
    for fam in FAMILIES:
        for reason, key in fam.keys.items():
            assert out.get(reason, key) == key, (reason, out[reason], key)
            out[reason] = key
    return out


def policy_settings(policies: list[Any]) -> dict[str, np.ndarray]:
    """Every family's ``settings``: the policy keys the columnar steps read, as arrays
    indexed by policy number."""
    out: dict[str, np.ndarray] = {}
    for m in MODULES:
        part = m.settings(policies)
        assert not set(part) & set(out), (m.FAMILY.name, set(part) & set(out))
        out.update(part)
    return out
