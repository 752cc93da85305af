"""Bisect a record's fate across policy versions: where does it first take its bad state,
and which policy key(s) did it.

A record's **state** in an assembly is what a user sees of it: ``(decision, rendering,
reason_code)`` of its final row (``None`` when it is not a candidate at all). ``bisect``
replays one request under every version of the registry's order from ``good`` to ``bad``
(replays of one request are cheap, so all of them: a state may flip back and forth),
and names the **first bad version**: the version after the last one whose state differs
from the bad state, i.e. where the record takes its bad state for good.

The keys: the resolved settings of that version and of the version before it (in registry
order, not ``extends``) are diffed; each changed key's new value is applied alone onto the
earlier version and the request replayed (a counterfactual). The keys that flip the record
to its bad state alone are the answer; when none does alone, the smallest set of changed
keys that does (searched by size, bounded), else all of them.

Runtime policies (transcripts: ``claude-code``, ``swe-agent:last_n_observations.n=3``…)
have no versions in between: ``good`` and ``bad`` are two settings of one family, the
first bad version is ``bad``, and the keys are found the same way among the keys whose
values differ ("as recorded" where a version leaves a key as the request ran).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any, Callable

from ingest.errors import ContextlensError, NotFoundError

from .policy import Policy, PolicyRegistry, RuntimePolicy, flatten, is_runtime_version

if TYPE_CHECKING:  # pragma: no cover
    from .assembler import Assembly
    from .snapshot import Request, Snapshot

__all__ = ["Bisection", "KeyChange", "State", "bisect", "hybrid", "record_state", "state_text",
           "version_range"]

State = tuple[str, "str | None", "str | None"]  # (decision, rendering, reason_code)

# Replays a smallest-set search may spend when no key flips the record alone; past it the
# answer is every changed key together (which is the bad-side version itself).
SEARCH_BUDGET = 256

_ABSENT: Any = object()


@dataclass(frozen=True)
class KeyChange:
    """One dotted policy key that differs between two adjacent versions. ``before`` /
    ``after`` are None when the key is absent on that side (a provider table)."""

    key: str
    before: Any
    after: Any
    flips_alone: bool  # applying only ``after`` onto the earlier version flips the record


@dataclass(frozen=True)
class Bisection:
    record_kind: str
    record_id: str
    good: str
    bad: str
    tried: tuple[tuple[str, State | None], ...]  # every version from good to bad, in order
    version: str  # the first bad version
    previous: str  # the version just before it (in registry order)
    changed: tuple[KeyChange, ...]  # every key that differs between previous and version
    keys: tuple[KeyChange, ...]  # the key(s) that flip it: each alone, or one set together
    alone: bool  # True: each of ``keys`` flips it alone; False: only together
    # the first version showing the bad state; before ``version`` when the state flipped
    # back and forth (the answer is the last flip into it, after which it stays)
    first_seen: str

    @property
    def good_state(self) -> State | None:
        return self.tried[0][1]

    @property
    def bad_state(self) -> State | None:
        return self.tried[-1][1]


def record_state(assembly: "Assembly", record_kind: str, record_id: str) -> State | None:
    """``(decision, rendering, reason_code)`` of the record's final row, None when it is
    not a candidate of ``assembly``."""
    for r in assembly.records:
        if r["record_kind"] == record_kind and r["record_id"] == record_id:
            return (r["decision"], r.get("rendering"), r.get("reason_code"))
    return None


def state_text(state: State | None) -> str:
    """A state in words: ``included as compact_memory (compact_memory)``."""
    if state is None:
        return "not a candidate"
    decision, rendering, reason = state
    if decision == "included":
        return f"included as {rendering} ({reason})"
    return f"{decision} ({reason})"


def version_range(registry: PolicyRegistry, good: str, bad: str) -> list[str]:
    """The registry's versions from ``good`` to ``bad``, both included; errors name an
    unknown version or a ``good`` that comes after ``bad``."""
    versions = registry.versions()
    for flag, v in (("--good", good), ("--bad", bad)):
        if v not in versions:
            raise ContextlensError(
                f"{flag}: unknown policy version '{v}' (known: {', '.join(versions)})"
            )
    i, j = versions.index(good), versions.index(bad)
    if i > j:
        raise ContextlensError(
            f"--good {good} comes after --bad {bad} in the registry order ({', '.join(versions)})"
        )
    return versions[i:j + 1]


def _flat(registry: PolicyRegistry, version: str) -> dict[str, Any]:
    # an empty table (no provider rules) says nothing: only its keys are compared
    return {k: v for k, v in flatten(registry.settings(version)).items() if v != {}}


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    if value is _ABSENT:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value


def hybrid(registry: PolicyRegistry, base: str, target: str, keys: tuple[str, ...]) -> Policy:
    """``base``'s settings with ``keys`` taken from ``target`` (a key absent from
    ``target`` is removed)."""
    data = registry.settings(base)
    theirs = _flat(registry, target)
    for key in keys:
        _set(data, key, theirs.get(key, _ABSENT))
    return Policy.model_validate({
        **data, "version": f"{base}+{'+'.join(keys)}",
        "description": f"{base} with {', '.join(keys)} from {target}",
    })


def bisect(
    snapshot: "Snapshot",
    request: "Request",
    registry: PolicyRegistry,
    record_kind: str,
    record_id: str,
    good: str,
    bad: str,
    assembler: Any = None,
    replay_version: Callable[[str], "Assembly"] | None = None,
) -> Bisection:
    """Bisect ``record_kind record_id`` of ``request`` from version ``good`` to ``bad``.

    ``replay_version(v)`` replays the request under a registry version (a caller's cache);
    by default the assembler is called directly. Raises ContextlensError when the versions
    are unknown or out of order, when the record is a candidate under neither, and when its
    state under ``good`` already is its state under ``bad`` (nothing to bisect)."""
    from .assembler import get_assembler

    plugin = assembler if assembler is not None else get_assembler("reference")

    def assemble(policy: Policy) -> "Assembly":
        return plugin.assemble(snapshot, request, policy)

    replay = replay_version or (lambda v: assemble(registry.get(v)))
    if is_runtime_version(good) or is_runtime_version(bad):
        return _bisect_runtime(registry, good, bad, record_kind, record_id, assemble, replay,
                               request.assembly_id)
    versions = version_range(registry, good, bad)
    tried = [(v, record_state(replay(v), record_kind, record_id)) for v in versions]
    states = [s for _, s in tried]
    name = f"{record_kind} {record_id}"
    if all(s is None for s in states):
        raise NotFoundError(
            f"record '{record_id}' ({record_kind}) is not a candidate of assembly "
            f"'{request.assembly_id}' under {good} to {bad}"
        )
    bad_state = states[-1]
    if states[0] == bad_state:
        raise ContextlensError(
            f"nothing to bisect: {name} is already {state_text(bad_state)} under --good {good},"
            f" as under --bad {bad}"
        )
    last_other = max(i for i, s in enumerate(states) if s != bad_state)
    first_bad = last_other + 1
    version, previous = versions[first_bad], versions[last_other]
    first_seen = versions[states.index(bad_state)]

    mine, theirs = _flat(registry, previous), _flat(registry, version)
    diff_keys = sorted(k for k in set(mine) | set(theirs) if mine.get(k, _ABSENT) != theirs.get(k, _ABSENT))

    def flips_to_bad(keys: tuple[str, ...]) -> bool:
        out = assemble(hybrid(registry, previous, version, keys))
        return record_state(out, record_kind, record_id) == bad_state

    changed = tuple(
        KeyChange(k, mine.get(k), theirs.get(k), flips_to_bad((k,))) for k in diff_keys
    )
    keys = tuple(c for c in changed if c.flips_alone)
    alone = bool(keys)
    if not keys:
        keys = _smallest_set(changed, flips_to_bad)
    return Bisection(
        record_kind=record_kind, record_id=record_id, good=good, bad=bad, tried=tuple(tried),
        version=version, previous=previous, changed=changed, keys=keys, alone=alone,
        first_seen=first_seen,
    )


_AS_RECORDED = "as recorded"


def _bisect_runtime(registry: PolicyRegistry, good: str, bad: str, record_kind: str,
                    record_id: str, assemble: Callable[[Any], "Assembly"],
                    replay: Callable[[str], "Assembly"], assembly_id: str) -> Bisection:
    """``bisect`` between two settings of one runtime family: which changed key(s) give
    the record its state under ``bad``."""
    g, b = registry.get(good), registry.get(bad)
    if not (isinstance(g, RuntimePolicy) and isinstance(b, RuntimePolicy)) or g.runtime != b.runtime:
        raise ContextlensError(
            f"--good {good} and --bad {bad}: a runtime policy is bisected against another "
            f"setting of the same runtime (e.g. --good {(b if isinstance(b, RuntimePolicy) else g).runtime}"
            ":<key>=<value>)")
    tried = ((good, record_state(replay(good), record_kind, record_id)),
             (bad, record_state(replay(bad), record_kind, record_id)))
    name = f"{record_kind} {record_id}"
    if tried[0][1] is None and tried[1][1] is None:
        raise NotFoundError(f"record '{record_id}' ({record_kind}) is not a candidate of assembly "
                            f"'{assembly_id}' under {good} or {bad}")
    bad_state = tried[1][1]
    if tried[0][1] == bad_state:
        raise ContextlensError(f"nothing to bisect: {name} is already {state_text(bad_state)} "
                               f"under --good {good}, as under --bad {bad}")
    mine, theirs = dict(g.overrides), dict(b.overrides)
    diff_keys = sorted(k for k in set(mine) | set(theirs)
                       if mine.get(k, _AS_RECORDED) != theirs.get(k, _AS_RECORDED))

    def flips_to_bad(keys: tuple[str, ...]) -> bool:
        merged = {**mine, **{k: theirs[k] for k in keys if k in theirs}}
        for k in keys:
            if k not in theirs:
                merged.pop(k, None)
        policy = RuntimePolicy(f"{good}+{'+'.join(keys)}", g.runtime, tuple(sorted(merged.items())))
        return record_state(assemble(policy), record_kind, record_id) == bad_state

    changed = tuple(KeyChange(k, mine.get(k, _AS_RECORDED), theirs.get(k, _AS_RECORDED),
                              flips_to_bad((k,))) for k in diff_keys)
    keys = tuple(c for c in changed if c.flips_alone)
    alone = bool(keys)
    if not keys:
        keys = _smallest_set(changed, flips_to_bad)
    return Bisection(record_kind=record_kind, record_id=record_id, good=good, bad=bad,
                     tried=tried, version=bad, previous=good, changed=changed, keys=keys,
                     alone=alone, first_seen=bad)


def _smallest_set(changed: tuple[KeyChange, ...],
                  flips: Callable[[tuple[str, ...]], bool]) -> tuple[KeyChange, ...]:
    """The first (smallest, then in key order) set of changed keys that flips the record
    together; every changed key when the search budget runs out first."""
    spent = 0
    for size in range(2, len(changed)):
        for combo in combinations(changed, size):
            if spent >= SEARCH_BUDGET:
                return changed
            spent += 1
            if flips(tuple(c.key for c in combo)):
                return combo
    return changed
