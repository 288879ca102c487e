"""Property: whatever JSON a producer puts in any field, `POST /api/v1/ingest` answers 200 or 207, stores
every valid event of the batch exactly once, and every page and read endpoint keeps answering 200.

Batches mix valid events of one of our runs with copies in which one field (of the envelope or of the
metadata our projections read) holds an arbitrary JSON value — NaN, huge integers, lone surrogates,
NUL, deep lists — sometimes in the same run as the valid events, so the projection of a run must also
survive whatever was accepted next to them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.traces.bad_input_cases import OURS, good
from tests.traces.ingest.test_bad_input import assert_everything_answers
from traces.ingest.pipeline import STORE_FAILED
from traces.models import Event, Project

URL = "/api/v1/ingest"
PFX = "\u2603id\u2603"

KNOWN_KEYS = [
    "budget_total", "budget_used", "compressed_count", "messages_in", "messages_out", "decisions", "index",
    "outcome", "pinned", "pin_id", "token_count_after", "relevance_score", "utilization", "usage",
    "prompt_tokens", "total_tokens", "latency_ms", "tokens", "until_turn", "found", "turn",
    "messages", "tool_calls", "id", "name", "arguments", "error", "duration_ms", "finish_reason",
    "completed", "failed", "strategy", "label", "content", "console_turn", "console_step",
]  # fmt: skip

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and ±Infinity included
    | st.text(max_size=12)  # lone surrogates and NUL included
    | st.sampled_from(
        [
            "",
            "a/b",
            "9999-12-31T23:59:59-05:00",
            "0001-01-01T00:00:00+01:00",
            "2026-11-30",
            "\x00",
            # Offsets Python reads and PostgreSQL does not (past ±15:59, or with seconds).
            "2026-11-30T10:00:00+20:00",
            "2026-11-30T10:00:00-00:16:08.5",
        ]
    ),
    # Keys the projections read (so a nested value lands where a column takes it), or any text.
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=6), children, max_size=4),
    max_leaves=6,
)

# The fields a value lands in: the envelope, and the metadata keys the projections read.
FIELDS = [
    "run_id", "step_id", "parent_step_id", "timestamp", "event_type", "role", "model", "llm_latency_ms",
    "tool_call", "budgets", "stop_reason", "stop_detail", "task_id", "metadata", "an_extra_key",
    "metadata.turn", "metadata.step", "metadata.producer", "metadata.source_agent", "metadata.facts",
    "metadata.usage", "metadata.assessment", "metadata.messages", "metadata.context_decision",
    "metadata.context_report", "metadata.primitive", "metadata.args", "metadata.result", "metadata.tokens",
    "metadata.tool_call_id", "metadata.arguments", "metadata.latency_ms", "metadata.prompt_snapshot",
    "metadata.explanation", "metadata.purpose",
]  # fmt: skip


def valid_run(rid: str) -> list[dict[str, Any]]:
    """A small run of ours: a turn with its llm_call, a pin primitive and a context decision."""
    turn, llm = good(rid, 1), good(rid, 2)
    md = {"producer": OURS, "turn": 1, "step": 1}
    pin = {
        "run_id": rid, "step_id": f"{rid}-pin", "parent_step_id": turn["step_id"], "event_type": "cognitive_primitive",
        "timestamp": "2026-11-30T10:00:00.7+00:00",
        "metadata": {**md, "primitive": "pin", "args": {"content": "c", "label": "l"},
                     "result": {"pinned": True, "pin_id": "p_1", "label": "l"}, "tool_call_id": "c1"},
    }  # fmt: skip
    decision = {
        "run_id": rid, "step_id": f"{rid}-cd", "parent_step_id": turn["step_id"], "event_type": "context_decision",
        "timestamp": "2026-11-30T10:00:00.1+00:00",
        "metadata": {**md, "context_decision": {"strategy": "s", "budget_total": 100, "budget_used": 10,
                     "decisions": [{"index": 0, "role": "user", "outcome": "kept", "token_count_before": 5,
                                    "token_count_after": 5}]}, "context_report": {"utilization": 0.1}},
    }  # fmt: skip
    return [decision, llm, pin, turn]


@st.composite
def batches(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]], list[bool]]:
    """(the valid run's id, the batch, which items are the untouched valid events)."""
    uid = PFX  # replaced by a fresh id per example: examples share the test's database
    rid = f"v-{uid}"
    valid = valid_run(rid)
    mutated: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 5))):
        ev = json.loads(json.dumps(draw(st.sampled_from(valid))))
        same_run = draw(st.booleans())
        ev["run_id"] = rid if same_run else f"m-{uid}-{i}"
        ev["step_id"] = f"m-{uid}-{i}"
        field = draw(st.sampled_from(FIELDS))
        value = draw(JSON)
        if field.startswith("metadata."):
            ev["metadata"][field.removeprefix("metadata.")] = value
        else:
            ev[field] = value
        mutated.append(ev)
    items = [(ev, True) for ev in valid] + [(ev, False) for ev in mutated]
    items = draw(st.permutations(items))
    return rid, [ev for ev, _ in items], [is_valid for _, is_valid in items]


@pytest.mark.django_db
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(batch=batches())
def test_no_input_breaks_the_store(
    batch: tuple[str, list[dict[str, Any]], list[bool]],
    api_client: Client,
    alice_client: Client,
    project: Project,
) -> None:
    rid, events, is_valid = batch
    uid = uuid.uuid4().hex[:12]
    rid = rid.replace(PFX, uid)
    for ev in events:
        for key in ("run_id", "step_id", "parent_step_id"):
            if isinstance(ev.get(key), str):
                ev[key] = ev[key].replace(PFX, uid)
    # As a producer sends it: NaN/Infinity written as JSON's non-standard literals, surrogates and NUL
    # as \u escapes.
    body = json.dumps({"events": events})
    r = api_client.post(URL, data=body, content_type="application/json")
    assert r.status_code in (200, 207), (r.status_code, r.content[:500])
    answer = r.json()
    for i, (ev, valid) in enumerate(zip(events, is_valid, strict=True)):
        result = answer["results"][i]
        assert result.get("error") != STORE_FAILED, (
            ev,
            result,
        )  # validation let nothing through that breaks a write
        if valid:
            assert result["status"] == "accepted", result
        if result["status"] == "accepted":
            stored = Event.objects.filter(project=project, run_id=ev["run_id"], step_id=ev["step_id"])
            assert stored.count() == 1, ev
        elif result["status"] == "rejected":
            assert result["error"] and isinstance(result.get("field", ""), str)
    assert Event.objects.filter(project=project, run_id=rid).count() >= 4
    # The runs stored: a refused event's run_id may be anything (a NUL cannot even be looked up).
    accepted = [
        ev["run_id"] for ev, res in zip(events, answer["results"], strict=True) if res["status"] == "accepted"
    ]
    assert_everything_answers(alice_client, project, accepted)
