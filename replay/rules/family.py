"""What a policy family module declares besides its steps: its vocabulary."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Family:
    """One policy family's vocabulary.

    ``families``: the ``policy_family`` values its decisions carry (visibility decides under
    visibility, ownership and promotion); ``reasons``: every ``reason_code`` it writes;
    ``keys``: for a reason, the dotted policy key that decides it (what "why" names; a
    reason whose key depends on the record, e.g. a freshness class, is left to
    ``replay.explain.policy_key``)."""

    name: str
    families: tuple[str, ...]
    reasons: tuple[str, ...]
    keys: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert set(self.keys) <= set(self.reasons), (self.name, set(self.keys) - set(self.reasons))
