from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runtime._tokens import TokenCounter, default_counter
from runtime._working_set import (
    REASONS,
    Budget,
    ContextStrategy,
    Fidelity,
    PinBlock,
    WorkingSet,
    WorkingSetBuilder,
    render_pin,
)
from runtime.errors import ConfigError, ContextOverflowError

WORDS = [
    "launch",
    "plan",
    "budget",
    "error",
    "customer",
    "deploy",
    "report",
    "alpha",
    "beta",
    "gamma",
    "delta",
]

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the docs.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": "Query."}}},
    },
}


def words(n: int, seed: int = 0) -> str:
    return " ".join(WORDS[(seed + i * 7) % len(WORDS)] for i in range(n))


def conversation(
    turns: int, *, size: int = 60, tool_rounds: int = 1, system: str = "You are terse."
) -> list[dict]:
    """A realistic chat: per turn a user message, `tool_rounds` tool calls with results, an answer."""
    history: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for t in range(1, turns + 1):
        history.append({"role": "user", "content": f"turn {t}: " + words(size, t)})
        for r in range(tool_rounds):
            cid = f"call_{t}_{r}"
            history.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": "search", "arguments": json.dumps({"q": words(size, r)})},
                        }
                    ],
                }
            )
            history.append({"role": "tool", "tool_call_id": cid, "content": words(size * 2, t + r)})
        history.append({"role": "assistant", "content": words(size, t * 3)})
    return history


def build(builder: WorkingSetBuilder, history: list[dict], **kwargs: Any) -> WorkingSet:
    kwargs.setdefault("turn", 1)
    kwargs.setdefault("step", 1)
    return asyncio.run(builder.build(history, **kwargs))


def assert_contract(messages: Sequence[Mapping[str, Any]]) -> None:
    """OpenAI's rule: every tool call is answered by tool messages right after it, and every tool
    message answers a call of the assistant message before it."""
    pending: set[str] = set()
    for m in messages:
        assert m["role"] in ("system", "user", "assistant", "tool")
        if m["role"] == "tool":
            assert m.get("tool_call_id") in pending, m
            pending.discard(m["tool_call_id"])
            continue
        assert not pending, f"tool calls {pending} not answered before {m}"
        if m["role"] == "assistant" and m.get("tool_calls"):
            pending = {tc["id"] for tc in m["tool_calls"]}
    assert not pending


def assert_invariants(
    ws: WorkingSet,
    history: list[dict],
    *,
    pins: Sequence[PinBlock] = (),
    tools: list[dict] | None = None,
    counter: TokenCounter | None = None,
) -> None:
    counter = counter or default_counter()
    d = ws.decision
    # exact accounting, and it fits
    assert counter.count_messages(ws.messages) == d.budget_used
    assert ws.prompt_tokens == d.budget_used + counter.count_tools(tools)
    assert d.budget_used <= d.budget_total
    assert d.budget_total == d.report.window_size - d.budget_reserve - d.budget_tools
    assert d.report.total_tokens == ws.prompt_tokens
    assert d.report.utilization == round(ws.prompt_tokens / d.report.window_size, 6)
    assert sum(d.report.tokens_by_layer.values()) == d.report.total_tokens
    # one decision per input message, in order, then one per pin
    assert len(d.decisions) == len(history) + len(pins)
    assert [x.index for x in d.decisions[: len(history)]] == list(range(len(history)))
    assert d.messages_in == len(history)
    assert d.messages_out == len(ws.messages)
    for x in d.decisions:
        assert x.reason in REASONS
        assert (x.outcome in ("kept", "compressed")) == (x.fidelity is not None)
        assert (x.outcome == "kept") == (x.fidelity == "L0")
        if x.outcome in ("dropped", "summarized"):
            assert x.token_count_after == 0
    # identity first and untouched, then pins at L0 at the index their decision says
    k = 0
    while k < len(history) and history[k]["role"] == "system":
        assert ws.messages[k] == history[k]
        assert d.decisions[k].outcome == "kept" and d.decisions[k].reason == "identity"
        k += 1
    for j, pin in enumerate(pins):
        pd = d.decisions[len(history) + j]
        assert pd.pinned and pd.pin_id == pin.pin_id
        assert (pd.outcome, pd.fidelity, pd.reason) == ("kept", "L0", "pinned")
        assert ws.messages[pd.index] == render_pin(pin)
        assert pd.index == k + j
    # the latest user message is sent as it is
    users = [i for i, m in enumerate(history) if m["role"] == "user"]
    if users:
        assert d.decisions[users[-1]].outcome == "kept"
        assert history[users[-1]] in ws.messages
    # tool pairs kept or dropped together, ids and roles kept at every fidelity
    assert_contract(ws.messages)
    sent = [x for x in d.decisions[: len(history)] if x.outcome in ("kept", "compressed")]
    non_pin = [m for i, m in enumerate(ws.messages) if not (k <= i < k + len(pins))]
    non_pin = [m for m in non_pin if not str(m.get("content") or "").startswith("[Earlier conversation")]
    assert len(non_pin) == len(sent)
    for x, m in zip(sent, non_pin, strict=True):
        original = history[x.index]
        assert m["role"] == original["role"]
        assert m.get("tool_call_id") == original.get("tool_call_id")
        assert [tc["id"] for tc in m.get("tool_calls") or []] == [
            tc["id"] for tc in original.get("tool_calls") or []
        ]
        assert counter.count_message(m) == x.token_count_after


