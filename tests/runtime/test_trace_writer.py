"""Trace writing (issue 3 item 5, docs/trace-format.md): sinks, the envelope, our metadata additions,
and that a conversation can be rebuilt from its trace alone."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from runtime import (
    CallableSink,
    JsonlFileSink,
    MultiSink,
    Runtime,
    RuntimeConfig,
    ScriptedProvider,
    TraceEvent,
    TraceReader,
)
from runtime._trace import ENVELOPE_KEYS, PRODUCER
from runtime._trace_writer import TraceWriter
from tests.runtime.session_helpers import call, calls, of_type, read_events, run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "arcana-1.2"

# arcana-agent 1.2's enums and models (reference §1.2/§1.3): what its pydantic reader validates.
AGENT_ROLES = {"system", "planner", "executor", "critic"}
STOP_REASONS = {
    "goal_reached",
    "max_steps",
    "max_time",
    "max_cost",
    "max_tokens",
    "no_progress",
    "error",
    "user_cancelled",
    "tool_blocked",
}
EVENT_TYPES = {
    "llm_call",
    "tool_call",
    "state_change",
    "error",
    "checkpoint",
    "plan",
    "verify",
    "memory_write",
    "context_decision",
    "prompt_snapshot",
    "cognitive_primitive",
    "capability_admission",
    "protocol_discovery",
    "guardrail_decision",
    "history_seeded",
    "task_submit",
    "task_start",
    "task_complete",
    "task_fail",
    "turn",
    "agent_turn",
    "graph_node_start",
    "graph_node_complete",
    "graph_transition",
    "graph_interrupt",
}
TOOL_CALL_RECORD = {
    "name": str,
    "args_digest": str,
    "idempotency_key": (str, type(None)),
    "result_digest": (str, type(None)),
    "error": (str, type(None)),
    "error_category": (str, type(None)),
    "duration_ms": (int, type(None)),
    "side_effect": (str, type(None)),
}
TOOL_ERROR_CATEGORIES = {
    "transport",
    "timeout",
    "rate_limit",
    "validation",
    "permission",
    "logic",
    "confirmation_required",
    "unexpected",
}
BUDGET_SNAPSHOT = {
    "max_tokens": (int, type(None)),
    "max_cost_usd": (float, int, type(None)),
    "max_time_ms": (int, type(None)),
    "max_iterations": (int, type(None)),
    "tokens_used": int,
    "cost_usd": (float, int),
    "time_ms": int,
    "iterations_used": int,
}
ARCANA_MESSAGE_KEYS = {"role", "content", "name", "tool_call_id", "tool_calls", "cache_control"}


def assert_arcana_valid(e: dict[str, Any]) -> None:
    """What arcana-agent 1.2's `TraceEvent` model would check, field by field."""
    assert list(e) == list(ENVELOPE_KEYS)
    assert isinstance(e["run_id"], str) and isinstance(e["step_id"], str)
    assert e["task_id"] is None or isinstance(e["task_id"], str)
    assert e["parent_step_id"] is None or isinstance(e["parent_step_id"], str)
    assert datetime.fromisoformat(e["timestamp"]).utcoffset() is not None
    assert e["role"] in AGENT_ROLES and e["event_type"] in EVENT_TYPES
    for key in (
        "state_before_hash",
        "state_after_hash",
        "llm_request_digest",
        "llm_response_digest",
        "model",
        "stop_detail",
    ):
        assert e[key] is None or isinstance(e[key], str), key
    assert e["llm_latency_ms"] is None or type(e["llm_latency_ms"]) is int
    assert e["stop_reason"] is None or e["stop_reason"] in STOP_REASONS
    if e["tool_call"] is not None:
        assert set(e["tool_call"]) == set(TOOL_CALL_RECORD)
        for key, types in TOOL_CALL_RECORD.items():
            assert isinstance(e["tool_call"][key], types), key
        assert e["tool_call"]["error_category"] in TOOL_ERROR_CATEGORIES | {None}
        assert e["tool_call"]["side_effect"] in {"read", "write", "none", None}
    if e["budgets"] is not None:
        assert set(e["budgets"]) == set(BUDGET_SNAPSHOT)
        for key, types in BUDGET_SNAPSHOT.items():
            assert isinstance(e["budgets"][key], types) and not isinstance(e["budgets"][key], bool), key
    assert isinstance(e["metadata"], dict)
    for digest_key in ("llm_request_digest", "llm_response_digest"):
        if e[digest_key] is not None:
            assert len(e[digest_key]) == 16 and int(e[digest_key], 16) >= 0


