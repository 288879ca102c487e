"""The session loop (issue 3 item 4): turns, steps, tools, errors, limits, over the scripted provider
and the loopback OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Optional

import pytest

from runtime import (
    ConfigError,
    ContextOverflowError,
    ContextStrategy,
    OpenAICompatibleProvider,
    ProviderHTTPError,
    Runtime,
    RuntimeConfig,
    ScriptedProvider,
    ToolDefinitionError,
    tool,
)
from runtime._tools import as_tool
from tests.runtime.session_helpers import call, calls, of_type, read_events, run, tool_results


def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
    """Current weather for a city.

    Args:
        city: City name, e.g. "Paris".
        unit: Temperature unit.
    """
    return f"{city}: 21{unit.upper()}"


@tool(name="add_numbers", description="Add two numbers.")
async def add(a: int, b: float = 0.5) -> dict:
    return {"sum": a + b}


def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


def scripted_runtime(tmp_path: Path, steps: list[Any], **config: Any) -> tuple[Runtime, ScriptedProvider]:
    provider = ScriptedProvider(steps)
    config.setdefault("trace_dir", str(tmp_path))
    rt = Runtime({"scripted": provider}, config=RuntimeConfig(**config), tools=[get_weather, add, explode])
    return rt, provider


# --------------------------------------------------------------------------------------------------
# Turns and runs


def test_turns_are_one_based_and_span_the_session_in_one_run(tmp_path: Path) -> None:
    rt, _ = scripted_runtime(tmp_path, ["one", "two", "three"])

    async def go() -> list[Any]:
        async with rt.chat(system="You are terse.") as chat:
            return [await chat.send(t) for t in ("a", "b", "c")]

    replies = run(go())
    assert [(r.turn, r.content, r.steps, r.outcome) for r in replies] == [
        (1, "one", 1, "answered"),
        (2, "two", 1, "answered"),
        (3, "three", 1, "answered"),
    ]
    assert len({r.run_id for r in replies}) == 1
    assert [p.name for p in tmp_path.iterdir()] == [f"{replies[0].run_id}.jsonl"]


def test_two_sessions_are_two_runs(tmp_path: Path) -> None:
    rt, _ = scripted_runtime(tmp_path, ["one", "two"])

    async def go() -> tuple[Any, Any]:
        async with rt.chat() as a, rt.chat() as b:
            return await a.send("x"), await b.send("y")

    ra, rb = run(go())
    assert ra.run_id != rb.run_id and ra.turn == rb.turn == 1
    assert len(list(tmp_path.iterdir())) == 2


def test_the_model_sees_the_history_it_built(tmp_path: Path) -> None:
    rt, provider = scripted_runtime(tmp_path, ["first answer", "second answer"])

    async def go() -> None:
        async with rt.chat(system="sys") as chat:
            await chat.send("q1")
            await chat.send("q2")

    run(go())
    assert provider.requests[1]["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "q2"},
    ]


# --------------------------------------------------------------------------------------------------
# Tools


def test_tool_calls_run_and_results_return_in_the_models_call_order(tmp_path: Path) -> None:
    rt, provider = scripted_runtime(
        tmp_path, [calls(call("add_numbers", a=2), call("get_weather", city="Oslo", unit="f")), "done"]
    )

    async def go() -> Any:
        async with rt.chat() as chat:
            return await chat.send("do both")

    reply = run(go())
    assert reply.steps == 2 and reply.content == "done"
    tool_msgs = [m for m in provider.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_msgs == [
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sum": 2.5}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "Oslo: 21F"},
    ]
    assert [(c["name"], c["kind"], c["result"]) for c in reply.tool_calls] == [
        ("add_numbers", "tool", {"sum": 2.5}),
        ("get_weather", "tool", "Oslo: 21F"),
    ]


def test_a_failing_tool_comes_back_to_the_model_as_a_structured_result(tmp_path: Path) -> None:
    rt, provider = scripted_runtime(tmp_path, [calls(call("explode", reason="x")), "recovered"])

    async def go() -> Any:
        async with rt.chat() as chat:
            return await chat.send("try it")

    reply = run(go())
    assert reply.content == "recovered"
    assert tool_results(provider.requests[1])["call_1"] == {
        "error": "RuntimeError: boom: x",
        "error_category": "unexpected",
    }
    [event] = of_type(read_events(tmp_path), "tool_call")
    assert event["tool_call"]["error"] == "RuntimeError: boom: x"
    assert event["tool_call"]["error_category"] == "unexpected"


@pytest.mark.parametrize(
    ("arguments", "detail"),
    [
        ({}, "missing required argument(s): city"),
        ({"city": 3}, "argument 'city': must be a string"),
        ({"city": "x", "unit": "k"}, "argument 'unit': must be one of ['c', 'f']"),
        ({"city": "x", "extra": 1}, "unexpected argument(s): extra"),
        ("{bad json", "arguments are not valid JSON"),
    ],
)
def test_bad_tool_arguments_are_a_structured_result(tmp_path: Path, arguments: Any, detail: str) -> None:
    step = {"content": None, "tool_calls": [{"name": "get_weather", "arguments": arguments}]}
    rt, provider = scripted_runtime(tmp_path, [step, "ok"])

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("go")

    run(go())
    result = tool_results(provider.requests[1])["call_1"]
    assert result["error_category"] == "validation" and detail in result["error"]


def test_an_unknown_tool_gets_a_structured_result_and_an_error_event(tmp_path: Path) -> None:
    rt, provider = scripted_runtime(tmp_path, [calls(call("teleport", to="Mars")), "ok"])

    async def go() -> Any:
        async with rt.chat() as chat:
            return await chat.send("go")

    reply = run(go())
    result = tool_results(provider.requests[1])["call_1"]
    assert result["error_category"] == "unknown_tool" and "unknown tool 'teleport'" in result["error"]
    assert "get_weather" in result["error"]
    events = read_events(tmp_path)
    [error] = of_type(events, "error")
    assert error["metadata"]["error_category"] == "unknown_tool"
    assert error["metadata"]["tool_call_id"] == "call_1" and error["metadata"]["turn"] == 1
    assert not of_type(events, "tool_call")
    assert reply.tool_calls[0]["kind"] == "unknown"


def test_max_steps_per_turn_ends_the_turn_with_a_clear_traced_outcome(tmp_path: Path) -> None:
    loop = [calls(call("get_weather", city="x")) for _ in range(5)]
    rt, provider = scripted_runtime(tmp_path, [*loop, "late answer"], max_steps_per_turn=3)

    async def go() -> Any:
        async with rt.chat() as chat:
            first = await chat.send("loop")
            history_ok = chat.history[-1]["role"] == "tool"  # every tool call still has its result
            return first, history_ok

    reply, history_ok = run(go())
    assert (reply.outcome, reply.content, reply.steps) == ("max_steps", None, 3)
    assert history_ok and len(provider.requests) == 3
    turns = of_type(read_events(tmp_path), "turn")
    assert turns[-1]["stop_reason"] == "max_steps"
    assert "max_steps_per_turn (3)" in turns[-1]["stop_detail"]
    assert [t["stop_reason"] for t in turns[:-1]] == [None, None]


def test_an_empty_answer_ends_the_turn(tmp_path: Path) -> None:
    rt, _ = scripted_runtime(tmp_path, [{"content": "", "tool_calls": []}])

    async def go() -> Any:
        async with rt.chat() as chat:
            return await chat.send("hi")

    reply = run(go())
    assert (reply.outcome, reply.content) == ("empty_response", "")


def test_a_message_that_cannot_fit_even_alone_fails_before_any_provider_call(tmp_path: Path) -> None:
    rt, provider = scripted_runtime(tmp_path, ["never"], context_window=600)

    async def go() -> Any:
        async with rt.chat() as chat:
            with pytest.raises(ContextOverflowError, match="shorten the message"):
                await chat.send("word " * 2000)
            return chat

    chat = run(go())
    assert provider.requests == []
    assert chat.turn == 0 and [m["role"] for m in chat.history] == ["system"]
    assert read_events(tmp_path) == []


def test_a_provider_failure_writes_an_error_event_then_raises_the_typed_error(
    openai_server: Any, tmp_path: Path
) -> None:
    provider = OpenAICompatibleProvider("loop", base_url=openai_server.base_url, model="m", max_retries=0)
    rt = Runtime({"loop": provider}, config=RuntimeConfig(trace_dir=str(tmp_path)))
    openai_server.enqueue_error(400, message="bad request")
    openai_server.enqueue_text("fine now")

    async def go() -> Any:
        async with rt.chat() as chat:
            with pytest.raises(ProviderHTTPError):
                await chat.send("first")
            reply = await chat.send("second")
        await rt.aclose()
        return reply

    reply = run(go())
    assert (reply.turn, reply.content) == (2, "fine now")
    events = read_events(tmp_path)
    [error] = of_type(events, "error")
    assert error["metadata"]["error"] == "ProviderHTTPError"
    assert error["metadata"]["error_category"] == "provider" and error["metadata"]["status_code"] == 400
    assert error["metadata"]["turn"] == 1 and error["stop_reason"] == "error"
    decision = of_type(events, "context_decision")[0]
    assert error["parent_step_id"] == decision["parent_step_id"]


def test_a_chat_with_tools_over_the_loopback_server(openai_server: Any, tmp_path: Path) -> None:
    provider = OpenAICompatibleProvider("loop", base_url=openai_server.base_url, model="m", max_retries=0)
    rt = Runtime({"loop": provider}, config=RuntimeConfig(trace_dir=str(tmp_path)), tools=[get_weather])
    openai_server.enqueue_tool_call("get_weather", {"city": "Paris"})
    openai_server.enqueue_text("Paris is 21C.")

    async def go() -> Any:
        async with rt.chat(system="sys") as chat:
            reply = await chat.send("weather?")
        await rt.aclose()
        return reply

    reply = run(go())
    assert (reply.content, reply.steps, reply.turn) == ("Paris is 21C.", 2, 1)
    body = json.loads(openai_server.requests[1].body)
    assert body["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "Paris: 21C"}
    assert body["tools"] == [as_tool(get_weather).schema]
    assert reply.usage.total_tokens > 0


def test_send_calls_are_serialized(tmp_path: Path) -> None:
    import asyncio

    rt, _ = scripted_runtime(tmp_path, ["a", "b"])

    async def go() -> list[int]:
        async with rt.chat() as chat:
            replies = await asyncio.gather(chat.send("x"), chat.send("y"))
            return sorted(r.turn for r in replies)

    assert run(go()) == [1, 2]


# --------------------------------------------------------------------------------------------------
# Tool schemas


def test_tool_schema_from_type_hints_and_docstring() -> None:
    def search(
        query: str,
        limit: int = 10,
        score: float = 0.5,
        exact: bool = False,
        tags: list[str] | None = None,
        filters: dict[str, int] | None = None,
        mode: Literal["fast", "deep"] = "fast",
        owner: Optional[str] = None,  # noqa: UP045 - Optional is part of what is supported
    ) -> list:
        """Search the index.

        Longer description line.

        Args:
            query: What to look for.
            limit: At most this many results.
            mode: How hard to try.
        """
        return []

    t = as_tool(search)
    assert t.name == "search" and t.description == "Search the index.\n\nLonger description line."
    props = t.parameters["properties"]
    assert t.parameters["required"] == ["query"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["limit"] == {"type": "integer", "description": "At most this many results.", "default": 10}
    assert props["score"] == {"type": "number", "default": 0.5}
    assert props["exact"] == {"type": "boolean", "default": False}
    assert props["tags"] == {"type": ["array", "null"], "items": {"type": "string"}, "default": None}
    assert props["filters"] == {
        "type": ["object", "null"],
        "additionalProperties": {"type": "integer"},
        "default": None,
    }
    assert props["mode"] == {
        "enum": ["fast", "deep"],
        "type": "string",
        "description": "How hard to try.",
        "default": "fast",
    }
    assert props["owner"] == {"type": ["string", "null"], "default": None}


def test_tool_decorator_overrides_name_and_description_and_keeps_the_function_callable() -> None:
    t = as_tool(add)
    assert (t.name, t.description, t.is_async) == ("add_numbers", "Add two numbers.", True)
    assert t.parameters["required"] == ["a"]
    assert run(add(1, 2)) == {"sum": 3}


def test_sphinx_style_parameter_docs() -> None:
    def f(x: int) -> int:
        """Double it.

        :param x: the number
        """
        return 2 * x

    assert as_tool(f).parameters["properties"]["x"] == {"type": "integer", "description": "the number"}


def test_a_tool_that_cannot_be_described_is_refused() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    def star(*args: int) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match="needs a type hint"):
        as_tool(untyped)
    with pytest.raises(ToolDefinitionError, match=r"\*args"):
        as_tool(star)
    with pytest.raises(ToolDefinitionError, match="two tools"):
        Runtime(
            {"s": ScriptedProvider(["x"])},
            config=RuntimeConfig(trace_dir=None),
            tools=[get_weather, get_weather],
        )


# --------------------------------------------------------------------------------------------------
# Configuration


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context_window": 0}, "context_window must be positive"),
        ({"context_window": -5}, "context_window must be positive"),
        ({"pin_budget_fraction": 0}, r"pin_budget_fraction must be in \(0, 1\]"),
        ({"pin_budget_fraction": 1.5}, r"pin_budget_fraction must be in \(0, 1\]"),
        ({"max_steps_per_turn": 0}, "max_steps_per_turn must be 1 or more"),
        ({"context_window": 1000, "response_reserve": 1000}, "response_reserve"),
        ({"tool_result_max_chars": 0}, "tool_result_max_chars"),
    ],
)
def test_config_is_validated_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RuntimeConfig(**kwargs)


def test_config_defaults() -> None:
    c = RuntimeConfig()
    assert (c.context_window, c.response_reserve, c.trace_dir, c.trace_enabled) == (
        128_000,
        4096,
        "./arcana-traces",
        True,
    )
    assert (c.max_steps_per_turn, c.pin_budget_fraction, c.cognitive_primitives) == (10, 0.5, ())
    assert c.trace_include_prompt_snapshots is False
    assert RuntimeConfig(context_window=8000).response_reserve == 2000
    assert RuntimeConfig(trace_dir=None).trace_enabled is False
    assert RuntimeConfig(trace_dir="x", trace=False).trace_enabled is False
    assert RuntimeConfig(pin_budget_fraction=1).pin_cap_tokens == 128_000


def test_trace_false_writes_nothing(tmp_path: Path) -> None:
    rt, _ = scripted_runtime(tmp_path, ["x"], trace=False)

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("hi")

    run(go())
    assert list(tmp_path.iterdir()) == []


def test_unknown_provider_names_are_refused() -> None:
    rt = Runtime({"s": ScriptedProvider(["x"])}, config=RuntimeConfig(trace_dir=None))
    with pytest.raises(ConfigError, match="unknown provider 'nope'"):
        rt.chat(provider="nope")
    with pytest.raises(ConfigError, match="default_provider"):
        Runtime(
            {"s": ScriptedProvider(["x"])}, config=RuntimeConfig(trace_dir=None, default_provider="other")
        )


def test_long_tool_results_are_cut_with_a_visible_marker(tmp_path: Path) -> None:
    def big() -> str:
        """A big result."""
        return "x" * 500

    provider = ScriptedProvider([calls(call("big")), "ok"])
    rt = Runtime(
        {"s": provider}, config=RuntimeConfig(trace_dir=None, tool_result_max_chars=100), tools=[big]
    )

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("go")

    run(go())
    content = tool_results(provider.requests[1])["call_1"]
    assert content == "x" * 100 + "\n[truncated: 500 chars total]"


def test_an_overflow_found_by_the_builder_is_traced_and_raised(tmp_path: Path) -> None:
    # Pins may take the whole window (fraction 1.0); the next step's floor then cannot fit.
    big = " ".join(f"fact{i}" for i in range(300))
    provider = ScriptedProvider([calls(call("pin", content=big)), "never"])
    rt = Runtime(
        {"s": provider},
        config=RuntimeConfig(
            trace_dir=str(tmp_path),
            context_window=900,
            response_reserve=100,
            pin_budget_fraction=1.0,
            cognitive_primitives=["pin"],
        ),
    )

    async def go() -> None:
        async with rt.chat() as chat:
            with pytest.raises(ContextOverflowError):
                await chat.send("pin this")

    run(go())
    assert len(provider.requests) == 1
    [error] = of_type(read_events(tmp_path), "error")
    assert error["metadata"]["error_category"] == "context_overflow"
    assert (error["metadata"]["turn"], error["metadata"]["step"]) == (1, 2)


# --------------------------------------------------------------------------------------------------
# The builder's summary call


def _summarizing_chat(openai_server: Any, tmp_path: Path) -> Any:
    provider = OpenAICompatibleProvider("loop", base_url=openai_server.base_url, model="m", max_retries=0)
    strategy = ContextStrategy(force="llm_summarize", summarize_min_tokens=0, keep_recent=1)
    rt = Runtime({"loop": provider}, config=RuntimeConfig(trace_dir=str(tmp_path), context_strategy=strategy))

    async def go() -> Any:
        async with rt.chat(system="sys") as chat:
            await chat.send("The budget is 40k and the owner is Dana.")
            reply = await chat.send("Who owns it?")
        await rt.aclose()
        return reply

    return go


def test_the_summary_call_is_traced_as_an_llm_call_of_its_step(openai_server: Any, tmp_path: Path) -> None:
    openai_server.enqueue_text("Noted.")
    openai_server.enqueue_text("Budget 40k, owner Dana.")  # the summary call of turn 2
    openai_server.enqueue_text("Dana.")
    reply = run(_summarizing_chat(openai_server, tmp_path)())
    assert (reply.turn, reply.content) == (2, "Dana.")
    events = read_events(tmp_path)
    summary_call, chat_call = [e for e in of_type(events, "llm_call") if e["metadata"]["turn"] == 2]
    decision = [e for e in of_type(events, "context_decision") if e["metadata"]["console_turn"] == 2][0]
    assert summary_call["metadata"]["purpose"] == "summarize" and chat_call["metadata"]["purpose"] == "chat"
    assert summary_call["parent_step_id"] == decision["parent_step_id"] == chat_call["parent_step_id"]
    assert summary_call["metadata"]["step"] == 1 and summary_call["metadata"]["usage"]["total_tokens"] > 0
    assert decision["metadata"]["context_decision"]["strategy"] == "llm_summarize"
    totals = [e["budgets"]["iterations_used"] for e in of_type(events, "llm_call")]
    assert totals == [1, 2, 3]


def test_a_failed_summary_call_writes_an_error_event_and_the_turn_goes_on(
    openai_server: Any, tmp_path: Path
) -> None:
    openai_server.enqueue_text("Noted.")
    openai_server.enqueue_error(500, message="summarizer down")
    openai_server.enqueue_text("Dana.")
    reply = run(_summarizing_chat(openai_server, tmp_path)())
    assert (reply.turn, reply.content, reply.outcome) == (2, "Dana.", "answered")
    events = read_events(tmp_path)
    [error] = of_type(events, "error")
    decision = [e for e in of_type(events, "context_decision") if e["metadata"]["console_turn"] == 2][0]
    md = error["metadata"]
    assert (md["error"], md["error_category"], md["purpose"], md["status_code"]) == (
        "ProviderHTTPError",
        "provider",
        "summarize",
        500,
    )
    assert (md["turn"], md["step"]) == (2, 1) and error["parent_step_id"] == decision["parent_step_id"]
    assert error["stop_reason"] is None  # the builder fell back; the turn did not stop
    assert decision["metadata"]["context_decision"]["strategy"] == "tail_preserve"
    assert "the summary call failed" in decision["metadata"]["context_report"]["strategy_note"]