# -- configuration ------------------------------------------------------------------------------
def test_it_selects_strategies_at_the_thresholds() -> None:
    s = ContextStrategy()
    assert s.select(0.0) == "passthrough"
    assert s.select(0.4999) == "passthrough"
    assert s.select(0.5) == "tail_preserve"
    assert s.select(0.75) == "llm_summarize"
    assert s.select(0.9) == "aggressive_truncate"
    assert ContextStrategy(passthrough_below=0.2, tail_preserve_below=0.3, llm_summarize_below=0.4).select(
        0.35
    ) == ("llm_summarize")


def test_it_rejects_bad_configuration() -> None:
    with pytest.raises(ConfigError):
        ContextStrategy(passthrough_below=0.8)
    with pytest.raises(ConfigError):
        ContextStrategy(force="shred")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        ContextStrategy(aggressive_keep_turns=0)
    with pytest.raises(ConfigError):
        Budget(0)
    with pytest.raises(ConfigError):
        Budget(1000, response_reserve=1000)
    with pytest.raises(ConfigError):
        Fidelity(l0_min_score=0.1)


def test_it_defaults_the_reserve_to_a_quarter_of_small_windows() -> None:
    assert Budget(128_000).reserve == 4096
    assert Budget(8000).reserve == 2000
    assert Budget(8000, response_reserve=0).reserve == 0


def test_it_selects_by_demand_at_the_exact_boundary() -> None:
    history = conversation(3)
    counter = default_counter()
    demand = counter.count_messages(history)
    at = build(WorkingSetBuilder(context_window=2 * demand), history)
    below = build(WorkingSetBuilder(context_window=2 * demand + 1), history)
    assert at.decision.report.demand_ratio == 0.5
    assert at.decision.report.strategy_requested == "tail_preserve"
    assert below.decision.strategy == "passthrough"


# -- passthrough --------------------------------------------------------------------------------
def test_it_passes_a_small_history_through_unchanged() -> None:
    history = conversation(2)
    ws = build(WorkingSetBuilder(context_window=128_000), history, tools=[SEARCH_TOOL])
    assert ws.messages == history
    assert ws.decision.strategy == "passthrough"
    assert ws.decision.compressed_count == 0
    assert not ws.decision.history_compressed
    assert {x.outcome for x in ws.decision.decisions} == {"kept"}
    assert ws.decision.decisions[0].reason == "identity"
    last_user = max(i for i, m in enumerate(history) if m["role"] == "user")
    assert ws.decision.decisions[last_user].reason == "task"
    assert ws.decision.explanation.startswith("Under budget, all 9 messages kept")
    assert_invariants(ws, history, tools=[SEARCH_TOOL])


