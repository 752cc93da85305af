"""What every family's columnar step shares: the integer codes the candidate rows carry,
and the numpy kernels for "per assembly, in order" walks (the byte budget, the token
budget, conflicts).

Kept apart from ``replay.columnar`` so that a family module can use them without importing
the engine that calls it."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ingest.contract import ENUMS

# kinds in (record_kind) string order, as the oracle sorts its candidates
KINDS = ("checkpoint", "message", "skill_state", "tool_artifact", "tool_call", "tool_memory")
K_CKPT, K_MSG, K_SKILL, K_ART, K_CALL, K_MEM = range(6)

SCOPES = ENUMS["visibility_scope"]
S_AUDIT, S_PRIVATE, S_CONV = (SCOPES.index(s) for s in ("audit_only", "participant_private",
                                                         "conversation"))
# a call's state at the request's time (replay.assembler._Index.call_state)
STATES = ("pending", "failed", "deferred", "succeeded", "resolved")
ST_SUCCEEDED = STATES.index("succeeded")


def groups(a: np.ndarray, order: np.ndarray, n_assemblies: int) -> tuple[np.ndarray, np.ndarray]:
    """For rows ``order`` (sorted by assembly first): each row's rank within its assembly,
    and each assembly's row count."""
    counts = np.bincount(a[order], minlength=n_assemblies)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.arange(len(order)) - np.repeat(starts, counts)
    return rank, counts


def greedy(a: np.ndarray, order: np.ndarray, size: np.ndarray, used: np.ndarray,
           cap: np.ndarray, cut_kind: np.ndarray | None = None) -> np.ndarray:
    """A sequential "take what fits, skip what does not" per assembly, over rows ``order``
    (each assembly's rows in its own ranking order), for all assemblies at once: one numpy
    step per rank. ``used`` (per assembly) is updated in place. With ``cut_kind``, once a
    row of that kind does not fit, every later row of that kind is refused as well (the
    history keeps no holes). Returns whether each row of ``order`` fits."""
    n_a = len(used)
    fits = np.zeros(len(order), dtype=bool)
    if not len(order):
        return fits
    rank, counts = groups(a, order, n_a)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    by_size = np.argsort(-counts, kind="stable")
    sizes = counts[by_size]
    cut = np.zeros(n_a, dtype=bool)
    for k in range(int(sizes[0])):
        grp = by_size[:int(np.searchsorted(-sizes, -k, side="left"))]  # sizes > k
        pos = starts[grp] + k
        rows = order[pos]
        t = size[rows]
        ok = used[grp] + t <= cap[grp]
        if cut_kind is not None:
            is_cut = cut_kind[rows]
            blocked = is_cut & cut[grp]
            ok &= ~blocked
            cut[grp[is_cut & ~ok & ~blocked]] = True
        used[grp[ok]] += t[ok]
        fits[pos] = ok
    return fits


def mask(n: int, rows: np.ndarray) -> np.ndarray:
    """A boolean mask of ``n`` rows, true at ``rows``."""
    out = np.zeros(n, dtype=bool)
    out[rows] = True
    return out


# --------------------------------------------------------------------------- policy settings
# Each family's ``settings(policies)`` gives the policy keys its columnar step reads, as
# arrays indexed by policy number (and by an enum code, with a last column standing for any
# code not in the enum).

def flags(policies: Sequence[Any], values: Sequence[str], pick: Callable[[Any], Any]) -> np.ndarray:
    """[policy, code]: whether the policy's ``pick`` names the code's value."""
    out = np.zeros((len(policies), len(values) + 1), dtype=bool)
    for i, p in enumerate(policies):
        chosen = set(pick(p))
        out[i, :len(values)] = [v in chosen for v in values]
    return out


def column(policies: Sequence[Any], get: Callable[[Any], Any], dtype: Any = bool) -> np.ndarray:
    """[policy]: one setting of each policy."""
    return np.array([get(p) for p in policies], dtype=dtype)
