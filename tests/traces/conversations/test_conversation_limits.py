"""Operator limits stop a conversation with their reason; the sweeper re-queues or fails lost work.

These call the task's body (`run_pending_turns`) in this process — the worker processes are in
test_conversation_workers.py — so each limit is checked quickly; its threads (lease, store sink) use
their own connections, hence `transaction=True`.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from runtime.scenarios import get_scenario
from tests.runtime.openai_server import OpenAIServer
from traces import conversations as service
from traces.models import Conversation, Event, Project

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_worker_takes_these(settings: Any) -> None:
    """Tasks these tests enqueue go to a queue no worker reads: the test runs the work itself."""
    settings.ARCANA_AGENTS_QUEUE = f"agents-nobody-{uuid.uuid4().hex[:8]}"


def _conversation(project: Project, **body: Any) -> Conversation:
    spec = service.check_conversation_request(body)
    return service.start_conversation(project, spec)


def test_it_stops_at_the_turn_limit(project: Project, settings: Any) -> None:
    # A script longer than the limit is refused when it is sent (test_api_conversations.py); this one
    # was accepted, then the operator lowered the limit.
    conv = _conversation(project, model="small-talk", script=["one", "two", "three"])
    settings.ARCANA_MAX_TURNS_PER_CONVERSATION = 2

    service.run_pending_turns(conv.pk)

    conv.refresh_from_db()
    assert conv.status == "failed" and conv.cursor == 2
    assert "turn limit reached (2 turns" in conv.reason and conv.finished_at is not None


def test_it_stops_at_the_step_limit(project: Project, settings: Any) -> None:
    settings.ARCANA_MAX_STEPS_PER_TURN = 2
    with OpenAIServer() as llm:
        settings.ARCANA_PROVIDERS = f'{{"loop": {{"base_url": "{llm.base_url}", "model": "m"}}}}'
        for i in range(3):
            llm.enqueue_tool_call("pin", {"content": f"fact {i}"})
        conv = _conversation(project, provider="loop", cognitive_primitives=["pin"], script=["pin forever"])

        service.run_pending_turns(conv.pk)

        assert len(llm.requests) == 2
    conv.refresh_from_db()
    assert conv.status == "failed" and "step limit reached in turn 1 (2 steps" in conv.reason
    assert conv.transcript[0]["outcome"] == "max_steps"


def test_it_stops_after_the_step_that_crosses_the_token_limit(project: Project, settings: Any) -> None:
    settings.ARCANA_MAX_TOKENS_PER_CONVERSATION = 50
    scenario = get_scenario("pin-recall-demo")
    conv = _conversation(project, model="pin-recall-demo", script=list(scenario.script))

    service.run_pending_turns(conv.pk)

    conv.refresh_from_db()
    assert conv.status == "failed" and "token limit reached (50 tokens" in conv.reason
    # Turn 1's first step (the pin) used more than 50 tokens: the turn stopped before its second step.
    assert conv.cursor == 1 and conv.transcript[0]["outcome"] == "stopped" and conv.tokens_used > 50
    stops = [
        e.data for e in Event.objects.filter(project=project, run_id=conv.run_id, event_type="state_change")
    ]
    assert [e["stop_reason"] for e in stops] == ["max_tokens"]


def test_the_sweeper_requeues_a_conversation_whose_worker_vanished(project: Project) -> None:
    conv = _conversation(project, model="small-talk", script=["one"])
    past = timezone.now() - timedelta(seconds=5)
    Conversation.objects.filter(pk=conv.pk).update(
        status="running", lease_owner="gone:1:1", lease_expires_at=past, attempts=1
    )
    alive = _conversation(project, model="small-talk", script=["one"])
    Conversation.objects.filter(pk=alive.pk).update(
        status="running", lease_owner="here:1:1", lease_expires_at=timezone.now() + timedelta(seconds=60)
    )

    result = service.sweep_conversations()

    assert result["requeued"] == 1
    conv.refresh_from_db()
    assert conv.status == "queued" and conv.lease_owner == ""
    assert Conversation.objects.get(pk=alive.pk).status == "running"
    # The re-queued work runs from its cursor.
    service.run_pending_turns(conv.pk)
    conv.refresh_from_db()
    assert conv.status == "completed" and conv.cursor == 1


def test_the_sweeper_fails_a_conversation_that_keeps_losing_its_worker(
    project: Project, settings: Any
) -> None:
    settings.ARCANA_CONVERSATION_MAX_ATTEMPTS = 2
    conv = _conversation(project, model="small-talk", script=["one"])
    Conversation.objects.filter(pk=conv.pk).update(
        status="running",
        lease_owner="gone:1:1",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
        attempts=2,
    )

    assert service.sweep_conversations()["failed"] == 1

    conv.refresh_from_db()
    assert conv.status == "failed" and "worker lost 2 times" in conv.reason and conv.finished_at


def test_a_second_delivery_of_a_claimed_conversation_does_nothing(project: Project) -> None:
    conv = _conversation(project, model="small-talk", script=["one"])
    assert service.claim(conv.pk, "first:1:1")

    assert service.run_pending_turns(conv.pk) == {"conversation": conv.pk, "skipped": "not claimable"}
    assert Conversation.objects.get(pk=conv.pk).lease_owner == "first:1:1"


def test_a_pool_playground_resumes_each_agent_from_the_saved_state(project: Project) -> None:
    conv = _conversation(
        project,
        model="pool-demo",
        cognitive_primitives=["recall", "pin"],
        agents=[{"name": "researcher"}, {"name": "writer", "cognitive_primitives": ["recall"]}],
        script=None,
    )
    scenario = get_scenario("pool-demo")
    for agent, text in zip(scenario.script_agents, scenario.script, strict=True):
        conv = service.post_message(conv, text, agent=agent)
        # Each turn is its own task: the engine is rebuilt from the row's saved state every time.
        service.run_pending_turns(conv.pk)
        conv.refresh_from_db()
        assert conv.status == "waiting_for_user", conv.reason

    assert [(t["agent"], t["turn"]) for t in conv.transcript] == [
        ("researcher", 1),
        ("writer", 1),
        ("writer", 2),
    ]
    assert [(p["agent"], p["label"]) for p in conv.active_pins()] == [("researcher", "weather")]
    assert conv.transcript[2]["assistant"] == "Aurora is live Friday, 16:00 UTC."  # after recalling turn 1
    assert set(conv.state["agents"]) == {"researcher", "writer"}


def test_the_sweeper_resends_a_queued_conversation_whose_message_was_lost(project: Project) -> None:
    conv = _conversation(project, model="small-talk", script=["one"])
    Conversation.objects.filter(pk=conv.pk).update(updated_at=timezone.now() - timedelta(hours=1))

    assert service.sweep_conversations()["resent"] == 1

    conv.refresh_from_db()
    assert conv.status == "queued" and conv.updated_at > timezone.now() - timedelta(minutes=1)


def test_a_message_too_big_for_the_window_fails_with_an_error_event(project: Project) -> None:
    conv = _conversation(project, model="small-talk", context_window=256, script=["word " * 400])

    service.run_pending_turns(conv.pk)

    conv.refresh_from_db()
    assert conv.status == "failed" and conv.reason.startswith("ContextOverflowError: the message needs")
    errors = [e.data for e in Event.objects.filter(project=project, run_id=conv.run_id, event_type="error")]
    assert len(errors) == 1 and errors[0]["metadata"]["error_category"] == "context_overflow"
    assert conv.run is not None and conv.run.status == "failed"


def test_a_provider_without_its_key_fails_readably(project: Project, settings: Any) -> None:
    settings.ARCANA_PROVIDERS = '{"deepseek": {}}'  # the preset; DEEPSEEK_API_KEY is not set
    conv = _conversation(project, provider="deepseek", script=["hi"])

    service.run_pending_turns(conv.pk)

    conv.refresh_from_db()
    assert conv.status == "failed" and "DEEPSEEK_API_KEY" in conv.reason
    assert Event.objects.filter(project=project, run_id=conv.run_id, event_type="error").count() == 1
