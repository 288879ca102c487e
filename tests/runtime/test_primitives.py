"""Cognitive primitives (issue 4): one test per rule at least, end to end through `Runtime` with the
scripted provider, and once over the loopback OpenAI-compatible server."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from runtime import (
    ConfigError,
    ContextStrategy,
    OpenAICompatibleProvider,
    PinBlock,
    Runtime,
    RuntimeConfig,
    ScriptedProvider,
    TraceReader,
)
from runtime._tokens import default_counter
from runtime._working_set import render_pin
from tests.runtime.session_helpers import call, calls, of_type, read_events, run, tool_names, tool_results

BOTH = ["recall", "pin"]


def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city name.
    """
    return f"{city}: 21C"


def make(tmp_path: Path, steps: list[Any], **config: Any) -> tuple[Runtime, ScriptedProvider]:
    provider = ScriptedProvider(steps)
    config.setdefault("trace_dir", str(tmp_path / "traces"))
    config.setdefault("cognitive_primitives", BOTH)
    tools = config.pop("tools", [lookup])
    return Runtime({"scripted": provider}, config=RuntimeConfig(**config), tools=tools), provider


def results_of(events: list[dict[str, Any]], primitive: str | None = None) -> list[dict[str, Any]]:
    prims = of_type(events, "cognitive_primitive")
    return [
        e["metadata"]["result"] for e in prims if primitive is None or e["metadata"]["primitive"] == primitive
    ]


def fixed_ids(*ids: str) -> Any:
    it = iter(ids)
    return lambda: next(it)


# --------------------------------------------------------------------------------------------------
# Enabling


def test_it_refuses_an_unknown_primitive_name_listing_the_accepted_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        RuntimeConfig(cognitive_primitives=["recall", "remember"])
    assert "'remember'" in str(exc.value) and "'recall', 'pin'" in str(exc.value)
    with pytest.raises(ConfigError, match="enabled together with 'pin'"):
        RuntimeConfig(cognitive_primitives=["unpin"])
    with pytest.raises(ConfigError, match="list of names"):
        RuntimeConfig(cognitive_primitives="pin")  # type: ignore[arg-type]


def test_it_offers_schemas_only_for_enabled_primitives(tmp_path: Path) -> None:
    seen: dict[str, list[str]] = {}
    for label, enabled in {"none": [], "recall": ["recall"], "pin": ["pin"], "both": BOTH}.items():
        rt, provider = make(tmp_path, ["ok"], cognitive_primitives=enabled)

        async def go(rt: Runtime = rt) -> None:
            async with rt.chat() as chat:
                await chat.send("hi")

        run(go())
        seen[label] = tool_names(provider.requests[0])
    assert seen == {
        "none": ["lookup"],
        "recall": ["lookup", "recall"],
        "pin": ["lookup", "pin", "unpin"],
        "both": ["lookup", "recall", "pin", "unpin"],
    }


def test_a_primitive_called_while_not_enabled_gets_a_structured_not_enabled_result(tmp_path: Path) -> None:
    rt, provider = make(
        tmp_path,
        [calls(call("pin", content="x"), call("unpin", pin_id="p_00000000")), "ok"],
        cognitive_primitives=["recall"],
    )

    async def go() -> Any:
        async with rt.chat() as chat:
            return await chat.send("hi"), chat

    reply, chat = run(go())
    assert reply.content == "ok"
    results = tool_results(provider.requests[1])
    assert results["call_1"]["error"] == "not_enabled" and "'pin'" in results["call_1"]["detail"]
    assert results["call_2"]["error"] == "not_enabled"
    assert chat.pins == []


def test_it_refuses_a_user_tool_named_like_an_enabled_primitive(tmp_path: Path) -> None:
    def recall(turn: int) -> str:
        return "mine"

    with pytest.raises(ConfigError, match="'recall'"):
        Runtime(
            {"s": ScriptedProvider(["x"])},
            config=RuntimeConfig(cognitive_primitives=["recall"], trace_dir=None),
            tools=[recall],
        )
    rt = Runtime({"s": ScriptedProvider(["x"])}, config=RuntimeConfig(trace_dir=None), tools=[recall])
    with pytest.raises(ConfigError, match="'recall'"):
        rt.chat(cognitive_primitives=["recall"])
    pool = rt.collaborate(cognitive_primitives=["recall"])
    with pytest.raises(ConfigError, match="'recall'"):
        pool.add("a")
    pool.add("b", cognitive_primitives=["pin"])  # no clash: recall is not enabled for b