def test_it_escalates_passthrough_that_would_not_fit() -> None:
    history = conversation(12)
    builder = WorkingSetBuilder(context_window=3000, strategy=ContextStrategy(force="passthrough"))
    ws = build(builder, history)
    assert ws.decision.strategy == "tail_preserve"
    assert ws.decision.report.strategy_requested == "passthrough"
    assert "does not fit at L0" in ws.decision.explanation
    assert_invariants(ws, history)


def test_it_does_not_modify_the_history() -> None:
    history = conversation(10)
    before = copy.deepcopy(history)
    build(WorkingSetBuilder(context_window=2500), history, pins=[PinBlock("p_00000001", "x", "y")])
    assert history == before


# -- tail_preserve ------------------------------------------------------------------------------
def test_it_keeps_the_tail_and_grades_the_middle() -> None:
    history = conversation(10)
    history[-4]["content"] = "What next?"  # a task sharing no keyword with the middle
    demand = default_counter().count_messages(history)
    builder = WorkingSetBuilder(context_window=int(demand / 0.6))
    ws = build(builder, history)
    d = ws.decision
    assert d.strategy == "tail_preserve"
    tail = d.decisions[-6:]
    assert all(x.outcome == "kept" for x in tail)
    assert {x.reason for x in tail} <= {"tail_preserve_tail", "task"}
    # the tail starts inside a tool pair (6 back is a tool result), so it widens to its call
    assert d.decisions[-7].reason == "tail_preserve_tail"
    middle = d.decisions[1:-7]
    assert all(x.relevance_score is not None and 0 <= x.relevance_score <= 1 for x in middle)
    assert {x.reason for x in middle} <= {"tail_preserve_middle_kept", "tail_preserve_middle_compressed"}
    assert any(x.outcome == "compressed" for x in middle)
    assert d.report.fidelity_distribution["L0"] + d.report.fidelity_distribution["L1"] > 0
    assert "fidelity-compressed" in d.explanation
    assert_invariants(ws, history)


def test_it_widens_the_tail_to_whole_tool_pairs() -> None:
    history = conversation(6, tool_rounds=2)
    demand = default_counter().count_messages(history)
    builder = WorkingSetBuilder(context_window=int(demand / 0.6), strategy=ContextStrategy(keep_recent=2))
    ws = build(builder, history)
    # the last two messages are a tool result and the answer... the tool result's call comes along
    decisions = ws.decision.decisions
    n = len(history)
    assert history[n - 3]["role"] == "assistant" and history[n - 3]["tool_calls"]
    assert decisions[n - 3].reason == "tail_preserve_tail"
    assert_invariants(ws, history)


def test_it_prefers_messages_relevant_to_the_task() -> None:
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "We talked about the weather in Lisbon and the sea today. " * 10},
        {"role": "assistant", "content": "Zebra kumquat noodle banjo. " * 20},
        {"role": "assistant", "content": "The kubernetes deployment manifest failed on the ingress. " * 8},
        {"role": "user", "content": "Fix the kubernetes deployment ingress manifest please"},
    ]
    builder = WorkingSetBuilder(
        context_window=2000, strategy=ContextStrategy(force="tail_preserve", keep_recent=0)
    )
    ws = build(builder, history)
    scores = {x.index: x.relevance_score for x in ws.decision.decisions}
    assert scores[3] > scores[2]
    assert_invariants(ws, history)


def test_it_demotes_to_a_stub_that_keeps_role_and_ids() -> None:
    history = conversation(8, size=80)
    builder = WorkingSetBuilder(context_window=2000, strategy=ContextStrategy(force="tail_preserve"))
    ws = build(builder, history)
    stubs = [m for m in ws.messages if " · turn " in str(m.get("content"))]
    assert {m["role"] for m in stubs} == {"user", "assistant"}, ws.decision.explanation
    for m in stubs:
        assert m["content"].startswith(f"[{m['role']} · turn ")
        assert "(earlier message, " in m["content"] and m["content"].endswith(" tokens)")
    call_stub = next(m for m in stubs if m.get("tool_calls"))
    assert call_stub["tool_calls"][0]["id"].startswith("call_")
    compressed_tool = next(m for m in ws.messages if m["role"] == "tool" and "[compressed]" in m["content"])
    assert compressed_tool["tool_call_id"].startswith("call_")
    assert_invariants(ws, history)


