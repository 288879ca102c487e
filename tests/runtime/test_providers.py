from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from runtime._provider_types import Provider
from runtime._providers import (
    PRESETS,
    OpenAICompatibleProvider,
    ProviderTimeouts,
    ScriptedProvider,
    parse_retry_after,
    resolve_providers,
)
from runtime.errors import (
    ConfigError,
    ProviderConnectionError,
    ProviderHTTPError,
    ProviderResponseError,
    ProviderTimeout,
)
from tests.runtime.openai_server import OpenAIServer, free_port

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather in Oslo?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def make(server: OpenAIServer, **kwargs: Any) -> OpenAICompatibleProvider:
    kwargs.setdefault("api_key", "sk-test-secret")
    kwargs.setdefault("model", "m-1")
    kwargs.setdefault("backoff_base", 0.01)
    return OpenAICompatibleProvider("local", base_url=server.base_url, **kwargs)


def complete(provider: OpenAICompatibleProvider, messages: list[dict[str, Any]] = MESSAGES, **kwargs: Any):
    async def go():
        async with provider:
            return await provider.complete(messages, **kwargs)

    return asyncio.run(go())


# -- the request -------------------------------------------------------------------------------------


def test_it_posts_a_deterministic_body_with_bearer_auth(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_text("a")
    openai_server.enqueue_text("b")
    messages = [{"role": "user", "content": "héllo ✓"}]
    p = make(openai_server)
    complete(p, messages, tools=TOOLS, temperature=0.2, max_tokens=50)
    complete(make(openai_server), messages, tools=TOOLS, temperature=0.2, max_tokens=50)
    first, second = openai_server.requests
    assert first.method == "POST"
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer sk-test-secret"
    assert first.headers["content-type"] == "application/json"
    assert first.body == second.body
    expected = {"model": "m-1", "messages": messages, "tools": TOOLS, "temperature": 0.2, "max_tokens": 50}
    assert first.body == json.dumps(expected, separators=(",", ":"), ensure_ascii=False).encode()
    assert p.request_body(messages, tools=TOOLS, temperature=0.2, max_tokens=50) == first.body


@pytest.mark.parametrize("tools", [None, []])
def test_it_omits_tools_when_there_are_none(openai_server: OpenAIServer, tools: Any) -> None:
    openai_server.enqueue_text("ok")
    complete(make(openai_server), tools=tools)
    assert list(openai_server.last_request.json) == ["model", "messages"]


def test_it_sends_no_authorization_without_a_key_and_adds_extra_headers(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_text("ok")
    complete(make(openai_server, api_key=None, extra_headers={"X-Team": "blue"}))
    assert "authorization" not in openai_server.last_request.headers
    assert openai_server.last_request.headers["x-team"] == "blue"


def test_it_uses_the_model_override(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_text("ok")
    reply = complete(make(openai_server), model="other-model")
    assert openai_server.last_request.json["model"] == "other-model"
    assert reply.model == "other-model"


# -- non-streaming answers -----------------------------------------------------------------------------


def test_it_returns_text_usage_latency_and_finish_reason(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_text(
        "Sunny.", usage={"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}, delay=0.05
    )
    reply = complete(make(openai_server))
    assert reply.content == "Sunny."
    assert reply.tool_calls == ()
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (12, 2, 14)
    assert reply.finish_reason == "stop"
    assert reply.model == "m-1"
    assert reply.latency_ms >= 50
    assert reply.streamed is False
    assert reply.extra["attempts"] == 1
    assert reply.extra["id"].startswith("chatcmpl-")


def test_it_parses_tool_calls_keeping_raw_json_arguments(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_tool_calls(
        [{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "call_a"}, ("pin", '{"content": "x"')],
        content="Checking.",
    )
    reply = complete(make(openai_server), tools=TOOLS)
    assert reply.finish_reason == "tool_calls"
    assert reply.content == "Checking."
    assert [(c.id, c.name) for c in reply.tool_calls] == [("call_a", "get_weather"), ("call_1", "pin")]
    assert json.loads(reply.tool_calls[0].arguments) == {"city": "Oslo"}
    assert reply.tool_calls[1].arguments == '{"content": "x"'  # invalid JSON is passed through raw
    assert reply.assistant_message()["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"}'


def test_it_reads_object_arguments_and_list_content_from_lenient_servers(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_completion(
        {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": [{"type": "text", "text": "part one"}],
                        "tool_calls": [{"id": "x", "function": {"name": "t", "arguments": {"a": 1}}}],
                    },
                    "finish_reason": "tool_calls",
                }
            ]
        }
    )
    reply = complete(make(openai_server))
    assert reply.content == "part one"
    assert reply.tool_calls[0].arguments == '{"a": 1}'
    assert reply.usage is None


# -- streaming -----------------------------------------------------------------------------------------


def test_it_streams_text_and_takes_usage_from_the_final_chunk(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_text("It is sunny in Oslo today.")
    reply = complete(make(openai_server, stream=True))
    body = openai_server.last_request.json
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert openai_server.last_request.headers["accept"] == "text/event-stream"
    assert reply.streamed is True
    assert reply.content == "It is sunny in Oslo today."
    assert reply.finish_reason == "stop"
    # the server counts words: 3 + 3 prompt words, 6 completion words
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (6, 6, 12)


def test_it_assembles_streamed_tool_call_deltas_by_index(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_tool_calls(
        [("get_weather", {"city": "Oslo", "unit": "celsius"}), ("pin", {"content": "remember Oslo"})],
        content="Let me check.",
    )
    reply = complete(make(openai_server, stream=True), tools=TOOLS)
    assert reply.content == "Let me check."
    assert reply.finish_reason == "tool_calls"
    assert [(c.id, c.name) for c in reply.tool_calls] == [("call_1", "get_weather"), ("call_2", "pin")]
    assert json.loads(reply.tool_calls[0].arguments) == {"city": "Oslo", "unit": "celsius"}
    assert json.loads(reply.tool_calls[1].arguments) == {"content": "remember Oslo"}


def test_it_assembles_interleaved_tool_call_deltas(openai_server: OpenAIServer) -> None:
    def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}

    openai_server.enqueue_stream(
        [
            delta(
                {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "two", "arguments": '{"y"'}}]}
            ),
            delta(
                {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "one", "arguments": '{"x"'}}]}
            ),
            delta({"tool_calls": [{"index": 1, "function": {"arguments": ": 2}"}}]}),
            delta({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
            delta({}, "tool_calls"),
            ": a comment line the client must ignore",
        ]
    )
    reply = complete(make(openai_server, stream=True))
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("a", "one", '{"x": 1}'),
        ("b", "two", '{"y": 2}'),
    ]
    assert reply.content is None
    assert reply.usage is None


