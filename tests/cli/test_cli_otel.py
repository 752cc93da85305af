"""OpenTelemetry span files on the command line: every fixture ingests, lists, shows and
verifies faithful with the usage its spans recorded; the example producer of docs/otel.md,
run exactly as written with the OpenTelemetry SDK, records omitted records that `show` and
the read model give with their reasons and that verify replays under the documented policy;
secrets and escape sequences in span attributes are masked and escaped like everywhere."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.cli import run, run_json

from ingest.store import Store
from readmodel import ReadModel
from replay.policy import load_registry

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "otel_fixtures"
DOCS = ROOT / "docs" / "otel.md"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))


USAGE_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")


def _recorded_usage(path: Path) -> list[int]:
    """The input tokens each model-call span of the file recorded, read with plain json /
    pyarrow (not the adapter), in start order."""
    found: list[tuple[str, int]] = []
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for row in pq.read_table(path).to_pylist():
            if row.get("attributes.llm.token_count.prompt") is not None:
                found.append((str(row["start_time"]), row["attributes.llm.token_count.prompt"]))
        return [n for _, n in sorted(found)]
    text = path.read_text()
    docs = [json.loads(text)] if path.suffix == ".json" else [json.loads(x) for x in text.splitlines()]
    for doc in docs:
        for rs in doc.get("resourceSpans", []):
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    attrs = {a["key"]: next(iter(a["value"].values())) for a in s["attributes"]}
                    usage = next((attrs[k] for k in USAGE_KEYS if k in attrs), None)
                    if usage is not None:
                        found.append((s["startTimeUnixNano"], int(usage)))
    return [n for _, n in sorted(found)]


@pytest.mark.parametrize("name", ["genai_agent.jsonl", "genai_events.jsonl", "openinference.json",
                                  "phoenix_spans.parquet"])
def test_a_span_file_ingests_lists_shows_and_verifies(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      name: str) -> None:
    db = tmp_path / "s.duckdb"
    loaded = run_json(capsys, "ingest", str(FIX / name), "--db", str(db))
    assert loaded["warnings"] == []  # nothing odd in the file, every reference resolves
    rows = sorted(run_json(capsys, "list", "--db", str(db)), key=lambda r: r["assembled_at"])
    # (two traces of genai_events start together: the order among equal times is not asked)
    assert sorted(r["assembled_tokens"] for r in rows) == sorted(_recorded_usage(FIX / name))
    for r in rows:
        view = run_json(capsys, "show", r["assembly_id"], "--db", str(db))
        assert {"input:exact", "tokens:recorded"} <= set(view["assembly"]["tags"])
        assert view["included"] and view["omitted"] == []  # each conversation only grows
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 0, out + err
    assert f"checked {len(rows)}: {len(rows)} faithful, 0 drifted" in out


# --------------------------------------------------------------------------- the documented producer


def _documented(kind: str) -> str:
    text = DOCS.read_text(encoding="utf-8")
    if kind == "producer":
        m = re.search(r"<!-- example-producer: start -->\n```python\n(.*?)```\n<!-- example-producer: end -->",
                      text, re.S)
    else:
        m = re.search(r"as a policy file `policies/last-4.toml`.*?```toml\n(.*?)```", text, re.S)
    assert m is not None, f"docs/otel.md lost its example {kind}"
    return m.group(1)


def _run_documented_producer(journal: Path, questions: list[str]) -> None:
    """The example of docs/otel.md, exactly as written, on an in-process SDK whose exporter
    writes each batch as one line of OTLP JSON (protobuf's JSON mapping: base64 ids)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Lines(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            with journal.open("a", encoding="utf-8") as f:
                f.write(json.dumps(MessageToDict(encode_spans(spans))) + "\n")
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Lines()))
    namespace: dict[str, Any] = {}
    exec(compile(_documented("producer"), str(DOCS), "exec"), namespace)  # noqa: S102 - our docs
    namespace["run_conversation"](provider.get_tracer("demo-runtime"), questions)
    provider.shutdown()