def test_it_renders_each_fidelity_level() -> None:
    f = Fidelity()
    long_text = "x" * 400
    msg = {
        "role": "assistant",
        "content": long_text,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "f", "arguments": json.dumps({"a": long_text})},
            }
        ],
    }
    assert f.render(msg, "L0", turn=3, tokens=10) == msg
    l1 = f.render(msg, "L1", turn=3, tokens=10)
    assert l1["content"] == "x" * 300 + "..."
    assert json.loads(l1["tool_calls"][0]["function"]["arguments"])["_compressed"].endswith("...")
    l2 = f.render(msg, "L2", turn=3, tokens=10)
    assert l2["content"] == "[compressed] " + "x" * 80 + "..."
    l3 = f.render(msg, "L3", turn=3, tokens=1204)
    assert l3["content"] == "[assistant · turn 3] (earlier message, 1,204 tokens)"
    assert l3["tool_calls"][0]["id"] == "call_1"
    assert l3["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
    tool = f.render({"role": "tool", "tool_call_id": "call_1", "content": "r"}, "L3", turn=2, tokens=5)
    assert tool == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "[tool · turn 2] (earlier tool result, 5 tokens)",
    }


def test_it_uses_the_turns_it_is_given_in_stubs() -> None:
    history = conversation(6, size=80)
    turns = [40 + i for i in range(len(history))]
    builder = WorkingSetBuilder(context_window=1200, strategy=ContextStrategy(force="tail_preserve"))
    ws = build(builder, history, message_turns=turns)
    stub = next(m for m in ws.messages if " · turn " in str(m.get("content")))
    assert int(stub["content"].split(" · turn ")[1].split("]")[0]) >= 40


def test_it_makes_head_and_tail_fit_by_degrading_the_tail() -> None:
    # The reference sent head + tail over budget (3113/1903); here the tail degrades instead.
    history = [{"role": "system", "content": "sys"}]
    for t in range(3):
        history += [
            {"role": "user", "content": words(300, t)},
            {"role": "assistant", "content": words(400, t + 1)},
        ]
    history.append({"role": "user", "content": "and now?"})
    builder = WorkingSetBuilder(context_window=800, response_reserve=100)
    ws = build(builder, history)
    assert ws.decision.budget_used <= ws.decision.budget_total
    assert {"demoted_to_fit", "dropped_to_fit"} & {x.reason for x in ws.decision.decisions}
    assert_invariants(ws, history)


# -- aggressive_truncate --------------------------------------------------------------------------
def test_it_truncates_aggressively_to_the_last_turns() -> None:
    history = conversation(8)
    builder = WorkingSetBuilder(context_window=100_000, strategy=ContextStrategy(force="aggressive_truncate"))
    ws = build(builder, history)
    users = [i for i, m in enumerate(history) if m["role"] == "user"]
    cut = users[-2]
    for x in ws.decision.decisions[1:]:
        if x.index < cut:
            assert (x.outcome, x.reason) == ("dropped", "aggressive_truncate_drop")
        else:
            assert x.outcome == "kept"
    assert ws.messages == [history[0], *history[cut:]]
    assert_invariants(ws, history)


# -- llm_summarize ------------------------------------------------------------------------------
class Summarizer:
    def __init__(self, reply: str | Exception) -> None:
        self.reply = reply
        self.calls: list[list[dict]] = []

    async def __call__(self, request: list[dict]) -> str:
        self.calls.append(request)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def summarize_builder(history: list[dict], **strategy: Any) -> WorkingSetBuilder:
    demand = default_counter().count_messages(history)
    return WorkingSetBuilder(
        context_window=int(demand / 0.8), strategy=ContextStrategy(summarize_min_tokens=500, **strategy)
    )