def test_a_user_tool_keeps_a_disabled_primitive_name(tmp_path: Path) -> None:
    def pin(content: str) -> str:
        return f"user tool pinned {content}"

    rt, provider = make(
        tmp_path, [calls(call("pin", content="a")), "ok"], cognitive_primitives=["recall"], tools=[pin]
    )

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("hi")

    run(go())
    assert tool_results(provider.requests[1]) == {"call_1": "user tool pinned a"}


# --------------------------------------------------------------------------------------------------
# recall


def test_the_seed_failure_table(tmp_path: Path) -> None:
    steps: list[Any] = [f"answer {i}" for i in range(1, 6)]
    steps += [calls(call("recall", turn=999)), calls(call("recall", turn=0)), "done"]
    rt, provider = make(tmp_path, steps)

    async def go() -> None:
        async with rt.chat() as chat:
            for i in range(1, 7):
                await chat.send(f"question {i}")

    run(go())
    r999, r0 = results_of(read_events(tmp_path / "traces"), "recall")
    assert r999 == {"turn": 999, "found": False, "messages": [], "note": "turn out of range: 999, max=5"}
    assert r0 == {
        "turn": 0,
        "found": False,
        "messages": [],
        "note": "turn must be 1 or greater (turns are 1-indexed). received: 0",
    }


def test_recall_says_trace_not_available_only_when_neither_history_nor_trace_holds_the_turn(
    tmp_path: Path,
) -> None:
    # No trace files at all, and the state is exported without its history.
    rt, _ = make(tmp_path, ["first answer", calls(call("recall", turn=1)), "ok"], trace_dir=None)

    async def go() -> Any:
        async with rt.chat() as chat:
            await chat.send("remember this")
            state = chat.export_state(include_history=False)
        async with rt.chat(state=state) as chat2:
            await chat2.send("what did I say?")
            return chat2

    chat2 = run(go())
    [entry] = chat2.recall_log
    assert entry["found"] is False
    tool_msg = [m for m in chat2.history if m["role"] == "tool"][0]
    result = json.loads(tool_msg["content"])
    assert result["found"] is False and result["note"].startswith("trace not available")
    assert set(result) == {"turn", "found", "messages", "note"}


