"""What filled the context: per step, the tokens sent by part, for a recorded decision (our runtime's
trace with a pin and a recall) and a reconstructed one (an OTLP conversation); the turn page draws a
stacked bar per step and the run overview a band over the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import Client

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
    overview = alice_client.get(run.get_absolute_url()).content.decode()
    assert 'id="ctx-band-title"' in overview
    band = run_band(run, "")
    assert band is not None and len(band["steps"]) == len(decisions)
    assert f'href="{band["steps"][0].href}"' in overview


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