def test_it_summarizes_the_middle_with_one_call() -> None:
    history = conversation(12)
    summarizer = Summarizer("The user asked about launch plans; search found budgets.")
    ws = build(
        summarize_builder(history), history, summarize=summarizer, pins=[PinBlock("p_0000abcd", None, "k")]
    )
    d = ws.decision
    assert len(summarizer.calls) == 1 and ws.summary_call_made
    assert summarizer.calls[0][0]["role"] == "system"
    assert "turn 1:" in summarizer.calls[0][1]["content"]
    assert d.strategy == "llm_summarize"
    summary = ws.messages[2]
    assert summary["role"] == "system"
    assert summary["content"].startswith("[Earlier conversation — summary of ")
    assert summary["content"].endswith("search found budgets.")
    summarized = [x for x in d.decisions if x.outcome == "summarized"]
    assert summarized and all(x.reason == "llm_summarized_into_single" for x in summarized)
    assert d.report.summary_tokens == default_counter().count_message(summary)
    assert_invariants(ws, history, pins=[PinBlock("p_0000abcd", None, "k")])


def test_it_trims_an_overlong_summary_to_the_room_it_has() -> None:
    history = conversation(12)
    summarizer = Summarizer(words(5000))
    builder = summarize_builder(history)
    ws = build(builder, history, summarize=summarizer)
    assert ws.decision.strategy == "llm_summarize"
    assert ws.decision.budget_used <= ws.decision.budget_total
    assert_invariants(ws, history)


def test_it_falls_back_truthfully_when_the_summary_call_fails() -> None:
    history = conversation(12)
    summarizer = Summarizer(RuntimeError("provider down"))
    ws = build(summarize_builder(history), history, summarize=summarizer)
    d = ws.decision
    assert len(summarizer.calls) == 1
    assert ws.summary_call_made and ws.summary_error == "RuntimeError: provider down"
    assert d.strategy == "tail_preserve"
    assert d.report.strategy_used == "tail_preserve"
    assert d.report.strategy_requested == "llm_summarize"
    assert "summary call failed (RuntimeError: provider down)" in d.explanation
    assert not any(x.outcome == "summarized" for x in d.decisions)
    assert_invariants(ws, history)


def test_it_does_not_call_the_summarizer_for_a_small_middle() -> None:
    history = conversation(12)
    summarizer = Summarizer("s")
    demand = default_counter().count_messages(history)
    builder = WorkingSetBuilder(
        context_window=int(demand / 0.8), strategy=ContextStrategy(summarize_min_tokens=10**6)
    )
    ws = build(builder, history, summarize=summarizer)
    assert summarizer.calls == [] and not ws.summary_call_made
    assert ws.decision.strategy == "tail_preserve"
    assert "summarize_min_tokens" in ws.decision.explanation


def test_it_treats_an_empty_summary_as_a_failure() -> None:
    history = conversation(12)
    ws = build(summarize_builder(history), history, summarize=Summarizer("   "))
    assert ws.decision.strategy == "tail_preserve" and ws.summary_error == "empty summary"


# -- pins ---------------------------------------------------------------------------------------
def test_it_renders_pins_with_id_and_label() -> None:
    assert render_pin(PinBlock("p_a1b2c3d4", "key facts", "A\nB")) == {
        "role": "system",
        "content": "[pinned p_a1b2c3d4 · key facts]\nA\nB",
    }


def test_it_places_pins_after_identity_and_reports_them_kept_at_l0() -> None:
    history = conversation(3, system="Identity one.")
    history.insert(1, {"role": "system", "content": "Identity two."})
    pins = [PinBlock("p_00000001", "facts", "alpha"), PinBlock("p_00000002", None, "beta")]
    ws = build(WorkingSetBuilder(context_window=50_000), history, pins=pins)
    assert ws.messages[2] == render_pin(pins[0]) and ws.messages[3] == render_pin(pins[1])
    pin_decisions = ws.decision.decisions[len(history) :]
    assert [(x.index, x.pin_id) for x in pin_decisions] == [(2, "p_00000001"), (3, "p_00000002")]
    assert pin_decisions[0].to_dict() == {
        "index": 2,
        "role": "system",
        "outcome": "kept",
        "fidelity": "L0",
        "relevance_score": None,
        "token_count_before": default_counter().count_message(render_pin(pins[0])),
        "token_count_after": default_counter().count_message(render_pin(pins[0])),
        "reason": "pinned",
        "pinned": True,
        "pin_id": "p_00000001",
    }
    assert "pinned" not in ws.decision.decisions[0].to_dict()
    assert ws.decision.report.pin_tokens == sum(x.token_count_after for x in pin_decisions)
    assert_invariants(ws, history, pins=pins)