def _turn_with_tool_then_recall(tmp_path: Path, include: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    rt, _ = make(
        tmp_path,
        [
            calls(call("lookup", city="Oslo"), content="checking"),
            "Oslo is 21C.",
            calls(call("recall", turn=1, include=include)),
            "ok",
        ],
    )

    async def go() -> Any:
        async with rt.chat() as chat:
            await chat.send("weather in Oslo?")
            turn1 = [m for m, t in zip(chat.history, chat._message_turns, strict=True) if t == 1]
            await chat.send("and again?")
            return turn1

    turn1 = run(go())
    [result] = results_of(read_events(tmp_path / "traces"), "recall")
    return result, turn1


def test_recall_include_all_returns_every_message_of_the_turn(tmp_path: Path) -> None:
    result, turn1 = _turn_with_tool_then_recall(tmp_path, "all")
    assert result["found"] is True and result["note"] is None
    assert result["messages"] == turn1
    assert [m["role"] for m in result["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_recall_include_assistant_only(tmp_path: Path) -> None:
    result, turn1 = _turn_with_tool_then_recall(tmp_path, "assistant_only")
    assert result["messages"] == [m for m in turn1 if m["role"] == "assistant"]
    assert [m["content"] for m in result["messages"]] == ["checking", "Oslo is 21C."]


def test_recall_include_tool_calls(tmp_path: Path) -> None:
    result, turn1 = _turn_with_tool_then_recall(tmp_path, "tool_calls")
    assert [m["role"] for m in result["messages"]] == ["assistant", "tool"]
    assert result["messages"][0]["tool_calls"][0]["function"]["name"] == "lookup"
    assert result["messages"][1] == {"role": "tool", "tool_call_id": "call_1", "content": "Oslo: 21C"}


def test_recall_with_an_unknown_include_is_a_structured_error(tmp_path: Path) -> None:
    result, _ = _turn_with_tool_then_recall(tmp_path, "everything")
    assert result["error"] == "invalid_arguments" and "include must be one of" in result["detail"]


def test_recall_reaches_turns_of_earlier_sends(tmp_path: Path) -> None:
    rt, _ = make(
        tmp_path,
        ["The plan: A then B.", "noted", calls(call("recall", turn=1, include="assistant_only")), "ok"],
    )

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("make a plan")
            await chat.send("something else")
            reply = await chat.send("what was the plan?")
            assert reply.turn == 3

    run(go())
    [result] = results_of(read_events(tmp_path / "traces"), "recall")
    assert result == {
        "turn": 1,
        "found": True,
        "messages": [{"role": "assistant", "content": "The plan: A then B."}],
        "note": None,
    }


def test_recall_of_the_current_turn_returns_what_exists_so_far_with_a_note(tmp_path: Path) -> None:
    rt, _ = make(tmp_path, ["one", calls(call("recall", turn=2)), "ok"])

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("first")
            await chat.send("second")

    run(go())
    [result] = results_of(read_events(tmp_path / "traces"), "recall")
    assert result["found"] is True
    assert "current turn" in result["note"]
    assert [m["role"] for m in result["messages"]] == ["user", "assistant"]
    assert result["messages"][0]["content"] == "second"


def test_recall_after_export_restore_reads_the_trace_when_history_was_not_exported(tmp_path: Path) -> None:
    trace_dir = tmp_path / "traces"
    steps = [calls(call("lookup", city="Rome")), "Rome is 21C.", "two", calls(call("recall", turn=1)), "ok"]
    rt, _ = make(tmp_path, steps)

    async def first() -> Any:
        async with rt.chat(system="sys") as chat:
            await chat.send("weather in Rome?")
            await chat.send("next")
            original = [m for m, t in zip(chat.history, chat._message_turns, strict=True) if t == 1]
            return chat.export_state(include_history=False), original

    state, original = run(first())
    state = json.loads(json.dumps(state))
    # A new runtime (as in another process) over the same trace directory.
    rt2 = Runtime(
        {"scripted": ScriptedProvider(steps)},
        config=RuntimeConfig(trace_dir=str(trace_dir), cognitive_primitives=BOTH),
        tools=[lookup],
    )

    async def second() -> Any:
        async with rt2.chat(state=state) as chat:
            reply = await chat.send("what happened in turn 1?")
            return reply, chat

    reply, chat = run(second())
    assert reply.turn == 3 and reply.content == "ok"
    assert [m["role"] for m in chat.history] == ["system", "user", "assistant", "tool", "assistant"]
    [entry] = chat.recall_log
    assert entry["source"] == "trace" and entry["found"] is True
    [result] = [r for r in results_of(read_events(trace_dir), "recall")]
    assert result["messages"] == original


def test_recall_after_export_restore_with_history_reads_memory(tmp_path: Path) -> None:
    steps = ["alpha", calls(call("recall", turn=1)), "ok"]
    rt, _ = make(tmp_path, steps)

    async def go() -> Any:
        async with rt.chat() as chat:
            await chat.send("first")
            state = json.loads(json.dumps(chat.export_state()))
        async with rt.chat(state=state) as chat2:
            await chat2.send("recall it")
            return chat2

    chat2 = run(go())
    [entry] = chat2.recall_log
    assert entry["source"] == "history" and entry["found"] is True and entry["message_count"] == 2


# --------------------------------------------------------------------------------------------------
# pin / unpin


def test_pin_success_shape_and_id_format(tmp_path: Path) -> None:
    rt, _ = make(tmp_path, [calls(call("pin", content="Budget is 42.", label="facts")), "ok"])

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("hi")

    run(go())
    [result] = results_of(read_events(tmp_path / "traces"), "pin")
    assert set(result) == {"pinned", "pin_id", "label", "until_turn", "already_pinned"}
    assert result["pinned"] is True and result["already_pinned"] is False
    assert result["label"] == "facts" and result["until_turn"] is None
    assert re.fullmatch(r"p_[0-9a-f]{8}", result["pin_id"])


def test_pin_is_idempotent_by_content_and_the_original_label_wins(tmp_path: Path) -> None:
    rt, _ = make(
        tmp_path,
        [
            calls(call("pin", content="Fact X", label="first")),
            calls(call("pin", content="Fact X", label="second")),
            "ok",
        ],
    )

    async def go() -> Any:
        async with rt.chat() as chat:
            await chat.send("hi")
            return chat

    chat = run(go())
    first, second = results_of(read_events(tmp_path / "traces"), "pin")
    assert second == {
        "pinned": True,
        "pin_id": first["pin_id"],
        "label": "first",
        "until_turn": None,
        "already_pinned": True,
    }
    assert len(chat.pins) == 1


def _pin_tokens(pin_id: str, label: str | None, content: str) -> int:
    return default_counter().count_message(render_pin(PinBlock(pin_id, label, content)))


def _cap_session(tmp_path: Path, window: int, steps: list[Any], ids: tuple[str, ...]) -> Any:
    rt, provider = make(tmp_path, steps, context_window=window, response_reserve=64, pin_budget_fraction=0.5)

    async def go() -> Any:
        async with rt.chat() as chat:
            chat.cognitive.id_factory = fixed_ids(*ids)
            await chat.send("pin both")
            return chat

    return run(go()), provider


A_TEXT = "Alpha fact: " + " ".join(f"a{i}" for i in range(300))
B_TEXT = "Beta fact: " + " ".join(f"b{i}" for i in range(300))


@pytest.mark.parametrize("over", [0, 1])
def test_pin_cap_boundary_equal_passes_one_token_over_fails(tmp_path: Path, over: int) -> None:
    ta = _pin_tokens("p_0000000a", "A", A_TEXT)
    tb = _pin_tokens("p_0000000b", "B", B_TEXT)
    cap = ta + tb - over
    window = 2 * cap  # fraction 0.5 → int(window * 0.5) == cap exactly
    steps = [
        calls(call("pin", content=A_TEXT, label="A")),
        calls(call("pin", content=B_TEXT, label="B")),
        "ok",
    ]
    chat, _ = _cap_session(tmp_path, window, steps, ("p_0000000a", "p_0000000b"))
    a, b = results_of(read_events(tmp_path / "traces"), "pin")
    assert a["pinned"] is True
    if over == 0:
        assert b["pinned"] is True and b["pin_id"] == "p_0000000b"
        assert sum(p["tokens"] for p in chat.pins) == cap
    else:
        assert b == {
            "pinned": False,
            "reason": "pin_budget_exceeded",
            "current_pin_tokens": ta,
            "requested_tokens": tb,
            "cap": cap,
            "suggestion": b["suggestion"],
        }
        assert f"p_0000000a label='A' {ta} tokens" in b["suggestion"]
        assert b["suggestion"].startswith("unpin older content") and b["suggestion"].endswith(
            "pin a shorter excerpt."
        )
        assert [p["pin_id"] for p in chat.pins] == ["p_0000000a"]


def _content_rendering_to(tokens: int, pin_id: str) -> str:
    """Content whose rendered pin block (no label) is exactly `tokens` tokens."""
    base = _pin_tokens(pin_id, None, "x")
    content = "x" + " a" * (tokens - base)  # " a" is one cl100k token
    assert _pin_tokens(pin_id, None, content) == tokens
    return content


def test_pin_cap_is_exact_for_fractions_binary_floats_cannot_hold(tmp_path: Path) -> None:
    # 10_000 * 0.57 == 5699.999... in floating point: the cap must still be the 5,700 tokens configured.
    assert RuntimeConfig(context_window=10_000, pin_budget_fraction=0.57).pin_cap_tokens == 5700
    content = _content_rendering_to(5700, "p_0000000a")
    rt, _ = make(
        tmp_path,
        [calls(call("pin", content=content)), "ok"],
        context_window=10_000,
        pin_budget_fraction=0.57,
    )

    async def go() -> Any:
        async with rt.chat() as chat:
            chat.cognitive.id_factory = fixed_ids("p_0000000a")
            await chat.send("pin it")
            return chat

    chat = run(go())
    [result] = results_of(read_events(tmp_path / "traces"), "pin")
    assert result["pinned"] is True, result
    assert chat.pins[0]["tokens"] == 5700 == chat.cognitive.cap


def test_pin_tokens_are_counted_exactly_as_the_builder_counts_the_rendered_block(tmp_path: Path) -> None:
    rt, _ = make(tmp_path, [calls(call("pin", content="Budget 42; deadline Friday.", label="facts")), "ok"])

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("hi")

    run(go())
    events = read_events(tmp_path / "traces")
    prim = of_type(events, "cognitive_primitive")[0]["metadata"]
    decision = of_type(events, "context_decision")[1]["metadata"]["context_decision"]
    [pinned] = [d for d in decision["decisions"] if d.get("pinned")]
    assert prim["tokens"] == pinned["token_count_after"] == pinned["token_count_before"]
    assert prim["tokens"] == _pin_tokens(prim["result"]["pin_id"], "facts", "Budget 42; deadline Friday.")


def test_expired_and_unpinned_pins_are_not_counted_and_pin_afresh(tmp_path: Path) -> None:
    ta = _pin_tokens("p_0000000a", "A", A_TEXT)
    tb = _pin_tokens("p_0000000b", "B", B_TEXT)
    cap = max(ta, tb) + 5  # room for one of them only
    steps = [
        calls(call("pin", content=A_TEXT, label="A", until_turn=1)),
        "turn one done",
        # Turn 2: A expired, so B fits; then B is unpinned and A pins afresh under a new id.
        calls(call("pin", content=B_TEXT, label="B")),
        calls(call("unpin", pin_id="p_0000000b")),
        calls(call("pin", content=A_TEXT, label="A again")),
        "ok",
    ]
    rt, _ = make(tmp_path, steps, context_window=2 * cap, response_reserve=64)

    async def go() -> Any:
        async with rt.chat() as chat:
            chat.cognitive.id_factory = fixed_ids("p_0000000a", "p_0000000b", "p_0000000c")
            await chat.send("one")
            await chat.send("two")
            return chat

    chat = run(go())
    a1, b, a2 = results_of(read_events(tmp_path / "traces"), "pin")
    assert a1["pinned"] and b["pinned"] and b["pin_id"] == "p_0000000b"
    assert a2 == {
        "pinned": True,
        "pin_id": "p_0000000c",
        "label": "A again",
        "until_turn": None,
        "already_pinned": False,
    }
    by_id = {p["pin_id"]: p for p in chat.pins}
    assert by_id["p_0000000b"]["unpinned_turn"] == 2
    assert [p["pin_id"] for p in chat.pins] == ["p_0000000a", "p_0000000b", "p_0000000c"]  # history kept


def test_until_turn_renders_through_that_turn_and_not_after(tmp_path: Path) -> None:
    steps = [calls(call("pin", content="Keep me", label="k", until_turn=2)), "t1", "t2", "t3"]
    rt, provider = make(tmp_path, steps)

    async def go() -> None:
        async with rt.chat() as chat:
            for text in ("one", "two", "three"):
                await chat.send(text)

    run(go())

    def has_pin(request: dict[str, Any]) -> bool:
        return any(
            m["role"] == "system" and "Keep me" in (m["content"] or "") and "[pinned" in m["content"]
            for m in request["messages"]
        )

    # Requests: turn 1 step 1 (before pin), turn 1 step 2, turn 2, turn 3.
    assert [has_pin(r) for r in provider.requests] == [False, True, True, False]
    decisions = of_type(read_events(tmp_path / "traces"), "context_decision")
    pinned_turns = [
        d["metadata"]["turn"]
        for d in decisions
        if any(x.get("pinned") for x in d["metadata"]["context_decision"]["decisions"])
    ]
    assert pinned_turns == [1, 2]


def test_until_turn_in_the_past_is_invalid(tmp_path: Path) -> None:
    rt, _ = make(tmp_path, ["t1", calls(call("pin", content="x", until_turn=1)), "ok"])

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("one")
            await chat.send("two")

    run(go())
    [result] = results_of(read_events(tmp_path / "traces"), "pin")
    assert result["error"] == "invalid_arguments" and "until_turn" in result["detail"]


def test_pin_refuses_empty_content(tmp_path: Path) -> None:
    rt, _ = make(tmp_path, [calls(call("pin", content="   ")), "ok"])

    async def go() -> Any:
        async with rt.chat() as chat:
            await chat.send("hi")
            return chat

    chat = run(go())
    [result] = results_of(read_events(tmp_path / "traces"), "pin")
    assert result == {
        "pinned": False,
        "reason": "empty_content",
        "suggestion": "pass non-empty content to pin.",
    }
    assert chat.pins == []


def test_unpin_results(tmp_path: Path) -> None:
    steps = [
        calls(call("pin", content="x", label="l")),
        calls(call("unpin", pin_id="p_0000000a")),
        calls(call("unpin", pin_id="p_0000000a")),
        calls(call("unpin", pin_id="p_ffffffff")),
        "ok",
    ]
    rt, provider = make(tmp_path, steps)

    async def go() -> None:
        async with rt.chat() as chat:
            chat.cognitive.id_factory = fixed_ids("p_0000000a")
            await chat.send("hi")

    run(go())
    ok, again, unknown = results_of(read_events(tmp_path / "traces"), "unpin")
    assert ok == {"unpinned": True, "pin_id": "p_0000000a"}
    assert (
        set(again) == {"unpinned", "pin_id", "note"}
        and again["unpinned"] is False
        and "already unpinned" in again["note"]
    )
    assert unknown == {
        "unpinned": False,
        "pin_id": "p_ffffffff",
        "note": "unknown pin_id (already removed or never existed)",
    }
    # After the unpin the block is gone from the working set.
    assert not any("[pinned" in (m["content"] or "") for m in provider.requests[-1]["messages"])


@pytest.mark.parametrize(
    ("name", "raw", "detail"),
    [
        ("recall", {}, "missing required argument 'turn'"),
        ("recall", {"turn": "3"}, "'turn' must be an integer"),
        ("recall", {"turn": True}, "'turn' must be an integer"),
        ("pin", {"content": 5}, "'content' must be a string"),
        ("pin", {"label": "x"}, "missing required argument 'content'"),
        ("unpin", {}, "missing required argument 'pin_id'"),
        ("recall", "{not json", "not valid JSON"),
        ("pin", "[1, 2]", "must be a JSON object"),
    ],
)
def test_invalid_arguments_get_a_structured_error(tmp_path: Path, name: str, raw: Any, detail: str) -> None:
    rt, _ = make(tmp_path, [{"content": None, "tool_calls": [{"name": name, "arguments": raw}]}, "ok"])

    async def go() -> None:
        async with rt.chat() as chat:
            reply = await chat.send("hi")
            assert reply.content == "ok"

    run(go())
    [result] = results_of(read_events(tmp_path / "traces"))
    assert set(result) == {"error", "detail"} and result["error"] == "invalid_arguments"
    assert detail in result["detail"]


def test_no_message_is_injected_after_a_failed_primitive(tmp_path: Path) -> None:
    steps = [
        calls(
            call("recall", turn=999),
            call("pin", content=""),
            call("unpin", pin_id="p_12345678"),
            call("recall", turn="x"),
        ),
        "ok",
    ]
    rt, provider = make(tmp_path, steps)

    async def go() -> Any:
        async with rt.chat(system="sys") as chat:
            await chat.send("hi")
            return chat

    chat = run(go())
    first, second = provider.requests
    # The second request is the first plus the assistant tool-call message and four tool results.
    assert second["messages"][: len(first["messages"])] == first["messages"]
    added = second["messages"][len(first["messages"]) :]
    assert [m["role"] for m in added] == ["assistant", "tool", "tool", "tool", "tool"]
    assert [m["role"] for m in chat.history] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "tool",
        "assistant",
    ]
    assert [m["content"] for m in chat.history if m["role"] == "user"] == ["hi"]


def test_pins_stay_l0_under_aggressive_compression(tmp_path: Path) -> None:
    pin_text = "LOAD-BEARING: " + " ".join(f"fact{i}" for i in range(60))
    long = " ".join(f"w{i}" for i in range(400))
    steps = [calls(call("pin", content=pin_text, label="facts")), long, long, long, long]
    rt, provider = make(
        tmp_path,
        steps,
        context_window=2400,
        response_reserve=200,
        context_strategy=ContextStrategy(force="aggressive_truncate", aggressive_keep_turns=1),
    )

    async def go() -> None:
        async with rt.chat() as chat:
            for text in ("please pin", "more", "more", "more"):
                await chat.send(text)

    run(go())
    decisions = [
        e["metadata"]["context_decision"]
        for e in of_type(read_events(tmp_path / "traces"), "context_decision")
    ]
    last = decisions[-1]
    assert any(d["outcome"] == "dropped" for d in last["decisions"])  # the history really was cut
    [pinned] = [d for d in last["decisions"] if d.get("pinned")]
    assert (pinned["outcome"], pinned["fidelity"], pinned["reason"]) == ("kept", "L0", "pinned")
    sent = provider.requests[-1]["messages"]
    assert sent[pinned["index"]]["content"].endswith(pin_text)


def test_primitive_events_carry_turn_step_and_their_steps_turn_event(tmp_path: Path) -> None:
    rt, _ = make(tmp_path, ["one", calls(call("lookup", city="x")), calls(call("pin", content="c")), "ok"])

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("first")
            await chat.send("second")

    run(go())
    events = read_events(tmp_path / "traces")
    [prim] = of_type(events, "cognitive_primitive")
    md = prim["metadata"]
    assert (md["turn"], md["step"], md["producer"]) == (2, 2, "arcana-console")
    assert md["tool_call_id"] == "call_2" and md["args"] == {"content": "c"}
    turn_events = {e["step_id"]: e for e in of_type(events, "turn")}
    parent = turn_events[prim["parent_step_id"]]
    assert (parent["metadata"]["turn"], parent["metadata"]["step"]) == (2, 2)


def test_pin_state_at_any_turn_is_reconstructible_from_the_trace(tmp_path: Path) -> None:
    steps = [
        calls(call("pin", content="P1", label="one"), call("pin", content="P2", label="two", until_turn=2)),
        "t1",
        calls(call("unpin", pin_id="p_0000000a")),
        "t2",
        "t3",
    ]
    rt, _ = make(tmp_path, steps)

    async def go() -> Any:
        async with rt.chat() as chat:
            chat.cognitive.id_factory = fixed_ids("p_0000000a", "p_0000000b")
            for text in ("one", "two", "three"):
                await chat.send(text)
            return chat

    chat = run(go())
    reader = TraceReader(tmp_path / "traces")
    active = {t: sorted(p.pin_id for p in reader.active_pins_at(chat.run_id, t)) for t in (1, 2, 3)}
    assert active == {1: ["p_0000000a", "p_0000000b"], 2: ["p_0000000a", "p_0000000b"], 3: []}


# --------------------------------------------------------------------------------------------------
# Opt-in default: byte-identical requests and identical traces


def _loopback_conversation(
    base_url: str, trace_dir: Path, *, config_primitives: list[str], chat_primitives: Any
) -> None:
    provider = OpenAICompatibleProvider("loop", base_url=base_url, model="m", max_retries=0)
    rt = Runtime(
        {"loop": provider},
        config=RuntimeConfig(trace_dir=str(trace_dir), cognitive_primitives=config_primitives),
        tools=[lookup],
    )

    async def go() -> None:
        async with rt.chat(system="sys", cognitive_primitives=chat_primitives) as chat:
            await chat.send("weather in Oslo?")
            await chat.send("thanks")
        await rt.aclose()

    run(go())


def _script(server: Any) -> None:
    server.enqueue_tool_call("lookup", {"city": "Oslo"})
    server.enqueue_text("Oslo is 21C.")
    server.enqueue_text("You are welcome.")


def test_default_is_byte_identical_to_no_primitives_at_all(tmp_path: Path) -> None:
    from tests.runtime.openai_server import OpenAIServer
    from tests.runtime.session_helpers import strip_volatile

    bodies: dict[str, list[bytes]] = {}
    traces: dict[str, list[dict[str, Any]]] = {}
    variants = {
        "default": ([], None),  # RuntimeConfig() default: cognitive_primitives=[]
        "opted_out": (BOTH, []),  # the feature configured, this session opted out
    }
    for name, (config_primitives, chat_primitives) in variants.items():
        with OpenAIServer() as server:
            _script(server)
            _loopback_conversation(
                server.base_url,
                tmp_path / name,
                config_primitives=config_primitives,
                chat_primitives=chat_primitives,
            )
            bodies[name] = [r.body for r in server.requests]
        traces[name] = strip_volatile(read_events(tmp_path / name))
    assert len(bodies["default"]) == 3
    assert bodies["default"] == bodies["opted_out"]
    for body in bodies["default"]:
        request = json.loads(body)
        assert [t["function"]["name"] for t in request["tools"]] == ["lookup"]
        assert not any("[pinned" in (m.get("content") or "") for m in request["messages"])
    assert traces["default"] == traces["opted_out"]
    assert not of_type(traces["default"], "cognitive_primitive")


def test_default_config_has_no_primitives() -> None:
    assert RuntimeConfig().cognitive_primitives == ()


# --------------------------------------------------------------------------------------------------
# Pools


def test_pool_inherit_override_opt_out(tmp_path: Path) -> None:
    providers = {n: ScriptedProvider(["ok"], name=n) for n in ("pa", "pb", "pc")}
    rt = Runtime(providers, config=RuntimeConfig(trace_dir=str(tmp_path)), tools=[lookup])

    async def go() -> Any:
        async with rt.collaborate(cognitive_primitives=["pin"]) as pool:
            a = pool.add("a", provider="pa")
            b = pool.add("b", provider="pb", cognitive_primitives=["recall"])
            c = pool.add("c", provider="pc", cognitive_primitives=[])
            for agent in (a, b, c):
                await agent.send("hi")
            return a, b, c

    a, b, c = run(go())
    assert (a.cognitive_primitives, b.cognitive_primitives, c.cognitive_primitives) == (
        ("pin",),
        ("recall",),
        (),
    )
    assert tool_names(providers["pa"].requests[0]) == ["lookup", "pin", "unpin"]
    assert tool_names(providers["pb"].requests[0]) == ["lookup", "recall"]
    assert tool_names(providers["pc"].requests[0]) == ["lookup"]


def test_pool_default_falls_back_to_the_config(tmp_path: Path) -> None:
    rt = Runtime(
        {"s": ScriptedProvider(["ok"])}, config=RuntimeConfig(trace_dir=None, cognitive_primitives=["recall"])
    )
    pool = rt.collaborate()
    assert pool.add("a").cognitive_primitives == ("recall",)


def test_pool_agents_pins_and_recall_logs_are_isolated(tmp_path: Path) -> None:
    pa = ScriptedProvider(
        [calls(call("pin", content="SECRET-OF-A", label="a-only")), calls(call("recall", turn=1)), "a done"]
    )
    pb = ScriptedProvider(
        [calls(call("unpin", pin_id="p_0000000a"), call("recall", turn=1)), "b done", "b again"]
    )
    rt = Runtime(
        {"pa": pa, "pb": pb}, config=RuntimeConfig(trace_dir=str(tmp_path), cognitive_primitives=BOTH)
    )

    async def go() -> Any:
        async with rt.collaborate() as pool:
            a = pool.add("a", provider="pa")
            b = pool.add("b", provider="pb")
            a.cognitive.id_factory = fixed_ids("p_0000000a")
            await a.send("A's first message")
            await b.send("B's first message")
            await b.send("B's second message")
            return a, b

    a, b = run(go())
    assert [p["pin_id"] for p in a.pins] == ["p_0000000a"] and a.pins[0]["unpinned_turn"] is None
    assert b.pins == []
    for request in pb.requests:
        assert "SECRET-OF-A" not in json.dumps(request)
    events = read_events(tmp_path)
    unpin = [e for e in of_type(events, "cognitive_primitive") if e["metadata"]["primitive"] == "unpin"][0]
    assert unpin["metadata"]["source_agent"] == "b"
    assert unpin["metadata"]["result"]["unpinned"] is False  # B cannot see A's pin
    b_recall = [
        e
        for e in of_type(events, "cognitive_primitive")
        if e["metadata"]["primitive"] == "recall" and e["metadata"]["source_agent"] == "b"
    ][0]
    assert [m["content"] for m in b_recall["metadata"]["result"]["messages"] if m["role"] == "user"] == [
        "B's first message"
    ]
    assert len(a.recall_log) == 1 and len(b.recall_log) == 1
    assert a.recall_log[0]["turn"] == 1 and b.recall_log[0]["turn"] == 1


# --------------------------------------------------------------------------------------------------
# Once over the loopback OpenAI-compatible server


def test_pin_and_recall_over_the_loopback_server(openai_server: Any, tmp_path: Path) -> None:
    # Streaming (SSE) requests: the server answers every one as a stream.
    provider = OpenAICompatibleProvider(
        "loop", base_url=openai_server.base_url, model="m", max_retries=0, stream=True
    )
    rt = Runtime({"loop": provider}, config=RuntimeConfig(trace_dir=str(tmp_path), cognitive_primitives=BOTH))
    openai_server.enqueue_tool_call("pin", {"content": "Owner is Dana.", "label": "owner"})
    openai_server.enqueue_text("Pinned.")
    openai_server.enqueue_tool_call("recall", {"turn": 1, "include": "assistant_only"})
    openai_server.enqueue_text("You told me the owner is Dana.")

    async def go() -> Any:
        async with rt.chat(system="sys") as chat:
            r1 = await chat.send("The owner is Dana. Pin it.")
            r2 = await chat.send("Who is the owner?")
        await rt.aclose()
        return r1, r2, chat

    r1, r2, chat = run(go())
    assert (r1.turn, r2.turn, r2.content) == (1, 2, "You told me the owner is Dana.")
    bodies = [json.loads(r.body) for r in openai_server.requests]
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["recall", "pin", "unpin"]
    pin_id = chat.pins[0]["pin_id"]
    # Every request after the pin carries the block, with its id and label, right after the system prompt.
    for body in bodies[1:]:
        assert body["messages"][1] == {
            "role": "system",
            "content": f"[pinned {pin_id} · owner]\nOwner is Dana.",
        }
    recall_result = json.loads(bodies[3]["messages"][-1]["content"])
    assert recall_result["found"] is True
    assert [m["role"] for m in recall_result["messages"]] == ["assistant", "assistant"]
    assert recall_result["messages"][0]["tool_calls"][0]["function"]["name"] == "pin"
    assert recall_result["messages"][1]["content"] == "Pinned."
    events = read_events(tmp_path)
    assert [e["metadata"]["primitive"] for e in of_type(events, "cognitive_primitive")] == ["pin", "recall"]


def test_pin_ids_are_unique_within_a_session(tmp_path: Path) -> None:
    rt, _ = make(tmp_path, [calls(*[call("pin", content=f"c{i}") for i in range(20)]), "ok"])

    async def go() -> Any:
        async with rt.chat() as chat:
            chat.cognitive.id_factory = itertools.cycle(
                ["p_0000000a", "p_0000000b", "p_0000000a"] + [f"p_{i:08x}" for i in range(100)]
            ).__next__
            await chat.send("hi")
            return chat

    chat = run(go())
    ids = [p["pin_id"] for p in chat.pins]
    assert len(ids) == 20 and len(set(ids)) == 20
