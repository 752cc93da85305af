"""Versioned assembly policies: a pydantic model per family, TOML files with ``extends``.

(The models, the file rules and the registry belong together: one module.)

A policy version is one TOML file ``<version>.toml`` in a folder (the registry). Its
``version`` must equal the file name, ``extends`` names the parent version (tables merge key
by key, scalars and lists replace), and every other top-level table is one policy family.
Unknown keys, wrong types and impossible values are errors naming the file, the dotted key
and the problem; so are ``extends`` cycles and unknown parents, a missing key (blamed on the
file that lacks it), duplicate ``ranking.order`` entries and provider tables whose names
collide case-insensitively (provider names are matched in lower case). ``docs/policies.md``
states every key, its type, default and meaning.

A policy can also be loaded from a file anywhere (``PolicyRegistry.resolve("path/v7.toml")``):
its ``extends`` chain is looked up first in the file's own folder, then in the registry.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ingest.errors import ContextlensError
from ingest.safe_files import POLICY_CAP, read_text_capped
from ingest.text import natural_key

__all__ = [
    "DESCRIPTIONS",
    "EffectiveBudget",
    "RUNTIMES",
    "RUNTIME_RULES",
    "RuntimePolicy",
    "runtime_rule",
    "is_runtime_version",
    "parse_runtime",
    "Policy",
    "PolicyChange",
    "PolicyRegistry",
    "bundled_policies_dir",
    "load_policy",
    "load_registry",
    "flatten",
    "effective_budget",
    "effective_budgets",
]

PrivacyClass = Literal[
    "public", "internal", "user_private", "oauth_derived", "google_derived", "secret_adjacent"
]
RetentionClass = Literal["keep", "archive", "redact", "hash_only", "delete"]
RankKey = Literal[
    "checkpoint", "skill_state", "exact_evidence", "message", "tool_memory", "tool_artifact",
    "tool_call",
]
ProtectedState = Literal["pending", "failed", "deferred"]

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class WindowPolicy(BaseModel):
    model_config = _STRICT
    max_messages: int = Field(default=12, ge=0, le=10**9)


class BudgetPolicy(BaseModel):
    model_config = _STRICT
    # bounded so every count fits the engine's 64-bit columns
    token_budget: int = Field(default=4000, ge=0, le=10**12)
    reserve_tokens: int = Field(default=500, ge=0, le=10**12)


class BranchPolicy(BaseModel):
    model_config = _STRICT
    lineage_only: bool = True
    shared_fill: bool = True


class OwnershipPolicy(BaseModel):
    model_config = _STRICT
    participant_isolation: bool = True
    child_promotion: Literal["auto", "explicit", "never"] = "explicit"


class VisibilityPolicy(BaseModel):
    model_config = _STRICT
    audit_only_excluded: bool = True


class ProviderRule(BaseModel):
    model_config = _STRICT
    blocked_classes: list[PrivacyClass] = Field(default_factory=list)


class PrivacyPolicy(BaseModel):
    model_config = _STRICT
    raw_blocked_classes: list[PrivacyClass] = Field(
        default_factory=lambda: ["oauth_derived", "google_derived", "secret_adjacent"]
    )
    providers: dict[str, ProviderRule] = Field(default_factory=dict)

    @field_validator("providers")
    @classmethod
    def _lower_case_providers(cls, value: dict[str, ProviderRule]) -> dict[str, ProviderRule]:
        # a request's provider is matched case-insensitively: "OpenAI" rules apply to "openai"
        out: dict[str, ProviderRule] = {}
        for name, rule in value.items():
            key = name.lower()
            if key in out:
                raise ValueError(f"provider '{name}' collides with another provider table "
                                 f"(names are matched case-insensitively)")
            out[key] = rule
        return out

    def rule_for(self, provider: str | None) -> ProviderRule | None:
        """The rule of ``provider`` (any case), or None."""
        return self.providers.get((provider or "").lower())


class FreshnessPolicy(BaseModel):
    """Windows in hours per freshness class; ``None`` (absent) means never stale."""

    model_config = _STRICT
    # hours, at most about a thousand years (a time window Python's dates can add)
    volatile: int | None = Field(default=6, ge=0, le=10**7)
    session: int | None = Field(default=24, ge=0, le=10**7)
    bounded: int | None = Field(default=72, ge=0, le=10**7)
    durable: int | None = Field(default=None, ge=0, le=10**7)
    permanent: int | None = Field(default=None, ge=0, le=10**7)
    stale_action: Literal["mark", "omit"] = "omit"
    broken_provenance: Literal["mark", "omit"] = "omit"

    def window(self, freshness_class: str) -> int | None:
        return getattr(self, freshness_class, None) if freshness_class in _FRESH_CLASSES else None


_FRESH_CLASSES = ("volatile", "session", "bounded", "durable", "permanent")


class ContradictionPolicy(BaseModel):
    model_config = _STRICT
    show_both_sides: bool = False
    supersession: Literal["omit_obsolete", "keep_both"] = "omit_obsolete"


class RecoveryPolicy(BaseModel):
    model_config = _STRICT
    protected_states: list[ProtectedState] = Field(
        default_factory=lambda: ["pending", "failed", "deferred"]
    )


class RehydrationPolicy(BaseModel):
    model_config = _STRICT
    byte_budget: int = Field(default=65536, ge=0, le=10**12)
    trigger: Literal["exact_evidence", "never"] = "exact_evidence"


class RetentionPolicy(BaseModel):
    model_config = _STRICT
    removed_classes: list[RetentionClass] = Field(default_factory=lambda: ["delete"])


class RankingPolicy(BaseModel):
    model_config = _STRICT
    order: list[RankKey] = Field(
        default_factory=lambda: [
            "checkpoint", "skill_state", "exact_evidence", "message", "tool_memory",
            "tool_artifact", "tool_call",
        ]
    )

    @field_validator("order")
    @classmethod
    def _no_duplicates(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for v in value:
            if v in seen:
                raise ValueError(f"duplicate entry '{v}'")
            seen.add(v)
        return value


class Policy(BaseModel):
    """One resolved policy version (its ``extends`` chain already merged in)."""

    model_config = _STRICT
    version: str
    description: str
    extends: str | None = None
    window: WindowPolicy = Field(default_factory=WindowPolicy)
    budget: BudgetPolicy = Field(default_factory=BudgetPolicy)
    branch: BranchPolicy = Field(default_factory=BranchPolicy)
    ownership: OwnershipPolicy = Field(default_factory=OwnershipPolicy)
    visibility: VisibilityPolicy = Field(default_factory=VisibilityPolicy)
    privacy: PrivacyPolicy = Field(default_factory=PrivacyPolicy)
    freshness: FreshnessPolicy = Field(default_factory=FreshnessPolicy)
    contradiction: ContradictionPolicy = Field(default_factory=ContradictionPolicy)
    recovery: RecoveryPolicy = Field(default_factory=RecoveryPolicy)
    rehydration: RehydrationPolicy = Field(default_factory=RehydrationPolicy)
    retention: RetentionPolicy = Field(default_factory=RetentionPolicy)
    ranking: RankingPolicy = Field(default_factory=RankingPolicy)


FAMILIES: tuple[str, ...] = tuple(
    name for name in Policy.model_fields if name not in ("version", "description", "extends")
)


@dataclass(frozen=True)
class PolicyChange:
    key: str  # dotted, e.g. "freshness.volatile"
    parent: Any
    value: Any


# --------------------------------------------------------------------------- runtime policies
# The rules of real agent runtimes (replayed by replay/runtimes.py), as versions of every
# registry: "<family>" replays each transcript request with the values it ran with,
# "<family>:<key>=<value>,..." changes keys (a counterfactual).

# family -> key -> (type, default, meaning); a default of None means "as the request ran"
RUNTIMES: dict[str, dict[str, tuple[type, Any, str]]] = {
    "claude-code": {
        "compaction": (bool, True, "the session's recorded compactions drop what came before them"),
        "microcompaction": (bool, True, "tool results the session cleared in place are sent cleared"),
        "compact_at": (int, None, "also compact when a request would carry more tokens than this "
                                  "(its summary is not known: counted as empty)"),
    },
    "codex": {
        "compaction": (bool, True, "the session's recorded compactions replace the history"),
    },
    "gemini-cli": {
        "compaction": (bool, True, "the session's recorded compressions replace the history"),
    },
    "swe-agent": {
        "history_processors": (bool, True, "the trajectory's history processors run"),
        "last_n_observations.n": (int, None, "observations kept in full (the last n)"),
        "last_n_observations.polling": (int, None, "how often the kept window moves"),
    },
    "chat-full-history": {},
    "esaa": {
        "last_n": (int, None, "events of the agent's view in its context (the last n)"),
        "shared": (bool, False, "every event of the log is in every agent's view, not only its own"),
    },
}

DESCRIPTIONS = {
    "claude-code": "Claude Code: the whole history since the last compaction; cleared results as placeholders",
    "codex": "Codex CLI: the whole history, replaced by the compacted history at a compaction",
    "gemini-cli": "Gemini CLI: the whole session history, replaced by the compressed history at a compression",
    "swe-agent": "SWE-agent: the whole history after the trajectory's history processors",
    "chat-full-history": "Chat loop: every earlier message, verbatim",
    "esaa": "ESAA: the last n events of the log visible to the agent (context --agent A --last n)",
}

@dataclass(frozen=True)
class RuntimePolicy:
    """A runtime family and the keys a version changes (empty: as each request ran)."""

    version: str
    runtime: str
    overrides: tuple[tuple[str, Any], ...] = ()
    description: str = ""

    def setting(self, key: str, recorded: Any = None) -> Any:
        """The value of ``key``: this version's, else what the request ran with, else the
        family's default."""
        for k, v in self.overrides:
            if k == key:
                return v
        if recorded is not None:
            return recorded
        return RUNTIMES[self.runtime][key][1]


