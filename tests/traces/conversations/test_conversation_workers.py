"""Conversations started from the API run on real Celery worker processes (issue 12).

Each worker has a data folder of its own (as on a separate machine: nothing shared but the database
and the broker); providers are the offline `scripted` scenarios or a real loopback OpenAI-compatible
server (`tests/runtime/openai_server.py`) configured through `ARCANA_PROVIDERS`.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from runtime.scenarios import get_scenario
from tests.runtime.openai_server import OpenAIServer
from tests.traces.workers import Worker, wait_for, worker
from traces.models import Conversation, Event, Pin, PrimitiveEvent, Project, Run, Step

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def llm() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def providers_json(llm: OpenAIServer) -> str:
    return json.dumps(
        {
            "loop": {"base_url": llm.base_url, "models": ["loopback-model"], "max_retries": 1},
            "loop-stream": {"base_url": llm.base_url, "model": "loopback-model", "stream": True},
        }
    )


@pytest.fixture(scope="module")
def agents_queue() -> str:
    return f"agents-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def conversation_settings(settings: Any, providers_json: str, agents_queue: str, llm: OpenAIServer) -> None:
    settings.ARCANA_PROVIDERS = providers_json
    settings.ARCANA_AGENTS_QUEUE = agents_queue


@pytest.fixture(scope="module")
def shared_worker(
    django_db_setup: None, django_db_blocker: Any, providers_json: str, agents_queue: str
) -> Iterator[Worker]:
    from django.conf import settings

    old = (settings.ARCANA_PROVIDERS, settings.ARCANA_AGENTS_QUEUE)
    settings.ARCANA_PROVIDERS, settings.ARCANA_AGENTS_QUEUE = providers_json, agents_queue
    try:
        with worker() as w:
            yield w
    finally:
        settings.ARCANA_PROVIDERS, settings.ARCANA_AGENTS_QUEUE = old


def start(client: Client, **body: Any) -> dict[str, Any]:
    response = client.post("/api/v1/conversations", body, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def wait_status(conv_id: int, *statuses: str, timeout: float = 90) -> Conversation:
    wait_for(
        lambda: Conversation.objects.filter(pk=conv_id, status__in=statuses).exists(),
        timeout=timeout,
        what=f"conversation {conv_id} to be {' or '.join(statuses)}",
    )
    return Conversation.objects.get(pk=conv_id)


def events_of(project: Project, run_id: str) -> list[dict[str, Any]]:
    return [json.loads(e.raw) for e in Event.objects.filter(project=project, run_id=run_id)]


def test_it_runs_the_pin_recall_demo_from_the_api_to_completed(
    shared_worker: Worker, api_client: Client, alice_client: Client, project: Project
) -> None:
    scenario = get_scenario("pin-recall-demo")
    created = start(api_client, provider="scripted", model="pin-recall-demo", script=list(scenario.script))
    assert created["status"] == "queued"

    conv = wait_status(created["id"], "completed", "failed")

    assert conv.status == "completed", conv.reason
    assert conv.started_at and conv.finished_at and conv.cursor == len(scenario.script)
    assert [t["outcome"] for t in conv.transcript] == ["answered"] * 5
    run = Run.objects.get(project=project, run_id=created["run_id"])
    assert run.conversation == conv
    assert run.status == Run.Status.COMPLETED and run.turns == 5
    primitives = list(PrimitiveEvent.objects.filter(run=run).values_list("primitive", "turn_number", "ok"))
    assert (
        ("pin", 1, True) in primitives
        and ("recall", 4, True) in primitives
        and ("unpin", 5, True) in primitives
    )
    pin = Pin.objects.get(run=run, pin_id="p_a7145c0d")
    assert (pin.label, pin.created_turn, pin.unpinned_turn) == ("constraints", 1, 5)
    # The small window compressed the turn-1 plan, and the decisions say so.
    assert sum(d.compressed_count + d.dropped_count for d in run.decisions.all()) > 0
    assert run.decisions.filter(pinned_count__gt=0).exists()
    # Every event was stored once, with deterministic ids.
    assert Event.objects.filter(project=project, run_id=run.run_id).count() == run.events
    # The API answers the same story.
    detail = api_client.get(f"/api/v1/conversations/{conv.pk}").json()
    assert detail["status"] == "completed" and detail["turns_done"] == 5 and detail["pins"] == []
    # And the pages: the run overview lists the pin and the cognitive events, turn 4 shows the recall.
    page = alice_client.get(run.get_absolute_url())
    assert page.status_code == 200
    html = page.content.decode()
    assert "p_a7145c0d" in html and "constraints" in html and "recall" in html
    turn4 = alice_client.get(run.turn_url(4)).content.decode()
    assert "recall" in turn4 and "Step 3 of the original plan" in turn4


def test_it_runs_a_playground_whose_turns_land_on_different_workers(
    alice_client: Client, project: Project, llm: OpenAIServer, settings: Any
) -> None:
    # A queue of this test's own: the module's shared worker must not take these turns.
    settings.ARCANA_AGENTS_QUEUE = f"agents-playground-{uuid.uuid4().hex[:8]}"
    before = len(llm.requests)
    created = start(
        alice_client,
        project=project.slug,
        provider="loop",
        model="loopback-model",
        system="You keep facts.",
        cognitive_primitives=["recall", "pin"],
        script=None,
    )
    conv_id = created["id"]
    assert created["status"] == "waiting_for_user"
    llm.enqueue_tool_call("pin", {"content": "The customer is ACME-42.", "label": "customer"})
    llm.enqueue_text("Pinned the customer id.")
    llm.enqueue_text("The weather is fine.")
    llm.enqueue_tool_call("recall", {"turn": 1})
    llm.enqueue_text("In turn 1 you told me the customer is ACME-42.")
    messages = ["Our customer is ACME-42; keep it.", "How is the weather?", "What did I say first?"]
    pids = []
    for text in messages:
        with worker() as w:
            r = alice_client.post(
                f"/api/v1/conversations/{conv_id}/messages",
                {"content": text},
                content_type="application/json",
            )
            assert r.status_code == 202, r.content
            # A second message while the turn is queued or running is refused.
            busy = alice_client.post(
                f"/api/v1/conversations/{conv_id}/messages",
                {"content": "again"},
                content_type="application/json",
            )
            assert busy.status_code == 409 and busy.json()["error"]
            conv = wait_status(conv_id, "waiting_for_user", "failed")
            assert conv.status == "waiting_for_user", conv.reason
            pids.append(w.pid)
    assert len(set(pids)) == 3
    conv = Conversation.objects.get(pk=conv_id)
    assert [t["turn"] for t in conv.transcript] == [1, 2, 3]
    # The pin survived two hand-overs: turn 3's request still carried the pinned block.
    assert len(llm.requests) == before + 5
    last = llm.requests[-2].json  # turn 3's first request (answered with the recall call)
    assert any("ACME-42" in str(m.get("content")) for m in last["messages"] if m["role"] == "system")
    assert [p["label"] for p in conv.active_pins()] == ["customer"]
    recall = PrimitiveEvent.objects.get(run__run_id=conv.run_id, primitive="recall")
    assert recall.ok and recall.turn_number == 3
    assert "ACME-42" in json.dumps(recall.result)


def test_it_runs_a_pool_with_per_agent_primitives(
    shared_worker: Worker, bob_client: Client, project: Project
) -> None:
    scenario = get_scenario("pool-demo")
    script = [
        {"agent": a, "content": t} for a, t in zip(scenario.script_agents, scenario.script, strict=True)
    ]
    script.append({"agent": "observer", "content": "Anything to add?"})
    created = start(
        bob_client,
        project=str(project.pk),
        provider="scripted",
        model="pool-demo",
        cognitive_primitives=["recall", "pin"],
        agents=[
            {"name": "researcher"},  # inherits recall + pin
            {"name": "writer", "cognitive_primitives": ["recall"]},  # overrides
            {"name": "observer", "cognitive_primitives": []},  # opts out
        ],
        script=script,
    )
    conv = wait_status(created["id"], "completed", "failed")
    assert conv.status == "completed", conv.reason
    run = Run.objects.get(project=project, run_id=created["run_id"])
    assert sorted(run.agents) == ["observer", "researcher", "writer"]

    def tools(agent: str) -> set[str]:
        step = Step.objects.filter(run=run, agent=agent).exclude(prompt_snapshot=None).first()
        assert step is not None
        return {t["function"]["name"] for t in step.prompt_snapshot["tools"]}

    assert {"recall", "pin", "unpin"} <= tools("researcher")
    assert "recall" in tools("writer") and "pin" not in tools("writer")
    assert not {"recall", "pin", "unpin"} & tools("observer")
    assert PrimitiveEvent.objects.filter(run=run, agent="researcher", primitive="pin").exists()
    assert PrimitiveEvent.objects.filter(run=run, agent="writer", primitive="recall", ok=True).exists()


def test_it_cancels_a_running_conversation_after_the_current_step(
    shared_worker: Worker, api_client: Client, project: Project, llm: OpenAIServer
) -> None:
    before = len(llm.requests)
    # No reply for a second step: asking for one would get 418 and fail the conversation.
    llm.enqueue_tool_call("pin", {"content": "slow fact"}, delay=3)
    created = start(
        api_client,
        provider="loop",
        cognitive_primitives=["pin"],
        script=["Pin something slowly.", "Then more."],
    )
    wait_for(lambda: len(llm.requests) > before, what="the first provider request")
    r = api_client.post(f"/api/v1/conversations/{created['id']}/cancel")
    assert r.status_code == 202 and r.json()["cancel_requested"] is True

    conv = wait_status(created["id"], "cancelled", "completed", "failed")

    assert conv.status == "cancelled" and "cancel" in conv.reason
    assert len(llm.requests) == before + 1  # the step in flight finished; no second step was asked for
    events = events_of(project, created["run_id"])
    assert any(e["event_type"] == "cognitive_primitive" for e in events)  # the current step completed
    stops = [e for e in events if e["stop_reason"] == "user_cancelled"]
    assert len(stops) == 1


def test_it_fails_with_an_error_event_when_the_provider_answers_500(
    shared_worker: Worker, api_client: Client, project: Project, llm: OpenAIServer
) -> None:
    for _ in range(2):  # the first answer and the one retry (max_retries=1)
        llm.enqueue_error(500, message="upstream exploded")
    created = start(api_client, provider="loop", script=["Hello?", "Anyone?"])

    conv = wait_status(created["id"], "failed", "completed")

    assert conv.status == "failed"
    assert "500" in conv.reason and "provider" in conv.reason
    assert conv.finished_at is not None and conv.cursor == 0
    errors = [e for e in events_of(project, created["run_id"]) if e["event_type"] == "error"]
    assert len(errors) == 1 and errors[0]["metadata"]["status_code"] == 500
    assert Run.objects.get(project=project, run_id=created["run_id"]).status == Run.Status.FAILED


@pytest.mark.parametrize("provider", ["loop", "loop-stream"])
def test_it_talks_to_an_openai_compatible_server(
    shared_worker: Worker, api_client: Client, project: Project, llm: OpenAIServer, provider: str
) -> None:
    before = len(llm.requests)
    llm.enqueue_text("First answer.")
    llm.enqueue_text("Second answer.")
    created = start(api_client, provider=provider, script=["one", "two"], system="Be brief.")

    conv = wait_status(created["id"], "completed", "failed")

    assert conv.status == "completed", conv.reason
    assert [t["assistant"] for t in conv.transcript] == ["First answer.", "Second answer."]
    sent = [r.json for r in llm.requests[before:]]
    assert [bool(b.get("stream")) for b in sent] == [provider == "loop-stream"] * 2
    assert sent[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    run = Run.objects.get(project=project, run_id=created["run_id"])
    assert run.turns == 2 and run.status == Run.Status.COMPLETED


@pytest.mark.slow
def test_it_survives_a_worker_killed_mid_turn(
    api_client: Client, project: Project, llm: OpenAIServer, settings: Any
) -> None:
    settings.ARCANA_AGENTS_QUEUE = f"agents-sigkill-{uuid.uuid4().hex[:8]}"
    fast_lease = {"ARCANA_CONVERSATION_LEASE_SECONDS": "3", "ARCANA_CONVERSATION_SWEEP_SECONDS": "1"}
    before = len(llm.requests)
    llm.enqueue_text("Turn one answered.")
    llm.enqueue_text("This answer never arrives: its worker is killed while waiting.", delay=8)
    llm.enqueue_text("Turn two answered after the crash.")
    llm.enqueue_text("Turn three answered.")
    with worker(env=fast_lease) as first:
        created = start(api_client, provider="loop", script=["one", "two", "three"])
        wait_for(lambda: len(llm.requests) >= before + 2, what="turn 2's provider request")
        # Turn 2's context decision (written before the request) is in the store: the re-run must
        # not store it a second time.
        turn2 = Event.objects.filter(project=project, run_id=created["run_id"], turn=2)
        wait_for(turn2.exists, what="turn 2's first events")
        conv = Conversation.objects.get(pk=created["id"])
        assert conv.status == "running" and conv.cursor == 1
        first.kill()

    # A new worker whose beat runs the sweeper: the lease expires, the conversation is queued again,
    # and turn 2 re-runs from the saved state with the same step ids.
    with worker(env=fast_lease, beat=True):
        conv = wait_status(created["id"], "completed", "failed", timeout=120)

    assert conv.status == "completed", conv.reason
    assert [t["assistant"] for t in conv.transcript] == [
        "Turn one answered.",
        "Turn two answered after the crash.",
        "Turn three answered.",
    ]
    events = events_of(project, created["run_id"])
    kinds = sorted((e["metadata"]["console_turn"], e["event_type"]) for e in events)
    expected = sorted(
        (turn, kind)
        for turn in (1, 2, 3)
        for kind in ("context_decision", "prompt_snapshot", "turn", "llm_call")
    )
    assert kinds == expected  # nothing twice, nothing missing
    run = Run.objects.get(project=project, run_id=created["run_id"])
    assert run.events == len(expected) and run.turns == 3 and run.status == Run.Status.COMPLETED


@pytest.mark.slow
def test_a_stopping_worker_hands_the_rest_of_a_conversation_back_after_the_turn_in_progress(
    api_client: Client, project: Project, llm: OpenAIServer, settings: Any
) -> None:
    # A prefork worker, as scripts/run starts it: the turn runs in a pool process that ignores the
    # SIGTERM its main process gets, and must still learn that the worker is stopping.
    settings.ARCANA_AGENTS_QUEUE = f"agents-stop-{uuid.uuid4().hex[:8]}"
    before = len(llm.requests)
    llm.enqueue_text("Turn one answered.")
    llm.enqueue_text("Turn two answered while its worker stops.", delay=3)
    llm.enqueue_text("Turn three answered by the next worker.")
    with worker(pool="prefork") as first:
        created = start(api_client, provider="loop", script=["one", "two", "three"])
        wait_for(lambda: len(llm.requests) >= before + 2, what="turn 2's provider request")
        first.proc.send_signal(signal.SIGTERM)
        # Warm shutdown: turn 2 is finished and stored, turn 3 is not started.
        assert first.proc.wait(timeout=30) == 0, first.log_text()[-3000:]

    conv = Conversation.objects.get(pk=created["id"])
    assert (conv.status, conv.cursor, conv.lease_owner) == ("queued", 2, "")
    assert [t["assistant"] for t in conv.transcript] == [
        "Turn one answered.",
        "Turn two answered while its worker stops.",
    ]
    assert len(llm.requests) == before + 2
    assert "handed back to the queue at turn 3" in first.log_text()

    # The task it sent on its way out is taken by the next worker, which runs turn 3 from the saved
    # state: no lease to wait for, no sweeper needed.
    with worker():
        conv = wait_status(created["id"], "completed", "failed", timeout=60)
    assert conv.status == "completed", conv.reason
    assert [t["assistant"] for t in conv.transcript][2] == "Turn three answered by the next worker."
    events = events_of(project, created["run_id"])
    turns = sorted((e["metadata"]["console_turn"], e["event_type"]) for e in events)
    assert turns == sorted(
        (turn, kind)
        for turn in (1, 2, 3)
        for kind in ("context_decision", "prompt_snapshot", "turn", "llm_call")
    )
