"""Which policy versions apply to a request, and to a store's requests: the one home of
that rule (the command line checks versions with it, the app's pickers offer what it says).

A request replays under the policies of the family it was recorded under:

- an export's request (recorded under a version of the registry: the bundled sample's
  ``v1`` .. ``v6``, or those of ``--policies DIR``; a version the registry lacks counts too,
  and a policy TOML file) replays under the registry's versions;
- a transcript's request (recorded under its runtime's family, ``replay/policy.py``
  ``RUNTIMES``: ``claude-code``, ``swe-agent``, ``chat-full-history``...) replays under that
  family and its variants, ``<family>:<key>=<value>`` (``claude-code:compact_at=100000``);
  a registry version does not: it governs a graph of memories, privacy classes and
  branches the transcript does not have, and would answer for a runtime that never ran it;
- a request recorded under ``observed`` (a runtime whose rule is not modelled) replays
  under none.

A store of both (an export and transcripts) offers each family for its own requests; a
compare over it runs over the requests of the family its versions belong to, and says so
(``CompareScope``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ingest.errors import ContextlensError
from ingest.text import natural_key
from replay.policy import DESCRIPTIONS, RUNTIMES, is_runtime_version

from .results import PolicyInfo

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter

    from .model import ReadModel

__all__ = [
    "NOT_MODELLED",
    "REGISTRY",
    "ApplicablePolicies",
    "CompareScope",
    "PolicyFamily",
    "compare_scope",
    "family_of_recorded",
    "family_of_version",
    "policy_choices",
    "request_policies",
    "store_policies",
]

REGISTRY = "registry"  # the family of the registry's versions (an export's requests)
NOT_MODELLED = "observed"  # recorded by a runtime whose rule is not modelled: no family
RECORDED = "recorded"  # compare's side A "the recording": applies to every request

# a value for each integer key of a runtime family, to show a variant as an example (a
# switch is shown turned over); chosen to be a change a user would try, not a default
_EXAMPLE_VALUES: dict[str, int] = {
    "compact_at": 100000,
    "last_n_observations.n": 3,
    "last_n_observations.polling": 1,
    "last_n": 10,
}


def family_of_recorded(version: str | None) -> str | None:
    """The family whose versions replay a request recorded under ``version``: a runtime's
    name, ``REGISTRY`` (an export's request), or None (``observed``: none does)."""
    if version is None or version == NOT_MODELLED:
        return None
    if is_runtime_version(version):
        return version.split(":", 1)[0]
    return REGISTRY


def family_of_version(version: str) -> str:
    """The family a version asked for belongs to: a runtime's name (``swe-agent``,
    ``swe-agent:last_n_observations.n=3``), else ``REGISTRY`` (``v4``, ``path/v7.toml``,
    or a name the registry will say it does not know)."""
    return version.split(":", 1)[0] if is_runtime_version(version) else REGISTRY


def runtime_examples(family: str) -> tuple[str, ...]:
    """Variants of a runtime family, one per key: ``claude-code:compact_at=100000``,
    ``claude-code:compaction=false``... (none for a family without keys)."""
    out = []
    for key, (kind, default, _meaning) in RUNTIMES.get(family, {}).items():
        if kind is bool:
            out.append(f"{family}:{key}={str(not default).lower()}")
        elif key in _EXAMPLE_VALUES:
            out.append(f"{family}:{key}={_EXAMPLE_VALUES[key]}")
    return tuple(out)


@dataclass(frozen=True)
class PolicyFamily:
    """The versions that replay some requests: ``name`` (``REGISTRY`` or a runtime
    family), ``versions`` (the registry's, or the runtime family alone), ``examples``
    (variants of a runtime family with a key changed), ``recorded`` (the versions those
    requests were recorded under, with how many requests each) and ``requests``."""

    name: str
    versions: tuple[str, ...]
    examples: tuple[str, ...]
    recorded: tuple[tuple[str, int], ...]
    requests: int
    description: str

    @property
    def runtime(self) -> bool:
        return self.name != REGISTRY

    def admits(self, version: str) -> bool:
        return family_of_version(version) == self.name

    def offer(self) -> str:
        """The versions as a user types them: ``v1, v2, v3, v4, v5, v6`` or ``swe-agent, or
        swe-agent:KEY=VALUE (e.g. swe-agent:last_n_observations.n=3, ...)``."""
        if not self.runtime:
            return ", ".join(self.versions) if self.versions else "the registry's versions"
        if not self.examples:
            return self.name
        return (f"{self.name}, or {self.name}:KEY=VALUE (e.g. {', '.join(self.examples)})")

    def to_json(self) -> dict[str, Any]:
        return {"family": self.name, "runtime": self.runtime, "versions": list(self.versions),
                "examples": list(self.examples), "requests": self.requests,
                "recorded": {v: n for v, n in self.recorded}, "description": self.description}


@dataclass(frozen=True)
class ApplicablePolicies:
    """What replays the requests asked about (``what``: "request 'asm-035'" or "this
    store's requests"): one ``PolicyFamily`` per family they were recorded under (the
    registry's first, then runtimes by name), and how many requests none replays
    (``not_modelled``: recorded under ``observed``)."""

    what: str
    families: tuple[PolicyFamily, ...]
    not_modelled: int = 0

    def family(self, version: str) -> PolicyFamily | None:
        """The family of these requests that ``version`` belongs to, or None."""
        if version == RECORDED:
            return None
        name = family_of_version(version)
        return next((f for f in self.families if f.name == name), None)

    def versions(self) -> list[str]:
        """Every version offered, families in order (examples not included)."""
        return [v for f in self.families for v in f.versions]

    def offer(self) -> str:
        """Every family's versions, as one phrase for an error line."""
        parts = []
        for f in self.families:
            n = f"{f.requests} request{'s' if f.requests != 1 else ''}"
            parts.append(f"{f.offer()} ({n})" if len(self.families) > 1 else f.offer())
        return "; ".join(parts)

    def require(self, version: str) -> PolicyFamily | None:
        """The family ``version`` replays, else a ContextlensError (exit 2) in one line
        naming the versions that do apply. ``recorded`` applies to every request (None)."""
        if version == RECORDED or not (self.families or self.not_modelled):
            return None  # no request to replay: nothing to refuse
        found = self.family(version)
        if found is not None:
            return found
        if not self.families:
            raise ContextlensError(
                f"policy {version} does not apply to {self.what}: recorded under "
                f"{NOT_MODELLED} (a runtime whose rule is not modelled), no policy version "
                "replays it")
        recorded = ", ".join(v for f in self.families for v, _n in f.recorded)
        verb = "it replays" if self.what.startswith("request ") else "they replay"
        raise ContextlensError(
            f"policy {version} does not apply to {self.what} (recorded under {recorded}): "
            f"{verb} under {self.offer()}")

    def to_json(self) -> dict[str, Any]:
        return {"families": [f.to_json() for f in self.families],
                "not_modelled": self.not_modelled}


def _applicable(model: "ReadModel", what: str, recorded: Mapping[str, int]) -> ApplicablePolicies:
    groups: dict[str, Counter[str]] = {}
    not_modelled = 0
    for version, n in recorded.items():
        family = family_of_recorded(version)
        if family is None:
            not_modelled += n
        else:
            groups.setdefault(family, Counter())[version] += n
    families = []
    for name in sorted(groups, key=lambda f: (f != REGISTRY, f)):
        counts = groups[name]
        if name == REGISTRY:
            versions = tuple(model.registry.versions())
            description = "the policy registry's versions"
            examples: tuple[str, ...] = ()
        else:
            versions, description, examples = (name,), DESCRIPTIONS[name], runtime_examples(name)
        families.append(PolicyFamily(
            name=name, versions=versions, examples=examples,
            recorded=tuple(sorted(counts.items(), key=lambda kv: natural_key(kv[0]))),
            requests=sum(counts.values()), description=description))
    return ApplicablePolicies(what, tuple(families), not_modelled)


def request_policies(model: "ReadModel", assembly_id: str,
                     request: Mapping[str, Any] | None = None) -> ApplicablePolicies:
    """The versions that replay one request (``request``: its row, if read already)."""
    row = request if request is not None else model.store.assembly(assembly_id)
    return _applicable(model, f"request '{assembly_id}'", {str(row["policy_version"]): 1})


def store_policies(model: "ReadModel",
                   flt: "AssemblyFilter | str | None" = None) -> ApplicablePolicies:
    """The versions that replay the store's requests (those matching ``flt``), by family."""
    what = "the requests the filter selects" if flt else "this store's requests"
    return _applicable(model, what, model.store.policy_version_counts(flt))


@dataclass(frozen=True)
class CompareScope:
    """The requests a compare of ``a`` against ``b`` runs over: ``flt`` (the user's filter,
    narrowed to the requests of ``family`` when the store holds others too) and ``note``
    (the sentence saying what was chosen and what was left out; empty when nothing was)."""

    flt: "AssemblyFilter"
    family: PolicyFamily | None
    note: str = ""


def compare_scope(model: "ReadModel", a: str, b: str,
                  flt: "AssemblyFilter | str | None" = None) -> CompareScope:
    """The requests ``a`` and ``b`` both apply to among those matching ``flt``. Versions of
    two families, or a family none of the requests has, are a ContextlensError naming the
    versions that apply; a store of several families is narrowed to the one of ``a`` and
    ``b``, and the note says which requests were left out."""
    from ingest.filters import AssemblyFilter, Term, parse_filter

    sides = [v for v in (a, b) if v != RECORDED]
    for version in sides:  # a bad key or value, an unknown version: said first, as itself
        model.registry.get(version)
    parsed = parse_filter(flt) if isinstance(flt, str) or flt is None else flt
    found = store_policies(model, parsed)
    names = {family_of_version(v) for v in sides}
    if len(names) > 1:
        raise ContextlensError(
            f"compare {a} {b}: the two versions are of different families ({a} and {b}), "
            f"no request replays under both; {found.what} replay under {found.offer()}"
            if found.families else
            f"compare {a} {b}: the two versions are of different families ({a} and {b})")
    family = None
    for version in sides:
        family = found.require(version)
    if family is None or (len(found.families) == 1 and not found.not_modelled):
        return CompareScope(parsed, family)
    # the other families' requests (and those none replays) are left out, by the
    # versions they were recorded under
    others = [(v, n) for f in found.families if f is not family for v, n in f.recorded]
    if found.not_modelled:
        others.append((NOT_MODELLED, found.not_modelled))
    narrowed = AssemblyFilter(
        parsed.terms + tuple(Term("policy", v, negate=True) for v, _n in others),
        parsed.text, parsed.ids)
    left = sum(n for _v, n in others)
    kinds = ", ".join(f"{v} {n}" for v, n in others)
    kept = ", ".join(v for v, _n in family.recorded)
    if family.name == REGISTRY:
        kept += " (the policy registry's versions)"
    plural = lambda n: f"{n} request{'s' if n != 1 else ''}"  # noqa: E731
    note = (f"compare {a} {b}: over the {plural(family.requests)} recorded under {kept}; "
            f"left out {plural(left)} that {a if a != RECORDED else b} does not apply to "
            f"(recorded under {kinds})")
    return CompareScope(narrowed, family, note)


def policy_choices(model: "ReadModel", applicable: ApplicablePolicies) -> list[PolicyInfo]:
    """What a picker offers for ``applicable``, family by family: the registry's versions
    (with what each changes), a runtime family (with its keys) followed by its examples,
    each a version with one key changed (``claude-code:compact_at=100000``)."""
    from .results import frozen_row

    out: list[PolicyInfo] = []
    runtimes = {p.version: p for p in model.runtime_policies()}
    for family in applicable.families:
        if not family.runtime:
            out += model.policies()
            continue
        out.append(runtimes[family.name])
        keys = RUNTIMES[family.name]
        for example in family.examples:
            key, _, value = example.partition(":")[2].partition("=")
            _kind, default, meaning = keys[key]
            out.append(PolicyInfo(
                version=example, extends=family.name,
                description=f"example: {family.name} with {key} = {value} ({key}: {meaning})",
                changes=(frozen_row({"key": key, "parent": default, "value": value}),),
                runtime=True))
    return out
