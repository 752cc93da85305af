"""replay.lint: transcript rules on small hand-written files, safety invariants on the sample
(expected findings computed here from the export's Parquet, independently of the SQL), on a
tampered copy of the sample, and a run on a real Claude Code session."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ingest.adapters import adapt
from ingest.contract import RESTRICTED_PRIVACY, TABLES
from ingest.filters import AssemblyFilter
from ingest.store import Store, ingest
from ingest.writer import ExportWriter
from replay.lint import SAFETY_RULES, Finding, has_errors, lint, memory_path_problem

FIXTURES = Path(__file__).resolve().parents[1] / "lint_fixtures"
REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
REAL_SESSION = REALDATA / "claude-code-spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"


def _lint_file(path: Path, tmp_path: Path) -> list[Finding]:
    res = adapt(path, tmp_path / "export")
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    with Store.open(db) as store:
        return lint(store)


def _rules(findings: list[Finding]) -> set[tuple[str, str]]:
    return {(f.rule, f.severity) for f in findings}


# --------------------------------------------------------------------------- transcript rules


def test_tool_call_without_result_then_another_request_is_an_error(tmp_path: Path) -> None:
    findings = _lint_file(FIXTURES / "unanswered_call.json", tmp_path)
    assert _rules(findings) == {("tool_call_without_result", "error"),
                                ("tool_call_without_result", "warning")}
    err = next(f for f in findings if f.severity == "error")
    assert err.record_kind == "tool_call" and err.assembly_id is not None
    assert "400" in err.detail and "get_weather" in err.detail
    # the call still pending at the very end of the transcript is only a warning
    warn = next(f for f in findings if f.severity == "warning")
    assert "ends" in warn.detail and warn.assembly_id is None
    assert has_errors(findings)
    assert findings[0].severity == "error"  # errors sort first


def test_results_split_across_two_user_messages_is_a_warning(tmp_path: Path) -> None:
    findings = _lint_file(FIXTURES / "split_results.json", tmp_path)
    assert [(f.rule, f.severity) for f in findings] == [("results_split_or_after_text", "warning")]
    assert "split across 2 messages" in findings[0].detail
    assert not has_errors(findings)


def test_tool_result_after_text_is_a_warning(tmp_path: Path) -> None:
    findings = _lint_file(FIXTURES / "result_after_text.json", tmp_path)
    assert [(f.rule, f.severity) for f in findings] == [("results_split_or_after_text", "warning")]
    assert findings[0].record_kind == "tool_artifact"
    assert "after text" in findings[0].detail


def test_three_serial_single_reads_are_an_info(tmp_path: Path) -> None:
    findings = _lint_file(FIXTURES / "serial_reads.jsonl", tmp_path)
    assert [(f.rule, f.severity) for f in findings] == [("serial_read_only_calls", "info")]
    detail = findings[0].detail
    assert "3 consecutive requests" in detail
    for name in ("/src/a.py", "/src/b.py", "/src/c.py"):
        assert name in detail


def _serial_session(tmp_path: Path, calls: list[tuple[str, dict[str, Any], str]]) -> Path:
    """A Claude Code session where each request makes one call: (tool, input, result)."""
    lines = [{"type": "user", "sessionId": "s", "uuid": "u0", "timestamp": "2025-06-01T09:00:00Z",
              "message": {"role": "user", "content": "Look into the parser."}}]
    for i, (tool, args, result) in enumerate(calls):
        lines.append({"type": "assistant", "sessionId": "s", "uuid": f"a{i}",
                      "timestamp": f"2025-06-01T09:0{i}:01Z", "requestId": f"req_{i}",
                      "message": {"id": f"msg_{i}", "model": "claude-sonnet-4-5", "role": "assistant",
                                  "content": [{"type": "tool_use", "id": f"tu_{i}", "name": tool,
                                               "input": args}],
                                  "usage": {"input_tokens": 100 + i, "output_tokens": 5}}})
        lines.append({"type": "user", "sessionId": "s", "uuid": f"r{i}",
                      "timestamp": f"2025-06-01T09:0{i}:02Z",
                      "message": {"role": "user", "content": [
                          {"type": "tool_result", "tool_use_id": f"tu_{i}", "content": result}]}})
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_a_read_at_the_line_a_grep_returned_is_not_serial(tmp_path: Path) -> None:
    # the Grep prints a relative path and a short line number; the Read uses both
    calls = [
        ("Glob", {"pattern": "**/*.py"}, "src/parser/lexer.py\nsrc/parser/tokens.py"),
        ("Grep", {"pattern": "def tokenize|TokenKind", "path": "/repo/src/parser/lexer.py"},
         "src/parser/lexer.py:42:def tokenize(text):"),
        ("Read", {"file_path": "/repo/src/parser/lexer.py", "offset": 42, "limit": 40},
         "    42\u2192def tokenize(text):"),
    ]
    assert _lint_file(_serial_session(tmp_path, calls), tmp_path) == []


def test_a_read_continuing_a_truncated_read_is_not_serial(tmp_path: Path) -> None:
    calls = [
        ("Read", {"file_path": "/repo/big.py", "limit": 500}, "     1\u2192import os"),
        ("Read", {"file_path": "/repo/big.py", "offset": 501, "limit": 500}, "   501\u2192x = 1"),
        ("Read", {"file_path": "/repo/big.py", "offset": 1001, "limit": 500}, "  1001\u2192y = 2"),
    ]
    assert _lint_file(_serial_session(tmp_path, calls), tmp_path) == []


def test_independent_reads_written_the_same_way_are_still_serial(tmp_path: Path) -> None:
    # the same shape as above with nothing taken from the previous result: still a finding
    calls = [
        ("Read", {"file_path": "/repo/src/parser/lexer.py", "offset": 42}, "    42\u2192a = 1"),
        ("Read", {"file_path": "/repo/docs/notes.md", "offset": 7}, "     7\u2192b = 2"),
        ("Grep", {"pattern": "TODO|FIXME", "path": "/repo/tests"}, "tests/x.py:3:# TODO"),
    ]
    findings = _lint_file(_serial_session(tmp_path, calls), tmp_path)
    assert [f.rule for f in findings] == ["serial_read_only_calls"]
    assert "3 consecutive requests" in findings[0].detail


def test_memory_path_escape(tmp_path: Path) -> None:
    findings = _lint_file(FIXTURES / "memory_paths.json", tmp_path)
    assert [(f.rule, f.severity) for f in findings] == [("memory_path_escape", "error")]
    assert "/memories/../etc/passwd" in findings[0].detail
    assert "/memories/notes.md" not in findings[0].detail


@pytest.mark.parametrize(
    "path, bad",
    [
        ("/memories/notes.md", False),
        ("/memories", False),
        ("/memories/a/b/c.txt", False),
        ("notes/today.md", False),
        ("/memories/../etc/passwd", True),
        ("/memories/%2e%2e/%2e%2e/etc/passwd", True),
        ("/memories/%252e%252e/secret", True),
        ("/etc/passwd", True),
        ("/memories_evil/x", True),
        ("/memories/a/../../b", True),
        ("..\\..\\windows", True),
        ("~/x", True),
    ],
)
def test_memory_path_problem(path: str, bad: bool) -> None:
    assert (memory_path_problem(path) is not None) is bad


def test_memory_rename_paths_are_checked(tmp_path: Path) -> None:
    log = [{"request": {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [
        {"role": "user", "content": "tidy notes"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_r", "name": "memory", "input": {
            "command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/%2e%2e/a.md"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_r", "content": "ok"}]},
    ]}}]
    path = tmp_path / "rename.json"
    path.write_text(json.dumps(log))
    findings = _lint_file(path, tmp_path)
    assert [f.rule for f in findings] == ["memory_path_escape"]
    assert "new_path" in findings[0].detail and "URL-encoded" in findings[0].detail


def test_finding_json_and_order() -> None:
    a = Finding("b_rule", "info", None, "m1", "tool_call", "t1", "x")
    b = Finding("a_rule", "error", "asm", None, "message", "m", "y")
    assert sorted([a, b], key=Finding.sort_key) == [b, a]
    assert a.to_json() == {"rule": "b_rule", "severity": "info", "assembly_id": None,
                           "message_id": "m1", "record_kind": "tool_call", "record_id": "t1",
                           "detail": "x"}
    json.dumps([a.to_json(), b.to_json()])


# --------------------------------------------------------------------------- safety on the sample


def _table(export: Path, name: str) -> list[dict]:
    path = export / f"{name}.parquet"
    return pq.read_table(path if path.exists() else export / name).to_pylist()


def _expected_safety(export: Path) -> set[tuple[str, str, str]]:
    """(invariant, assembly_id, record_id) computed in Python from the export's Parquet."""
    asms = {a["assembly_id"]: a for a in _table(export, "context_assemblies")}
    branches = {b["branch_id"]: b for b in _table(export, "branches")}
    msgs = {m["message_id"]: m for m in _table(export, "messages")}
    arts = {a["artifact_id"]: a for a in _table(export, "tool_artifacts")}
    mems = {m["memory_id"]: m for m in _table(export, "tool_memories")}
    runs = {r["model_run_id"]: r for r in _table(export, "model_runs")}
    calls = {c["tool_call_id"]: c for c in _table(export, "tool_calls")}

    def lineage(branch: str) -> dict[str, dt.datetime | None]:
        out: dict[str, dt.datetime | None] = {}
        cut = None
        b = branches.get(branch)
        while b is not None and b["branch_id"] not in out:
            out[b["branch_id"]] = cut
            if b["parent_branch_id"] is None:
                break
            fork = msgs.get(b["fork_message_id"] or "")
            at = fork["created_at"] if fork else b["created_at"]
            cut = at if cut is None or at < cut else cut
            b = branches.get(b["parent_branch_id"])
        return out

    def on_lineage(lin: dict, branch: str | None, created: dt.datetime) -> bool:
        return branch in lin and (lin[branch] is None or created <= lin[branch])

    out: set[tuple[str, str, str]] = set()
    for r in _table(export, "assembly_records"):
        if r["decision"] != "included":
            continue
        a = asms[r["assembly_id"]]
        me, at, lin = a["participant_id"], a["assembled_at"], lineage(a["branch_id"])
        kind, rid = r["record_kind"], r["record_id"]
        row = {"message": msgs, "tool_artifact": arts, "tool_memory": mems, "tool_call": calls}.get(kind, {}).get(rid)
        if row is None:
            continue
        if kind == "tool_call":
            branch, created, scope, owner, shared = (runs.get(row["model_run_id"]) or {}).get("branch_id"), row["requested_at"], None, None, []
        else:
            branch, created, scope = row["branch_id"], row["created_at"], row["visibility_scope"]
            owner = row["participant_id"] if kind == "message" else row["owner_participant_id"]
            shared = list(row.get("shared_with") or [])
        key = (r["assembly_id"], rid)
        if branch is not None and not (kind == "tool_memory" and scope == "conversation") \
                and not on_lineage(lin, branch, created):
            out.add(("sibling_branch", *key))
        if scope == "participant_private" and owner is not None and owner != me and me not in shared:
            child = runs.get(row.get("owner_model_run_id") or "") if kind == "tool_memory" else None
            parent = runs.get((child or {}).get("parent_model_run_id") or "")
            promotable = kind == "tool_memory" and (row["promotion_policy"] == "auto" or (
                row["promotion_policy"] == "explicit" and row["promoted"]))
            if not (promotable and child and child["runtime_kind"] == "subagent_child"
                    and parent and parent["participant_id"] == me):
                out.add(("foreign_private", *key))
        if scope == "audit_only":
            out.add(("audit_only_included", *key))
        if kind == "tool_memory":
            newer = [n for n in mems.values() if n["memory_id"] != rid and (
                n["memory_id"] == row["superseded_by"] or rid in (n["supersedes"] or []))]
            for n in newer:
                eligible = n["created_at"] <= at and n["visibility_scope"] != "audit_only" and not (
                    n["visibility_scope"] == "participant_private" and n["owner_participant_id"]
                    not in (None, me)) and (n["visibility_scope"] == "conversation"
                                            or on_lineage(lin, n["branch_id"], n["created_at"]))
                if eligible:
                    out.add(("superseded_included", *key))
            if r["rendering"] == "compact_memory" and row["stale_after"] is not None and row["stale_after"] < at:
                out.add(("stale_as_current", *key))
        if kind == "tool_artifact" and row["privacy_class"] in RESTRICTED_PRIVACY \
                and r["rendering"] in ("verbatim", "rehydrated_raw"):
            out.add(("restricted_raw_sent", *key))
    return out


