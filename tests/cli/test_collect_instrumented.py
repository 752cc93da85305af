"""Real instrumentation, no network: a pydantic-ai agent (FunctionModel, one tool call) and
the openai client under openinference-instrumentation-openai and under
opentelemetry-instrumentation-openai-v2 (against a stub endpoint on loopback), each
exported by the real OTLP/HTTP exporter to `contextlens collect`. openai-v2 twice: with
its message content on the spans (span_only), and as log events (event_only), which go to
/v1/logs into the same journal.

First the journal: every model call's span arrived with the messages it sent and its
usage. Then the store read from the journal (the otel adapter, through the command line):
one conversation per run, each request holding exactly what its call sent, with the
recorded usage, and verify faithful.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import support
from support.cli import run
from support.otlp import Collector, journal_lines, spans_of

PRODUCERS = Path(support.__file__).parent / "otel_producers.py"

# How each instrumentation names its model-call spans, where it puts the messages sent
# (on the span, or on a log event naming it), and its content capture setting
MODEL_CALLS = {
    "pydantic-ai": ("chat function:model:", "gen_ai.input.messages", ""),
    "openinference": ("ChatCompletion", "llm.input_messages.1.message.content", ""),
    "openai-v2": ("chat gpt-4o-mini", "gen_ai.input.messages", "span_only"),
    "openai-v2-events": ("chat gpt-4o-mini", "gen_ai.client.inference.operation.details",
                         "event_only"),
}


def _value(any_value: dict[str, Any]) -> Any:
    (kind, value), = any_value.items()
    return int(value) if kind == "intValue" else value


def _attributes(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: _value(a["value"]) for a in span.get("attributes", [])}


def _run(producer: str, tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    journal = tmp_path / "spans.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    # openai-v2 2.4b0 takes span_only / event_only / span_and_event ("true", what its older
    # releases took, is now refused with a warning and captures nothing)
    env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = MODEL_CALLS[producer][2]
    server = Collector(journal)
    try:
        # -P: the script's folder (tests/support, whose secrets.py would shadow the
        # standard library's) is not put on sys.path
        done = subprocess.run([sys.executable, "-P", str(PRODUCERS), str(server.port), producer],
                              capture_output=True, text=True, timeout=300, env=env)
    finally:
        code, log = server.stop()
    assert done.returncode == 0, done.stderr
    assert code == 0 and "refused" not in log, log
    return journal, json.loads(done.stdout)


@pytest.mark.parametrize("producer", list(MODEL_CALLS))
def test_an_instrumented_run_is_collected_as_the_conversation_it_was(
        producer: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal, sent = _run(producer, tmp_path)

    # the journal: both model calls, with what they sent and the usage they recorded
    name, messages_at, _ = MODEL_CALLS[producer]
    docs = journal_lines(journal)
    spans = [s for doc in docs for s in spans_of(doc)]
    calls = sorted((s for s in spans if s["name"] == name), key=lambda s: s["startTimeUnixNano"])
    assert len(calls) == len(sent) == 2, [s["name"] for s in spans]
    inputs = []
    for call, expected in zip(calls, sent):
        attributes = _attributes(call)
        recorded = (attributes.get("gen_ai.usage.input_tokens")
                    or attributes.get("llm.token_count.prompt"))
        assert recorded == expected["input_tokens"]
        if producer.endswith("-events"):  # on the log event that names the span
            events = [r for doc in docs for rl in doc.get("resourceLogs", [])
                      for sl in rl["scopeLogs"] for r in sl["logRecords"]
                      if r.get("eventName") == messages_at and r.get("spanId") == call["spanId"]]
            assert len(events) == 1, events
            attributes = {a["key"]: a["value"] for a in events[0]["attributes"]}
            inputs.append(json.dumps(attributes["gen_ai.input.messages"]))
        else:
            inputs.append(str(attributes[messages_at]))
            inputs[-1] += json.dumps({k: v for k, v in attributes.items()
                                      if "input" in k and k != messages_at})
        assert expected["texts"][0] in inputs[-1]
    assert "sunny in Paris" in inputs[1] and "sunny in Paris" not in inputs[0]
    assert len({s["traceId"] for s in calls}) == 1  # one run, one trace

    # the store, as the command line reads the journal (in this process: the commands are
    # the same, without a Python start for each)
    code, out, err = run(capsys, "list", "--db", str(journal), "--json")
    assert code == 0, err
    requests = sorted(json.loads(out), key=lambda r: r["assembled_at"])
    assert len(requests) == 2
    assert len({r["conversation_id"] for r in requests}) == 1
    for request, expected in zip(requests, sent):
        code, out, err = run(capsys, "show", request["assembly_id"], "--db", str(journal),
                             "--json")
        assert code == 0, err
        view = json.loads(out)
        tags = view["assembly"]["tags"]
        assert "input:exact" in tags and "tokens:recorded" in tags
        assert view["assembly"]["assembled_tokens"] == expected["input_tokens"]
        _holds_exactly(view, expected)
    code, out, err = run(capsys, "verify", "--db", str(journal))
    assert code == 0, out + err
    assert "checked 2: 2 faithful, 0 drifted, 0 inconsistent, 0 not replayable" in out


def _holds_exactly(view: dict[str, Any], expected: dict[str, Any]) -> None:
    """The request's included records are the messages its call sent, in order, and nothing
    else. The system instruction is a record or, as the transcript adapters count it, fixed
    overhead; an assistant message that only carries tool calls may be a record of its own
    (``assistant:``, empty) beside its tool-call records."""
    labels = [r["label"] for r in view["included"]]
    wanted = [*expected["texts"],
              *(f'{c["name"]}({json.dumps(c["arguments"])})' for c in expected["tool_calls"]),
              *expected["tool_results"]]
    rest = list(labels)
    if rest and expected["system"] in rest[0]:
        rest.pop(0)
    else:
        assert any(t.startswith("system_prompt_tokens_estimate:")
                   for t in view["assembly"]["tags"]), (labels, view["assembly"]["tags"])
    rest = [label for label in rest if label.strip() != "assistant:"]
    assert len(rest) == len(wanted), (labels, wanted)
    for label, text in zip(rest, wanted):
        assert text in label, (label, text)
    assert view["omitted"] == []  # a conversation that only grows leaves nothing out
