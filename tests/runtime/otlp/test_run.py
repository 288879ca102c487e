"""`runtime.otlp.group_runs` / `assemble_run`: turns, steps by end time, tool calls, agents and
hand-offs from spans in any order; the same answer whatever the order they arrived in."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.otlp import NormalizedSpan, assemble_run, group_runs, normalize_span

T = "0af7651916cd43dd8448eb211c80319c"
T2 = "1af7651916cd43dd8448eb211c80319c"


def span(
    sid: int,
    name: str,
    start: int,
    end: int,
    attrs: dict[str, Any],
    *,
    parent: int | None = None,
    trace: str = T,
    status: str = "unset",
) -> NormalizedSpan:
    return normalize_span(
        {
            "trace_id": trace,
            "span_id": f"{sid:016x}",
            "parent_span_id": f"{parent:016x}" if parent else None,
            "name": name,
            "kind": "internal",
            "start_time": start,
            "end_time": end,
            "status": {"code": status, "message": "failed" if status == "error" else ""},  # type: ignore[typeddict-item]
            "attributes": attrs,
            "events": [],
            "links": [],
            "resource": {},
            "scope": {"name": "", "version": ""},
        }
    )


def msgs(*items: tuple[str, Any]) -> str:
    out = []
    for role, part in items:
        out.append(
            {"role": role, "parts": [{"type": "text", "content": part} if isinstance(part, str) else part]}
        )
    return json.dumps(out)


def chat(
    sid: int, start: int, end: int, inputs: str, outputs: str, *, parent: int | None = None, **kw: Any
) -> NormalizedSpan:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": inputs,
        "gen_ai.output.messages": outputs,
    }
    attrs |= {"gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 2}
    return span(sid, "chat m", start, end, attrs | kw.pop("attrs", {}), parent=parent, **kw)


CALL = {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": '{"q": 1}'}
RESULT = {"type": "tool_call_response", "id": "c1", "result": "found"}


def pydantic_like() -> list[NormalizedSpan]:
    """Two agent runs of one conversation: a tool call, then a sub-agent called from a tool."""
    conv = {"gen_ai.conversation.id": "conv"}
    return [
        span(
            1,
            "invoke_agent main",
            100,
            900,
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "main"} | conv,
        ),
        chat(2, 110, 200, msgs(("user", "Find it")), msgs(("assistant", CALL)), parent=1, attrs=conv),
        span(
            3,
            "execute_tool lookup",
            210,
            260,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": "c1",
                "gen_ai.tool.call.result": "found",
            }
            | conv,
            parent=1,
        ),
        chat(
            4,
            270,
            400,
            msgs(("user", "Find it"), ("assistant", CALL), ("user", RESULT)),
            msgs(("assistant", "Done")),
            parent=1,
            attrs=conv,
        ),
        span(
            5,
            "invoke_agent main",
            1000,
            1900,
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "main"} | conv,
            trace=T2,
        ),
        chat(
            6,
            1010,
            1100,
            msgs(("user", "Ask the helper")),
            msgs(("assistant", {**CALL, "id": "c2", "name": "helper"})),
            parent=5,
            trace=T2,
            attrs=conv,
        ),
        span(
            7,
            "execute_tool helper",
            1110,
            1500,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "helper",
                "gen_ai.tool.call.id": "c2",
            }
            | conv,
            parent=5,
            trace=T2,
        ),
        span(
            8,
            "invoke_agent sub",
            1120,
            1490,
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "sub"} | conv,
            parent=7,
            trace=T2,
        ),
        chat(
            9,
            1130,
            1480,
            msgs(("user", "Sub question")),
            msgs(("assistant", "Sub answer")),
            parent=8,
            trace=T2,
            attrs=conv,
        ),
        chat(
            10,
            1510,
            1600,
            msgs(("user", "Ask the helper"), ("user", {**RESULT, "id": "c2", "result": "Sub answer"})),
            msgs(("assistant", "The sub says so")),
            parent=5,
            trace=T2,
            attrs=conv,
        ),
    ]


def test_it_assembles_turns_steps_tools_and_subagents() -> None:
    run = assemble_run(pydantic_like())
    assert run["run_key"] == "conv" and run["trace_ids"] == [T, T2] and run["span_count"] == 10
    assert [(t["agent"], t["steps"], t["span_id"]) for t in run["turns"]] == [
        ("main", [0, 1], f"{1:016x}"),
        ("main", [2, 3, 4], f"{5:016x}"),
    ]
    assert [(s["span_id"][-1], s["agent"], s["turn"]) for s in run["steps"]] == [
        ("2", "main", 0),
        ("4", "main", 0),
        ("6", "main", 1),
        ("9", "sub", 1),
        ("a", "main", 1),
    ]
    assert run["turns"][1]["user_message"] == {
        "role": "user",
        "parts": [{"type": "text", "content": "Ask the helper"}],
    }
    [call] = run["steps"][0]["tool_calls"]
    assert call == {
        "call_id": "c1",
        "name": "lookup",
        "arguments": '{"q": 1}',
        "result": "found",
        "span_id": f"{3:016x}",
        "error": None,
        "start_time": 210,
        "end_time": 260,
        "arcana": None,  # no `arcana.*` attribute: not exported by our runtime
    }
    [helper] = run["steps"][2]["tool_calls"]
    assert (helper["span_id"], helper["result"]) == (f"{7:016x}", "Sub answer")  # result from the next input
    assert run["agents"] == [
        {"name": "main", "span_ids": [f"{1:016x}", f"{5:016x}"], "parent": None, "via": "root"},
        {"name": "sub", "span_ids": [f"{8:016x}"], "parent": "main", "via": "subagent"},
    ]
    assert run["usage"]["input_tokens"] == 50 and run["usage"]["output_tokens"] == 10
    assert run["missing_parents"] == [] and run["errors"] == [] and run["unattached_tool_calls"] == []


def test_openai_agents_handoffs_continue_the_turn() -> None:
    oi = {"session.id": "s1"}
    spans = [
        span(1, "Agent workflow", 0, 1000, {"openinference.span.kind": "CHAIN"} | oi),
        span(
            2,
            "Triage",
            10,
            300,
            {"openinference.span.kind": "AGENT", "graph.node.id": "Triage"} | oi,
            parent=1,
        ),
        chat(
            3,
            20,
            100,
            msgs(("user", "Hola")),
            msgs(("assistant", "…")),
            parent=2,
            attrs={"openinference.span.kind": "LLM"},
        ),
        span(
            4,
            "handoff to Spanish",
            110,
            120,
            {"openinference.span.kind": "TOOL", "graph.node.parent_id": "Triage"} | oi,
            parent=2,
        ),
        span(
            5,
            "Spanish",
            310,
            900,
            {"openinference.span.kind": "AGENT", "graph.node.id": "Spanish", "graph.node.parent_id": "Triage"}
            | oi,
            parent=1,
        ),
        chat(6, 320, 800, msgs(("user", "Hola")), msgs(("assistant", "¡Hola!")), parent=5),
    ]
    run = assemble_run(spans)
    assert [t["agent"] for t in run["turns"]] == ["Triage"]
    assert run["turns"][0]["steps"] == [0, 1]
    assert [s["agent"] for s in run["steps"]] == ["Triage", "Spanish"]
    assert run["handoffs"] == [{"source": "Triage", "target": "Spanish", "span_id": f"{4:016x}", "time": 110}]
    assert {a["name"]: (a["via"], a["parent"]) for a in run["agents"]} == {
        "Triage": ("root", None),
        "Spanish": ("handoff", "Triage"),
    }


def test_model_calls_under_no_agent_make_a_turn_per_new_user_message() -> None:
    run = assemble_run(
        [
            chat(1, 0, 10, msgs(("user", "Q1")), msgs(("assistant", CALL)), trace="a" * 32),
            chat(
                2,
                20,
                30,
                msgs(("user", "Q1"), ("assistant", CALL), ("tool", RESULT)),
                msgs(("assistant", "A1")),
                trace="b" * 32,
            ),
            chat(
                3,
                40,
                50,
                msgs(("user", "Q1"), ("assistant", "A1"), ("user", "Q2")),
                msgs(("assistant", "A2")),
                trace="c" * 32,
            ),
        ]
    )
    assert [t["steps"] for t in run["turns"]] == [[0, 1], [2]]
    assert run["steps"][0]["tool_calls"][0]["result"] == "found"
    assert run["run_key_source"] == "trace_id"


def test_an_incomplete_run_is_assembled_with_its_missing_parents_listed() -> None:
    spans = pydantic_like()
    partial = [s for s in spans if s["span_id"] not in (f"{5:016x}", f"{1:016x}")]
    run = assemble_run(partial)
    assert run["missing_parents"] == [f"{1:016x}", f"{5:016x}"]
    assert len(run["steps"]) == 5
    assert [a["name"] for a in run["agents"]] == ["sub"]
    with pytest.raises(ValueError):
        assemble_run([])


def test_a_tool_span_without_a_call_id_attaches_to_the_step_before_it() -> None:
    run = assemble_run(
        [
            chat(1, 0, 10, msgs(("user", "Q")), msgs(("assistant", "thinking"))),
            span(
                2,
                "my_tool",
                15,
                20,
                {
                    "openinference.span.kind": "TOOL",
                    "tool.name": "my_tool",
                    "input.value": "{}",
                    "output.value": "ok",
                },
            ),
            span(3, "orphan", 1, 2, {"openinference.span.kind": "TOOL", "tool.name": "early"}),
        ]
    )
    assert [(c["name"], c["result"]) for c in run["steps"][0]["tool_calls"]] == [("my_tool", "ok")]
    assert [c["name"] for c in run["unattached_tool_calls"]] == ["early"]


def test_group_runs_keeps_a_trace_with_its_conversation() -> None:
    app_root = span(1, "request", 0, 100, {})  # no conversation id: the application's own span
    inner = span(
        2,
        "invoke_agent a",
        1,
        99,
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "c"},
        parent=1,
    )
    other = span(3, "chat m", 0, 5, {"gen_ai.operation.name": "chat"}, trace=T2)
    runs = group_runs([other, inner, app_root])
    assert {k: [s["span_id"][-1] for s in v] for k, v in runs.items()} == {"c": ["1", "2"], T2: ["3"]}


def test_a_span_seen_twice_counts_once() -> None:
    spans = pydantic_like()
    again = assemble_run(spans + [spans[1], spans[3]])
    assert again == assemble_run(spans)


@settings(max_examples=60, deadline=None)
@given(st.permutations(pydantic_like()), st.lists(st.integers(min_value=0, max_value=9), max_size=3))
def test_the_result_does_not_depend_on_the_order_spans_arrived_in(
    spans: list[NormalizedSpan], dupes: list[int]
) -> None:
    expected = assemble_run(pydantic_like())
    assert assemble_run(spans + [spans[i] for i in dupes]) == expected
    assert group_runs(spans) == group_runs(pydantic_like())