def is_runtime_version(version: str) -> bool:
    return version.split(":", 1)[0] in RUNTIMES


def parse_runtime(version: str) -> RuntimePolicy:
    """``claude-code`` or ``swe-agent:last_n_observations.n=3,...`` -> RuntimePolicy; a
    bad key or value is a ContextlensError naming it."""
    family, _, rest = version.partition(":")
    if family not in RUNTIMES:
        raise ContextlensError(f"unknown runtime policy '{family}' (known: {', '.join(RUNTIMES)})")
    keys = RUNTIMES[family]
    overrides: list[tuple[str, Any]] = []
    for part in [p for p in rest.split(",") if p.strip()] if rest else []:
        key, eq, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not eq and key in keys:
            raise ContextlensError(f"runtime policy '{version}': {key} needs a value "
                                   f"({family}:{key}=VALUE)")
        if not eq or key not in keys:
            known = ", ".join(keys) or "none"
            raise ContextlensError(f"runtime policy '{version}': unknown key '{key}' "
                                   f"(keys of {family}: {known})")
        kind = keys[key][0]
        if kind is bool:
            if raw.lower() not in ("true", "false"):
                raise ContextlensError(f"runtime policy '{version}': {key} must be true or false, not '{raw}'")
            value: Any = raw.lower() == "true"
        else:
            try:
                value = int(raw)
            except ValueError:
                raise ContextlensError(f"runtime policy '{version}': {key} must be an integer, "
                                       f"not '{raw}'") from None
            if value < (1 if key.endswith("polling") else 0):
                raise ContextlensError(f"runtime policy '{version}': {key} must be at least "
                                       f"{1 if key.endswith('polling') else 0}, not {value}")
        overrides.append((key, value))
    changed = ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in overrides)
    return RuntimePolicy(version, family, tuple(overrides),
                         DESCRIPTIONS[family] + (f" (changed: {changed})" if changed else ""))


