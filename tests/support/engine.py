"""Helpers for the replay engine tests: hand-built mini graphs and policy variants."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pyarrow as pa

from replay.assembler import Assembly, assemble
from replay.policy import Policy, load_registry, merge
from replay.sample.graph import Graph, ts
from replay.snapshot import Request, Snapshot

REGISTRY = load_registry(None)


def policy(base: str = "v4", **dotted: Any) -> Policy:
    """A resolved bundled policy with some keys replaced, e.g. policy("v1", **{"freshness.stale_action": "mark"})."""
    data = REGISTRY.settings(base)
    for key, value in dotted.items():
        node: dict[str, Any] = {}
        over = node
        parts = key.split(".")
        for p in parts[:-1]:
            over[p] = {}
            over = over[p]
        over[parts[-1]] = value
        data = merge(data, node)
    return Policy.model_validate({**data, "version": f"{base}-test", "description": "test"})


class Mini:
    """One conversation 'c' with branch 'b-main', a user, 'p-me' (anthropic) and 'p-other' (openai)."""

    def __init__(self) -> None:
        g = Graph(random.Random(0))
        self.g = g
        g.conversation("c", "mini", "u", "2026-01-01 00:00:00")
        g.branch("b-main", "c", "main", "2026-01-01 00:00:00")
        g.participant("p-user", "c", "User", "user")
        g.participant("p-me", "c", "Me", "model", "anthropic", "m-a")
        g.participant("p-other", "c", "Other", "model", "openai", "m-o")
        g.participant("p-sub", "c", "Sub", "subagent", "anthropic", "m-s")
        self.user_msg = g.message("b-main", "user", "hello there", "2026-01-01 00:00:01",
                                  participant="p-user")
        self.run = g.run("b-main", "p-me", "2026-01-01 00:00:02", None, trigger=self.user_msg)

    def request(self, at: str, run: str | None = None, *, context_limit: int | None = None,
                token_budget: int | None = 6000, byte_budget: int | None = 65536,
                exact: tuple[str, ...] = (), runtime: str | None = None) -> Request:
        """The request of ``run`` at ``at``: ``context_limit`` caps the policy's token budget;
        ``token_budget``/``byte_budget`` are only what a recording would say it used."""
        r = self.g.get("model_runs", run or self.run)
        return Request(
            assembly_id="asm-t", model_run_id=r["model_run_id"], conversation_id=r["conversation_id"],
            branch_id=r["branch_id"], participant_id=r["participant_id"],
            runtime_kind=runtime or r["runtime_kind"], provider=r["provider"], model=r["model"],
            assembled_at=ts(at), policy_version="test", assembler_version="test",
            token_budget=token_budget, byte_budget=byte_budget, exact_evidence_ids=list(exact), tags=[],
            context_limit=context_limit)

    def assemble(self, at: str, pol: Policy | None = None, **kw: Any) -> Assembly:
        return assemble(Snapshot(self.g.tables), self.request(at, **kw), pol or policy())


def rec(a: Assembly, record_id: str) -> dict[str, Any]:
    return a.record(record_id)


def decision(a: Assembly, record_id: str) -> tuple[str, str | None, str]:
    r = a.record(record_id)
    return r["decision"], r["rendering"], r["reason_code"]


class TestRegistry:
    """The few registry calls replay and safety make, over test policies keyed by version."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, policies: dict[str, Policy]) -> None:
        self._policies = policies

    def __contains__(self, version: object) -> bool:
        return version in self._policies

    def get(self, version: str) -> Policy:
        return self._policies[version]

    def versions(self) -> list[str]:
        return list(self._policies)


REQUEST_SCHEMA = pa.schema([
    ("assembly_id", pa.string()), ("model_run_id", pa.string()), ("conversation_id", pa.string()),
    ("branch_id", pa.string()), ("participant_id", pa.string()), ("runtime_kind", pa.string()),
    ("provider", pa.string()), ("model", pa.string()), ("assembled_at", pa.timestamp("us", tz="UTC")),
    ("policy_version", pa.string()), ("assembler_version", pa.string()),
    ("token_budget", pa.int64()), ("byte_budget", pa.int64()),
    ("exact_evidence_ids", pa.list_(pa.string())), ("tags", pa.list_(pa.string())),
    ("context_limit", pa.int64()),
])


def requests_table(reqs: list[Request]) -> pa.Table:
    """Requests as the context_assemblies rows a chunk holds (no export_id)."""
    rows: list[dict[str, Any]] = [dataclasses.asdict(r) for r in reqs]
    return pa.Table.from_pylist(rows, schema=REQUEST_SCHEMA)
