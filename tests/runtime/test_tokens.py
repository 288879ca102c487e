from __future__ import annotations

import pytest

from runtime._tokens import REPLY_PRIMING_TOKENS, TokenCounter, default_counter
from runtime.errors import ConfigError

# The worked example of the openai-cookbook "How to count tokens with tiktoken"; the API reports
# 129 prompt tokens for it on the cl100k models.
COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.",
    },
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
    },
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return default_counter()


def test_it_uses_the_official_cl100k_ranks_offline(counter: TokenCounter) -> None:
    assert counter.encoding == "cl100k_base"
    # Token ids published in the cookbook for cl100k_base.
    assert counter.encode("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]


def test_it_counts_the_cookbook_example_as_the_api_bills_it(counter: TokenCounter) -> None:
    assert counter.count_messages(COOKBOOK_MESSAGES) == 129


def test_it_counts_a_message_as_overhead_role_and_content(counter: TokenCounter) -> None:
    msg = {"role": "user", "content": "hello world"}
    assert counter.count_message(msg) == 3 + counter.count_text("user") + counter.count_text("hello world")
    assert counter.count_messages([msg]) == counter.count_message(msg) + REPLY_PRIMING_TOKENS


def test_it_counts_name_with_one_extra_token(counter: TokenCounter) -> None:
    plain = {"role": "user", "content": "hi"}
    named = {"role": "user", "content": "hi", "name": "alice"}
    assert counter.count_message(named) - counter.count_message(plain) == counter.count_text("alice") + 1


def test_it_counts_tool_call_names_and_arguments(counter: TokenCounter) -> None:
    args = '{"city": "Paris", "unit": "celsius"}'
    msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": args}}
        ],
    }
    expected = (
        3 + counter.count_text("assistant") + counter.count_text("get_weather") + counter.count_text(args)
    )
    assert counter.count_message(msg) == expected


def test_it_counts_the_tool_call_id_of_tool_results(counter: TokenCounter) -> None:
    msg = {"role": "tool", "tool_call_id": "call_abc", "content": "sunny"}
    assert counter.count_message(msg) == 3 + counter.count_text("tool") + counter.count_text(
        "call_abc"
    ) + counter.count_text("sunny")


def test_it_counts_text_parts_and_images(counter: TokenCounter) -> None:
    msg = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
    }
    assert (
        counter.count_message(msg)
        == 3 + counter.count_text("user") + counter.count_text("what is this?") + 85
    )


def test_it_treats_special_token_text_as_plain_text(counter: TokenCounter) -> None:
    assert counter.count_text("<|endoftext|>") > 1


def test_it_caches_counts_by_content_not_identity() -> None:
    counter = TokenCounter(cache_size=8)
    counter.count_message({"role": "user", "content": "same words"})
    misses = counter.misses
    assert counter.count_message({"role": "user", "content": "same words"}) == counter.count_message(
        {"content": "same words", "role": "user"}
    )
    assert counter.misses == misses
    counter.count_message({"role": "assistant", "content": "same words"})
    assert counter.misses == misses + 1


def test_it_keeps_the_cache_bounded() -> None:
    counter = TokenCounter(cache_size=4)
    for i in range(20):
        counter.count_message({"role": "user", "content": f"message {i}"})
    assert len(counter._cache) == 4
    misses = counter.misses
    counter.count_message({"role": "user", "content": "message 19"})  # recent: still cached
    counter.count_message({"role": "user", "content": "message 0"})  # evicted: counted again
    assert counter.misses == misses + 1


def test_it_counts_tool_schemas_with_the_cookbook_constants(counter: TokenCounter) -> None:
    expected = (
        12  # once per request
        + 10
        + counter.count_text("get_weather:Get the weather")
        + 3
        + 3
        + counter.count_text("city:string:City name")
        + 3
        + (-3 + 3 + counter.count_text("celsius") + 3 + counter.count_text("fahrenheit"))
        + counter.count_text("unit:string:")
    )
    assert counter.count_tools([WEATHER_TOOL]) == expected
    assert counter.count_tools([]) == 0
    assert counter.count_tools(None) == 0


def test_it_charges_nested_schemas(counter: TokenCounter) -> None:
    flat = {
        "type": "function",
        "function": {"name": "f", "parameters": {"properties": {"x": {"type": "array"}}}},
    }
    nested = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "properties": {"x": {"type": "array", "items": {"type": "object", "properties": {"y": {}}}}}
            },
        },
    }
    assert counter.count_tools([nested]) > counter.count_tools([flat])


def test_it_counts_tools_deterministically_whatever_the_key_order(counter: TokenCounter) -> None:
    reordered = {"function": dict(reversed(list(WEATHER_TOOL["function"].items()))), "type": "function"}
    assert counter.count_tools([reordered]) == counter.count_tools([WEATHER_TOOL])


def test_it_truncates_text_at_a_token_boundary(counter: TokenCounter) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 5
    cut = counter.truncate_text(text, 7)
    assert text.startswith(cut)
    assert counter.count_text(cut) <= 7
    assert counter.truncate_text("short", 100) == "short"
    assert counter.truncate_text("anything", 0) == ""


def test_it_shares_one_default_counter() -> None:
    assert default_counter() is default_counter()


def test_it_rejects_an_encoding_it_cannot_load_offline() -> None:
    with pytest.raises(ConfigError, match="not available offline"):
        TokenCounter("no_such_encoding")


def test_it_rejects_a_zero_cache() -> None:
    with pytest.raises(ConfigError):
        TokenCounter(cache_size=0)