# what each runtime does with the history, for "why" sentences
RUNTIME_RULES = {
    "claude-code": "Claude Code sends the whole history since the last compaction",
    "codex": "Codex sends the whole history since its last compaction",
    "gemini-cli": "Gemini CLI sends the whole session history since its last compression",
    "swe-agent": "SWE-agent sends the whole history after its history processors",
    "chat-full-history": "the chat loop sends every earlier message",
    "esaa": "ESAA gives an agent the last events of the log it can see",
}


def runtime_rule(version: str) -> str | None:
    """The sentence saying what ``version``'s runtime does with the history, or None."""
    return RUNTIME_RULES.get(version.split(":", 1)[0])


# --------------------------------------------------------------------------- the effective budget
# The one home of the budget rule (DESIGN.md section 5, "Budget"): the reference assembler's
# step 11 and the columnar engine both take their budget from here, and every view that
# explains an assembly shows this answer.

BUDGET_CAPS = ("policy", "context_limit")  # what set a request's effective budget


@dataclass(frozen=True)
class EffectiveBudget:
    """The token budget a request is assembled under: the policy's ``budget.token_budget``,
    never more than the model's context limit recorded on the request (``context_limit``),
    less ``budget.reserve_tokens``; ``available`` is what the records may fill.

    ``capped_by`` says which of the two set ``budget``: ``"context_limit"`` when the model's
    limit is below the policy's budget, else ``"policy"`` (also when no limit is recorded).
    A runtime policy (a transcript's ``claude-code``, ``swe-agent``…) keeps no token budget:
    ``policy_budget``, ``reserve_tokens``, ``budget``, ``available`` and ``capped_by`` are
    None and ``context_limit`` (the model's window, when recorded) is all that applies."""

    policy_version: str
    context_limit: int | None  # the model's context window recorded on the request
    policy_budget: int | None  # budget.token_budget; None: a runtime policy (no budget)
    reserve_tokens: int | None  # budget.reserve_tokens
    budget: int | None  # the policy's budget capped by context_limit
    available: int | None  # budget - reserve_tokens (negative: nothing but protected fits)
    capped_by: str | None  # "policy" or "context_limit"; None without a budget

    @property
    def has_budget(self) -> bool:
        return self.budget is not None

    def sentence(self) -> str:
        """One line for the command line: the budget, what set it, the reserve and what is
        left for records; or that the runtime keeps none, with the model's window."""
        if self.budget is None:
            window = (f"the model's context window is {self.context_limit:,}"
                      if self.context_limit is not None else "no model context window recorded")
            return f"no token budget under {self.policy_version} (a runtime policy); {window}"
        if self.capped_by == "context_limit":
            why = f"the model's context limit, below policy {self.policy_version}'s {self.policy_budget:,}"
        elif self.context_limit is None:
            why = f"policy {self.policy_version}'s (no model context limit recorded)"
        else:
            why = f"policy {self.policy_version}'s, within the model's context limit {self.context_limit:,}"
        return (f"token budget {self.budget:,}: {why}; reserve {self.reserve_tokens:,}, "
                f"{self.available:,} available")

    def short(self) -> str:
        """The same in a few words, for a screen's header line (the side names the policy)."""
        if self.budget is None:
            window = (f"model window {self.context_limit:,}" if self.context_limit is not None
                      else "no model window recorded")
            return f"none (runtime policy); {window}"
        if self.capped_by == "context_limit":
            why = f"model limit; policy {self.policy_budget:,}"
        elif self.context_limit is None:
            why = "policy; no model limit recorded"
        else:
            why = f"policy; model limit {self.context_limit:,}"
        return f"{self.budget:,} ({why}) - reserve {self.reserve_tokens:,} = {self.available:,}"

    def to_json(self) -> dict[str, Any]:
        return {"policy_version": self.policy_version, "context_limit": self.context_limit,
                "policy_budget": self.policy_budget, "reserve_tokens": self.reserve_tokens,
                "budget": self.budget, "available": self.available,
                "capped_by": self.capped_by}