def test_it_reads_a_json_answer_to_a_stream_request(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_text("plain json", stream=False)
    reply = complete(make(openai_server, stream=True))
    assert reply.content == "plain json"
    assert reply.streamed is False


# -- retries ---------------------------------------------------------------------------------------------


def test_it_honours_retry_after_on_429(openai_server: OpenAIServer, caplog: pytest.LogCaptureFixture) -> None:
    openai_server.enqueue_error(429, retry_after=1, message="slow down")
    openai_server.enqueue_text("finally")
    with caplog.at_level(logging.WARNING, logger="runtime.providers"):
        reply = complete(make(openai_server))
    waited = openai_server.requests[1].received_at - openai_server.requests[0].received_at
    assert reply.content == "finally"
    assert reply.extra["attempts"] == 2
    assert waited >= 1.0
    assert "HTTP 429" in caplog.text
    assert "sk-test-secret" not in caplog.text


def test_it_honours_retry_after_as_an_http_date(openai_server: OpenAIServer) -> None:
    when = datetime.now(UTC) + timedelta(seconds=2)
    openai_server.enqueue_error(503, headers={"Retry-After": format_datetime(when, usegmt=True)})
    openai_server.enqueue_text("ok")
    reply = complete(make(openai_server))
    waited = openai_server.requests[1].received_at - openai_server.requests[0].received_at
    assert reply.content == "ok"
    assert waited >= 0.5  # the date has one-second resolution


def test_it_retries_a_500_then_succeeds(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_error(500)
    openai_server.enqueue_error(502)
    openai_server.enqueue_text("recovered")
    reply = complete(make(openai_server))
    assert reply.content == "recovered"
    assert reply.extra["attempts"] == 3
    assert len(openai_server.requests) == 3
    assert openai_server.requests[0].body == openai_server.requests[2].body


def test_it_retries_a_streamed_500_then_succeeds(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_error(500)
    openai_server.enqueue_text("streamed after a failure")
    reply = complete(make(openai_server, stream=True))
    assert reply.content == "streamed after a failure"
    assert reply.extra["attempts"] == 2


def test_it_raises_http_error_after_the_retries(openai_server: OpenAIServer) -> None:
    for _ in range(3):
        openai_server.enqueue_error(503, message="overloaded")
    with pytest.raises(ProviderHTTPError) as info:
        complete(make(openai_server, max_retries=2))
    assert info.value.status_code == 503
    assert "overloaded" in info.value.body
    assert "after 3 attempts" in str(info.value)
    assert info.value.provider == "local"
    assert len(openai_server.requests) == 3


def test_it_does_not_retry_a_400(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_error(400, message="bad tool schema")
    openai_server.enqueue_text("never sent")
    with pytest.raises(ProviderHTTPError) as info:
        complete(make(openai_server))
    assert info.value.status_code == 400
    assert "bad tool schema" in str(info.value)
    assert len(openai_server.requests) == 1


def test_it_truncates_the_error_body_and_masks_the_key(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_error(401, body="invalid key sk-test-secret " + "x" * 10_000)
    with pytest.raises(ProviderHTTPError) as info:
        complete(make(openai_server))
    assert len(info.value.body) == 2000
    assert "sk-test-secret" not in info.value.body
    assert "sk-test-secret" not in str(info.value)
    assert "***" in info.value.body


def test_it_raises_timeout_when_the_server_is_too_slow(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_text("late", delay=2)
    openai_server.enqueue_text("late too", delay=2)
    with pytest.raises(ProviderTimeout, match="after 2 attempts"):
        complete(make(openai_server, timeout=ProviderTimeouts(read=0.2), max_retries=1))
    assert len(openai_server.requests) == 2


def test_it_raises_timeout_when_a_stream_stalls(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_stream(content="slow words here", chunk_delay=1.0)
    with pytest.raises(ProviderTimeout):
        complete(make(openai_server, stream=True, timeout=ProviderTimeouts(read=0.2), max_retries=0))


def test_it_raises_connection_error_when_nothing_listens() -> None:
    p = OpenAICompatibleProvider(
        "down", base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", max_retries=1, backoff_base=0.01
    )
    with pytest.raises(ProviderConnectionError, match="cannot reach") as info:
        complete(p)
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_it_retries_a_dropped_connection(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_disconnect()
    openai_server.enqueue_text("second try")
    assert complete(make(openai_server)).content == "second try"


def test_it_retries_a_stream_cut_mid_way(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_stream(content="cut off here", complete=False, done=False)
    openai_server.enqueue_text("whole answer")
    reply = complete(make(openai_server, stream=True))
    assert reply.content == "whole answer"
    assert reply.extra["attempts"] == 2


# -- bad answers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("this is not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"choices": []}', "'choices' is missing or empty"),
        ('{"choices": [{"finish_reason": "stop"}]}', "message' is missing"),
        ('{"error": {"message": "quota exceeded"}}', "quota exceeded"),
        ('{"choices": [{"message": {"content": 5}}]}', "content' must be"),
        ('{"choices": [{"message": {"content": null, "tool_calls": [{"id": "a"}]}}]}', "no function name"),
    ],
)
def test_it_rejects_a_bad_2xx_body_without_retrying(
    openai_server: OpenAIServer, body: str, match: str
) -> None:
    openai_server.enqueue_raw(body)
    with pytest.raises(ProviderResponseError, match=match):
        complete(make(openai_server))
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize(
    ("chunks", "done", "match"),
    [
        (['{"choices": [{"index": 0, "delta": {"content": "hi"}}]}', "{broken"], True, "not JSON"),
        (['{"choices": [{"index": 0, "delta": {"content": "hi"}}]}'], False, "ended before"),
        (['{"error": {"message": "model crashed"}}'], True, "model crashed"),
        (
            [
                '{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}, "finish_reason": "tool_calls"}]}'
            ],
            True,
            "no function name",
        ),
    ],
)
def test_it_rejects_a_broken_sse_stream(
    openai_server: OpenAIServer, chunks: list[str], done: bool, match: str
) -> None:
    openai_server.enqueue_stream(chunks, done=done)
    with pytest.raises(ProviderResponseError, match=match):
        complete(make(openai_server, stream=True))


def test_it_accepts_a_stream_with_finish_reason_but_no_done_marker(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_stream(
        ['{"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}'], done=False
    )
    assert complete(make(openai_server, stream=True)).content == "ok"


# -- the client ---------------------------------------------------------------------------------------------


def test_it_uses_an_injected_transport_and_leaves_the_client_open() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, json={"choices": [{"message": {"role": "assistant", "content": "mocked"}}]}
        )

    async def go() -> tuple[str | None, bool]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            p = OpenAICompatibleProvider(
                "mock", base_url="http://example.invalid/v1", model="m", client=client
            )
            reply = await p.complete(MESSAGES)
            await p.aclose()
            return reply.content, client.is_closed

    content, closed = asyncio.run(go())
    assert content == "mocked"
    assert closed is False
    assert str(seen[0].url) == "http://example.invalid/v1/chat/completions"


def test_it_closes_the_client_it_created(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_text("ok")
    p = make(openai_server)

    async def go() -> httpx.AsyncClient:
        await p.complete(MESSAGES)
        client = p._client
        await p.aclose()
        return client

    assert asyncio.run(go()).is_closed


def test_it_works_across_event_loops(openai_server: OpenAIServer) -> None:
    openai_server.enqueue_text("one")
    openai_server.enqueue_text("two")
    p = make(openai_server)
    assert complete(p).content == "one"
    assert complete(p).content == "two"


def test_its_repr_hides_the_key(openai_server: OpenAIServer) -> None:
    assert "sk-test-secret" not in repr(make(openai_server))


def test_it_satisfies_the_provider_protocol(openai_server: OpenAIServer) -> None:
    assert isinstance(make(openai_server), Provider)


def test_it_validates_its_arguments() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        OpenAICompatibleProvider("x", base_url="127.0.0.1:80", model="m")
    with pytest.raises(ConfigError, match="model"):
        OpenAICompatibleProvider("x", base_url="http://h/v1", model="")
    with pytest.raises(ConfigError, match="max_retries"):
        OpenAICompatibleProvider("x", base_url="http://h/v1", model="m", max_retries=-1)
    with pytest.raises(ConfigError, match="read"):
        ProviderTimeouts(read=0)


def test_timeouts_coerce_numbers_dicts_and_none() -> None:
    assert ProviderTimeouts.coerce(5) == ProviderTimeouts(5, 5, 5, 5)
    assert ProviderTimeouts.coerce({"read": 120}) == ProviderTimeouts(read=120)
    assert ProviderTimeouts.coerce(None).to_httpx() == httpx.Timeout(None)
    with pytest.raises(ConfigError, match="phases"):
        ProviderTimeouts.coerce({"total": 3})


def test_retry_after_parsing() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("3600", cap=60) == 60.0
    assert parse_retry_after("Thu, 01 Jan 2026 00:00:10 GMT", now=now) == 10.0
    assert parse_retry_after("Wed, 31 Dec 2025 00:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


# -- presets and resolve_providers -----------------------------------------------------------------------


def test_it_resolves_a_preset_from_a_key_string() -> None:
    providers = resolve_providers({"openai": "sk-a", "deepseek": "sk-b"})
    openai, deepseek = providers["openai"], providers["deepseek"]
    assert isinstance(openai, OpenAICompatibleProvider)
    assert (openai.base_url, openai.model, openai.name) == (
        "https://api.openai.com/v1",
        "gpt-4o-mini",
        "openai",
    )
    assert (deepseek.base_url, deepseek.model) == ("https://api.deepseek.com/v1", "deepseek-chat")
    assert openai._headers["Authorization"] == "Bearer sk-a"
    assert set(PRESETS) == {"openai", "deepseek", "gemini", "kimi", "glm", "minimax", "ollama"}


def test_a_dict_overrides_the_preset(openai_server: OpenAIServer) -> None:
    providers = resolve_providers(
        {"openai": {"api_key": "k", "base_url": openai_server.base_url, "model": "mine", "stream": True}}
    )
    p = providers["openai"]
    assert (p.base_url, p.model, p.stream) == (openai_server.base_url, "mine", True)
    openai_server.enqueue_text("through the override")
    assert complete(p).content == "through the override"
    assert openai_server.last_request.headers["authorization"] == "Bearer k"


def test_a_custom_endpoint_needs_no_key(openai_server: OpenAIServer) -> None:
    p = resolve_providers(
        {"local": {"base_url": openai_server.base_url, "model": "m", "timeout": 3, "max_retries": 0}}
    )["local"]
    assert p.timeouts == ProviderTimeouts.uniform(3)
    assert p.max_retries == 0
    openai_server.enqueue_text("no key needed")
    assert complete(p).content == "no key needed"
    assert "authorization" not in openai_server.last_request.headers


def test_a_preset_takes_its_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-env")
    p = resolve_providers({"deepseek": {"model": "deepseek-reasoner"}})["deepseek"]
    assert p._headers["Authorization"] == "Bearer sk-env"
    assert p.model == "deepseek-reasoner"


def test_it_passes_provider_instances_through() -> None:
    scripted = ScriptedProvider(["hi"])
    assert resolve_providers({"scripted": scripted})["scripted"] is scripted


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"mystery": "sk-x"}, "a string value is an API key for a preset"),
        ({"mystery": {"api_key": "k", "model": "m"}}, "give it a 'base_url'"),
        ({"custom": {"base_url": "http://127.0.0.1:1/v1"}}, "no 'model'"),
        ({"openai": {}}, "no API key.*OPENAI_API_KEY"),
        ({"openai": {"api_key": "k", "modle": "typo"}}, "unknown keys \\['modle'\\]"),
        ({"openai": 42}, "expected an API key string"),
        ({"custom": {"base_url": "ftp://x", "model": "m"}}, "http:// or https://"),
        ({}, "providers is empty"),
    ],
)
def test_it_rejects_bad_provider_specs(spec: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        resolve_providers(spec)