def test_the_documented_producer_s_omitted_records_show_with_their_reasons(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    journal = tmp_path / "spans.jsonl"
    questions = ["hello there", "what is a context window?", "and a token budget?", "thanks, bye"]
    _run_documented_producer(journal, questions)
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "last-4.toml").write_text(_documented("policy"))
    db = tmp_path / "s.duckdb"
    assert run(capsys, "ingest", str(journal), "--db", str(db))[0] == 0
    rows = sorted(run_json(capsys, "list", "--db", str(db)), key=lambda r: r["assembled_at"])
    assert [r["policy_version"] for r in rows] == ["last-4"] * 4
    last = run_json(capsys, "show", rows[-1]["assembly_id"], "--db", str(db))
    # the runtime sent the last four messages (question 4 and the turns before it) ...
    assert [r["label"] for r in last["included"]] == [
        "assistant: I heard: what is a context window?", "user: and a token budget?",
        "assistant: I heard: and a token budget?", "user: thanks, bye"]
    # ... and left out the three before, each with its reason and the runtime's detail
    assert [(r["label"], r["reason_code"], r["policy_family"], r["detail"]) for r in last["omitted"]] == [
        ("user: hello there", "outside_window", "window", "older than the last 4 messages"),
        ("assistant: I heard: hello there", "outside_window", "window", "older than the last 4 messages"),
        ("user: what is a context window?", "outside_window", "window", "older than the last 4 messages")]
    with Store.open(db) as store:
        view = ReadModel(store, load_registry(policies)).assembly(rows[-1]["assembly_id"])
        omitted = view.records.filter(view.records["decision"].to_numpy(zero_copy_only=False) == "omitted")
        assert sorted(omitted["reason_code"].to_pylist()) == ["outside_window"] * 3
    # replayed under the documented policy, each request is what the runtime recorded
    code, out, err = run(capsys, "verify", "--db", str(db), "--policies", str(policies))
    assert code == 0 and "checked 4: 4 faithful, 0 drifted, 0 inconsistent, 0 not replayable" in out
    code, out, err = run(capsys, "verify", "--db", str(db))  # without it: named, not failed
    assert code == 0 and "no policy last-4 to replay it" in out


def test_the_committed_assembly_fixture_replays_under_the_documented_policy(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert (FIX / "policies" / "last-4.toml").read_text() == _documented("policy")
    code, out, err = run(capsys, "verify", "--db", str(FIX / "assembly.jsonl"),
                         "--policies", str(FIX / "policies"))
    assert code == 0 and "4 faithful, 0 drifted" in out, out + err


# --------------------------------------------------------------------------- safety


def _chat_line(text: str) -> str:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
             "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": text}]}]),
             "gen_ai.usage.input_tokens": "12"}
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "chat gpt-4o",
            "startTimeUnixNano": "1767225600000000000", "endTimeUnixNano": "1767225601000000000",
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}) + "\n"


def test_secrets_and_escapes_in_span_attributes_are_masked_and_escaped(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    token = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
    spans = tmp_path / "spans.jsonl"
    spans.write_text(_chat_line(f"use {token} [bold red]now[/] \x1b[31mplease\x1b[0m"))
    rows = run_json(capsys, "list", "--db", str(spans))
    code, out, err = run(capsys, "show", rows[0]["assembly_id"], "--db", str(spans))
    # the label is cut after the markup's start: printed as text, not taken as a style
    assert code == 0 and token not in out and "\x1b" not in out and "[bold" in out
    shown = run_json(capsys, "show", rows[0]["assembly_id"], "--db", str(spans))
    assert token not in json.dumps(shown)
    revealed = run_json(capsys, "show", rows[0]["assembly_id"], "--db", str(spans), "--reveal")
    assert token in json.dumps(revealed)


def test_a_file_without_spans_is_one_line_naming_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "spans.jsonl"
    empty.write_text('{"resourceSpans": []}\n')
    code, out, err = run(capsys, "ingest", str(empty), "--db", str(tmp_path / "s.duckdb"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "spans.jsonl: OpenTelemetry data without spans" in err and "Traceback" not in err
