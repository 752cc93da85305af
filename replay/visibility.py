"""What one request may see: the one definition the assembler's stages 3-5 apply and safety
judges by (DESIGN.md section 5, "Privacy and visibility fail closed").

``RequestView(ix, request, rules).decide(kind, row, branch, created)`` gives a record's
decisions at stages 3 (branch lineage), 4 (visibility and ownership) and 5 (privacy and
provider), as the reference assembler records them, and the subagent chain of a record
whose run is below the requester (its promotion is decided later, at stage 8, by
``promotion_decision``). A record is

- **visible** when none of those decisions denies it (a subagent's record included: the
  assembler counts it as a live candidate until promotion decides);
- **hidden** when stage 4 or 5 denies it (``HIDING_STEPS``): it is in this request's
  history, but private to another participant, audit-only, owned by nobody who resolves,
  or of a class blocked (raw, or for the request's provider). A memory superseded by a
  hidden replacement is not a current fact: a stale marker, or omitted as superseded;
- **absent** when stage 3 denies it (a sibling branch: not this request's history at all).

The rules come from a policy (``VisibilityRules.of``: what the assembler replays under) or,
for safety, ``VisibilityRules.fail_closed``: the switches that hide records are on whatever
a policy says, and the class blocks are those of the request's standard policy (the version
it was recorded under). The lint's SQL form of safety (``ingest.store.lint``) states the
same rules for the replacement of a superseded memory; tests hold the forms equal, and hold
safety's visibility equal to the assembler's decisions on generated graphs.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .rules import branch as _branch
from .rules import privacy as _privacy
from .rules import visibility as _visibility
from .rules.visibility import HIDING_STEPS, owner_of, promotion_decision

if TYPE_CHECKING:  # pragma: no cover
    from .assembler import _Index
    from .policy import Policy

__all__ = ["HIDING_STEPS", "RequestView", "VisibilityRules", "owner_of", "promotion_decision"]

# (step, family, outcome, reason_code, detail): one PolicyDecision of a record
Decision = tuple[int, str, str, str, str]


@dataclass(frozen=True)
class VisibilityRules:
    """The policy settings stages 3-5 read, for one request (its provider's rule resolved)."""

    lineage_only: bool
    shared_fill: bool
    audit_only_excluded: bool
    participant_isolation: bool
    raw_blocked: frozenset[str]
    provider_blocked: frozenset[str]

    @classmethod
    def of(cls, policy: "Policy", provider: str | None) -> "VisibilityRules":
        """The rules ``policy`` applies to a request sent to ``provider``."""
        rule = policy.privacy.rule_for(provider)
        return cls(lineage_only=policy.branch.lineage_only, shared_fill=policy.branch.shared_fill,
                   audit_only_excluded=policy.visibility.audit_only_excluded,
                   participant_isolation=policy.ownership.participant_isolation,
                   raw_blocked=frozenset(policy.privacy.raw_blocked_classes),
                   provider_blocked=frozenset(rule.blocked_classes) if rule is not None else frozenset())

    @classmethod
    def fail_closed(cls, standard: "Policy | None", provider: str | None) -> "VisibilityRules":
        """Safety's rules: lineage, audit-only exclusion and participant isolation hold
        whatever a policy says; the class blocks are ``standard``'s (none without one)."""
        base = (cls.of(standard, provider) if standard is not None
                else cls(True, True, True, True, frozenset(), frozenset()))
        return replace(base, lineage_only=True, shared_fill=True, audit_only_excluded=True,
                       participant_isolation=True)


class RequestView:
    """One request's view of its conversation's graph under ``rules``."""

    __slots__ = ("ix", "me", "lineage", "rules", "provider")

    def __init__(self, ix: "_Index", branch_id: str, participant_id: str, provider: str | None,
                 rules: VisibilityRules) -> None:
        self.ix = ix
        self.me = participant_id
        self.provider = provider
        self.lineage = ix.lineage(branch_id)
        self.rules = rules

    def on_lineage(self, branch: str | None, created: dt.datetime) -> bool:
        """On the request's branch, or on an ancestor up to the fork it was left by."""
        cut = self.lineage.get(branch)  # type: ignore[arg-type]
        return branch in self.lineage and (cut is None or created <= cut[0])

    def decide(self, kind: str, row: dict[str, Any], branch: str | None, created: dt.datetime,
               on: bool | None = None) -> tuple[list[Decision], list[dict[str, Any]]]:
        """The stage 3-5 decisions of a record (the last one a deny when it is absent or
        hidden) and its subagent chain ([] unless a run below the requester's owns it).
        ``on``: whether it lies on the lineage, when the caller knows already."""
        out: list[Decision] = []
        if on is None:
            on = self.on_lineage(branch, created)
        d = _branch.decide(self, kind, row, branch, on)
        if d is not None:
            out.append(d)
            if d[2] == "deny":
                return out, []
        if kind in ("skill_state", "checkpoint"):  # the request's own run's: always its own
            return out, []
        d, chain = _visibility.decide(self, kind, row)
        if d is not None:
            out.append(d)
            return out, []
        d = _privacy.decide(self, kind, row)
        if d is not None:
            out.append(d)
        return out, chain

    def sight(self, kind: str, row: dict[str, Any], branch: str | None,
              created: dt.datetime) -> tuple[str, str | None]:
        """("visible" | "hidden" | "absent", the deciding reason code) of a record."""
        decisions, _chain = self.decide(kind, row, branch, created)
        if decisions and decisions[-1][2] == "deny":
            step, _fam, _out, reason, _detail = decisions[-1]
            return ("hidden" if step in HIDING_STEPS else "absent"), reason
        return "visible", None
