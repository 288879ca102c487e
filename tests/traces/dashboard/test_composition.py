"""What filled the context: per step, the tokens sent by part, for a recorded decision (our runtime's
trace with a pin and a recall) and a reconstructed one (an OTLP conversation); the turn page draws a
stacked bar per step and the run overview a band over the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from opentelemetry.sdk.trace import TracerProvider

from runtime._tokens import default_counter
from runtime.otlp._recorded import openai_tool
from tests.traces.otlp import test_api as otlp_api
from tests.traces.otlp.test_api import _json_body, _json_span, _text
from traces.dashboard.composition import compose, run_band, step_composition
from traces.models import ContextDecision, Project, Run, message_decision_rows

from ..runtime_trace import write_runtime_trace
from ..views_helpers import OUR_RUN, ingest_file, ingest_samples


def _sent(d: ContextDecision) -> int:
    return sum(
        r[6] or 0 for r in message_decision_rows(d.message_table) if r[2] not in ("dropped", "summarized")
    )


def test_a_recorded_decision_splits_by_role_pins_and_recalls(project: Project, alice_client: Client) -> None:
    ingest_samples(project)
    run = Run.objects.get(project=project, run_id=OUR_RUN)
    decisions = list(
        ContextDecision.objects.filter(run=run).select_related("step").order_by("turn_number", "step_number")
    )
    comps = [compose(d, d.step.prompt_snapshot) for d in decisions]
    for d, c in zip(decisions, comps, strict=True):
        report = d.report or {}
        # Every message sent is in exactly one part; tool schemas and summaries come from the report.
        extra = (report.get("tools_tokens") or d.budget_tools or 0) + (report.get("summary_tokens") or 0)
        assert c.total == _sent(d) + extra
        assert c.origin == "recorded"
        assert c.tokens["system"] > 0 and c.tokens["user"] > 0
    pinned = [c for d, c in zip(decisions, comps, strict=True) if d.pinned_count]
    assert pinned and all(c.tokens["pins"] > 0 for c in pinned)
    assert all(c.tokens["tools"] == 300 for c in comps)  # the report's tool schemas
    page = alice_client.get(run.turn_url(2)).content.decode()
    assert (
        page.count("data-context-composition")
        == ContextDecision.objects.filter(run=run, turn_number=2).count()
    )
    assert "recalled turns" in page or "pins" in page
    # The overview links the band's fragment (run.js puts it in place), which draws the band.
    overview = alice_client.get(run.get_absolute_url()).content.decode()
    assert f'data-band-url="{run.band_url()}"' in overview and 'id="ctx-band-title"' not in overview
    fragment = alice_client.get(run.band_url())
    assert fragment.status_code == 200 and fragment.has_header("ETag")
    drawn = fragment.content.decode()
    assert 'id="ctx-band-title"' in drawn
    band = run_band(run, "")
    assert band is not None and len(band["steps"]) == len(decisions)
    assert f'href="{band["steps"][0].href}"' in drawn
    again = alice_client.get(run.band_url(), HTTP_IF_NONE_MATCH=fragment["ETag"])
    assert again.status_code == 304


def test_a_recall_result_is_told_apart_by_the_prompt_snapshot(
    project: Project, alice_client: Client, tmp_path: Path
) -> None:
    ingest_file(project, write_runtime_trace(tmp_path))  # pins, calls a tool, recalls turn 1
    run = Run.objects.get(project=project)
    decisions = (
        ContextDecision.objects.filter(run=run).select_related("step").order_by("turn_number", "step_number")
    )
    comps = {(d.turn_number, d.step_number): compose(d, d.step.prompt_snapshot) for d in decisions}
    recalled = [key for key, c in comps.items() if c.tokens["recalled"]]
    assert recalled and all(key[0] >= 2 for key in recalled)  # the recall is made in turn 2
    assert any(c.tokens["tool_results"] for c in comps.values())  # the weather lookup stays a tool result
    turn, step = recalled[0]
    page = alice_client.get(run.turn_url(turn)).content.decode()
    assert "recalled turns" in page


@pytest.mark.django_db(transaction=True)
def test_a_reconstructed_decision_shows_its_parts(client: Client, api_key: str, alice_client: Client) -> None:
    trace = "8b8efff798038103d269b633813fc60c"
    first = [_text("system", "You are a careful agent. Never delete data."), _text("user", "Clean the logs.")]
    second = [*first, _text("assistant", "Cleaned."), _text("user", "Now archive them.")]
    spans = [
        _json_span(trace, f"{n:016x}", "chat m", start=n, end=n + 1, attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": "comp-1",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 40 * n,
            "gen_ai.usage.output_tokens": 5,
            "gen_ai.input.messages": json.dumps(msgs),
            "gen_ai.output.messages": json.dumps([_text("assistant", "Done.")]),
        })
        for n, msgs in ((1, first), (3, second))
    ]  # fmt: skip
    r = client.post("/v1/traces", _json_body(spans), content_type="application/json", HTTP_X_API_KEY=api_key)
    assert r.status_code == 200
    run = Run.objects.get(run_id="comp-1")
    last = (
        ContextDecision.objects.filter(run=run)
        .select_related("step")
        .order_by("-turn_number", "-step_number")[0]
    )
    comp = step_composition(last.step, last)
    assert comp is not None and comp.origin == "reconstructed"
    assert comp.tokens["system"] > 0 and comp.tokens["user"] > 0 and comp.tokens["assistant"] > 0
    assert comp.total == _sent(last)
    page = alice_client.get(run.turn_url(last.turn_number)).content.decode()
    assert "data-context-composition" in page and "reconstructed from the messages the call received" in page


#: The OpenTelemetry SDK exporting each span as it ends to the live server (tests/traces/otlp).
exporter_provider = otlp_api.exporter_provider

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "the city"}},
        "required": ["city"],
    },
}


def _tools_of(run: Run) -> list[int]:
    decisions = ContextDecision.objects.filter(run=run).select_related("step").order_by("step_number")
    return [step_composition(d.step, d).tokens["tools"] for d in decisions]  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)
def test_tool_schemas_of_otlp_spans_fill_their_part_of_the_context(
    exporter_provider: TracerProvider, project: Project, alice_client: Client
) -> None:
    """Spans made by the OpenTelemetry SDK and sent over OTLP: a GenAI chat span with
    `gen_ai.tool.definitions` and an OpenInference LLM span with `llm.tools.0.tool.json_schema` — each
    step's reconstructed composition counts the schemas as `TokenCounter.count_tools` does; a span
    with no tool definitions has none."""
    tracer = exporter_provider.get_tracer("my.app")
    expected = default_counter().count_tools([openai_tool(WEATHER_TOOL)])
    assert expected > 20
    for n, conversation in enumerate(("tools-genai", "tools-none")):
        with tracer.start_as_current_span("invoke_agent helper") as agent:
            agent.set_attributes(
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": conversation}
            )
            attrs: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps(
                    [_text("system", "Be brief."), _text("user", f"Rome? {n}")]
                ),
                "gen_ai.output.messages": json.dumps([_text("assistant", "Sunny.")]),
            }
            if conversation == "tools-genai":
                attrs["gen_ai.tool.definitions"] = json.dumps([WEATHER_TOOL])
            with tracer.start_as_current_span("chat gpt-4o") as span:
                span.set_attributes(attrs)
    oi_schema = {"type": "function", "function": {k: v for k, v in WEATHER_TOOL.items() if k != "type"}}
    with tracer.start_as_current_span("Agent workflow") as chain:
        chain.set_attributes({"openinference.span.kind": "CHAIN", "session.id": "tools-oi"})
        with tracer.start_as_current_span("ChatCompletion") as llm:
            llm.set_attributes(
                {
                    "openinference.span.kind": "LLM",
                    "session.id": "tools-oi",
                    "llm.model_name": "gpt-4o",
                    "llm.input_messages.0.message.role": "system",
                    "llm.input_messages.0.message.content": "Be brief.",
                    "llm.input_messages.1.message.role": "user",
                    "llm.input_messages.1.message.content": "Rome?",
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": "Sunny.",
                    "llm.tools.0.tool.json_schema": json.dumps(oi_schema),
                }
            )
    exporter_provider.force_flush()
    genai, none, oi = (
        Run.objects.get(project=project, run_id=r) for r in ("tools-genai", "tools-none", "tools-oi")
    )
    assert _tools_of(genai) == [expected]
    assert _tools_of(oi) == [expected]
    assert _tools_of(none) == [0]
    # The turn page's bar has the part, with its tokens.
    page = alice_client.get(genai.turn_url(1)).content.decode()
    assert "tool schemas" in page and f"{expected}" in page
