"""`traces.ingest.spans`: a conversation's spans in any batches and any order — one writer after the
other, or concurrent writers on PostgreSQL — give the events and projections of sending them all at
once, with the run's tallies right (the same run derived again never counts its events twice)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from django.db import connection

from runtime.otlp import decode_request
from tests.traces.helpers import projection_snapshot
from tests.traces.ingest.test_ingest_ours import _concurrently
from traces.ingest.spans import do_ingest_spans
from traces.models import Event, Project, Run, Span

T0 = 1_764_000_000_000_000_000


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def conversation(key: str, calls: int, trace: str) -> list[dict[str, Any]]:
    """The decoded spans of one conversation of `calls` chat calls, each call's input the history so
    far (every third call trims the oldest exchange)."""
    history: list[dict[str, Any]] = [_text("system", "Be brief. Never share the key.")]
    body_spans = []
    for n in range(1, calls + 1):
        history.append(_text("user", f"question {n} of {key}"))
        if n % 3 == 0:
            history = [history[0], *history[3:]]
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": key,
            "gen_ai.request.model": "m",
            "gen_ai.input.messages": json.dumps(history),
            "gen_ai.output.messages": json.dumps([_text("assistant", f"answer {n}")]),
            "gen_ai.usage.input_tokens": 10 * n,
            "gen_ai.usage.output_tokens": 2,
        }
        body_spans.append(
            {
                "traceId": trace,
                "spanId": f"{n:016x}",
                "name": "chat m",
                "startTimeUnixNano": str(T0 + n * 10**9),
                "endTimeUnixNano": str(T0 + n * 10**9 + 5 * 10**8),
                "attributes": [
                    {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
                    for k, v in attrs.items()
                ],
            }
        )
        history.append(_text("assistant", f"answer {n}"))
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": body_spans}]}]}).encode()
    return list(decode_request(body, "application/json").spans)


def _batches(spans: list[dict[str, Any]], size: int, seed: int) -> list[list[dict[str, Any]]]:
    shuffled = spans[:]
    random.Random(seed).shuffle(shuffled)
    return [shuffled[i : i + size] for i in range(0, len(shuffled), size)]


def _tallies_agree(project: Project) -> None:
    for run in Run.objects.filter(project=project):
        assert run.events == Event.objects.filter(project=project, run_id=run.run_id).count(), run.run_id


@pytest.mark.parametrize("size", [1, 3, 7])
def test_batches_in_any_order_give_the_run_of_one_batch(project: Project, size: int) -> None:
    spans = conversation("conv-a", 9, "5b8efff798038103d269b633813fc60c")
    reference = Project.objects.create(team=project.team, slug="reference")
    do_ingest_spans(reference, spans)
    for batch in _batches(spans, size, seed=size):
        do_ingest_spans(project, batch)
    assert projection_snapshot(project)["conv-a"] == projection_snapshot(reference)["conv-a"]
    _tallies_agree(project)
    _tallies_agree(reference)
    run = Run.objects.get(project=project, run_id="conv-a")
    assert run.steps == 9 and Span.objects.filter(project=project).count() == 9
    # Sending it all again stores nothing and changes nothing.
    do_ingest_spans(project, spans)
    assert Span.objects.filter(project=project).count() == 9
    assert projection_snapshot(project)["conv-a"] == projection_snapshot(reference)["conv-a"]
    _tallies_agree(project)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent writers need PostgreSQL")
@pytest.mark.postgres
def test_concurrent_writers_of_one_conversation_lose_nothing(
    transactional_db: None, project: Project
) -> None:
    spans = conversation("conv-c", 12, "6b8efff798038103d269b633813fc60c")
    spans += conversation("conv-d", 8, "7b8efff798038103d269b633813fc60c")
    reference = Project.objects.create(team=project.team, slug="reference-c")
    do_ingest_spans(reference, spans)
    parts = [spans[0::3], spans[1::3], spans[2::3]]

    def writer(part: list[dict[str, Any]]) -> None:
        for batch in _batches(part, 2, seed=len(part)):
            do_ingest_spans(project, batch)

    assert _concurrently(writer, parts) == []
    ours, theirs = projection_snapshot(project), projection_snapshot(reference)
    assert ours["conv-c"] == theirs["conv-c"] and ours["conv-d"] == theirs["conv-d"]
    assert Event.objects.filter(project=project).count() == Event.objects.filter(project=reference).count()
    _tallies_agree(project)