def test_it_keeps_pins_at_l0_under_aggressive_compression() -> None:
    history = conversation(10, size=100)
    pin = PinBlock("p_deadbeef", "plan", words(200))
    builder = WorkingSetBuilder(context_window=1400, strategy=ContextStrategy(force="aggressive_truncate"))
    ws = build(builder, history, pins=[pin])
    assert render_pin(pin) in ws.messages
    assert ws.decision.decisions[-1].fidelity == "L0"
    assert_invariants(ws, history, pins=[pin])


# -- overflow -----------------------------------------------------------------------------------
def test_it_refuses_a_user_message_that_cannot_fit_even_alone() -> None:
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": words(3000)}]
    with pytest.raises(ContextOverflowError, match="latest user message") as info:
        build(WorkingSetBuilder(context_window=2000), history)
    assert "context window of 2000 tokens" in str(info.value)


def test_it_refuses_pins_and_tools_that_leave_no_room() -> None:
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    pin = PinBlock("p_00000001", None, words(900))
    with pytest.raises(ContextOverflowError, match="pins"):
        build(WorkingSetBuilder(context_window=1000), history, pins=[pin], tools=[SEARCH_TOOL])


# -- trace shape --------------------------------------------------------------------------------
def test_it_writes_the_trace_format_shape() -> None:
    history = conversation(10)
    ws = build(WorkingSetBuilder(context_window=4000), history, turn=4, step=2, tools=[SEARCH_TOOL])
    d = ws.decision.to_dict()
    assert set(d) >= {
        "turn",
        "step",
        "strategy",
        "budget_total",
        "budget_used",
        "budget_tools",
        "budget_reserve",
        "messages_in",
        "messages_out",
        "compressed_count",
        "memory_injected",
        "history_compressed",
        "decisions",
        "compressed_messages",
        "explanation",
    }
    assert (d["turn"], d["step"]) == (4, 2)
    assert d["compressed_messages"] == [] and d["memory_injected"] is False
    assert set(d["decisions"][1]) == {
        "index",
        "role",
        "outcome",
        "fidelity",
        "relevance_score",
        "token_count_before",
        "token_count_after",
        "reason",
    }
    meta = ws.decision.to_metadata()
    assert meta["explanation"] == d["explanation"] and meta["messages_in"] == len(history)
    report = meta["context_report"]
    assert report["encoding"] == "cl100k_base"
    assert report["utilization"] == round(ws.prompt_tokens / 4000, 6)
    assert set(report["fidelity_distribution"]) == {"L0", "L1", "L2", "L3"}
    assert set(report["tokens_by_layer"]) == {"identity", "task", "working", "external"}
    assert report["tokens_by_layer"]["external"] == default_counter().count_tools([SEARCH_TOOL])
    json.dumps(meta)  # JSON-safe


# -- properties ---------------------------------------------------------------------------------
@st.composite
def histories(draw: st.DrawFn) -> list[dict]:
    history: list[dict[str, Any]] = []
    for s in range(draw(st.integers(0, 2))):
        history.append({"role": "system", "content": words(draw(st.integers(1, 40)), s)})
    n_turns = draw(st.integers(0, 7))
    cid = 0
    for t in range(n_turns):
        history.append({"role": "user", "content": words(draw(st.integers(1, 150)), t)})
        for _ in range(draw(st.integers(0, 2))):
            n_calls = draw(st.integers(1, 3))
            calls = []
            for _ in range(n_calls):
                cid += 1
                calls.append(
                    {
                        "id": f"call_{cid}",
                        "type": "function",
                        "function": {
                            "name": "search",
                            "arguments": json.dumps({"q": words(draw(st.integers(0, 120)))}),
                        },
                    }
                )
            content = draw(st.one_of(st.none(), st.integers(1, 60).map(words)))
            history.append({"role": "assistant", "content": content, "tool_calls": calls})
            for c in calls:
                history.append(
                    {"role": "tool", "tool_call_id": c["id"], "content": words(draw(st.integers(0, 300)), t)}
                )
        if t < n_turns - 1 or draw(st.booleans()):
            history.append({"role": "assistant", "content": words(draw(st.integers(1, 200)), t + 1)})
    return history