def _safety_found(findings: list[Finding]) -> set[tuple[str, str, str]]:
    return {(f.rule, f.assembly_id, f.record_id) for f in findings if f.rule in SAFETY_RULES}


def test_sample_safety_findings(sample_db: Path, sample_export: Path) -> None:
    with Store.open(sample_db) as store:
        findings = lint(store)
    found = _safety_found(findings)
    expected = _expected_safety(sample_export)
    assert found == expected

    asms = _table(sample_export, "context_assemblies")
    drift = {a["assembly_id"] for a in asms if "scenario:drift_supersession" in a["tags"]}
    incident_v5 = {a["assembly_id"] for a in asms
                   if "scenario:incident_calendar_freshness" in a["tags"] and a["policy_version"] == "v5"}
    assert drift and incident_v5
    flagged = {asm for _, asm, _ in found}
    # exactly the drift story and the v5 incident; the faithful assemblies of the other
    # stories (and the v4/v6 incident requests) have no safety finding
    assert flagged == drift | incident_v5
    for asm in drift:
        assert any(rule == "superseded_included" and a == asm for rule, a, _ in found)
    for asm in incident_v5:
        assert ("stale_as_current", asm, "mem-020") in found
    # the sample's transcript-rule findings are not safety findings and are never errors
    assert all(f.severity == "error" for f in findings if f.rule in SAFETY_RULES)