def effective_budget(policy: "Policy | RuntimePolicy", context_limit: int | None) -> EffectiveBudget:
    """The effective budget of a request under ``policy``; ``context_limit`` is the one
    recorded on the request (``Request.context_limit``, the context_assemblies column), None
    when not recorded (no cap)."""
    limit = int(context_limit) if context_limit is not None else None
    if isinstance(policy, RuntimePolicy):
        return EffectiveBudget(policy.version, limit, None, None, None, None, None)
    budget = policy.budget.token_budget
    capped = limit is not None and limit < budget
    if capped:
        budget = limit  # type: ignore[assignment]
    reserve = policy.budget.reserve_tokens
    return EffectiveBudget(policy.version, limit, policy.budget.token_budget, reserve, budget,
                           budget - reserve, "context_limit" if capped else "policy")


def effective_budgets(token_budget: Any, reserve_tokens: Any, context_limit: Any,
                      has_limit: Any) -> tuple[Any, Any, Any]:
    """``effective_budget`` over numpy columns (one value per request): the policies'
    token budgets and reserves, the recorded limits and whether one is recorded. Returns
    (budget, available, capped: the model's limit set the budget)."""
    import numpy as np

    capped = np.asarray(has_limit, dtype=bool) & (context_limit < token_budget)
    budget = np.where(capped, context_limit, token_budget)
    return budget, budget - reserve_tokens, capped


