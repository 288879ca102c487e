"""`runtime.facts` on its own: the reading of a trace every view shares, on real arcana-agent 1.2.0
files (tests/fixtures/arcana-1.2-unseen) and on files of our runtime written through a loopback
provider for the same situations."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import runtime
from runtime import facts as F
from runtime._trace import TraceEvent
from runtime._trace_reader import TraceReader
from runtime.facts._events import _normalized
from tests.runtime.trace_scenarios import (
    ARCANA_500_SEND,
    ARCANA_BUNDLE,
    ARCANA_PLAIN_SEND,
    ARCANA_PLANNER,
    ARCANA_TOOLS_SEND,
    ARCANA_WRITER,
    UNSEEN,
    write_tools_and_errors,
)


@pytest.fixture(scope="module")
def arcana() -> TraceReader:
    return TraceReader(UNSEEN)


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceReader, str]:
    written = write_tools_and_errors(tmp_path_factory.mktemp("ours"))
    return TraceReader(written["path"]), written["run_id"]


def _snapshot(sv: F.StepView) -> Any:
    return sv.prompt_snapshot.metadata["prompt_snapshot"]["messages"] if sv.prompt_snapshot else None


def test_the_module_is_public_and_documented() -> None:
    assert F.__doc__ and "| fact |" in F.__doc__
    public = {n for n in vars(F) if not n.startswith("_") and n != "annotations"}
    modules = {n for n in public if type(getattr(F, n)).__name__ == "module"}
    assert set(F.__all__) == public - modules
    # Exported from `runtime.facts` only, not again at the top level (issue 33).
    assert not hasattr(runtime, "turn_outcome") and not hasattr(runtime, "PinnedBlock")


# -- errors and failures -------------------------------------------------------------------------------


def test_it_counts_a_raised_tool_and_an_unknown_tool_in_an_arcana_send(arcana: TraceReader) -> None:
    turns = arcana.turns(ARCANA_TOOLS_SEND)
    first = turns[0].steps[0]
    errors = F.step_errors(first)
    assert [(e.kind, e.name) for e in errors] == [("tool", "lookup_price"), ("unrecorded", "get_stock")]
    assert errors[0].message == "price service has no SKU X-404"
    assert errors[1].message == F.UNRECORDED_CALL
    assert F.turn_outcome(turns[0]) == F.SendOutcome("continued", None, 2)
    assert F.run_outcome(turns, arcana.events(ARCANA_TOOLS_SEND)) == F.SendOutcome("completed", None, 2)


def test_it_counts_the_same_errors_in_our_file(ours: tuple[TraceReader, str]) -> None:
    reader, rid = ours
    turns = reader.turns(rid)
    errors = F.step_errors(turns[0].steps[0])
    assert [(e.kind, e.name) for e in errors] == [("tool", "lookup_price"), ("unknown_tool", "get_stock")]
    assert F.turn_outcome(turns[0]) == F.SendOutcome("completed", None, 2)


def test_it_reads_an_arcana_send_without_a_model_answer_as_failed(arcana: TraceReader) -> None:
    turns = arcana.turns(ARCANA_500_SEND)
    assert [len(tv.steps) for tv in turns] == [1] and turns[0].steps[0].turn_event is None
    outcome = F.run_outcome(turns, arcana.events(ARCANA_500_SEND))
    assert outcome == F.SendOutcome("failed", F.NO_ANSWER, 1)
    assert F.turn_outcome(turns[0]) == outcome
    assert F.step_failure(turns[0].steps[0]) == F.NO_ANSWER


def test_it_reads_our_send_whose_provider_failed_as_failed_with_the_reason(
    ours: tuple[TraceReader, str],
) -> None:
    reader, rid = ours
    turns = reader.turns(rid)
    second = F.turn_outcome(turns[1])
    assert second.status == "failed" and "HTTP 500" in (second.reason or "") and second.errors == 1
    run = F.run_outcome(turns, reader.events(rid))
    assert (run.status, run.reason, run.errors) == ("failed", second.reason, 3)


def test_a_plain_answer_completes(arcana: TraceReader) -> None:
    turns = arcana.turns(ARCANA_PLAIN_SEND)
    assert F.run_outcome(turns, arcana.events(ARCANA_PLAIN_SEND)) == F.SendOutcome("completed", None, 0)


def test_a_session_file_without_steps_is_completed_and_a_lone_primitive_is_running() -> None:
    seeded = TraceEvent.new("history_seeded", run_id="s", metadata={"seed_count": 2})
    assert F.run_outcome([], [seeded]).status == "completed"
    prim = TraceEvent.new("cognitive_primitive", run_id="s", metadata={"primitive": "pin", "result": {}})
    assert F.run_outcome([], [prim]).status == "running"


# -- pins ---------------------------------------------------------------------------------------------


def test_it_locates_an_arcana_pinned_block_and_names_its_pin(arcana: TraceReader) -> None:
    pins = arcana.pins(ARCANA_PLANNER)
    assert [(p.pin_id, p.label, p.created_turn) for p in pins] == [("p_7bb7e50a", "constraints", 1)]
    sv = arcana.turns(ARCANA_PLANNER)[1].steps[0]
    rows = F.decision_rows(sv.context_decision)
    block = F.pinned_blocks(rows, pins, sv.turn, arcana=True, snapshot_messages=_snapshot(sv))
    assert [b.to_dict() for b in block] == [
        {"index": 1, "raw_index": 4, "located": "snapshot", "pin_id": "p_7bb7e50a", "label": "constraints",
         "tokens": 21, "role": "system", "fidelity": "L0", "outcome": "kept"}
    ]  # fmt: skip
    assert _snapshot(sv)[1]["content"].startswith("[pinned: constraints]")
    # Without a prompt snapshot, Arcana's own rule (pins follow the first message) gives the same answer.
    no_snapshot = F.pinned_blocks(rows, pins, sv.turn, arcana=True)
    assert [(b.index, b.raw_index, b.located, b.pin_id) for b in no_snapshot] == [
        (1, 4, "rule", "p_7bb7e50a")
    ]


def test_the_active_rule_and_arcanas_rendered_rule_differ_as_documented(arcana: TraceReader) -> None:
    (pin,) = arcana.pins(ARCANA_PLANNER)
    assert [pin.is_active_at(t) for t in (1, 2)] == [True, True]
    assert [F.arcana_renders_pin(pin.created_turn, pin.until_turn, pin.unpinned_turn, t) for t in (1, 2)] == [
        False,
        True,
    ]
    # until_turn: active through t <= until; Arcana renders one turn longer; an unpin in t still renders t.
    assert [F.pin_active_at(1, 3, None, t) for t in (3, 4)] == [True, False]
    assert [F.arcana_renders_pin(1, 3, None, t) for t in (4, 5)] == [True, False]
    assert F.pin_active_at(1, None, 3, 3) and not F.pin_active_at(1, None, 3, 4)


def test_our_pinned_blocks_keep_the_written_index_and_id() -> None:
    rows = [
        {"index": 0, "role": "system", "outcome": "kept"},
        {"index": 1, "role": "system", "outcome": "kept", "fidelity": "L0", "reason": "pinned",
         "pinned": True, "pin_id": "p_00000001", "token_count_before": 9, "token_count_after": 9},
    ]  # fmt: skip
    pin = F.PinLifetime("p_00000001", "facts", "x", 9, 1, None, None)
    (block,) = F.pinned_blocks(rows, [pin], 2, arcana=False)
    assert (block.index, block.raw_index, block.located, block.pin_id, block.label) == (
        1,
        1,
        "written",
        "p_00000001",
        "facts",
    )


# -- primitives, tools, models, decisions, links ----------------------------------------------------------


@pytest.mark.parametrize(
    ("primitive", "args", "result", "ok", "line"),
    [
        ("recall", {"turn": 2}, {"turn": 2, "found": True, "messages": [{}, {}]}, True, "recall turn=2 → 2 messages"),
        ("recall", {"turn": 9}, {"turn": 9, "found": False, "note": "turn out of range: 9, max=4"}, False,
         "recall turn=9 → turn out of range: 9, max=4"),
        ("pin", {}, {"pinned": True, "pin_id": "p_1", "label": "a"}, True, "pin pin_id=p_1 label='a'"),
        ("pin", {}, {"pinned": True, "pin_id": "p_1", "label": "a", "already_pinned": True}, True,
         "pin pin_id=p_1 label='a' already pinned"),
        ("pin", {}, {"pinned": False, "reason": "pin_budget_exceeded", "current_pin_tokens": 40,
                     "requested_tokens": 4325, "cap": 3500}, False, "pin REJECTED pin_budget_exceeded (40+4325 > 3500)"),
        ("unpin", {"pin_id": "p_1"}, {"unpinned": True, "pin_id": "p_1"}, True, "unpin pin_id=p_1 ok"),
        ("unpin", {"pin_id": "p_0"}, {"unpinned": False, "pin_id": "p_0", "note": "unknown pin_id (already removed or never existed)"},
         False, "unpin pin_id=p_0 unknown id"),
        ("recall", {"turn": "x"}, {"error": "invalid_arguments", "detail": "turn: not an int"}, False,
         "recall REJECTED invalid_arguments: turn: not an int"),
        ("pin", {}, "oops", False, "pin no result recorded"),
    ],
)  # fmt: skip
def test_a_primitive_outcome_has_one_wording(
    primitive: str, args: Any, result: Any, ok: bool, line: str
) -> None:
    outcome = F.primitive_outcome(primitive, args, result)
    assert (outcome.ok, outcome.line) == (ok, line)


def test_a_steps_model_comes_from_the_turn_the_snapshot_or_the_llm_call(
    arcana: TraceReader, ours: tuple[TraceReader, str]
) -> None:
    assert {F.step_model(sv) for tv in arcana.turns(ARCANA_PLANNER) for sv in tv.steps} == {"loopback-model"}
    # No snapshot and a null `turn.model`: the trace does not say.
    assert F.step_model(arcana.turns(ARCANA_TOOLS_SEND)[0].steps[0]) is None
    reader, rid = ours
    assert F.step_model(reader.turns(rid)[0].steps[0]) == "loopback-model"


def test_tool_results_list_the_calls_in_the_order_the_model_asked(arcana: TraceReader) -> None:
    results = F.tool_results(arcana.turns(ARCANA_TOOLS_SEND)[0].steps[0])
    assert [(r["name"], r["ok"], r["event"], r["recorded"]) for r in results] == [
        ("lookup_price", False, "tool_call", False),
        ("get_stock", False, None, False),
    ]
    assert F.unrecorded_calls(arcana.turns(ARCANA_TOOLS_SEND)[0].steps[0]) == ["get_stock"]


def test_decision_counts_keep_pins_apart() -> None:
    d = {
        "compressed_count": 3,
        "decisions": [
            {"outcome": "kept"},
            {"outcome": "compressed"},
            {"outcome": "dropped"},
            {"outcome": "kept", "reason": "pinned"},
        ],
    }
    counts = F.decision_counts(d)
    assert (counts.kept, counts.compressed, counts.dropped, counts.pinned) == (1, 1, 1, 1)
    assert counts.changed == "1 compressed, 1 dropped"
    assert F.decision_counts({"compressed_count": 2}).changed == "2 compressed"
    assert F.decision_counts({"decisions": [{"outcome": "kept"}]}).changed == "0 compressed"


def test_run_links_name_the_bundle_and_the_delegating_run(arcana: TraceReader) -> None:
    writer = F.run_links(arcana.events(ARCANA_WRITER))
    assert writer == F.RunLinks(ARCANA_BUNDLE, ARCANA_PLANNER, "writer")
    assert F.run_links(arcana.events(ARCANA_PLANNER)) == F.RunLinks(ARCANA_BUNDLE, None, "planner")
    assert F.run_links(arcana.events(ARCANA_TOOLS_SEND)) == F.RunLinks()


def test_fixtures_are_where_the_scenarios_say() -> None:
    assert (Path(UNSEEN) / "pool" / f"{ARCANA_PLANNER}.jsonl").exists()


@given(
    index=st.integers(1, 10**6),
    turn=st.none() | st.integers(1, 500),
    step=st.none() | st.integers(1, 50),
    agent=st.none() | st.text(max_size=8),
    key=st.none() | st.text(max_size=12),
    producer=st.sampled_from(["arcana-console", "arcana-1.2"]),
)
def test_a_normalized_event_built_fast_is_the_dataclass_one(
    index: int, turn: int | None, step: int | None, agent: str | None, key: str | None, producer: str
) -> None:
    ev = TraceEvent.new("turn", run_id="r")
    fast = _normalized(index, ev, turn, step, agent, key, producer)
    slow = F.NormalizedEvent(index, ev, turn, step, agent, key, producer)
    assert type(fast) is F.NormalizedEvent
    assert fast == slow
    assert repr(fast) == repr(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.turn = 3  # type: ignore[misc]


def test_a_tool_result_has_every_key_in_order() -> None:
    from runtime.facts._outcomes import ToolResult, _result

    r = _result(tool_call_id=None, name="n", arguments=None, recorded=False, error=None, ok=True, event=None)
    assert list(r) == list(ToolResult.__annotations__)
