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
from traces.ingest.spans import do_derive_pending, do_ingest_spans
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
    transactional_db: None, project: Project, settings: Any
) -> None:
    # A writer that finds the project's span lock held leaves its spans pending for a worker: the
    # worker's derivation is run here once the writers are done (no worker reads this queue).
    settings.ARCANA_INGEST_QUEUE = "no-worker-reads-this"
    spans = conversation("conv-c", 12, "6b8efff798038103d269b633813fc60c")
    spans += conversation("conv-d", 8, "7b8efff798038103d269b633813fc60c")
    reference = Project.objects.create(team=project.team, slug="reference-c")
    do_ingest_spans(reference, spans)
    parts = [spans[0::3], spans[1::3], spans[2::3]]

    def writer(part: list[dict[str, Any]]) -> None:
        for batch in _batches(part, 2, seed=len(part)):
            do_ingest_spans(project, batch)

    assert _concurrently(writer, parts) == []
    do_derive_pending(project)
    assert Span.objects.filter(project=project, run_id="").count() == 0
    ours, theirs = projection_snapshot(project), projection_snapshot(reference)
    assert ours["conv-c"] == theirs["conv-c"] and ours["conv-d"] == theirs["conv-d"]
    assert Event.objects.filter(project=project).count() == Event.objects.filter(project=reference).count()
    _tallies_agree(project)


def _events(project: Project) -> dict[str, str]:
    return dict(Event.objects.filter(project=project).values_list("step_id", "raw"))


def _json_spans(trace: str, calls: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]) -> list[Any]:
    """Decoded chat spans of conversation `conv-t`, one a call: (input messages, output messages)."""
    out = []
    for n, (inp, outp) in enumerate(calls, start=1):
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": "conv-t",
            "gen_ai.input.messages": json.dumps(inp),
            "gen_ai.output.messages": json.dumps(outp),
        }
        out.append(
            {
                "traceId": trace,
                "spanId": f"{n:016x}",
                "name": "chat m",
                "startTimeUnixNano": str(T0 + n * 10**9),
                "endTimeUnixNano": str(T0 + n * 10**9 + 5 * 10**8),
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
            }
        )
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": out}]}]}).encode()
    return list(decode_request(body, "application/json").spans)


def test_calls_appended_in_order_keep_the_stored_events_and_give_the_run_of_one_batch(
    project: Project,
) -> None:
    spans = conversation("conv-a", 6, "5b8efff798038103d269b633813fc60c")
    reference = Project.objects.create(team=project.team, slug="reference")
    do_ingest_spans(reference, spans)
    do_ingest_spans(project, spans[:2])
    first = dict(Event.objects.filter(project=project).values_list("step_id", "pk"))
    for span in spans[2:]:
        do_ingest_spans(project, [span])
    # The earlier steps' events were not written again (the same rows), and the run is the one
    # sending everything at once gives.
    kept = dict(Event.objects.filter(project=project, step_id__in=list(first)).values_list("step_id", "pk"))
    assert kept == first
    assert _events(project) == _events(reference)
    assert projection_snapshot(project)["conv-a"] == projection_snapshot(reference)["conv-a"]
    _tallies_agree(project)


_SYSTEM = _text("system", "Never share the key with anyone at all. Always answer in French please.")
_USER = _text("user", "What is the weather in Paris today?")
_ASK = {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "weather", "arguments": {}}]}
_RESULT = {"role": "user", "parts": [{"type": "tool_call_response", "id": "c1", "result": "sunny"}]}
_DONE = _text("assistant", "Il fait beau.")
_MORE = _text("user", "And tomorrow in Paris, is it sunny?")
#: A tool result read from a later call's input; an instruction lost at one call and back at the next.
_LATER_CHANGES = {
    "tool result": [([_USER], [_ASK]), ([_USER, _ASK, _RESULT], [_DONE])],
    "instruction restored": [
        ([_SYSTEM, _USER], [_DONE]),
        ([_SYSTEM, _USER, _DONE, _MORE], [_DONE]),
        ([_USER, _DONE, _MORE, _DONE, _MORE], [_DONE]),  # the system instructions gone…
        ([_SYSTEM, _USER, _DONE, _MORE, _DONE, _MORE, _DONE, _MORE], [_DONE]),  # …and back
    ],
}


@pytest.mark.parametrize("case", list(_LATER_CHANGES))
def test_a_later_call_that_changes_an_earlier_step_derives_the_run_again(project: Project, case: str) -> None:
    """Appended one call at a time, the run is still the one of sending everything at once."""
    spans = _json_spans("8b8efff798038103d269b633813fc60c", _LATER_CHANGES[case])
    reference = Project.objects.create(team=project.team, slug="reference")
    do_ingest_spans(reference, spans)
    for span in spans:
        do_ingest_spans(project, [span])
    if case == "tool result":
        assert '"result":"sunny"' in next(v for k, v in _events(project).items() if k.endswith("-tool-1"))
    else:  # lost at the third call while it was the last, lost no more once the fourth came
        third = Project.objects.create(team=project.team, slug="third")
        do_ingest_spans(third, spans[:3])
        assert "lost_instructions" in "".join(_events(third).values())
        assert "lost_instructions" not in "".join(_events(reference).values())
    assert _events(project) == _events(reference)
    assert projection_snapshot(project)["conv-t"] == projection_snapshot(reference)["conv-t"]
    _tallies_agree(project)


def _toast_chunks() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'traces_span'::regclass"
        )
        (toast,) = cursor.fetchone()
        cursor.execute(f"SELECT count(*) FROM {toast}")
        return int(cursor.fetchone()[0])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="TOAST is PostgreSQL's")
@pytest.mark.postgres
def test_a_chat_span_of_seven_kilobytes_is_stored_in_its_row_not_in_toast(project: Project) -> None:
    words = random.Random(7).choices(["context", "window", "pin", "recall", "turn", "agent", "step"], k=1100)
    spans = conversation("conv-big", 1, "6b8efff798038103d269b633813fc60c")
    spans[0]["attributes"]["gen_ai.input.messages"] = json.dumps([_text("user", " ".join(words))])
    before = _toast_chunks()
    do_ingest_spans(project, spans)
    with connection.cursor() as cursor:
        cursor.execute("SELECT octet_length(body) FROM traces_span WHERE project_id = %s", [project.pk])
        (size,) = cursor.fetchone()
    assert size > 7000
    assert _toast_chunks() == before


def test_spans_of_a_project_deleted_before_they_are_stored_are_not_stored(project: Project) -> None:
    spans = conversation("conv-gone", 2, "7b8efff798038103d269b633813fc60c")
    pk = project.pk
    Project.objects.filter(pk=pk).delete()
    assert do_ingest_spans(project, spans).stored == 0
    assert not Span.objects.filter(project_id=pk).exists()


def test_deleting_a_project_deletes_its_spans(project: Project) -> None:
    other = Project.objects.create(team=project.team, slug="kept")
    do_ingest_spans(project, conversation("conv-a", 2, "8b8efff798038103d269b633813fc60c"))
    do_ingest_spans(other, conversation("conv-a", 2, "8b8efff798038103d269b633813fc60c"))
    pk = project.pk
    project.delete()
    assert not Span.objects.filter(project_id=pk).exists()
    assert Span.objects.filter(project=other).count() == 2