def test_sample_filter_narrows(sample_db: Path) -> None:
    with Store.open(sample_db) as store:
        findings = lint(store, "scenario:drift_supersession")
    assert findings and {f.rule for f in findings} == {"superseded_included"}


_FLIP = {
    "sibling_branch": "sibling_branch",
    "participant_private": "foreign_private",
    "audit_only": "audit_only_included",
    "privacy_restricted": "restricted_raw_sent",
    "superseded": "superseded_included",
}


def test_tampered_sample_trips_every_invariant(sample_export: Path, tmp_path: Path) -> None:
    """Omitted records flipped to included: each invariant names each flipped record (the
    drift story's omissions are wrong to begin with, so they are left alone)."""
    drift = [a["assembly_id"] for a in _table(sample_export, "context_assemblies") if "drift" in a["tags"]]
    out = tmp_path / "tampered"
    with ExportWriter(out, export_id="tampered", producer="test",
                      created_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)) as w:
        for name in TABLES:
            table = pq.read_table(sample_export / f"{name}.parquet")
            if name == "assembly_records":
                flip = pc.and_(
                    pc.and_(pc.is_in(table["reason_code"], pa.array(list(_FLIP))),
                            pc.not_equal(table["record_kind"], "tool_call")),
                    pc.invert(pc.is_in(table["assembly_id"], pa.array(drift))),
                )
                rendering = pc.if_else(pc.equal(table["record_kind"], "tool_memory"),
                                       "compact_memory", "verbatim")
                table = table.set_column(table.schema.get_field_index("decision"), "decision",
                                         pc.if_else(flip, "included", table["decision"]))
                table = table.set_column(table.schema.get_field_index("rendering"), "rendering",
                                         pc.if_else(flip, rendering, table["rendering"]))
                table = table.set_column(table.schema.get_field_index("position"), "position",
                                         pc.if_else(flip, pa.scalar(999, pa.int64()), table["position"]))
                flipped = table.filter(flip).to_pylist()
            w.write(name, table)
    db = tmp_path / "tampered.duckdb"
    ingest(out, db)
    with Store.open(db) as store:
        whole = lint(store)
        # a page of the request list (the app's markers) is judged on its own
        # conversations' rows: the same findings, details included, as the whole store's
        ids = store.list_assemblies(None)["assembly_id"].to_pylist()
        paged = {f for i in range(0, len(ids), 7)
                 for f in lint(store, AssemblyFilter(ids=tuple(ids[i:i + 7])))}
    found = _safety_found(whole)
    assert len(flipped) > 100
    for r in flipped:
        assert (_FLIP[r["reason_code"]], r["assembly_id"], r["record_id"]) in found, r
    assert found == _expected_safety(out)
    assert ({f for f in paged if f.rule in SAFETY_RULES}
            == {f for f in whole if f.rule in SAFETY_RULES})


