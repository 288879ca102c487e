"""Numbers that pass validation (integers up to ±(2**53 − 1)) but do not fit the 32-bit columns a
projection puts them in: the event is stored, its projection holds no wrong number, pages answer 200."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

from tests.traces.bad_input_cases import OURS, good
from tests.traces.ingest.test_bad_input import assert_everything_answers
from traces.ingest import ingest_events
from traces.ingest.pipeline import STORE_FAILED
from traces.models import ContextDecision, Event, Pin, Project, Run, Step

BIG = 2**40


def _events(rid: str) -> list[dict]:
    turn, llm = good(rid, 1), good(rid, 2)
    md = {"producer": OURS, "turn": 1, "step": 1, "console_turn": 1, "console_step": 1}
    llm["metadata"]["latency_ms"] = BIG
    decision = {
        "run_id": rid, "step_id": f"{rid}-cd", "parent_step_id": turn["step_id"], "event_type": "context_decision",
        "timestamp": "2026-11-30T10:00:00.1+00:00",
        "metadata": {**md, "context_decision": {"strategy": "s", "budget_total": BIG, "budget_used": -BIG,
                     "budget_tools": BIG, "budget_reserve": BIG, "messages_in": BIG, "messages_out": BIG,
                     "compressed_count": BIG, "decisions": [{"index": BIG, "role": "user", "outcome": "kept",
                     "token_count_before": BIG, "token_count_after": BIG, "pinned": True, "pin_id": "p_1"}]},
                     "context_report": {"utilization": 1e308}, "compressed_count": BIG},
    }  # fmt: skip
    pin = {
        "run_id": rid, "step_id": f"{rid}-pin", "parent_step_id": turn["step_id"], "event_type": "cognitive_primitive",
        "timestamp": "2026-11-30T10:00:00.7+00:00",
        "metadata": {**md, "primitive": "pin", "tokens": BIG, "args": {"content": "c", "label": "l"},
                     "result": {"pinned": True, "pin_id": "p_1", "label": "l", "until_turn": BIG}},
    }  # fmt: skip
    turn["metadata"]["facts"]["usage"] = {
        "prompt_tokens": 2**53 - 1,
        "completion_tokens": 2**53 - 1,
        "total_tokens": BIG,
    }
    return [decision, llm, pin, turn]


@pytest.mark.parametrize("batches", [1, 4], ids=["one-batch", "event-by-event"])
def test_big_numbers_are_stored_and_every_page_answers(
    batches: int, project: Project, alice_client: Client
) -> None:
    events = _events("big")
    chunks = [events] if batches == 1 else [[e] for e in events]
    for chunk in chunks:
        result = ingest_events(project, chunk, source="api")
        assert [r.error for r in result.results] == [None] * len(chunk), [r.error for r in result.results]
        assert STORE_FAILED not in {r.error for r in result.results}
    # The raw events keep every number as sent; the projection holds none it cannot store.
    assert all(Event.objects.get(project=project, step_id=e["step_id"]).raw for e in events)
    run = Run.objects.get(project=project, run_id="big")
    decision = ContextDecision.objects.get(run=run)
    if connection.vendor == "postgresql":  # SQLite enforces no integer ranges: it stores them as sent
        assert (decision.budget_total, decision.budget_used, decision.messages_in) == (None, None, None)
        assert decision.compressed_count == 2**31 - 1  # not null: the nearest bound
        pin = Pin.objects.get(run=run)
        assert (pin.tokens, pin.until_turn) == (None, None)
        assert Step.objects.get(run=run).latency_ms is None
    assert run.tokens > 2**31  # a 64-bit column: the total as computed, not bounded
    assert_everything_answers(alice_client, project)