def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: 21C"


def boom() -> str:
    """Fails."""
    raise ValueError("nope")


SCRIPT = [
    calls(
        call("lookup", city="Oslo"), call("pin", content="Oslo matters", label="city"), content="Checking."
    ),
    "Oslo is 21C.",
    calls(call("recall", turn=1, include="assistant_only"), call("teleport"), call("boom")),
    "Done.",
]


def conversation(trace_dir: Path, *, snapshots: bool = False, sinks: Any = None) -> Any:
    provider = ScriptedProvider(SCRIPT)
    rt = Runtime(
        {"scripted": provider},
        config=RuntimeConfig(
            trace_dir=str(trace_dir),
            cognitive_primitives=["recall", "pin"],
            trace_include_prompt_snapshots=snapshots,
        ),
        tools=[lookup, boom],
        trace_sinks=sinks,
    )

    async def go() -> Any:
        async with rt.chat(system="sys") as chat:
            await chat.send("weather in Oslo?")
            await chat.send("what did you say?")
            return chat

    return run(go())


def test_every_event_is_a_valid_envelope_with_producer_turn_and_step(tmp_path: Path) -> None:
    conversation(tmp_path, snapshots=True)
    events = read_events(tmp_path)
    assert {e["event_type"] for e in events} == {
        "context_decision",
        "prompt_snapshot",
        "turn",
        "llm_call",
        "cognitive_primitive",
        "tool_call",
        "error",
    }
    for e in events:
        TraceEvent.from_dict(e)
        assert_arcana_valid(e)
        md = e["metadata"]
        assert md["producer"] == PRODUCER
        assert isinstance(md["console_turn"], int) and md["console_turn"] >= 1
        assert isinstance(md["console_step"], int) and md["console_step"] >= 1
        # Where arcana-agent 1.2.0's CLI reads its own numbers: the run-wide 0-based LLM iteration.
        arcana_key = {"context_decision": "turn", "prompt_snapshot": "turn", "turn": "step"}.get(
            e["event_type"]
        )
        for key in ("turn", "step"):
            assert isinstance(md[key], int) and md[key] >= (0 if key == arcana_key else 1)
        assert "source_agent" not in md  # a plain chat has one unnamed agent


def test_our_file_has_the_same_envelope_as_arcana_samples(tmp_path: Path) -> None:
    conversation(tmp_path)
    sample = json.loads(
        (FIXTURES / "basic_chat" / "08b465c7-83c0-44d1-bad3-727f773cb988.jsonl").read_text().splitlines()[0]
    )
    ours = read_events(tmp_path)[0]
    assert list(ours) == list(sample)


def test_file_order_and_parent_links_per_step(tmp_path: Path) -> None:
    conversation(tmp_path, snapshots=True)
    events = read_events(tmp_path)
    turns = of_type(events, "turn")
    assert [(t["metadata"]["console_turn"], t["metadata"]["console_step"]) for t in turns] == [
        (1, 1),
        (1, 2),
        (2, 1),
        (2, 2),
    ]
    assert [t["metadata"]["step"] for t in turns] == [0, 1, 2, 3]  # arcana-agent 1.2's iteration
    # The spine: each turn event's parent is the previous step's turn event.
    assert turns[0]["parent_step_id"] is None
    assert [t["parent_step_id"] for t in turns[1:]] == [t["step_id"] for t in turns[:-1]]
    # Everything else of a step points at its turn event.
    by_id = {t["step_id"]: t for t in turns}
    for e in events:
        if e["event_type"] != "turn":
            parent = by_id[e["parent_step_id"]]
            assert (parent["metadata"]["console_turn"], parent["metadata"]["console_step"]) == (
                e["metadata"]["console_turn"],
                e["metadata"]["console_step"],
            )
    # Order within the first step: decision, snapshot, turn, llm_call, primitive, tool.
    first = [
        e["event_type"]
        for e in events
        if (e["metadata"]["console_turn"], e["metadata"]["console_step"]) == (1, 1)
    ]
    assert first == [
        "context_decision",
        "prompt_snapshot",
        "turn",
        "llm_call",
        "cognitive_primitive",
        "tool_call",
    ]


