"""Why-sentences say only what is true: about other records of the prompt, the policy's stale
date, provider blocks, hidden replacements; and they read as sentences."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from ingest.store import Store
from readmodel import ReadModel
from replay.explain import explain
from replay.policy import load_registry
from replay.service import recorded_records


def _why(sample_db: Path, assembly_id: str, record_id: str, side: str = "recorded") -> str:
    with Store.open(sample_db) as store:
        return ReadModel(store, load_registry(None)).why(assembly_id, record_id, side=side).sentence


def test_memory_with_its_source_rehydrated_raw_does_not_claim_it_sufficed(sample_db: Path) -> None:
    sentence = _why(sample_db, "asm-006", "mem-003")
    assert "raw not rehydrated because the memory sufficed" not in sentence
    assert "its source artifact art-003 is also in the prompt as rehydrated raw evidence" in sentence
    # where its source is replaced by it, the memory did suffice
    assert "raw not rehydrated because the memory sufficed" in _why(sample_db, "asm-005", "mem-003")


def test_raw_replaced_by_a_memory_that_is_in_the_prompt(sample_db: Path) -> None:
    sentence = _why(sample_db, "asm-005", "art-003")
    assert "Compact memory mem-003, derived from it, is in the prompt in its place." in sentence
    with Store.open(sample_db) as store:
        row = store.assembly("asm-005")
        rows = {r["record_id"]: r for r in recorded_records(store, "asm-005", row["export_id"])}
    assert rows["mem-003"]["decision"] == "included"


def test_stale_omission_says_the_policy_windows_date(sample_db: Path) -> None:
    sentence = _why(sample_db, "asm-031", "mem-020", side="v1")
    assert "It has been stale since 2026-10-27 15:00 UTC (volatile, 6h window)" in sentence
    # a producer's stale_after that differs from the window's date is not what the policy used
    rec = {"record_kind": "tool_memory", "record_id": "m", "decision": "omitted", "rendering": None,
           "reason_code": "stale", "policy_family": "freshness",
           "detail": "stale since 2026-10-20 15:00 UTC (volatile, 6h window)"}
    record = {"stale_after": dt.datetime(2026, 10, 25, tzinfo=dt.timezone.utc),
              "freshness_class": "volatile", "revalidation_tools": []}
    sentence = explain({"policy_version": "v1"}, rec, record, [], [])
    assert "stale since 2026-10-20 15:00 UTC" in sentence and "2026-10-25" not in sentence


def test_provider_block_is_not_called_a_raw_block(sample_db: Path) -> None:
    sentence = _why(sample_db, "asm-010", "mem-001")
    assert "blocked as raw" not in sentence
    assert "sends no google_derived data to openai, raw or summarised" in sentence


def test_privacy_detail_is_a_finished_clause(sample_db: Path) -> None:
    with Store.open(sample_db) as store:
        row = store.assembly("asm-003")
        rec = next(r for r in recorded_records(store, "asm-003", row["export_id"])
                   if r["record_id"] == "art-002")
    assert rec["detail"] == "raw google_derived body is never sent; a safe summary of it may be sent instead"


def test_hidden_replacement_is_not_called_the_current_fact() -> None:
    rec = {"record_kind": "tool_memory", "record_id": "m1", "decision": "omitted", "rendering": None,
           "reason_code": "superseded", "policy_family": "contradiction",
           "detail": "superseded by m2, which this request may not see (owner_unknown)"}
    sentence = explain({"policy_version": "v1"}, rec, {"superseded_by": "m2"}, [], [])
    assert "current fact" not in sentence.replace("not shown as a current fact", "")
    assert "It is superseded by m2, which this request may not see (owner_unknown), so it is not shown as a current fact." in sentence
    # a replacement that is not in this prompt is not called the current fact either
    seen = {**rec, "detail": "superseded by m2"}
    others = [{"record_kind": "tool_memory", "record_id": "m2", "decision": "omitted"}]
    assert "which is not in this prompt either" in explain({"policy_version": "v1"}, seen, {}, [], [], others)
    others[0]["decision"] = "included"
    assert "the replacement is the current fact" in explain({"policy_version": "v1"}, seen, {}, [], [], others)


def test_every_sentence_of_the_sample_starts_with_a_capital(sample_db: Path) -> None:
    with Store.open(sample_db) as store:
        for row in store.assembly_requests().to_pylist():
            rows = recorded_records(store, row["assembly_id"], row["export_id"])
            for rec in rows:
                record = store.record(rec["record_kind"], rec["record_id"])
                sentence = explain(row, rec, record, [], [], rows)
                assert sentence[0].isupper(), sentence
                assert not re.search(r"[.;] ?\. |\. [a-z]", sentence), sentence


def test_a_replayed_stale_marker_names_the_date_its_why_names(sample_db: Path) -> None:
    """Under v6 mem-014 went stale at the end of v6's 48h window: the marker the model
    receives says so, as the why-sentence does (the memory's own stale_after is a day
    later)."""
    with Store.open(sample_db) as store:
        model = ReadModel(store, load_registry(None))
        why = model.why("asm-035", "mem-014", side="v6")
        assert why.decision["rendering"] == "stale_marker"
        since = re.search(r"stale since (\S+ \S+ UTC)", why.sentence).group(1)
        (text,) = model.rendered_as("asm-035", "tool_memory", "mem-014", ["stale_marker"],
                                    details=[why.decision["detail"]])
    assert text.startswith("[STALE: observed ") and f"stale since {since};" in text
