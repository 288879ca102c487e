"""Context decisions reconstructed from the messages each model call received, for runs sent over
OTLP: a real Pydantic AI agent whose history processor trims, one that summarizes, and a hand-written
conversation that loses an instruction — what the read API, the runs filter and the pages show, with
the expected decisions written by hand."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from django.test import Client
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation, ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.runtime.openai_server import OpenAIServer
from tests.traces.otlp.test_api import _json_body, _json_span, _text
from traces.models import ContextDecision, Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def provider(live_server: Any, api_key: str) -> Iterator[TracerProvider]:
    p = TracerProvider()
    p.add_span_processor(
        SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=f"{live_server.url}/v1/traces", headers={"x-api-key": api_key})
        )
    )
    yield p
    p.shutdown()


def _agent(client: openai.AsyncOpenAI, provider: TracerProvider, name: str, **kw: Any) -> Agent[None, str]:
    model = OpenAIChatModel("loopback-model", provider=OpenAIProvider(openai_client=client))
    settings = InstrumentationSettings(tracer_provider=provider, version=5, include_content=True)
    return Agent(
        model, name=name, capabilities=[Instrumentation(settings=settings), *kw.pop("capabilities", [])], **kw
    )


def _outcomes(run: Run, api_client: Client, turn: int) -> list[list[tuple[str, str]]]:
    """Per step of the turn: (outcome, reason) of each message decision, from the read API."""
    steps = api_client.get(run.api_turn_url(turn)).json()["steps"]
    return [
        [(d["outcome"], d["reason"]) for d in s["decision"]["message_decisions"]] if s["decision"] else []
        for s in steps
    ]


def test_a_pydantic_ai_history_processor_that_trims_shows_what_it_dropped(
    provider: TracerProvider, openai_server: OpenAIServer, api_client: Client, alice_client: Client
) -> None:
    client = openai.AsyncOpenAI(base_url=openai_server.base_url, api_key="k", max_retries=0)

    def keep_last_request(messages: list[ModelMessage]) -> list[ModelMessage]:
        return messages[-1:]  # the new user message only: the earlier exchange is dropped

    agent = _agent(client, provider, "trimmer", capabilities=[ProcessHistory(keep_last_request)])

    async def main() -> None:
        async with client:
            openai_server.enqueue_text("Noted: the budget is 4,000 EUR.")
            first = await agent.run("My budget is 4,000 EUR.", conversation_id="trim-1")
            openai_server.enqueue_text("Pick any hotel.")
            await agent.run("Which hotel?", message_history=first.all_messages(), conversation_id="trim-1")

    asyncio.run(main())
    provider.force_flush()

    run = Run.objects.get(run_id="trim-1")
    assert _outcomes(run, api_client, 1) == [[("kept", "reconstructed_first_call")]]
    # Turn 2: the first user message and the first answer were dropped, the new question is new.
    assert sorted(_outcomes(run, api_client, 2)[0]) == [
        ("dropped", "reconstructed_dropped"),
        ("dropped", "reconstructed_dropped"),
        ("kept", "reconstructed_new_input"),
    ]
    decision = ContextDecision.objects.get(run=run, turn_number=2)
    assert decision.strategy == "reconstructed" and decision.dropped_count == 2
    assert decision.report["compaction"]["dropped"] and decision.report["origin"] == "reconstructed"
    lost = decision.report["lost_instructions"]
    assert [i["text"] for i in lost] == ["My budget is 4,000 EUR."]
    # The runs list filters by both; the turn page says where the decisions come from.
    found = {r["run_id"] for r in api_client.get("/api/v1/runs?had_compaction=1").json()["results"]}
    assert found == {"trim-1"}
    found = {r["run_id"] for r in api_client.get("/api/v1/runs?lost_instruction=1").json()["results"]}
    assert found == {"trim-1"}
    page = alice_client.get(run.turn_url(2)).content.decode()
    assert "Reconstructed from the messages the model received" in page
    # The run page lists where the compaction happened and which instruction it lost, from which call.
    overview = alice_client.get(run.get_absolute_url()).content.decode()
    assert "Compactions and lost instructions" in overview
    assert "<q>My budget is 4,000 EUR.</q>" in overview and "turn 2 · step 1" in overview


def test_a_pydantic_ai_summary_stands_for_the_range_it_replaced(
    provider: TracerProvider, openai_server: OpenAIServer, api_client: Client
) -> None:
    client = openai.AsyncOpenAI(base_url=openai_server.base_url, api_key="k", max_retries=0)
    summarizer = _agent(client, provider, "summarizer")

    async def summarize(messages: list[ModelMessage]) -> list[ModelMessage]:
        if len(messages) < 3:
            return messages
        summary = (await summarizer.run("Summarize the conversation so far.")).output
        return [ModelRequest(parts=[UserPromptPart(content=f"Summary: {summary}")]), messages[-1]]

    agent = _agent(client, provider, "chatty", capabilities=[ProcessHistory(summarize)])

    async def main() -> None:
        async with client:
            openai_server.enqueue_text("Hello Ann.")
            first = await agent.run("Hi, I am Ann.", conversation_id="sum-1")
            openai_server.enqueue_text(
                "Summary of the conversation so far: the user introduced herself as Ann and said hello."
            )
            openai_server.enqueue_text("You are Ann.")
            await agent.run("Who am I?", message_history=first.all_messages(), conversation_id="sum-1")

    asyncio.run(main())
    provider.force_flush()

    run = Run.objects.get(run_id="sum-1")
    last = (
        ContextDecision.objects.filter(run=run, agent__in=["", "chatty"])
        .order_by("turn_number", "step_number")
        .last()
    )
    assert last is not None
    outcomes = sorted(d["outcome"] for d in last.message_decisions)
    assert outcomes.count("summarized") == 2 and "kept" in outcomes


def test_a_constraint_lost_to_a_trim_is_listed_with_the_call_that_no_longer_saw_it(
    client: Client, api_key: str, api_client: Client
) -> None:
    trace = "7b8efff798038103d269b633813fc60c"
    system = "You are a coding agent. Never touch the auth module."
    first = [_text("system", system), _text("user", "Fix the login bug.")]
    second = [_text("user", "Now refactor the tests.")]  # the system prompt and history are gone
    spans = [
        _json_span(
            trace,
            "1001",
            "chat m",
            start=1,
            end=2,
            attrs={
                "gen_ai.operation.name": "chat",
                "gen_ai.conversation.id": "lost-1",
                "gen_ai.input.messages": json.dumps(first),
                "gen_ai.output.messages": json.dumps([_text("assistant", "Fixed.")]),
            },
        ),
        _json_span(
            trace,
            "1002",
            "chat m",
            start=3,
            end=4,
            attrs={
                "gen_ai.operation.name": "chat",
                "gen_ai.conversation.id": "lost-1",
                "gen_ai.input.messages": json.dumps(second),
                "gen_ai.output.messages": json.dumps([_text("assistant", "Refactored.")]),
            },
        ),
    ]
    for s in spans:
        s["spanId"] = s["spanId"].rjust(16, "0")
    r = client.post("/v1/traces", _json_body(spans), content_type="application/json", HTTP_X_API_KEY=api_key)
    assert r.status_code == 200
    run = Run.objects.get(run_id="lost-1")
    decisions = list(ContextDecision.objects.filter(run=run).order_by("turn_number", "step_number"))
    lost = [i for d in decisions for i in (d.report or {}).get("lost_instructions", [])]
    # The constraint of the system prompt and the user's imperative, both gone from the second call.
    assert sorted(i["text"] for i in lost) == ["Fix the login bug.", "Never touch the auth module."]
    assert all(i["first_missing_call_id"].endswith("0000000000001002") for i in lost)
    found = {r["run_id"] for r in api_client.get("/api/v1/runs?lost_instruction=true").json()["results"]}
    assert found == {"lost-1"}