def test_turn_events_carry_the_messages_and_arcana_raw_facts(tmp_path: Path) -> None:
    conversation(tmp_path)
    sample_turn = [
        json.loads(x)
        for x in (FIXTURES / "pin_recall" / "17a81a75-0187-4ca7-b323-4a0c6e1c963b.jsonl")
        .read_text()
        .splitlines()
    ]
    sample_md = next(e for e in sample_turn if e["event_type"] == "turn")["metadata"]
    turns = of_type(read_events(tmp_path), "turn")
    for t in turns:
        md = t["metadata"]
        assert set(sample_md["facts"]) <= set(md["facts"])
        assert set(sample_md["facts"]["usage"]) <= set(md["facts"]["usage"])
        assert set(sample_md["assessment"]) <= set(md["assessment"])
        assert set(sample_md["trace_privacy"]) <= set(md["trace_privacy"])
        assert t["model"] == "scripted-1" and isinstance(t["llm_latency_ms"], int)
    assert turns[0]["metadata"]["messages"][0] == {"role": "user", "content": "weather in Oslo?"}
    assert turns[0]["metadata"]["messages"][1]["tool_calls"][0]["function"]["name"] == "lookup"
    assert turns[1]["metadata"]["messages"] == [{"role": "assistant", "content": "Oslo is 21C."}]
    assert turns[1]["metadata"]["assessment"]["completed"] is True
    assert turns[0]["metadata"]["assessment"]["completed"] is False


