"""One safety judgement, one set of words: the lint's SQL and compare's chunk query return
facts, ``replay.findings_text`` words them, and the lint, the diff's judgement
(``SafetyContext.findings``, which diff, why and the bundle report show) and compare's
(``graph_findings``) give the same finding text, byte for byte."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from support.cli import run

from ingest.store import Store
from ingest.timefmt import sentence_time, sentence_time_column
from replay.lint import SAFETY_RULES, lint
from replay.policy import load_registry
from replay.safety import FINDING_OF_RULE, graph_findings, load_context
from replay.service import recorded_records

INCIDENT = "asm-035"  # the v5 incident: calendar memories shown as current facts
CALENDAR = ("mem-014", "mem-015", "mem-016", "mem-020")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_lint_json_diff_and_compare_word_the_v5_incident_alike(capsys, sample_db: Path) -> None:
    code, out, _ = run(capsys, "lint", "--json", "--db", str(sample_db), "--filter", INCIDENT)
    assert code == 1  # safety findings are errors
    linted = {(FINDING_OF_RULE[f["rule"]], f["record_kind"], f["record_id"]): f["detail"]
              for f in json.loads(out) if f["rule"] in SAFETY_RULES}
    registry = load_registry(None)
    with Store.open(sample_db) as store:
        row = store.assembly(INCIDENT)
        records = recorded_records(store, INCIDENT, row["export_id"])
        # what diff, why and the bundle report judge: the Python form
        judged = {(f["finding"], f["record_kind"], f["record_id"]): f["detail"]
                  for f in load_context(store, INCIDENT, registry).findings(records)}
        # what compare judges: the chunk's SQL form, over the same recorded rows
        requests = store.assembly_requests(INCIDENT)
        graphs = store.conversation_graphs([row["conversation_id"]], row["export_id"])
    (side,) = graph_findings(duckdb.connect(), graphs, row["export_id"], requests,
                             [pa.Table.from_pylist(records)], registry)
    compared = {(f["finding"], f["record_kind"], f["record_id"]): f["detail"] for f in side.to_pylist()}
    # diff --json against the recording: its in_recording group is what was sent
    code, out, _ = run(capsys, "diff", INCIDENT, "--policy", "v4", "--json", "--db", str(sample_db))
    assert code == 0
    diffed = {(f["finding"], f["record_kind"], f["record_id"]): f["detail"]
              for f in json.loads(out)["safety"]["in_recording"]}
    # compare --json from the recording: its in_recording group, the example records' words
    code, out, _ = run(capsys, "compare", "recorded", "v4", "--filter", INCIDENT, "--json",
                       "--db", str(sample_db))
    assert code == 0
    compared_json = {(group["finding"], r["record_kind"], r["record_id"]): r["detail"]
                     for group in json.loads(out)["safety"]["in_recording"]
                     for r in group["records"]}
    assert linted == judged == compared == diffed == compared_json
    for mem in CALENDAR:
        assert ("stale_as_current", "tool_memory", mem) in linted
    # one time style, ingest/timefmt.py's sentence time (the SQL wrote seconds)
    assert linted[("stale_as_current", "tool_memory", "mem-014")] == (
        "rendered compact_memory (a current fact) at 2026-10-29 17:00 UTC, "
        "stale since 2026-10-22 12:00 UTC")


def test_every_recorded_finding_has_the_lints_words(sample_db: Path) -> None:
    registry = load_registry(None)
    with Store.open(sample_db) as store:
        linted = {(f.assembly_id, FINDING_OF_RULE[f.rule], f.record_kind, f.record_id): f.detail
                  for f in lint(store, registry=registry) if f.rule in SAFETY_RULES}
        judged = {}
        for row in store.assembly_requests().to_pylist():
            aid = row["assembly_id"]
            records = recorded_records(store, aid, row["export_id"])
            for f in load_context(store, aid, registry).findings(records):
                judged[(aid, f["finding"], f["record_kind"], f["record_id"])] = f["detail"]
    assert {k[1] for k in linted} >= {"stale_as_current", "superseded"}
    assert linted == judged


RENDERINGS = ["verbatim", "rehydrated_raw", "compact_memory", "summary", "reference", None]


def test_sentence_time_column_agrees_with_sentence_time() -> None:
    values = [dt.datetime(2026, 10, 22, 12, 0, 10, 654321, tzinfo=dt.timezone.utc), None,
              dt.datetime(2026, 1, 1, 23, 59, 59),
              dt.datetime(2026, 3, 29, 1, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))]
    for typ in (pa.timestamp("us", tz="UTC"), pa.timestamp("us"), pa.timestamp("ns", tz="UTC"),
                pa.timestamp("ms", tz="Europe/Paris")):
        column = pa.array(values, typ)
        assert sentence_time_column(column).to_pylist() == [
            sentence_time(v) for v in column.to_pylist()], typ
    assert sentence_time_column(pa.array([], pa.timestamp("us"))).to_pylist() == []
