"""Real instrumented agents exporting to `contextlens collect`, run as a script (each in its
own process: the instrumentations patch the openai module globally).

    python -P otel_producers.py PORT pydantic-ai|openinference|openai-v2|openai-v2-events

Every span goes through the real OTLP/HTTP exporter (opentelemetry-exporter-otlp-proto-http)
and a BatchSpanProcessor to http://127.0.0.1:PORT/v1/traces; nothing leaves the machine
(the openai client talks to a stub chat.completions endpoint on loopback). The script
prints, as JSON, what each model call was sent and the usage it recorded, for the test to
hold the journal and the store to.

The run is the same for the three: a system instruction, a user question, a tool call
(get_weather), its result, and the answer; two model calls.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SYSTEM = "You answer weather questions."
QUESTION = "What is the weather in Paris?"
TOOL_RESULT = "sunny in Paris"
ANSWER = "It is sunny in Paris."
USAGE = [(50, 7), (70, 9)]  # (input, output) tokens of the two model calls


def _tracer_provider(port: int, service: str):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")))
    return provider


def _logger_provider(port: int):
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    provider = LoggerProvider()
    provider.add_log_record_processor(BatchLogRecordProcessor(
        OTLPLogExporter(endpoint=f"http://127.0.0.1:{port}/v1/logs")))
    return provider


def _expected() -> list[dict]:
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    first = {"system": SYSTEM, "texts": [QUESTION], "tool_calls": [], "tool_results": []}
    second = {"system": SYSTEM, "texts": [QUESTION], "tool_calls": [call],
              "tool_results": [TOOL_RESULT]}
    return [{**sent, "input_tokens": i, "output_tokens": o}
            for sent, (i, o) in zip((first, second), USAGE)]


def pydantic_ai(provider) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.usage import RequestUsage

    def model(messages, info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:  # the question alone: call the tool
            return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Paris"},
                                                     tool_call_id="call_1")],
                                 usage=RequestUsage(input_tokens=USAGE[0][0],
                                                    output_tokens=USAGE[0][1]))
        return ModelResponse(parts=[TextPart(ANSWER)],
                             usage=RequestUsage(input_tokens=USAGE[1][0],
                                                output_tokens=USAGE[1][1]))

    # pydantic-ai 2.x: instrumentation is a capability (Agent(instrument=...) in 1.x)
    agent = Agent(FunctionModel(model), instructions=SYSTEM, capabilities=[
        Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))])

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"sunny in {city}"

    assert agent.run_sync(QUESTION).output == ANSWER


_REPLIES = [
    {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000,
     "model": "gpt-4o-mini",
     "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
         "role": "assistant", "content": None, "tool_calls": [{
             "id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}}],
     "usage": {"prompt_tokens": USAGE[0][0], "completion_tokens": USAGE[0][1],
               "total_tokens": sum(USAGE[0])}},
    {"id": "chatcmpl-2", "object": "chat.completion", "created": 1700000001,
     "model": "gpt-4o-mini",
     "choices": [{"index": 0, "finish_reason": "stop",
                  "message": {"role": "assistant", "content": ANSWER}}],
     "usage": {"prompt_tokens": USAGE[1][0], "completion_tokens": USAGE[1][1],
               "total_tokens": sum(USAGE[1])}},
]


def _stub_openai() -> ThreadingHTTPServer:
    """A chat.completions endpoint on loopback answering the two replies in turn."""
    replies = list(_REPLIES)

    class Stub(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps(replies.pop(0)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def openai_run(provider, instrumentor, **instrument) -> None:
    import openai

    stub = _stub_openai()
    instrumentor.instrument(tracer_provider=provider, **instrument)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{stub.server_port}/v1",
                           api_key="sk-test", max_retries=0)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    messages: list[dict] = [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": QUESTION}]
    # one agent run is one trace: both model calls under one parent span
    with provider.get_tracer("weather-agent").start_as_current_span("weather agent run"):
        first = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                               tools=tools)
        call = first.choices[0].message.tool_calls[0]
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call.id, "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": TOOL_RESULT}]
        second = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                                tools=tools)
    assert second.choices[0].message.content == ANSWER
    stub.shutdown()


def main(port: int, which: str) -> None:
    provider = _tracer_provider(port, f"weather-{which}")
    if which == "pydantic-ai":
        pydantic_ai(provider)
    elif which == "openinference":
        from openinference.instrumentation import using_session
        from openinference.instrumentation.openai import OpenAIInstrumentor

        with using_session("weather-run-1"):
            openai_run(provider, OpenAIInstrumentor())
    elif which == "openai-v2":
        # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only (set by the test):
        # the messages ride on the span as gen_ai.input.messages / gen_ai.output.messages
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        openai_run(provider, OpenAIInstrumentor())
    elif which == "openai-v2-events":
        # ...=event_only: the messages come as a log event per call
        # (gen_ai.client.inference.operation.details, naming the span), exported to /v1/logs
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        logs = _logger_provider(port)
        openai_run(provider, OpenAIInstrumentor(), logger_provider=logs)
        logs.force_flush(30_000)
        logs.shutdown()
    else:
        raise SystemExit(f"unknown producer {which}")
    assert provider.force_flush(30_000), "spans not exported"
    provider.shutdown()
    print(json.dumps(_expected()))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