# --------------------------------------------------------------------------- helpers


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge: tables merge key by key; scalars and lists in ``over`` replace."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists are leaves."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    return repr(value)


_EXPECTED = {
    "int_type": "expected an integer",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
    "float_type": "expected a number",
}


def _problem(err: dict[str, Any]) -> str:
    kind = err["type"]
    got = err.get("input")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing key"
    if kind in _EXPECTED:
        return f"{_EXPECTED[kind]}, got {_shown(got)}"
    if kind == "literal_error":
        expected = (err.get("ctx") or {}).get("expected", "")
        return f"expected one of {expected}, got {_shown(got)}"
    if kind == "greater_than_equal":
        return f"must be >= {(err.get('ctx') or {}).get('ge')}, got {_shown(got)}"
    if kind == "less_than_equal":
        return f"must be <= {(err.get('ctx') or {}).get('le'):,}, got {_shown(got)}"
    if kind == "value_error" and (err.get("ctx") or {}).get("error") is not None:
        return str(err["ctx"]["error"])
    return f"{err.get('msg', 'invalid value')}, got {_shown(got)}"


def _has_path(raw: dict[str, Any], path: tuple[Any, ...]) -> bool:
    node: Any = raw
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


# --------------------------------------------------------------------------- registry


# a policy's ``extends`` chain is a handful of files; a longer one is refused by name
MAX_EXTENDS_DEPTH = 64


