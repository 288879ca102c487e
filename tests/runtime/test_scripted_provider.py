from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from runtime._provider_types import Provider
from runtime._providers import ScriptedProvider
from runtime.errors import ConfigError


def ask(provider: ScriptedProvider, text: str, **kwargs: Any):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]
    return asyncio.run(provider.complete(messages, **kwargs))


def test_it_satisfies_the_provider_protocol() -> None:
    assert isinstance(ScriptedProvider(["hi"]), Provider)


def test_it_answers_string_steps_in_order_then_the_closing_text() -> None:
    p = ScriptedProvider(["one", "two"], closing_text="bye")
    assert [ask(p, "x").content for _ in range(4)] == ["one", "two", "bye", "bye"]
    assert p.exhausted


def test_it_uses_the_default_closing_text_when_exhausted() -> None:
    p = ScriptedProvider([])
    reply = ask(p, "anything")
    assert reply.content == "(script finished)"
    assert reply.tool_calls == ()
    assert reply.finish_reason == "stop"


def test_it_returns_tool_calls_with_deterministic_ids_and_raw_json_arguments() -> None:
    p = ScriptedProvider(
        [
            {"content": None, "tool_calls": [{"name": "pin", "arguments": {"content": "x", "label": "é"}}]},
            {
                "content": "two calls",
                "tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": "{bad"}],
            },
        ]
    )
    first = ask(p, "go")
    second = ask(p, "go")
    assert first.finish_reason == "tool_calls"
    assert [(c.id, c.name) for c in first.tool_calls] == [("call_1", "pin")]
    assert json.loads(first.tool_calls[0].arguments) == {"content": "x", "label": "é"}
    assert "é" in first.tool_calls[0].arguments  # not \u-escaped
    assert [(c.id, c.name, c.arguments) for c in second.tool_calls] == [
        ("call_2", "a", "{}"),
        ("call_3", "b", "{bad"),
    ]
    assert second.content == "two calls"
    assert first.assistant_message()["tool_calls"][0]["function"]["name"] == "pin"


def test_it_takes_the_first_unused_step_whose_when_matches_the_last_user_message() -> None:
    p = ScriptedProvider(
        [
            {"content": "about cats", "when": "cat"},
            {"content": "about dogs", "when": "dog"},
            "plain",
        ]
    )
    # "dog" skips the cat step (kept for later) and takes the dog step.
    assert ask(p, "tell me about my dog").content == "about dogs"
    # No "when" matches: the unconditional step answers.
    assert ask(p, "hello").content == "plain"
    # The skipped cat step is still available.
    assert ask(p, "a cat!").content == "about cats"
    assert ask(p, "a cat!").content == "(script finished)"


def test_it_matches_when_case_sensitively_against_the_last_user_message_only() -> None:
    p = ScriptedProvider([{"content": "yes", "when": "Remember"}])
    messages = [
        {"role": "user", "content": "Remember this"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "remember lower"},
    ]
    assert asyncio.run(p.complete(messages)).content == "(script finished)"
    messages.append({"role": "tool", "tool_call_id": "call_1", "content": "Remember in a tool result"})
    assert asyncio.run(p.complete(messages)).content == "(script finished)"
    messages.append({"role": "user", "content": [{"type": "text", "text": "please Remember"}]})
    assert asyncio.run(p.complete(messages)).content == "yes"


def test_it_answers_the_closing_text_when_no_remaining_step_matches() -> None:
    p = ScriptedProvider([{"content": "only for x", "when": "x"}], closing_text="done")
    assert ask(p, "y").content == "done"
    assert p.remaining == 1


def test_it_records_every_request_as_copies() -> None:
    p = ScriptedProvider(["a"])
    messages = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]
    asyncio.run(p.complete(messages, tools=tools, model="other"))
    messages.append({"role": "user", "content": "mutated later"})
    assert p.requests == [{"messages": [{"role": "user", "content": "hi"}], "tools": tools, "model": "other"}]
    asyncio.run(p.complete(messages))
    assert p.requests[1]["model"] == "scripted-1"
    assert p.requests[1]["tools"] is None


def test_it_counts_usage_in_words_deterministically() -> None:
    p = ScriptedProvider(
        ["three word answer", {"content": None, "tool_calls": [{"name": "pin", "arguments": {"a": "b c"}}]}]
    )
    reply = ask(p, "four words right here")
    # prompt: "You are terse." (3) + "four words right here" (4)
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (7, 3, 10)
    again = ask(ScriptedProvider(["three word answer"]), "four words right here")
    assert again.usage == reply.usage
    call_reply = ask(p, "x")
    # name "pin" (1) + '{"a": "b c"}' (3 whitespace-separated pieces)
    assert call_reply.usage.completion_tokens == 4


def test_it_exports_and_restores_its_cursor() -> None:
    steps = [
        "one",
        {"content": "cat", "when": "cat"},
        {"content": None, "tool_calls": [{"name": "t", "arguments": {}}]},
        "four",
    ]
    p = ScriptedProvider(steps)
    ask(p, "x")
    ask(p, "x")  # takes the tool-call step (call_1), cat step stays unused
    state = p.export_state()
    assert json.loads(json.dumps(state)) == state

    clone = ScriptedProvider(copy.deepcopy(steps))
    clone.restore_state(state)
    rest_original = [ask(p, t) for t in ("cat", "x", "x")]
    rest_clone = [ask(clone, t) for t in ("cat", "x", "x")]
    assert (
        [r.content for r in rest_clone]
        == [r.content for r in rest_original]
        == ["cat", "four", "(script finished)"]
    )


def test_it_continues_tool_call_numbering_after_restore() -> None:
    steps = [{"content": None, "tool_calls": [{"name": "t", "arguments": {}}]}] * 2
    p = ScriptedProvider(steps)
    ask(p, "x")
    clone = ScriptedProvider(steps)
    clone.restore_state(p.export_state())
    assert ask(clone, "x").tool_calls[0].id == "call_2"


def test_it_rejects_a_state_from_another_script() -> None:
    state = ScriptedProvider(["a"]).export_state()
    with pytest.raises(ConfigError, match="different script"):
        ScriptedProvider(["b"]).restore_state(state)
    with pytest.raises(ConfigError, match="must have"):
        ScriptedProvider(["b"]).restore_state({})


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ("just a string", "list"),
        ([42], "string or a dict"),
        ([{"content": None}], "needs 'content'"),
        ([{"text": "hi"}], "unknown keys"),
        ([{"content": "x", "when": ""}], "'when'"),
        ([{"content": "x", "tool_calls": [{"arguments": {}}]}], "'name'"),
        (
            [{"content": "x", "tool_calls": [{"name": "t", "arguments": {"a": object()}}]}],
            "JSON-serializable",
        ),
    ],
)
def test_it_rejects_bad_steps(steps: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ScriptedProvider(steps)


def test_a_delay_paces_each_answer_like_a_model() -> None:
    """`delay` (a server's demo pacing, ARCANA_SCRIPTED_STEP_MS) holds each answer that long, and
    changes nothing else; a negative or NaN delay is refused."""
    import time

    from runtime.scenarios import get_scenario

    p = get_scenario("pin-recall-demo").provider(delay=0.2)
    assert p.delay == 0.2
    started = time.monotonic()
    answer = ask(p, "brief")
    assert time.monotonic() - started >= 0.2
    assert answer.content == ask(get_scenario("pin-recall-demo").provider(), "brief").content
    for bad in (-1, float("nan")):
        with pytest.raises(ConfigError):
            ScriptedProvider(["hi"], delay=bad)
