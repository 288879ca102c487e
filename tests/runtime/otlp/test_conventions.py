"""`runtime.otlp.normalize_span`: every convention form (GenAI semconv JSON attributes, per-message
events, indexed prompt / completion attributes, OpenInference) read into one model whose messages are
all in the GenAI "parts" form; unknown attributes kept."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.otlp import NormalizedSpan, decode_request, normalize_span

from .builders import TRACE, pb_request, spec

TOOL_PART = {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
RESULT_PART = {"type": "tool_call_response", "id": "call_1", "name": "get_weather", "result": "sunny"}


def norm(
    attributes: dict[str, Any],
    *,
    name: str = "span",
    events: list[tuple[str, dict[str, Any]]] | None = None,
    status: tuple[int, str] = (0, ""),
    parent: int | None = None,
) -> NormalizedSpan:
    body = pb_request(
        [spec(2, name=name, attributes=attributes, events=events, status=status, parent=parent)]
    )
    [span] = decode_request(body, "application/x-protobuf").spans
    return normalize_span(span)


def test_it_reads_the_parts_form_of_the_genai_conventions() -> None:
    inputs = [
        {"role": "system", "parts": [{"type": "text", "content": "You are a weather bot."}]},
        {
            "role": "user",
            "parts": [{"type": "text", "content": "Weather?"}, {"type": "text", "content": "In Paris."}],
        },
        {
            "role": "assistant",
            "parts": [{"type": "thinking", "content": "hmm"}, TOOL_PART],
            "finish_reason": "tool_call",
        },
        {
            "role": "user",
            "parts": [RESULT_PART, {"type": "uri", "modality": "image", "uri": "https://x/y.png"}],
        },
    ]
    outputs = [
        {"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}], "finish_reason": "stop"}
    ]
    n = norm(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Be brief."}]),
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.request.temperature": 0.2,
            "gen_ai.provider.name": "openai",
            "gen_ai.system": "openai",
            "gen_ai.response.id": "chatcmpl-9",
            "gen_ai.response.finish_reasons": ["stop"],
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 7,
            "gen_ai.usage.cache_read.input_tokens": 100,
            "gen_ai.conversation.id": "conv-1",
            "gen_ai.agent.name": "weather_agent",
            "gen_ai.tool.definitions": json.dumps([{"type": "function", "name": "get_weather"}]),
            "logfire.msg": "chat gpt-4o",
            "server.port": 443,
        },
        name="chat gpt-4o",
    )
    assert n["kind"] == "model_call" and n["operation"] == "chat"
    assert n["messages_format"] == "gen_ai.messages"
    assert n["input_messages"] == inputs  # every part kept, unknown types as they came
    assert n["output_messages"] == outputs
    assert n["system_instructions"] == [{"type": "text", "content": "Be brief."}]
    assert (n["request_model"], n["response_model"], n["model"]) == (
        "gpt-4o",
        "gpt-4o-2024-08-06",
        "gpt-4o-2024-08-06",
    )
    assert n["request_parameters"] == {"temperature": 0.2}
    assert n["provider"] == "openai" and n["response_id"] == "chatcmpl-9" and n["finish_reasons"] == ["stop"]
    assert n["usage"] == {
        "input_tokens": 120,
        "output_tokens": 7,
        "total_tokens": None,
        "cached_input_tokens": 100,
        "cache_creation_input_tokens": None,
        "reasoning_tokens": None,
    }
    assert (n["run_key"], n["run_key_source"], n["conversation_id"]) == (
        "conv-1",
        "gen_ai.conversation.id",
        "conv-1",
    )
    assert n["agent_name"] == "weather_agent"
    assert n["tool_definitions"] == [{"type": "function", "name": "get_weather"}]
    # gen_ai.system was read after gen_ai.provider.name: it is not mapped, so it is kept.
    assert n["other_attributes"] == {
        "logfire.msg": "chat gpt-4o",
        "server.port": 443,
        "gen_ai.system": "openai",
    }
    assert n["unparsed"] == [] and n["error"] is None and n["tool"] is None


def test_a_message_attribute_that_is_not_json_is_kept_as_text() -> None:
    n = norm(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": "Hello [not json",
            "gen_ai.system_instructions": "[oops",
        }
    )
    assert n["input_messages"] == [
        {"role": "unknown", "parts": [{"type": "text", "content": "Hello [not json"}], "unparsed": True}
    ]
    assert n["system_instructions"] == [{"type": "text", "content": "[oops"}]
    assert n["unparsed"] == ["gen_ai.input.messages", "gen_ai.system_instructions"]
    # A plain-text system instruction is an allowed form, not an unparsed one.
    assert norm({"gen_ai.system_instructions": "Be brief."})["system_instructions"] == [
        {"type": "text", "content": "Be brief."}
    ]
    assert norm({"gen_ai.system_instructions": "Be brief."})["unparsed"] == []


def test_it_reads_messages_in_the_openai_chat_shape_into_parts() -> None:
    inputs = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather?"},
                {"type": "image_url", "image_url": {"url": "u"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    n = norm({"gen_ai.input.messages": json.dumps(inputs)})
    assert n["kind"] == "model_call"  # messages and no operation name: a model call
    assert n["input_messages"] == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "Weather?"},
                {"type": "image_url", "image_url": {"url": "u"}},
            ],
        },
        {"role": "assistant", "parts": [TOOL_PART]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "result": "sunny"}]},
    ]


def test_it_reads_the_per_message_events() -> None:
    events = [
        ("gen_ai.system.message", {"content": "Be brief.", "gen_ai.system": "openai"}),
        ("gen_ai.user.message", {"content": "Weather?"}),
        (
            "gen_ai.assistant.message",
            {
                "tool_calls": json.dumps(
                    [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ]
                )
            },
        ),
        ("gen_ai.tool.message", {"content": "sunny", "id": "call_1"}),
        (
            "gen_ai.choice",
            {"index": 1, "finish_reason": "stop", "message": {"role": "assistant", "content": "Second."}},
        ),
        (
            "gen_ai.choice",
            {"index": 0, "finish_reason": "stop", "message": json.dumps({"content": "Sunny."})},
        ),
        ("custom.event", {"x": 1}),
    ]
    n = norm({"gen_ai.operation.name": "chat", "gen_ai.system": "openai"}, events=events)
    assert n["messages_format"] == "gen_ai.events"
    assert n["input_messages"] == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Weather?"}]},
        {"role": "assistant", "parts": [TOOL_PART]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "result": "sunny"}]},
    ]
    assert n["output_messages"] == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}], "finish_reason": "stop"},
        {"role": "assistant", "parts": [{"type": "text", "content": "Second."}], "finish_reason": "stop"},
    ]
    assert [e["name"] for e in n["other_events"]] == ["custom.event"]
    assert n["provider"] == "openai"


def test_it_reads_the_older_content_events() -> None:
    events = [
        ("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps([{"role": "user", "content": "Hi"}])}),
        (
            "gen_ai.content.completion",
            {"gen_ai.completion": json.dumps([{"role": "assistant", "content": "Hello"}])},
        ),
    ]
    n = norm({"gen_ai.system": "openai"}, events=events)
    assert n["input_messages"] == [{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]
    assert n["output_messages"] == [{"role": "assistant", "parts": [{"type": "text", "content": "Hello"}]}]


def test_it_reads_the_indexed_prompt_and_completion_attributes() -> None:
    n = norm(
        {
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "Be brief.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "Weather?",
            "gen_ai.prompt.2.role": "assistant",
            "gen_ai.prompt.2.tool_calls.0.id": "call_1",
            "gen_ai.prompt.2.tool_calls.0.name": "get_weather",
            "gen_ai.prompt.2.tool_calls.0.arguments": '{"city": "Paris"}',
            "gen_ai.prompt.3.role": "tool",
            "gen_ai.prompt.3.content": "sunny",
            "gen_ai.prompt.3.tool_call_id": "call_1",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Sunny.",
            "gen_ai.completion.0.finish_reason": "stop",
            "gen_ai.usage.prompt_tokens": 30,
            "gen_ai.usage.completion_tokens": 2,
            "llm.usage.total_tokens": 32,
            "llm.request.type": "chat",
        }
    )
    assert n["kind"] == "model_call" and n["messages_format"] == "gen_ai.prompt"
    assert n["input_messages"] == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Weather?"}]},
        {"role": "assistant", "parts": [TOOL_PART]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "result": "sunny"}]},
    ]
    assert n["output_messages"] == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}], "finish_reason": "stop"}
    ]
    assert n["usage"] is not None and (
        n["usage"]["input_tokens"],
        n["usage"]["output_tokens"],
        n["usage"]["total_tokens"],
    ) == (30, 2, 32)
    assert n["other_attributes"] == {"llm.request.type": "chat"}


def test_it_reads_openinference_llm_spans() -> None:
    n = norm(
        {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "llm.provider": "openai",
            "session.id": "sess-9",
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "Be brief.",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.contents.0.message_content.type": "text",
            "llm.input_messages.1.message.contents.0.message_content.text": "Weather?",
            "llm.input_messages.1.message.contents.1.message_content.type": "image",
            "llm.input_messages.1.message.contents.1.message_content.image.image.url": "https://x/y.png",
            "llm.input_messages.2.message.role": "assistant",
            "llm.input_messages.2.message.tool_calls.0.tool_call.id": "call_1",
            "llm.input_messages.2.message.tool_calls.0.tool_call.function.name": "get_weather",
            "llm.input_messages.2.message.tool_calls.0.tool_call.function.arguments": '{"city": "Paris"}',
            "llm.input_messages.3.message.role": "tool",
            "llm.input_messages.3.message.tool_call_id": "call_1",
            "llm.input_messages.3.message.name": "get_weather",
            "llm.input_messages.3.message.content": "sunny",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Sunny.",
            "llm.token_count.prompt": 30,
            "llm.token_count.completion": 2,
            "llm.token_count.total": 32,
            "llm.token_count.prompt_details.cache_read": 16,
            "llm.tools.0.tool.json_schema": json.dumps(
                {"type": "function", "function": {"name": "get_weather"}}
            ),
            "llm.invocation_parameters": json.dumps({"temperature": 0}),
            "llm.finish_reason": "stop",
            "input.value": "{...}",
            "metadata": '{"thread_id": "t1"}',
        },
        name="ChatCompletion",
    )
    assert n["kind"] == "model_call" and n["operation"] == "chat" and n["messages_format"] == "openinference"
    assert n["model"] == "gpt-4o-mini" and n["provider"] == "openai"
    assert (n["run_key"], n["run_key_source"], n["conversation_id"]) == ("sess-9", "session.id", "sess-9")
    assert n["input_messages"] == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "Weather?"},
                {"type": "image", "image.image.url": "https://x/y.png"},
            ],
        },
        {"role": "assistant", "parts": [TOOL_PART]},
        {"role": "tool", "parts": [RESULT_PART | {"result": "sunny"}]},
    ]
    assert n["output_messages"] == [{"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}]}]
    assert (
        n["usage"] is not None
        and n["usage"]["cached_input_tokens"] == 16
        and n["usage"]["total_tokens"] == 32
    )
    assert n["tool_definitions"] == [{"type": "function", "function": {"name": "get_weather"}}]
    assert n["request_parameters"] == {"temperature": 0}
    assert n["finish_reasons"] == ["stop"]
    assert n["other_attributes"] == {"input.value": "{...}", "metadata": '{"thread_id": "t1"}'}


def test_it_reads_tool_spans_of_both_conventions() -> None:
    genai = norm(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": '{"city":"Paris"}',
            "gen_ai.tool.call.result": "sunny",
            "gen_ai.agent.name": "weather_agent",
        },
        name="execute_tool get_weather",
    )
    assert genai["kind"] == "tool_call" and genai["agent_name"] == "weather_agent"
    assert genai["tool"] == {
        "name": "get_weather",
        "call_id": "call_1",
        "arguments": '{"city":"Paris"}',
        "result": "sunny",
        "description": None,
    }
    oi = norm(
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "get_weather",
            "tool.description": "Weather of a city.",
            "tool.parameters": "{}",
            "input.value": '{"city":"Paris"}',
            "input.mime_type": "application/json",
            "output.value": "sunny",
        },
        name="get_weather",
    )
    assert oi["kind"] == "tool_call" and oi["operation"] == "execute_tool"
    assert oi["tool"] == {
        "name": "get_weather",
        "call_id": None,
        "arguments": '{"city":"Paris"}',
        "result": "sunny",
        "description": "Weather of a city.",
    }
    assert oi["other_attributes"] == {"tool.parameters": "{}"}
    # The name comes from the span name when no attribute gives it.
    assert (
        norm({"gen_ai.operation.name": "execute_tool"}, name="execute_tool lookup")["tool"]["name"]
        == "lookup"
    )  # type: ignore[index]


def test_it_reads_agents_graph_nodes_and_handoffs() -> None:
    invoke = norm(
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "main", "gen_ai.agent.id": "a-1"},
        name="invoke_agent main",
    )
    assert (invoke["kind"], invoke["agent_name"], invoke["agent_id"]) == ("agent", "main", "a-1")
    assert (
        norm({"gen_ai.operation.name": "invoke_agent"}, name="invoke_agent helper")["agent_name"] == "helper"
    )
    oi_agent = norm(
        {"openinference.span.kind": "AGENT", "graph.node.id": "Spanish", "graph.node.parent_id": "Triage"},
        name="Spanish",
    )
    assert oi_agent["kind"] == "agent" and oi_agent["agent_name"] == "Spanish"
    assert oi_agent["graph_node"] == {"id": "Spanish", "parent_id": "Triage"}
    with_name = norm({"openinference.span.kind": "AGENT", "agent.name": "Triage"}, name="Triage")
    assert with_name["agent_name"] == "Triage"
    handoff = norm(
        {"openinference.span.kind": "TOOL", "graph.node.parent_id": "Triage"}, name="handoff to Spanish"
    )
    assert handoff["kind"] == "other" and handoff["handoff"] == {"source": "Triage", "target": "Spanish"}
    # Pydantic AI before the GenAI names: "agent run" with agent_name.
    old = norm({"agent_name": "old_agent", "model_name": "m"}, name="agent run")
    assert (old["kind"], old["agent_name"]) == ("agent", "old_agent")
    embeddings = norm(
        {"gen_ai.operation.name": "embeddings", "gen_ai.request.model": "e-3", "gen_ai.usage.input_tokens": 4}
    )
    assert embeddings["kind"] == "other" and embeddings["model"] == "e-3" and embeddings["usage"] is not None


def test_it_reads_errors_from_the_status_error_type_and_exception_events() -> None:
    n = norm(
        {"gen_ai.operation.name": "chat", "error.type": "RateLimitError"},
        status=(2, "429 Too Many Requests"),
        events=[
            (
                "exception",
                {
                    "exception.type": "openai.RateLimitError",
                    "exception.message": "slow down",
                    "exception.stacktrace": "Traceback...",
                    "exception.escaped": True,
                },
            )
        ],
    )
    assert n["error"] == {"type": "RateLimitError", "message": "slow down", "stacktrace": "Traceback..."}
    assert n["other_events"] == [
        {"name": "exception", "time": None, "attributes": {"exception.escaped": True}}
    ]
    assert n["input_messages"] is None  # a failed call may carry no messages
    status_only = norm({"openinference.span.kind": "AGENT"}, status=(2, "Max turns exceeded"))
    assert status_only["error"] == {"type": None, "message": "Max turns exceeded", "stacktrace": None}
    assert norm({"gen_ai.operation.name": "chat"}, status=(1, ""))["error"] is None


def test_the_run_key_is_the_conversation_then_the_session_then_the_trace() -> None:
    both = norm({"gen_ai.conversation.id": "c", "session.id": "s"})
    assert (both["run_key"], both["run_key_source"]) == ("c", "gen_ai.conversation.id")
    assert both["other_attributes"] == {}
    neither = norm({})
    assert (neither["run_key"], neither["run_key_source"], neither["conversation_id"]) == (
        TRACE,
        "trace_id",
        None,
    )


def test_a_second_message_form_stays_in_other_attributes() -> None:
    n = norm(
        {
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
            ),
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "hi",
        },
        events=[("gen_ai.user.message", {"content": "hi"})],
    )
    assert n["messages_format"] == "gen_ai.messages"
    assert n["other_attributes"] == {
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "hi",
    }
    assert [e["name"] for e in n["other_events"]] == ["gen_ai.user.message"]


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
json_value = st.recursive(
    json_leaf,
    lambda v: st.one_of(st.lists(v, max_size=3), st.dictionaries(st.text(max_size=6), v, max_size=3)),
    max_leaves=10,
)
attr_value = st.one_of(json_value, json_value.map(json.dumps), st.text(max_size=10))
known_keys = st.sampled_from(
    [
        "gen_ai.operation.name",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.definitions",
        "gen_ai.response.finish_reasons",
        "gen_ai.usage.input_tokens",
        "gen_ai.prompt",
        "gen_ai.prompt.0.role",
        "gen_ai.prompt.0.content",
        "gen_ai.prompt.0.tool_calls.0.id",
        "gen_ai.completion.1.content",
        "gen_ai.prompt.x",
        "llm.input_messages.0.message.role",
        "llm.input_messages.0.message.contents.0.message_content.text",
        "llm.output_messages.2.message.tool_calls.0.tool_call.function.name",
        "llm.tools.0.tool.json_schema",
        "llm.invocation_parameters",
        "openinference.span.kind",
        "gen_ai.conversation.id",
        "session.id",
        "graph.node.parent_id",
        "gen_ai.tool.name",
        "input.value",
        "error.type",
    ]
)
event_names = st.sampled_from(
    [
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
        "gen_ai.content.prompt",
        "exception",
        "other",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(known_keys, attr_value, max_size=8),
    st.lists(
        st.tuples(
            event_names,
            st.dictionaries(
                st.sampled_from(["content", "message", "tool_calls", "id", "index", "gen_ai.prompt", "body"]),
                attr_value,
                max_size=3,
            ),
        ),
        max_size=3,
    ),
    st.sampled_from(["span", "handoff to X", "execute_tool t", "invoke_agent a", "agent run"]),
)
def test_it_never_raises_and_gives_json_whatever_the_attributes_hold(
    attributes: dict[str, Any], events: list[tuple[str, dict[str, Any]]], name: str
) -> None:
    span = {
        "trace_id": TRACE,
        "span_id": "0000000000000002",
        "parent_span_id": None,
        "name": name,
        "kind": "internal",
        "start_time": 1,
        "end_time": 2,
        "status": {"code": "unset", "message": ""},
        "attributes": attributes,
        "events": [{"name": n, "time": 1, "attributes": a} for n, a in events],
        "links": [],
        "resource": {},
        "scope": {"name": "", "version": ""},
    }
    before = json.dumps(span, sort_keys=True)
    n = normalize_span(span)  # type: ignore[arg-type]
    json.dumps(n)
    assert json.dumps(span, sort_keys=True) == before  # the input is not changed
    for messages in (n["input_messages"] or [], n["output_messages"] or []):
        for m in messages:
            assert isinstance(m["role"], str) and isinstance(m["parts"], list)
            assert all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in m["parts"])