def test_results_rule_skipped_without_placement_columns(sample_db: Path) -> None:
    with Store.open(sample_db) as store:
        assert "result_after_text" not in store.table_columns("tool_artifacts")
        assert store.result_placement() is None
        assert not [f for f in lint(store) if f.rule == "results_split_or_after_text"]


# --------------------------------------------------------------------------- real data


def _raw_unanswered(path: Path) -> int:
    """tool_use blocks with no tool_result in their file, followed by a later model request
    (another requestId) of the same file: what the provider would reject."""
    total = 0
    files = [path] + sorted((path.parent / path.stem / "subagents").glob("agent-*.jsonl"))
    for f in files:
        streams: dict[bool, list[tuple[str, list[str]]]] = {}
        answered: set[str] = set()
        seen: set[str] = set()
        for raw in f.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(d, dict) or d.get("uuid") in seen:
                continue
            seen.add(d.get("uuid"))
            msg = d.get("message") if isinstance(d.get("message"), dict) else {}
            content = msg.get("content") if isinstance(msg.get("content"), list) else []
            if d.get("type") == "assistant" and msg.get("model") != "<synthetic>":
                key = d.get("requestId") or msg.get("id") or d.get("uuid")
                reqs = streams.setdefault(bool(d.get("isSidechain")), [])
                if not reqs or reqs[-1][0] != key:
                    reqs.append((key, []))
                reqs[-1][1].extend(b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use")
            elif d.get("type") == "user":
                answered |= {b.get("tool_use_id") for b in content
                             if isinstance(b, dict) and b.get("type") == "tool_result"}
        for reqs in streams.values():
            for i, (_, uses) in enumerate(reqs[:-1]):
                total += sum(1 for u in uses if u not in answered)
    return total


@pytest.mark.skipif(not REALDATA.is_dir(), reason="development data (../shared/realdata) not present")
def test_real_claude_code_session(tmp_path: Path) -> None:
    findings = _lint_file(REAL_SESSION, tmp_path)
    errors = [f for f in findings if f.rule == "tool_call_without_result" and f.severity == "error"]
    assert len(errors) == _raw_unanswered(REAL_SESSION)
    assert not [f for f in findings if f.rule in SAFETY_RULES]
    for f in findings:
        json.dumps(f.to_json())
