"""Agent pools (issue 3 item 4): one run, per-agent history/turns/state, `source_agent` on every event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtime import ConfigError, Runtime, RuntimeConfig, ScriptedProvider, TraceReader
from tests.runtime.session_helpers import call, calls, of_type, read_events, run


def price(item: str) -> float:
    """Price of an item."""
    return {"apple": 1.5}.get(item, 0.0)


def make_pool_runtime(tmp_path: Path) -> tuple[Runtime, dict[str, ScriptedProvider]]:
    providers = {
        "planner": ScriptedProvider(["Plan: buy apples.", "Plan v2."], name="planner"),
        "executor": ScriptedProvider(
            [calls(call("price", item="apple")), "Apples cost 1.5."], name="executor"
        ),
    }
    rt = Runtime(providers, config=RuntimeConfig(trace_dir=str(tmp_path), cognitive_primitives=["pin"]))
    return rt, providers


def test_a_pool_is_one_run_and_every_event_names_its_agent(tmp_path: Path) -> None:
    rt, _ = make_pool_runtime(tmp_path)

    async def go() -> Any:
        async with rt.collaborate() as pool:
            planner = pool.add("planner", system="You plan.", provider="planner")
            executor = pool.add("executor", system="You execute.", provider="executor", tools=[price])
            r1 = await planner.send("plan the shopping")
            r2 = await executor.send("price the apples")
            r3 = await planner.send("revise")
            return pool, (r1, r2, r3)

    pool, (r1, r2, r3) = run(go())
    assert r1.run_id == r2.run_id == r3.run_id == pool.run_id
    assert (r1.turn, r2.turn, r3.turn) == (1, 1, 2)  # turns count per agent
    assert (r1.agent, r2.agent) == ("planner", "executor")
    assert [p.name for p in tmp_path.iterdir()] == [f"{pool.run_id}.jsonl"]
    events = read_events(tmp_path)
    assert all(e["metadata"].get("source_agent") in {"planner", "executor"} for e in events)
    [tool_event] = of_type(events, "tool_call")
    assert tool_event["metadata"]["source_agent"] == "executor"  # tool calls included (reference §7.19)
    reader = TraceReader(tmp_path)
    assert reader.agents(pool.run_id) == ["executor", "planner"]


def test_agents_have_their_own_history_and_tools(tmp_path: Path) -> None:
    rt, providers = make_pool_runtime(tmp_path)

    async def go() -> Any:
        async with rt.collaborate() as pool:
            planner = pool.add("planner", system="You plan.", provider="planner")
            executor = pool.add("executor", system="You execute.", provider="executor", tools=[price])
            await planner.send("plan the shopping")
            await executor.send("price the apples")
            return planner, executor

    planner, executor = run(go())
    assert [m["content"] for m in planner.history if m["role"] == "user"] == ["plan the shopping"]
    assert [m["content"] for m in executor.history if m["role"] == "user"] == ["price the apples"]
    assert "plan the shopping" not in json.dumps(providers["executor"].requests)
    assert [t["function"]["name"] for t in providers["executor"].requests[0]["tools"]] == [
        "price",
        "pin",
        "unpin",
    ]
    assert [t["function"]["name"] for t in providers["planner"].requests[0]["tools"]] == ["pin", "unpin"]


def test_history_of_each_agent_is_rebuildable_from_the_pool_trace(tmp_path: Path) -> None:
    rt, _ = make_pool_runtime(tmp_path)

    async def go() -> Any:
        async with rt.collaborate() as pool:
            planner = pool.add("planner", provider="planner")
            executor = pool.add("executor", provider="executor", tools=[price])
            await planner.send("plan")
            await executor.send("price")
            return pool, planner, executor

    pool, planner, executor = run(go())
    reader = TraceReader(tmp_path)
    for agent in (planner, executor):
        assert reader.messages_for_turn(pool.run_id, 1, agent=agent.agent) == agent.history[1:]


def test_duplicate_and_empty_names_are_refused(tmp_path: Path) -> None:
    rt, _ = make_pool_runtime(tmp_path)
    pool = rt.collaborate()
    pool.add("a", provider="planner")
    with pytest.raises(ConfigError, match="already has an agent named 'a'"):
        pool.add("a", provider="planner")
    with pytest.raises(ConfigError, match="non-empty"):
        pool.add("  ")
    with pytest.raises(ConfigError, match="unknown cognitive primitive"):
        pool.add("b", cognitive_primitives=["memo"])


class ClosingSink:
    """Records the runs closed on it."""

    def __init__(self) -> None:
        self.closed: list[str] = []

    def write(self, event: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def close_run(self, run_id: str) -> None:
        self.closed.append(run_id)


def test_an_agent_does_not_hold_its_pool_and_leaves_closing_the_run_to_it() -> None:
    """An agent gets what it uses (its writer, its name, that the pool closes the run), not the pool."""
    sink = ClosingSink()
    rt = Runtime({"planner": ScriptedProvider(["Plan."], name="planner")}, trace_sinks=[sink])

    async def go() -> Any:
        async with rt.collaborate() as pool:
            agent = pool.add("planner", provider="planner")
            await agent.send("plan")
            await agent.aclose()
            assert sink.closed == []  # an agent's close leaves the pool's run open
            return pool, agent

    pool, agent = run(go())
    assert sink.closed == [pool.run_id]
    assert all(value is not pool for value in vars(agent).values())
    assert (agent.writer.run_id, agent.agent) == (pool.run_id, "planner")

    async def chat() -> str:
        async with rt.chat() as session:
            return session.run_id

    chat_run = run(chat())
    assert sink.closed == [pool.run_id, chat_run]  # a plain chat closes its own run


def test_pool_state_round_trip(tmp_path: Path) -> None:
    rt, providers = make_pool_runtime(tmp_path)

    async def first() -> Any:
        async with rt.collaborate() as pool:
            pool.add("planner", provider="planner")
            await pool["planner"].send("plan")
            return json.loads(json.dumps(pool.export_state()))

    state = run(first())
    rt2 = Runtime(
        {"planner": ScriptedProvider(["Plan: buy apples.", "Plan v2."], name="planner")},
        config=RuntimeConfig(trace_dir=str(tmp_path), cognitive_primitives=["pin"]),
    )

    async def second() -> Any:
        async with rt2.collaborate(state=state) as pool:
            planner = pool.add("planner", provider="planner")
            reply = await planner.send("revise")
            return pool, reply

    pool, reply = run(second())
    assert pool.run_id == state["run_id"] and reply.run_id == state["run_id"]
    assert (reply.turn, reply.content) == (2, "Plan v2.")
    events = read_events(tmp_path)
    assert {e["run_id"] for e in events} == {state["run_id"]}
    llm_calls = of_type(events, "llm_call")
    assert [e["budgets"]["iterations_used"] for e in llm_calls] == [1, 2]  # totals continue


def test_a_restored_pool_keeps_each_agents_primitives_and_the_pool_default(tmp_path: Path) -> None:
    def steps() -> list[Any]:
        return [calls(call("pin", content="Budget is 40k.", label="budget")), "Pinned.", "Still pinned."]

    rt = Runtime({"s": ScriptedProvider(steps())}, config=RuntimeConfig(trace_dir=str(tmp_path)))

    async def first() -> Any:
        async with rt.collaborate(cognitive_primitives=["pin"]) as pool:
            await pool.add("a").send("remember the budget")
            pool.add("b", cognitive_primitives=["recall"])
            return json.loads(json.dumps(pool.export_state()))

    state = run(first())
    # Another process: a runtime whose config enables no primitive at all.
    provider = ScriptedProvider(steps())
    rt2 = Runtime({"s": provider}, config=RuntimeConfig(trace_dir=str(tmp_path)))

    async def second() -> Any:
        async with rt2.collaborate(state=state) as pool:
            a, b, c = pool.add("a"), pool.add("b"), pool.add("c")
            await a.send("go on")
            return a, b, c

    a, b, c = run(second())
    # Each resumed agent keeps what it had; a new agent inherits the pool default it was created with.
    assert (a.cognitive_primitives, b.cognitive_primitives, c.cognitive_primitives) == (
        ("pin",),
        ("recall",),
        ("pin",),
    )
    # The resumed agent's pin is still rendered, and it can still unpin it.
    request = provider.requests[-1]
    assert [t["function"]["name"] for t in request["tools"]] == ["pin", "unpin"]
    assert request["messages"][1]["content"].startswith(f"[pinned {a.pins[0]['pin_id']} · budget]")
