"""diff_records: pairing, change classes, ordering, and the safety delta (regressions, fixes,
findings in the recording) computed by the one safety function on both sides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.store import Store
from replay import service
from replay.diff import CHANGE_CLASSES, SafetyDelta, diff_records


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


def test_ids_of_a_change_class_are_listed_in_the_order_a_reader_counts_them() -> None:
    # a transcript's messages are m0..m11: code-point order would list m10 and m11 after m1
    a = [r("message", f"m{i}", "included", "verbatim", "in_window", i) for i in range(12)]
    b = [r("message", f"m{i}", "omitted", None, "outside_window", None) for i in range(12)]
    d = diff_records(a, b)
    assert [c["record_id"] for c in d.changes] == [f"m{i}" for i in range(12)]


class _Findings:
    """A stand-in SafetyContext: a record included with the rendering ``flagged`` names is a
    finding."""

    def __init__(self, flagged: dict[tuple[str, str], str]) -> None:
        self.flagged = flagged

    def findings(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"record_id": x["record_id"], "record_kind": x["record_kind"],
                 "finding": self.flagged[(x["record_id"], x["rendering"])], "detail": ""}
                for x in records
                if x["decision"] == "included" and (x["record_id"], x["rendering"]) in self.flagged]


def test_safety_first_then_class_order_then_kind_and_id() -> None:
    # k2 is stale shown as current in B only; k1 is a finding in A only (a fix)
    ctx = _Findings({("k2", "compact_memory"): "stale_as_current",
                     ("k1", "compact_memory"): "superseded"})
    d = diff_records(A, B, context=ctx)  # type: ignore[arg-type]
    assert d.safety.regressions == [{"record_id": "k2", "record_kind": "tool_memory",
                                     "finding": "stale_as_current", "detail": ""}]
    assert d.safety.fixes == [{"record_id": "k1", "record_kind": "tool_memory", "finding": "superseded",
                               "detail": ""}]
    assert d.safety.in_recording == []  # neither side is the recording
    assert d.summary["safety"] == 1
    order = [c["record_id"] for c in d.changes]
    assert order == ["k2", "x1", "m4", "k1", "m3", "c9", "k3", "m1", "m2"]
    assert d.changes[0]["safety"] and not any(c["safety"] for c in d.changes[1:])
    assert d.changes[1]["a"] == {"decision": "omitted", "rendering": None, "reason_code": "privacy_restricted",
                                 "position": None, "tokens": 10, "detail": "", "policy_family": "window"}
    assert d.changed == [c for c in d.changes if c["change"] != "unchanged"]
    assert d.to_json()["safety"] == {
        "regressions": [{"record_id": "k2", "record_kind": "tool_memory", "finding": "stale_as_current",
                         "detail": ""}],
        "fixes": [{"record_id": "k1", "record_kind": "tool_memory", "finding": "superseded", "detail": ""}],
        "in_recording": [],
    }


def test_findings_of_a_recorded_side_are_in_recording() -> None:
    ctx = _Findings({("k1", "compact_memory"): "superseded"})
    d = diff_records(A, A, context=ctx, a_recorded=True)  # type: ignore[arg-type]
    # the same finding on both sides: neither a regression nor a fix, but it was sent
    assert d.safety.regressions == [] and d.safety.fixes == []
    assert d.safety.in_recording == [{"record_id": "k1", "record_kind": "tool_memory",
                                      "finding": "superseded", "detail": ""}]
    assert not d.safety.empty and len(d.safety) == 0


def test_identical_sides_and_insertion_are_not_moves() -> None:
    same = diff_records(A, A)
    assert same.summary["counts"]["unchanged"] == len(A) and not same.safety
    # inserting a record before others shifts positions but moves nothing
    shifted = [dict(x, position=x["position"] + 1) if x["position"] is not None else x for x in A]
    shifted.append(r("checkpoint", "ck", "included", "summary", "checkpoint_restore", 0))
    d = diff_records(A, shifted)
    assert d.summary["counts"]["moved"] == 0 and d.summary["counts"]["newly_included"] == 1


def test_without_a_context_there_are_no_findings() -> None:
    d = diff_records(A, B)
    assert d.safety == SafetyDelta() and d.safety.empty
    assert d.to_json()["safety"] == {"regressions": [], "fixes": [], "in_recording": []}


# the incident's calendar memory as every safety path words it (replay.findings_text)
STALE_020 = {"record_id": "mem-020", "record_kind": "tool_memory", "finding": "stale_as_current",
             "detail": "rendered compact_memory (a current fact) at 2026-10-29 17:00 UTC, "
                       "stale since 2026-10-27 15:00 UTC"}


def test_v5_incident_against_v4_is_a_stale_as_current_regression(sample_db: Path) -> None:
    """Replaying the v5 incident request under v4 and v5: the calendar memory mem-020 is
    shown as current fact under v5 (a regression), not merely a rendering change."""
    with Store.open(sample_db) as store:
        d = service.diff(store, "asm-035", "v5", against="v4")
        recorded = service.diff(store, "asm-035", "v4")
    assert STALE_020 in d.safety.regressions
    assert d.safety.fixes == [] and d.safety.in_recording == []
    change = next(c for c in d.changes if c["record_id"] == "mem-020")
    assert change["change"] == "rendering_changed" and change["safety"]
    # against the recording (v5): v4 fixes what the recording sent
    assert STALE_020 in recorded.safety.fixes
    assert STALE_020 in recorded.safety.in_recording
    assert recorded.safety.regressions == []
