"""diff_records: pairing, change classes, ordering and the safety list."""

from __future__ import annotations

from replay.diff import CHANGE_CLASSES, SAFETY_REASONS, diff_records


def r(kind: str, rid: str, decision: str, rendering: str | None, reason: str,
      position: int | None, tokens: int = 10) -> dict:
    return {"assembly_id": "a", "record_kind": kind, "record_id": rid, "decision": decision,
            "rendering": rendering, "position": position, "policy_family": "window",
            "reason_code": reason, "detail": "", "tokens": tokens}


A = [
    r("message", "m1", "included", "verbatim", "in_window", 0),
    r("message", "m2", "included", "verbatim", "in_window", 1),
    r("message", "m3", "included", "verbatim", "in_window", 2),
    r("tool_memory", "k1", "included", "compact_memory", "compact_memory", 3),
    r("tool_memory", "k2", "omitted", None, "stale", None),
    r("tool_artifact", "x1", "omitted", None, "privacy_restricted", None),
    r("message", "m4", "included", "verbatim", "in_window", 4),
    r("tool_memory", "k3", "omitted", None, "stale", None),
]
B = [
    r("message", "m2", "included", "verbatim", "in_window", 0),
    r("message", "m1", "included", "verbatim", "in_window", 1),  # swapped with m2
    r("message", "m3", "included", "verbatim", "lineage", 2),
    r("tool_memory", "k1", "included", "stale_marker", "stale_marker", 3, 5),
    r("tool_memory", "k2", "included", "compact_memory", "compact_memory", 4),
    r("tool_artifact", "x1", "included", "reference", "lineage", 5),
    r("message", "m4", "omitted", None, "outside_window", None),
    r("tool_memory", "k3", "omitted", None, "superseded", None),
    r("tool_call", "c9", "omitted", None, "redundant", None),
]


def test_change_classes() -> None:
    d = diff_records(A, B, "recorded v5", "replay v4")
    by = {c["record_id"]: c["change"] for c in d.changes}
    assert by == {"m1": "moved", "m2": "moved", "m3": "reason_changed", "k1": "rendering_changed",
                  "k2": "newly_included", "x1": "newly_included", "m4": "newly_omitted",
                  "k3": "reason_changed", "c9": "reason_changed"}
    assert d.summary["counts"] == {"newly_included": 2, "newly_omitted": 1, "rendering_changed": 1,
                                   "reason_changed": 3, "moved": 2, "unchanged": 0}
    assert tuple(d.summary["counts"]) == CHANGE_CLASSES
    assert (d.summary["tokens_a"], d.summary["tokens_b"]) == (50, 55)
    assert (d.summary["included_a"], d.summary["included_b"]) == (5, 6)


def test_safety_first_then_class_order_then_kind_and_id() -> None:
    d = diff_records(A, B)
    assert d.safety == [{"record_kind": "tool_artifact", "record_id": "x1", "a_reason": "privacy_restricted",
                         "b_rendering": "reference", "b_reason": "lineage"}]
    order = [c["record_id"] for c in d.changes]
    assert order == ["x1", "k2", "m4", "k1", "m3", "c9", "k3", "m1", "m2"]
    assert d.changes[0]["a"] == {"decision": "omitted", "rendering": None, "reason_code": "privacy_restricted",
                                 "position": None, "tokens": 10, "detail": "", "policy_family": "window"}
    assert d.changed == [c for c in d.changes if c["change"] != "unchanged"]


def test_identical_sides_and_insertion_are_not_moves() -> None:
    same = diff_records(A, A)
    assert same.summary["counts"]["unchanged"] == len(A) and not same.safety
    # inserting a record before others shifts positions but moves nothing
    shifted = [dict(x, position=x["position"] + 1) if x["position"] is not None else x for x in A]
    shifted.append(r("checkpoint", "ck", "included", "summary", "checkpoint_restore", 0))
    d = diff_records(A, shifted)
    assert d.summary["counts"]["moved"] == 0 and d.summary["counts"]["newly_included"] == 1


def test_every_safety_reason_is_reported() -> None:
    for reason in sorted(SAFETY_REASONS):
        a = [r("tool_memory", "k", "omitted", None, reason, None)]
        b = [r("tool_memory", "k", "included", "compact_memory", "compact_memory", 0)]
        assert diff_records(a, b).safety[0]["a_reason"] == reason
    # withheld for a non-safety reason: not a finding
    a = [r("tool_memory", "k", "omitted", None, "over_budget", None)]
    b = [r("tool_memory", "k", "included", "compact_memory", "compact_memory", 0)]
    assert diff_records(a, b).safety == []
    assert diff_records(a, b).to_json()["safety"] == []
