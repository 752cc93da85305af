"""A transcript's request has no policy to explain: its why-sentence names the runtime's own
rule and no policy key. (That every key a sentence of a governed request names flips its
record, and every change it names does what it says, is tests/unit/test_why_proof.py.)"""

from __future__ import annotations

from replay.explain import explain, policy_key


def test_observed_runtime_names_no_key() -> None:
    assembly = {"policy_version": "observed", "provider": "anthropic", "branch_id": "b",
                "assembler_version": "claude-code-adapter/1"}
    sent = {"record_kind": "message", "record_id": "m1", "decision": "included",
            "rendering": "verbatim", "reason_code": "in_window", "policy_family": "window",
            "detail": "sent in the recorded request"}
    sentence = explain(assembly, sent, {"branch_id": "b"}, [], [])
    # the runtime's own rule, not an invented policy reason
    assert "Claude Code sends the whole history since the last compaction" in sentence
    assert "No policy to explain" in sentence and "window" not in sentence
    assert "policy key" not in sentence and policy_key(assembly, sent, {}) is None
    left = {**sent, "decision": "omitted", "rendering": None, "reason_code": "compacted",
            "detail": "dropped by compaction #1 at 2025-06-01T12:01:00+00:00 (trigger auto, preTokens 5000)"}
    sentence = explain(assembly, left, {}, [], [])
    assert "compacted the conversation" in sentence and "preTokens 5000" in sentence
    assert "No policy to explain" in sentence and policy_key(assembly, left, {}) is None
    cleared = {**sent, "rendering": "cleared", "reason_code": "elided",
               "detail": "cleared by microcompaction #1 (tokensSaved 1234 recorded, 1100 estimated)"}
    sentence = explain(assembly, cleared, {}, [], [])
    assert "placeholder" in sentence and "tokensSaved 1234 recorded" in sentence
    assert "policy key" not in sentence
