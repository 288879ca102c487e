"""`POST /v1/traces`: real OpenTelemetry exporters and a real Pydantic AI agent send spans over HTTP to
a live server; what the read API and the pages then show is asserted, with the OTLP answers for bad
input (the valid spans of a request are stored)."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from django.test import Client
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode
from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.runtime.openai_server import OpenAIServer
from traces.models import Project, Run, Span, Step

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def exporter_provider(live_server: Any, api_key: str) -> Iterator[TracerProvider]:
    """The SDK exporting each span as it ends, as protobuf over HTTP, to the live server — configured
    only with the endpoint and the key, as a user would."""
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-app"}))
    exporter = OTLPSpanExporter(
        endpoint=f"{live_server.url}/v1/traces", headers={"Authorization": f"Bearer {api_key}"}
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def _chat(
    tracer: Any, name: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], **attrs: Any
) -> None:
    with tracer.start_as_current_span(name) as span:
        span.set_attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps(inputs),
                "gen_ai.output.messages": json.dumps(outputs),
                "gen_ai.usage.input_tokens": 11,
                "gen_ai.usage.output_tokens": 4,
                **attrs,
            }
        )


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def test_an_sdk_export_becomes_a_run_the_api_and_pages_show(
    exporter_provider: TracerProvider, project: Project, api_client: Client, alice_client: Client
) -> None:
    tracer = exporter_provider.get_tracer("my.app")
    call = {"type": "tool_call", "id": "c1", "name": "search", "arguments": {"q": "Rome"}}
    result = {"type": "tool_call_response", "id": "c1", "name": "search", "result": "Rome: 24C"}
    with tracer.start_as_current_span("invoke_agent planner") as agent:
        agent.set_attributes(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "planner",
                "gen_ai.conversation.id": "c-42",
            }
        )
        _chat(
            tracer,
            "chat gpt-4o",
            [_text("user", "Plan a trip <b>now</b>")],
            [{"role": "assistant", "parts": [call]}],
        )
        with tracer.start_as_current_span("execute_tool search") as tool:
            tool.set_attributes(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.id": "c1",
                }
            )
            tool.set_status(Status(StatusCode.ERROR, "search timed out"))
        _chat(
            tracer,
            "chat gpt-4o",
            [
                _text("user", "Plan a trip <b>now</b>"),
                {"role": "assistant", "parts": [call]},
                {"role": "user", "parts": [result]},
            ],
            [_text("assistant", "Go to Rome.")],
            **{"app.customer": "acme"},
        )
    exporter_provider.force_flush()

    assert Span.objects.filter(project=project).count() == 4
    runs = api_client.get("/api/v1/runs").json()["results"]
    [run] = [r for r in runs if r["run_id"] == "c-42"]
    assert run["source"] == "otlp" and run["tokens"] == 30 and run["model"] == "gpt-4o"
    detail = api_client.get(run["url"]).json()
    assert [t["number"] for t in detail["turn_list"]] == [1]
    turn = api_client.get(detail["turn_list"][0]["url"]).json()
    steps = turn["steps"]
    assert [s["step"] for s in steps] == [1, 2]
    assert steps[0]["tool_calls"] == [{"id": "c1", "name": "search", "arguments": {"q": "Rome"}}]
    assert steps[1]["assistant_text"] == "Go to Rome."
    snapshot = steps[1]["prompt_snapshot"]["messages"]
    assert snapshot[-1] == {"role": "user", "tool_call_id": "c1", "name": "search", "content": "Rome: 24C"}
    # The page: the messages each call received, escaped; the tool result is no empty user box.
    page = alice_client.get(Run.objects.get(run_id="c-42").turn_url(1)).content.decode()
    assert "Plan a trip &lt;b&gt;now&lt;/b&gt;" in page and "<b>now</b>" not in page
    assert "Rome: 24C" in page and "Go to Rome." in page
    assert "search timed out" in page
    # Unknown attributes are kept (raw span) and reach the read API's events.
    events = api_client.get(run["events_url"] + "?type=turn").json()["results"]
    assert any(e["event"]["metadata"]["otlp"]["span_id"] for e in events)


def test_spans_arrive_in_any_order_and_a_late_parent_folds_its_trace_into_the_conversation(
    client: Client, project: Project, api_key: str
) -> None:
    """A chat span sent before its agent span (which alone names the conversation) first makes a run
    of its trace; once the parent arrives the run is the conversation's, and the trace's run is gone.
    Sending everything again changes nothing."""
    trace = "5b8efff798038103d269b633813fc60c"
    chat = _json_span(
        trace,
        "eee19b7ec3c1b174",
        "chat gpt-4o",
        parent="eee19b7ec3c1b173",
        start=2,
        end=3,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([_text("user", "Hi")]),
            "gen_ai.output.messages": json.dumps([_text("assistant", "Hello")]),
        },
    )
    agent = _json_span(
        trace,
        "eee19b7ec3c1b173",
        "invoke_agent a",
        start=1,
        end=4,
        attrs={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "a",
            "gen_ai.conversation.id": "conv-late",
        },
    )
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    r = client.post("/v1/traces", _json_body([chat]), content_type="application/json", **auth)
    assert r.status_code == 200 and r.json() == {"partialSuccess": {}}
    assert set(Run.objects.filter(project=project).values_list("run_id", flat=True)) == {trace}
    r = client.post("/api/v1/otlp/v1/traces", _json_body([agent]), content_type="application/json", **auth)
    assert r.status_code == 200
    assert set(Run.objects.filter(project=project).values_list("run_id", flat=True)) == {"conv-late"}
    steps = list(Step.objects.filter(run__run_id="conv-late").values_list("assistant_text", flat=True))
    assert steps == ["Hello"]
    before = (Span.objects.count(), Step.objects.count())
    r = client.post("/v1/traces", _json_body([agent, chat]), content_type="application/json", **auth)
    assert r.status_code == 200 and (Span.objects.count(), Step.objects.count()) == before


def test_two_projects_reusing_a_conversation_id_never_merge(
    client: Client, project: Project, api_key: str, charlie_project: Project
) -> None:
    from traces.teams.actions import do_create_api_key

    other_key = do_create_api_key(charlie_project, None, "other", "ingest")[1]
    span = _json_span(
        "5b8efff798038103d269b633813fc6aa",
        "abc19b7ec3c1b174",
        "chat m",
        start=1,
        end=2,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": "shared-id",
            "gen_ai.input.messages": json.dumps([_text("user", "mine")]),
        },
    )
    for key in (api_key, other_key):
        r = client.post("/v1/traces", _json_body([span]), content_type="application/json", HTTP_X_API_KEY=key)
        assert r.status_code == 200
    runs = Run.objects.filter(run_id="shared-id")
    assert sorted(r.project_id for r in runs) == sorted([project.pk, charlie_project.pk])
    assert all(r.steps == 1 for r in runs) and Span.objects.count() == 2


def _json_span(
    trace: str,
    span: str,
    name: str,
    *,
    start: int,
    end: int,
    attrs: dict[str, Any],
    parent: str | None = None,
) -> dict[str, Any]:
    def value(v: Any) -> dict[str, Any]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        return {"stringValue": str(v)}

    out = {
        "traceId": trace,
        "spanId": span,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(1_764_000_000_000_000_000 + start * 1_000_000),
        "endTimeUnixNano": str(1_764_000_000_000_000_000 + end * 1_000_000),
        "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
    }
    if parent:
        out["parentSpanId"] = parent
    return out


def _json_body(spans: list[dict[str, Any]]) -> bytes:
    return json.dumps(
        {
            "resourceSpans": [
                {"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}
            ]
        }
    ).encode()


GOOD = _json_span(
    "5b8efff798038103d269b633813fc60d",
    "aaa19b7ec3c1b174",
    "chat m",
    start=1,
    end=2,
    attrs={
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps([_text("user", "ok")]),
    },
)


@pytest.mark.parametrize(
    ("body", "content_type", "extra", "status"),
    [
        (b"\x0a\xff\xff\xff", "application/x-protobuf", {}, 400),
        (b"{not json", "application/json", {}, 400),
        (_json_body([GOOD]), "text/plain", {}, 415),
        (_json_body([GOOD]), "application/json", {"HTTP_CONTENT_ENCODING": "br"}, 415),
        (b"\x1f\x8b\x08not gzip", "application/json", {"HTTP_CONTENT_ENCODING": "gzip"}, 400),
    ],
)
def test_an_unreadable_request_is_answered_as_otlp_says(
    client: Client, api_key: str, body: bytes, content_type: str, extra: dict[str, str], status: int
) -> None:
    r = client.post(
        "/v1/traces", body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {api_key}", **extra
    )
    assert r.status_code == status
    assert Span.objects.count() == 0


def test_the_valid_spans_of_a_request_are_stored_and_the_refused_ones_named(
    client: Client, api_key: str
) -> None:
    bad = [
        {**GOOD, "spanId": ""},  # a span without its id
        {**GOOD, "spanId": "bbb19b7ec3c1b174", "startTimeUnixNano": "0"},  # a time of 0
        {
            **GOOD,
            "spanId": "ccc19b7ec3c1b174",
            "attributes": [{"key": "x", "value": {"stringValue": "a\u0000b"}}],
        },
    ]
    r = client.post(
        "/v1/traces", _json_body([GOOD, *bad]), content_type="application/json", HTTP_X_API_KEY=api_key
    )
    assert r.status_code == 200
    partial = r.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "3" and "3 of 4 spans rejected" in partial["errorMessage"]
    assert list(Span.objects.values_list("span_id", flat=True)) == ["aaa19b7ec3c1b174"]


def test_protobuf_errors_carry_a_status_and_no_key_is_401(client: Client) -> None:
    r = client.post("/v1/traces", b"", content_type="application/x-protobuf")
    assert r.status_code == 401 and r["Content-Type"] == "application/x-protobuf"
    assert b"\x08\x10" in r.content  # google.rpc.Status code 16 (UNAUTHENTICATED)


def test_gzip_and_the_size_limit(client: Client, api_key: str, settings: Any) -> None:
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    r = client.post(
        "/v1/traces",
        gzip.compress(_json_body([GOOD])),
        content_type="application/json",
        HTTP_CONTENT_ENCODING="gzip",
        **auth,
    )
    assert r.status_code == 200 and Span.objects.count() == 1
    settings.ARCANA_MAX_INGEST_BYTES = 1000
    big = gzip.compress(_json_body([{**GOOD, "spanId": "ddd19b7ec3c1b174", "name": "x" * 5000}]))
    r = client.post("/v1/traces", big, content_type="application/json", HTTP_CONTENT_ENCODING="gzip", **auth)
    assert r.status_code == 413 and Span.objects.count() == 1


def test_a_real_pydantic_ai_agent_configured_with_only_the_endpoint_and_key(
    exporter_provider: TracerProvider, openai_server: OpenAIServer, api_client: Client, alice_client: Client
) -> None:
    client = openai.AsyncOpenAI(base_url=openai_server.base_url, api_key="k", max_retries=0)
    model = OpenAIChatModel("loopback-model", provider=OpenAIProvider(openai_client=client))
    settings = InstrumentationSettings(tracer_provider=exporter_provider, version=5, include_content=True)
    agent: Agent[None, str] = Agent(
        model,
        name="weather_agent",
        system_prompt="You are a weather bot.",
        capabilities=[Instrumentation(settings=settings)],
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather of a city."""
        return f"sunny in {city}"

    async def main() -> None:
        async with client:
            openai_server.enqueue_tool_call("get_weather", {"city": "Paris"})
            openai_server.enqueue_text("It is sunny in Paris.")
            await agent.run("What's the weather in Paris?", conversation_id="pyd-1")

    asyncio.run(main())
    exporter_provider.force_flush()

    run = Run.objects.get(run_id="pyd-1")
    assert run.source == "otlp" and run.status == "completed"
    steps = list(Step.objects.filter(run=run).order_by("turn_number", "number"))
    assert len(steps) == 2 and all(s.prompt_tokens > 0 for s in steps)
    assert steps[0].tool_calls[0]["name"] == "get_weather"
    assert steps[1].assistant_text == "It is sunny in Paris."
    received = [m["content"] for m in steps[1].prompt_snapshot["messages"]]
    assert (
        received[:2] == ["You are a weather bot.", "What's the weather in Paris?"]
        and "sunny in Paris" in received
    )
    page = alice_client.get(run.turn_url(1)).content.decode()
    assert "What&#x27;s the weather in Paris?" in page and "sunny in Paris" in page


def test_the_response_is_an_export_trace_service_response(client: Client, api_key: str) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = (
        bytes.fromhex(GOOD["traceId"]),
        bytes.fromhex(GOOD["spanId"]),
        "chat m",
    )
    span.start_time_unix_nano, span.end_time_unix_nano = 1_764_000_000_000_000_000, 1_764_000_001_000_000_000
    r = client.post(
        "/v1/traces",
        request.SerializeToString(),
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
    )
    assert r.status_code == 200 and r["Content-Type"] == "application/x-protobuf"
    answer = ExportTraceServiceResponse.FromString(r.content)
    assert answer.partial_success.rejected_spans == 0 and Span.objects.count() == 1