pins_st = st.lists(
    st.builds(
        PinBlock,
        pin_id=st.integers(0, 2**32 - 1).map(lambda i: f"p_{i:08x}"),
        label=st.one_of(st.none(), st.sampled_from(["facts", "plan"])),
        content=st.integers(1, 80).map(words),
    ),
    max_size=3,
    unique_by=lambda p: p.pin_id,
)


_PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
_STRATEGY_NAMES = ["passthrough", "tail_preserve", "llm_summarize", "aggressive_truncate"]


@_PROPERTY_SETTINGS
@given(
    history=histories(),
    pins=pins_st,
    factor=st.floats(0.2, 3.0),
    force=st.one_of(st.none(), st.sampled_from(_STRATEGY_NAMES)),
    keep_recent=st.integers(0, 8),
    with_tools=st.booleans(),
    summary=st.one_of(st.none(), st.just("boom"), st.integers(1, 800).map(words)),
)
def test_it_always_fits_and_keeps_the_contract(
    history: list[dict],
    pins: list[PinBlock],
    factor: float,
    force: Any,
    keep_recent: int,
    with_tools: bool,
    summary: str | None,
) -> None:
    check_build(history, pins, factor, force, keep_recent, with_tools, summary)


@_PROPERTY_SETTINGS
@given(
    history=histories(),
    pins=pins_st,
    factor=st.floats(0.9, 1.6),
    keep_recent=st.integers(0, 4),
    with_tools=st.booleans(),
    summary=st.one_of(st.just("boom"), st.integers(1, 800).map(words)),
)
def test_it_always_fits_and_keeps_the_contract_when_summarizing(
    history: list[dict],
    pins: list[PinBlock],
    factor: float,
    keep_recent: int,
    with_tools: bool,
    summary: str,
) -> None:
    check_build(history, pins, factor, "llm_summarize", keep_recent, with_tools, summary)


def check_build(
    history: list[dict],
    pins: list[PinBlock],
    factor: float,
    force: Any,
    keep_recent: int,
    with_tools: bool,
    summary: str | None,
) -> None:
    tools = [SEARCH_TOOL] if with_tools else None
    counter = default_counter()
    # A window around the demand, so that every strategy and every degradation step gets exercised.
    pin_tokens = sum(counter.count_message(render_pin(p)) for p in pins)
    demand = counter.count_messages(history) + counter.count_tools(tools) + pin_tokens
    window = max(64, int(demand * factor))
    strategy = ContextStrategy(force=force, keep_recent=keep_recent, summarize_min_tokens=100)
    builder = WorkingSetBuilder(context_window=window, strategy=strategy)
    summarizer = (
        None if summary is None else Summarizer(RuntimeError("boom") if summary == "boom" else summary)
    )
    try:
        ws = build(builder, history, pins=pins, tools=tools, summarize=summarizer)
    except ContextOverflowError:
        # Only when identity + latest user message + pins + tools + reserve truly exceed the window.
        k = 0
        while k < len(history) and history[k]["role"] == "system":
            k += 1
        users = [m for m in history if m["role"] == "user"]
        floor = counter.count_messages(history[:k] + users[-1:] + [render_pin(p) for p in pins])
        assert floor + counter.count_tools(tools) + builder.budget.reserve > window
        event("overflow")
        return
    event(f"strategy={ws.decision.strategy}")
    event(f"outcomes={sorted({x.outcome for x in ws.decision.decisions})}")
    assert_invariants(ws, history, pins=pins, tools=tools)
    if summarizer is not None:
        assert len(summarizer.calls) <= 1
        assert ws.summary_call_made == (len(summarizer.calls) == 1)
        if ws.decision.strategy == "llm_summarize":
            assert ws.summary_error is None