def test_llm_call_events_have_usage_latency_and_running_budget_totals(tmp_path: Path) -> None:
    conversation(tmp_path)
    calls_ = of_type(read_events(tmp_path), "llm_call")
    assert len(calls_) == 4
    running = 0
    for i, e in enumerate(calls_, start=1):
        md = e["metadata"]
        assert md["purpose"] == "chat" and md["provider"] == "scripted"
        assert set(md["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
        assert isinstance(md["latency_ms"], int) and e["llm_latency_ms"] == md["latency_ms"]
        running += md["usage"]["total_tokens"]
        # tokens_used: the call's own tokens (arcana-agent 1.2.0 sums it over the run's events).
        assert (
            e["budgets"]["tokens_used"] == md["usage"]["total_tokens"]
            and e["budgets"]["iterations_used"] == i
        )
        assert e["llm_request_digest"] and e["llm_response_digest"]
    assert sum(e["budgets"]["tokens_used"] for e in calls_) == running


def test_context_decision_metadata_shape(tmp_path: Path) -> None:
    conversation(tmp_path)
    sample = json.loads(
        (FIXTURES / "basic_chat" / "08b465c7-83c0-44d1-bad3-727f773cb988.jsonl").read_text().splitlines()[0]
    )
    ours = of_type(read_events(tmp_path), "context_decision")
    assert len(ours) == 4
    for e in ours:
        md = e["metadata"]
        assert set(sample["metadata"]) <= set(md)
        assert set(sample["metadata"]["context_decision"]) <= set(md["context_decision"])
        assert {"utilization", "fidelity_distribution", "tokens_by_layer", "encoding"} <= set(
            md["context_report"]
        )
        assert (md["context_decision"]["turn"], md["context_decision"]["step"]) == (
            md["console_turn"],
            md["console_step"],
        )
    # One decision per input message (+ one per pin block).
    last = ours[-1]["metadata"]["context_decision"]
    assert len(last["decisions"]) == last["messages_in"] + sum(
        1 for d in last["decisions"] if d.get("pinned")
    )


def test_prompt_snapshots_are_opt_in_and_show_what_was_sent(tmp_path: Path) -> None:
    chat = conversation(tmp_path / "off")
    assert of_type(read_events(tmp_path / "off"), "prompt_snapshot") == []
    conversation(tmp_path / "on", snapshots=True)
    snaps = of_type(read_events(tmp_path / "on"), "prompt_snapshot")
    assert len(snaps) == 4
    s = snaps[-1]["metadata"]["prompt_snapshot"]
    assert set(s) >= {"turn", "model", "messages", "tools", "response_format", "budget_snapshot"}
    assert all(set(m) == ARCANA_MESSAGE_KEYS for m in s["messages"])
    assert [t["function"]["name"] for t in s["tools"]] == ["lookup", "boom", "recall", "pin", "unpin"]
    assert snaps[-1]["model"] == "scripted-1"
    assert chat.turn == 2


def test_tool_call_and_error_events(tmp_path: Path) -> None:
    conversation(tmp_path)
    events = read_events(tmp_path)
    ok, failed = of_type(events, "tool_call")
    assert ok["tool_call"]["name"] == "lookup" and ok["tool_call"]["error"] is None
    assert ok["metadata"]["arguments"] == {"city": "Oslo"} and ok["metadata"]["result"] == "Oslo: 21C"
    assert (
        failed["tool_call"]["error"] == "ValueError: nope"
        and failed["tool_call"]["error_category"] == "unexpected"
    )
    [unknown] = of_type(events, "error")
    assert (
        unknown["metadata"]["error_category"] == "unknown_tool"
        and unknown["metadata"]["tool_name"] == "teleport"
    )


def test_history_is_rebuildable_from_the_trace_alone(tmp_path: Path) -> None:
    chat = conversation(tmp_path)
    reader = TraceReader(tmp_path)
    assert reader.line_errors == []
    for turn in (1, 2):
        in_memory = [m for m, t in zip(chat.history, chat._message_turns, strict=True) if t == turn]
        assert reader.messages_for_turn(chat.run_id, turn) == in_memory


def test_jsonl_sink_one_file_per_run_append_and_thread_safe(tmp_path: Path) -> None:
    sink = JsonlFileSink(tmp_path / "t")
    writers = [TraceWriter(sink, f"run-{i}") for i in range(3)]

    def work(w: TraceWriter) -> None:
        for n in range(200):
            w.emit("turn", turn=1, step=n + 1, metadata={"payload": "x" * (n % 50)})

    threads = [threading.Thread(target=work, args=(w,)) for w in writers for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    files = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert files == ["run-0.jsonl", "run-1.jsonl", "run-2.jsonl"]
    for name in files:
        lines = (tmp_path / "t" / name).read_text().splitlines()
        assert len(lines) == 400
        assert {TraceEvent.from_json(line).run_id for line in lines} == {name[:-6]}
    # A second sink (another process, a restored session) appends to the same file.
    again = JsonlFileSink(tmp_path / "t")
    TraceWriter(again, "run-0").emit("turn", turn=2, step=1)
    again.close()
    assert len((tmp_path / "t" / "run-0.jsonl").read_text().splitlines()) == 401


def test_callable_and_multi_sinks(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    raw: list[TraceEvent] = []

    class Broken:
        def write(self, event: TraceEvent) -> None:
            raise OSError("disk full")

        def close(self) -> None:
            raise OSError("still full")

    sinks = [
        Broken(),
        CallableSink(seen.append),
        CallableSink(raw.append, as_dict=False),
        JsonlFileSink(tmp_path),
    ]
    logger_name = "runtime.trace"
    import logging

    logging.getLogger(logger_name).disabled = True
    try:
        chat = conversation(tmp_path, sinks=sinks)
    finally:
        logging.getLogger(logger_name).disabled = False
    assert seen == read_events(tmp_path)
    assert [e.to_dict() for e in raw] == seen
    assert all(ev.run_id == chat.run_id for ev in raw)
    multi = MultiSink(Broken(), CallableSink(seen.append))
    logging.getLogger(logger_name).disabled = True
    try:
        multi.close()
    finally:
        logging.getLogger(logger_name).disabled = False


def test_writer_stamps_cannot_be_overwritten_by_metadata() -> None:
    got: list[dict[str, Any]] = []
    w = TraceWriter(CallableSink(got.append), "r").for_agent("planner")
    w.emit("turn", turn=3, step=2, metadata={"turn": 99, "producer": "x", "source_agent": "y", "k": 1})
    md = got[0]["metadata"]
    assert (md["producer"], md["console_turn"], md["console_step"], md["source_agent"], md["k"]) == (
        PRODUCER,
        3,
        2,
        "planner",
        1,
    )
    assert (md["turn"], md["step"]) == (3, 0)  # a turn event's `step` is the 0-based LLM iteration


def test_a_disabled_writer_writes_nothing() -> None:
    assert TraceWriter(None, "r").emit("turn", turn=1, step=1) is None


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*/*.jsonl")), ids=lambda p: p.name[:8])
def test_the_arcana_samples_pass_the_same_envelope_check(fixture: Path) -> None:
    # Guards the checker above: it accepts what arcana-agent 1.2 really writes.
    for line in fixture.read_text().splitlines():
        assert_arcana_valid(json.loads(line))
