"""Calibrated token counts reach the store marked as estimates (pages show "≈")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime import CallableSink, Runtime, RuntimeConfig
from tests.runtime.openai_server import OpenAIServer
from traces import ingest
from traces.models import ContextDecision, Project, Run


def _run(model: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with OpenAIServer() as server:
        server.enqueue_text("one", usage={"prompt_tokens": 80, "completion_tokens": 1, "total_tokens": 81})
        server.enqueue_text("two", usage={"prompt_tokens": 120, "completion_tokens": 1, "total_tokens": 121})
        rt = Runtime(
            {"llm": {"base_url": server.base_url, "model": model}},
            config=RuntimeConfig(trace_dir=None),
            trace_sinks=[CallableSink(events.append)],
        )

        async def go() -> None:
            async with rt.chat() as chat:
                await chat.send("hello")
                await chat.send("again")
            await rt.aclose()

        asyncio.run(go())
    return events


@pytest.mark.parametrize(("model", "estimated"), [("glm-4-flash", True), ("gpt-4o-mini", False)])
def test_it_marks_calibrated_counts_as_estimates(project: Project, model: str, estimated: bool) -> None:
    events = _run(model)

    result = ingest.ingest_events(project, events, source="api")

    assert result.rejected == 0
    run = Run.objects.get(project=project, run_id=events[0]["run_id"])
    assert run.tokens_estimated is estimated
    assert [d.estimated for d in ContextDecision.objects.filter(run=run)] == [estimated, estimated]
