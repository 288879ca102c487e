"""Real clients: the OpenTelemetry SDK's OTLP/HTTP protobuf exporter, Pydantic AI's own
instrumentation and OpenInference's OpenAI instrumentation, running real agents against the loopback
OpenAI-compatible server; what they export is decoded, normalized and assembled here."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from google.protobuf import json_format
from openinference.instrumentation import using_session
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import Instrumentation, ProcessHistory
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from runtime.otlp import assemble_run, decode_request, group_runs
from tests.runtime.openai_server import OpenAIServer

from .conftest import OtlpCollector


def _texts(message: dict[str, Any]) -> list[str]:
    return [p["content"] for p in message["parts"] if p["type"] == "text"]


# --------------------------------------------------------------------------------------------------
# The SDK and its protobuf exporter; the same export written as OTLP/JSON by hand


def test_the_sdk_exporter_sends_protobuf_that_reads_back_the_same_as_its_json(
    collector: OtlpCollector, tracer_provider: TracerProvider
) -> None:
    tracer = tracer_provider.get_tracer("my.app", "3.1")
    with tracer.start_as_current_span("invoke_agent planner") as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        agent.set_attribute("gen_ai.agent.name", "planner")
        agent.set_attribute("gen_ai.conversation.id", "c-42")
        with tracer.start_as_current_span("chat gpt-4o") as chat:
            chat.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.input.messages": json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": "Plan a trip"}]}]
                    ),
                    "gen_ai.output.messages": json.dumps(
                        [
                            {
                                "role": "assistant",
                                "parts": [
                                    {
                                        "type": "tool_call",
                                        "id": "c1",
                                        "name": "search",
                                        "arguments": {"q": "Rome"},
                                    }
                                ],
                            }
                        ]
                    ),
                    "gen_ai.usage.input_tokens": 11,
                    "gen_ai.usage.output_tokens": 4,
                    "gen_ai.response.finish_reasons": ["tool_call"],
                    "temperatures": [0.1, 0.2],
                }
            )
        with tracer.start_as_current_span("execute_tool search") as tool:
            tool.set_attributes(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.id": "c1",
                }
            )
            tool.add_event(
                "exception", {"exception.type": "TimeoutError", "exception.message": "search timed out"}
            )
            tool.set_status(Status(StatusCode.ERROR, "search timed out"))
    tracer_provider.force_flush()

    requests = collector.wait_for_requests(3)
    assert {r.path for r in requests} == {"/v1/traces"}
    assert {r.headers["content-type"] for r in requests} == {"application/x-protobuf"}
    assert requests[0].headers["user-agent"].startswith("OTel-OTLP-Exporter-Python/")

    spans = collector.normalized()
    assert [s["kind"] for s in spans] == ["model_call", "tool_call", "agent"]  # exported as each ended
    chat_span, tool_span, agent_span = spans
    assert chat_span["parent_span_id"] == agent_span["span_id"] and agent_span["parent_span_id"] is None
    assert chat_span["resource"] == agent_span["resource"]
    assert chat_span["resource"]["service.name"] == "otlp-test"
    assert chat_span["scope"] == {"name": "my.app", "version": "3.1"}
    assert chat_span["other_attributes"] == {"temperatures": [0.1, 0.2]}
    assert tool_span["error"] == {"type": "TimeoutError", "message": "search timed out", "stacktrace": None}

    run = assemble_run(spans)
    assert run["run_key"] == "c-42" and run["run_key_source"] == "gen_ai.conversation.id"
    [turn] = run["turns"]
    assert turn["agent"] == "planner" and turn["span_id"] == agent_span["span_id"] and turn["steps"] == [0]
    [call] = run["steps"][0]["tool_calls"]
    assert (
        call["name"] == "search"
        and call["arguments"] == {"q": "Rome"}
        and call["span_id"] == tool_span["span_id"]
    )
    assert call["error"] is not None and call["error"]["type"] == "TimeoutError"

    # The same export as OTLP/JSON, written as the specification says: lowerCamelCase keys, ids in
    # hex, 64-bit integers as strings, enums as integers.
    for req in requests:
        message = ExportTraceServiceRequest.FromString(req.body)
        doc = json_format.MessageToDict(message, use_integers_for_enums=True)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in sp:
                            sp[key] = json_format.base64.b64decode(sp[key]).hex()
        body = json.dumps(doc).encode()
        assert '"startTimeUnixNano": "' in body.decode()
        assert (
            decode_request(body, "application/json").spans
            == decode_request(req.body, "application/x-protobuf").spans
        )


# --------------------------------------------------------------------------------------------------
# Pydantic AI's own instrumentation


def _pydantic_agent(
    client: openai.AsyncOpenAI, provider: TracerProvider, name: str, **kw: Any
) -> Agent[None, str]:
    model = OpenAIChatModel("loopback-model", provider=OpenAIProvider(openai_client=client))
    settings = InstrumentationSettings(tracer_provider=provider, version=5, include_content=True)
    return Agent(
        model, name=name, capabilities=[Instrumentation(settings=settings), *kw.pop("capabilities", [])], **kw
    )


def test_a_pydantic_ai_run_with_tools_and_a_subagent(
    collector: OtlpCollector, tracer_provider: TracerProvider, openai_server: OpenAIServer
) -> None:
    client = openai.AsyncOpenAI(base_url=openai_server.base_url, api_key="k", max_retries=0)
    helper = _pydantic_agent(client, tracer_provider, "helper_agent")
    agent = _pydantic_agent(
        client,
        tracer_provider,
        "weather_agent",
        system_prompt="You are a weather bot.",
        instructions="Be brief.",
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather of a city."""
        return f"sunny in {city}"

    @agent.tool
    async def ask_helper(ctx: RunContext[None], question: str) -> str:
        """Ask the helper agent."""
        return (await helper.run(question, conversation_id="conv-1")).output

    async def main() -> None:
        async with client:
            openai_server.enqueue_tool_call("get_weather", {"city": "Paris"})
            openai_server.enqueue_text("It is sunny in Paris.")
            first = await agent.run("What's the weather in Paris?", conversation_id="conv-1")
            openai_server.enqueue_tool_call("ask_helper", {"question": "Is Rome warm?"})
            openai_server.enqueue_text("Rome is warm.")
            openai_server.enqueue_text("The helper says Rome is warm.")
            await agent.run("And Rome?", message_history=first.all_messages(), conversation_id="conv-1")

    asyncio.run(main())
    tracer_provider.force_flush()

    spans = collector.normalized()
    assert {s["conversation_id"] for s in spans} == {"conv-1"}
    [(key, run_spans)] = group_runs(spans).items()
    run = assemble_run(run_spans)
    assert key == run["run_key"] == "conv-1"
    assert len(run["trace_ids"]) == 2  # one trace per agent.run

    steps = run["steps"]
    assert [s["agent"] for s in steps] == [
        "weather_agent",
        "weather_agent",
        "weather_agent",
        "helper_agent",
        "weather_agent",
    ]
    assert [s["turn"] for s in steps] == [0, 0, 1, 1, 1]
    assert [t["agent"] for t in run["turns"]] == ["weather_agent", "weather_agent"]
    assert [_texts(t["user_message"]) for t in run["turns"]] == [
        ["What's the weather in Paris?"],
        ["And Rome?"],
    ]  # type: ignore[arg-type]

    # What the model saw, in the parts form, equals what reached the server.
    first_input = steps[0]["input_messages"]
    assert first_input is not None
    assert [(m["role"], _texts(m)) for m in first_input] == [
        ("system", ["You are a weather bot."]),
        ("user", ["What's the weather in Paris?"]),
    ]
    assert steps[0]["system_instructions"] == [{"type": "text", "content": "Be brief."}]
    wire = openai_server.requests[1].json["messages"]
    assert wire[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny in Paris"}
    tool_message = steps[1]["input_messages"][-1]  # type: ignore[index]
    assert tool_message == {
        "role": "user",
        "parts": [
            {"type": "tool_call_response", "id": "call_1", "name": "get_weather", "result": "sunny in Paris"}
        ],
    }

    [weather_call] = steps[0]["tool_calls"]
    assert (weather_call["call_id"], weather_call["name"], weather_call["result"]) == (
        "call_1",
        "get_weather",
        "sunny in Paris",
    )
    assert json.loads(weather_call["arguments"]) == {"city": "Paris"} and weather_call["span_id"] is not None
    [helper_call] = steps[2]["tool_calls"]
    assert (helper_call["name"], helper_call["result"]) == ("ask_helper", "Rome is warm.")
    assert [_texts(m) for m in steps[4]["output_messages"]] == [["The helper says Rome is warm."]]  # type: ignore[union-attr]

    assert {a["name"]: (a["via"], a["parent"]) for a in run["agents"]} == {
        "weather_agent": ("root", None),
        "helper_agent": ("subagent", "weather_agent"),
    }
    sent = [r.json for r in openai_server.requests]
    assert len(sent) == 5
    assert run["usage"]["input_tokens"] == sum(s["usage"]["input_tokens"] for s in steps if s["usage"])  # type: ignore[misc]
    assert all(s["usage"] is not None and s["usage"]["input_tokens"] for s in steps)
    assert run["errors"] == [] and run["missing_parents"] == [] and run["unattached_tool_calls"] == []


def test_a_pydantic_ai_summarizer_inside_a_history_processor_is_a_nested_step(
    collector: OtlpCollector, tracer_provider: TracerProvider, openai_server: OpenAIServer
) -> None:
    client = openai.AsyncOpenAI(base_url=openai_server.base_url, api_key="k", max_retries=0)
    summarizer = _pydantic_agent(client, tracer_provider, "summarizer")

    async def summarize(messages: list[ModelMessage]) -> list[ModelMessage]:
        if len(messages) <= 2:
            return messages
        summary = (await summarizer.run("Summarize the conversation so far.")).output
        return [ModelRequest(parts=[UserPromptPart(content=f"Summary: {summary}")]), messages[-1]]

    agent = _pydantic_agent(client, tracer_provider, "chatty", capabilities=[ProcessHistory(summarize)])

    async def main() -> None:
        async with client:
            openai_server.enqueue_text("Hello Ann.")
            first = await agent.run("Hi, I am Ann.", conversation_id="conv-s")
            openai_server.enqueue_text("Ann said hi.")
            openai_server.enqueue_text("You are Ann.")
            await agent.run("Who am I?", message_history=first.all_messages(), conversation_id="conv-s")

    asyncio.run(main())
    tracer_provider.force_flush()

    run = assemble_run(collector.normalized())
    steps = run["steps"]
    assert [s["agent"] for s in steps] == ["chatty", "summarizer", "chatty"]  # by end time
    assert steps[1]["nested_in"] == 2 and steps[0]["nested_in"] is None and steps[2]["nested_in"] is None
    assert [s["turn"] for s in steps] == [0, 1, 1]
    # The outer call's input is what the summarizer produced, after the processor ran.
    outer_input = steps[2]["input_messages"]
    assert outer_input is not None
    # (Pydantic AI sends the two requests as one user message of two text parts.)
    assert [t for m in outer_input for t in _texts(m)] == ["Summary: Ann said hi.", "Who am I?"]
    assert steps[1]["start_time"] > steps[2]["start_time"] and steps[1]["end_time"] < steps[2]["end_time"]


def test_a_pydantic_ai_model_error_is_read(
    collector: OtlpCollector, tracer_provider: TracerProvider, openai_server: OpenAIServer
) -> None:
    client = openai.AsyncOpenAI(base_url=openai_server.base_url, api_key="k", max_retries=0)
    agent = _pydantic_agent(client, tracer_provider, "fragile")
    openai_server.enqueue_raw(b'{"error": {"message": "bad request"}}', status=400)

    async def main() -> None:
        async with client:
            await agent.run("Hi", conversation_id="conv-e")

    with pytest.raises(ModelHTTPError):
        asyncio.run(main())
    tracer_provider.force_flush()
    run = assemble_run(collector.normalized())
    [step] = run["steps"]
    assert step["error"] is not None and step["error"]["type"]
    assert run["turns"][0]["error"] is not None
    assert {e["kind"] for e in run["errors"]} == {"model_call", "agent"}


# --------------------------------------------------------------------------------------------------
# OpenInference's OpenAI instrumentation


@pytest.fixture
def openinference(tracer_provider: TracerProvider) -> Any:
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    yield instrumentor
    instrumentor.uninstrument()


def test_the_openai_client_through_openinference(
    collector: OtlpCollector, tracer_provider: TracerProvider, openai_server: OpenAIServer, openinference: Any
) -> None:
    client = openai.OpenAI(base_url=openai_server.base_url, api_key="k", max_retries=0)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    openai_server.enqueue_tool_call("get_weather", {"city": "Paris"})
    openai_server.enqueue_text("Sunny in Paris.")
    openai_server.enqueue_text("You're welcome.")
    with using_session("sess-9"):
        messages: list[Any] = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
        ]
        reply = client.chat.completions.create(model="loopback-model", messages=messages, tools=tools)  # type: ignore[arg-type]
        call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
        messages.append({"role": "assistant", "content": None, "tool_calls": [call.model_dump()]})
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny in Paris"})
        reply = client.chat.completions.create(model="loopback-model", messages=messages, tools=tools)  # type: ignore[arg-type]
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        messages.append({"role": "user", "content": "Thanks!"})
        client.chat.completions.create(model="loopback-model", messages=messages)  # type: ignore[arg-type]
    tracer_provider.force_flush()

    spans = collector.normalized()
    assert {(s["kind"], s["messages_format"], s["run_key"]) for s in spans} == {
        ("model_call", "openinference", "sess-9")
    }
    assert len({s["trace_id"] for s in spans}) == 3  # each call its own trace, one session
    run = assemble_run(spans)
    steps = run["steps"]
    assert [[_texts(t["user_message"])] for t in run["turns"]] == [[["Weather in Paris?"]], [["Thanks!"]]]  # type: ignore[arg-type]
    assert [s["turn"] for s in steps] == [0, 0, 1]
    assert steps[0]["output_messages"] == [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
            ],
        }
    ]
    assert steps[1]["input_messages"][-1] == {  # type: ignore[index]
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call_1", "result": "sunny in Paris"}],
    }
    [weather_call] = steps[0]["tool_calls"]
    assert weather_call["result"] == "sunny in Paris" and weather_call["span_id"] is None
    wire_usage = [json.loads(r.body) for r in openai_server.requests]
    assert len(wire_usage) == 3
    assert [s["usage"]["total_tokens"] for s in steps] == [  # type: ignore[index]
        s["usage"]["input_tokens"] + s["usage"]["output_tokens"]
        for s in steps  # type: ignore[index,operator]
    ]
    assert steps[0]["model"] == "loopback-model"
    assert all(s["agent"] is None for s in steps) and run["agents"] == []