class PolicyRegistry:
    """Every ``*.toml`` of a folder, validated and resolved on construction."""

    def __init__(self, folder: str | Path | None = None, *, texts: dict[str, str] | None = None,
                 label: str | None = None) -> None:
        self.folder = Path(folder) if folder is not None else Path("policies")
        self._label = label or self.folder.name or "policies"
        self._where = str(self.folder) if texts is None else self._label
        self._raw: dict[str, dict[str, Any]] = {}
        self._files: dict[str, str] = {}  # version -> file name in messages, when not label/v.toml
        self._resolved: dict[str, dict[str, Any]] = {}
        self._policies: dict[str, Policy] = {}
        self._depths: dict[str, int] = {}  # version -> how many ancestors its chain has
        if texts is None:
            if not self.folder.is_dir():
                raise ContextlensError(f"policies folder {self.folder} not found")
            texts = {}
            for path in sorted(self.folder.glob("*.toml")):
                # bounded: a FIFO or /dev/zero named *.toml (a hostile bundle) is refused
                texts[path.stem] = read_text_capped(path, POLICY_CAP, "a policy file")
            if not texts:
                raise ContextlensError(f"policies folder {self.folder} holds no *.toml file")
        for stem in sorted(texts, key=natural_key):
            self._raw[stem] = self._parse(stem, texts[stem])
        for stem in self.versions():
            self._resolve(stem, ())

    @classmethod
    def from_texts(cls, texts: dict[str, str], label: str = "policies") -> "PolicyRegistry":
        """A registry over in-memory TOML texts keyed by version (file stem)."""
        return cls(None, texts=texts, label=label)

    # ---- loading
    def _file(self, stem: str) -> str:
        return self._files.get(stem) or f"{self._label}/{stem}.toml"

    def _parse(self, stem: str, text: str) -> dict[str, Any]:
        file = self._file(stem)
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ContextlensError(f"{file}: invalid TOML: {err}") from None
        except RecursionError:
            raise ContextlensError(f"{file}: invalid TOML: nested too deeply") from None
        version = raw.get("version")
        if version is None:
            raise ContextlensError(f"{file}: key version: missing key")
        if not isinstance(version, str):
            raise ContextlensError(f"{file}: key version: expected a string, got {_shown(version)}")
        if version != stem:
            raise ContextlensError(
                f"{file}: key version: '{version}' does not match the file name '{stem}'"
            )
        parent = raw.get("extends")
        if parent is not None and not isinstance(parent, str):
            raise ContextlensError(f"{file}: key extends: expected a string, got {_shown(parent)}")
        return self._lower_providers(file, raw)

    @staticmethod
    def _lower_providers(file: str, raw: dict[str, Any]) -> dict[str, Any]:
        """Provider table names in lower case, before ``extends`` merges them, so a child's
        ``[privacy.providers.OpenAI]`` overrides its parent's ``openai``."""
        privacy = raw.get("privacy")
        providers = privacy.get("providers") if isinstance(privacy, dict) else None
        if not isinstance(providers, dict):
            return raw
        lowered: dict[str, Any] = {}
        first: dict[str, str] = {}
        for name, rule in providers.items():
            key = name.lower()
            if key in lowered:
                raise ContextlensError(
                    f"{file}: key privacy.providers.{name}: collides with privacy.providers."
                    f"{first[key]} (provider names are matched case-insensitively)"
                )
            lowered[key] = rule
            first[key] = name
        return {**raw, "privacy": {**privacy, "providers": lowered}}

    def _resolve(self, stem: str, chain: tuple[str, ...]) -> dict[str, Any]:
        """The merged settings of ``stem``: its ``extends`` chain is walked iteratively (a
        chain of a thousand files is no recursion), MAX_EXTENDS_DEPTH deep at most."""
        if stem in self._resolved:
            return self._resolved[stem]
        # the unresolved part of the chain, child first
        pending: list[str] = list(chain)
        node: str | None = stem
        while node is not None and node not in self._resolved:
            if node in pending:
                cycle = " -> ".join(pending[pending.index(node):] + [node])
                raise ContextlensError(f"{self._file(pending[pending.index(node)])}: extends cycle {cycle}")
            if len(pending) > MAX_EXTENDS_DEPTH:
                raise self._too_deep(stem)
            pending.append(node)
            parent = self._raw[node].get("extends")
            if parent is not None and parent not in self._raw:
                raise ContextlensError(
                    f"{self._file(node)}: key extends: extends unknown version '{parent}'"
                )
            node = parent
        for child in reversed(pending[len(chain):]):
            self._merge_one(child)
        return self._resolved[stem]

    def _too_deep(self, stem: str) -> ContextlensError:
        return ContextlensError(
            f"{self._file(stem)}: key extends: a chain of more than {MAX_EXTENDS_DEPTH} "
            f"policies (the extends depth limit)"
        )

    def _merge_one(self, stem: str) -> None:
        """Resolve ``stem`` whose parent (if any) is resolved already."""
        raw = self._raw[stem]
        parent = raw.get("extends")
        own = {k: v for k, v in raw.items()}
        depth = 0 if parent is None else self._depths[parent] + 1
        self._depths[stem] = depth
        if depth > MAX_EXTENDS_DEPTH:
            raise self._too_deep(stem)
        if parent is None:
            merged = own
        else:
            base = dict(self._resolved[parent])
            base.pop("description", None)
            merged = merge(base, own)
        try:
            policy = Policy.model_validate(merged)
        except pydantic.ValidationError as err:
            first = err.errors()[0]
            loc = tuple(first["loc"])
            key = ".".join(str(p) for p in loc)
            # name the file of the chain that wrote the offending key; a missing key is
            # the fault of the file that lacks it
            owner = stem
            node = stem if first["type"] != "missing" else None
            while node is not None:
                if _has_path(self._raw[node], loc):
                    owner = node
                    break
                node = self._raw[node].get("extends")
            raise ContextlensError(f"{self._file(owner)}: key {key}: {_problem(first)}") from None
        self._resolved[stem] = merged
        self._policies[stem] = policy

    # ---- queries
    def versions(self) -> list[str]:
        return sorted(self._raw, key=natural_key)

    def get(self, version: str) -> Any:
        """The policy of ``version`` (a ``Policy``, or a ``RuntimePolicy`` for a runtime
        family such as ``claude-code`` or ``swe-agent:last_n_observations.n=3``); a
        reference ending in ``.toml`` is a file (see resolve)."""
        if version.endswith(".toml") and version not in self._policies:
            return self.resolve(version)
        if version not in self._policies and is_runtime_version(version):
            return parse_runtime(version)
        try:
            return self._policies[version]
        except KeyError:
            known = ", ".join(self.versions())
            raise ContextlensError(
                f"unknown policy version '{version}' (known: {known})"
            ) from None

    def resolve(self, ref: str | Path) -> Policy:
        """A policy by version name, or from a TOML file when ``ref`` ends in ``.toml``.

        A file's ``extends`` chain is looked up first in the file's own folder, then among
        this registry's versions (files of the chain shadow same-named versions for this
        lookup only; the registry is not changed); errors name the file, key and problem."""
        text = str(ref)
        if not isinstance(ref, Path) and not text.endswith(".toml"):
            return self.get(text)
        path = Path(text)
        if not path.exists():
            raise ContextlensError(f"policy file {path} not found")
        loaded: dict[str, Path] = {}
        contents: dict[str, str] = {}
        node: Path | None = path
        while node is not None and node.stem not in loaded:
            if len(loaded) > MAX_EXTENDS_DEPTH:
                raise ContextlensError(
                    f"{path}: key extends: a chain of more than {MAX_EXTENDS_DEPTH} policies "
                    "(the extends depth limit)"
                )
            loaded[node.stem] = node
            # bounded: a FIFO or /dev/zero in the chain is refused, never read
            contents[node.stem] = read_text_capped(node, POLICY_CAP, "a policy file")
            try:
                raw = tomllib.loads(contents[node.stem])
            except (tomllib.TOMLDecodeError, RecursionError):
                break  # _parse below reports it with the file name
            parent = raw.get("extends")
            sibling = node.parent / f"{parent}.toml" if isinstance(parent, str) else None
            node = sibling if sibling is not None and sibling.exists() else None
        # resolved in a copy: the chain's files shadow same-named versions for this lookup
        # only, and this registry stays as it was
        view = object.__new__(PolicyRegistry)
        view.__dict__.update(self.__dict__)
        view._raw, view._files = dict(self._raw), dict(self._files)
        view._resolved, view._policies, view._depths = {}, {}, {}
        for stem, file in loaded.items():
            view._files[stem] = str(file)
            view._raw[stem] = view._parse(stem, contents[stem])
        view._resolve(path.stem, ())
        return view._policies[path.stem]

    def require(self, recorded: Mapping[str, int] | Iterable[str]) -> None:
        """Check that every recorded policy version is here, else raise ONE ContextlensError
        naming all the missing versions and how many requests recorded them.

        ``recorded``: version -> number of requests, or one version per request (e.g. a
        store's ``policy_version`` column)."""
        counts = Counter(recorded) if not isinstance(recorded, Mapping) else Counter(dict(recorded))
        missing = sorted((v for v in counts if v not in self), key=natural_key)
        if not missing:
            return
        n = sum(counts[v] for v in missing)
        raise ContextlensError(
            f"policies folder {self._where} lacks {', '.join(missing)} "
            f"recorded by {n} request{'s' if n != 1 else ''}"
        )

    def __contains__(self, version: object) -> bool:
        return version in self._policies or (isinstance(version, str) and is_runtime_version(version))

    def description(self, version: str) -> str:
        return self.get(version).description

    def parent(self, version: str) -> str | None:
        policy = self.get(version)
        if isinstance(policy, RuntimePolicy):
            return policy.runtime if policy.overrides else None
        return policy.extends

    def changes(self, version: str) -> list[PolicyChange]:
        """Dotted keys whose resolved value differs from the parent's; [] for a root (a
        runtime version: the keys it changes from what each request ran with)."""
        policy = self.get(version)
        if isinstance(policy, RuntimePolicy):
            return [PolicyChange(k, "as recorded", v) for k, v in policy.overrides]
        if policy.extends is None:
            return []
        mine = flatten(self.settings(version))
        theirs = flatten(self.settings(policy.extends))
        out = []
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                out.append(PolicyChange(key, theirs.get(key), mine.get(key)))
        return out

    def settings(self, version: str) -> dict[str, Any]:
        """The resolved families of ``version`` as plain data (defaults filled in)."""
        policy = self.get(version)
        if isinstance(policy, RuntimePolicy):
            return {"runtime": {"family": policy.runtime, **dict(policy.overrides)}}
        data = policy.model_dump(mode="json")
        for k in ("version", "description", "extends"):
            data.pop(k, None)
        return data


def bundled_policies_dir() -> Path:
    from sample_data import SAMPLE_DIR

    return SAMPLE_DIR / "policies"


def load_registry(folder: str | Path | None = None) -> PolicyRegistry:
    """The registry over ``folder`` (the bundled ``sample_data/policies`` when None)."""
    return PolicyRegistry(bundled_policies_dir() if folder is None else Path(folder))


def load_policy(path: str | Path, registry: PolicyRegistry | None = None) -> Policy:
    """The policy of a TOML file: its ``extends`` chain from the file's own folder first,
    then from ``registry`` (the bundled one when None)."""
    return (registry or load_registry(None)).resolve(Path(path))
