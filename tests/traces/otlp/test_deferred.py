"""Spans left to a worker (`traces.ingest.span_queue`): a large export is stored and answered at once,
then a real Celery worker derives its runs; a request that would wait for another derivation's lock
leaves its spans pending instead; the sweeper sends the task again for spans left pending; the raw
spans are readable through `GET /api/v1/projects/<id>/spans` from the moment the export is answered."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traces.ingest import span_queue
from traces.ingest.spans import do_derive_pending
from traces.models import Project, Run, Span, Step

pytestmark = pytest.mark.django_db(transaction=True)

TRACE = "5b8efff798038103d269b633813fc60c"


def _chat_span(n: int, conversation: str) -> dict[str, Any]:
    """Model call `n` of a conversation (its own span id, one trace), as OTLP/JSON writes it."""
    history = [
        {"role": "user", "parts": [{"type": "text", "content": f"question {i}"}]} for i in range(n + 1)
    ]
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.conversation.id": conversation,
        "gen_ai.input.messages": json.dumps(history),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": f"answer {n}"}]}]
        ),
    }
    start = 1_700_000_000_000_000_000 + n * 10**9
    return {
        "traceId": TRACE,
        "spanId": f"{n + 1:016x}",
        "name": "chat gpt-4o",
        "kind": 3,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 5 * 10**8),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
    }


def _export(spans: list[dict[str, Any]]) -> bytes:
    return json.dumps(
        {
            "resourceSpans": [
                {"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}
            ]
        }
    ).encode()


def _post(client: Client, spans: list[dict[str, Any]]) -> Any:
    return client.post("/v1/traces", data=_export(spans), content_type="application/json")


def _pending(project: Project) -> int:
    return Span.objects.filter(project=project, run_id="").count()


def _wait_for(check: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@override_settings(ARCANA_OTLP_INLINE_SPANS=2)
def test_a_large_export_is_answered_stored_and_then_derived_by_a_real_worker(
    celery_worker_process: subprocess.Popen[bytes], project: Project, api_client: Client
) -> None:
    response = _post(api_client, [_chat_span(n, "conv-big") for n in range(5)])

    assert response.status_code == 200
    assert Span.objects.filter(project=project).count() == 5  # stored before the answer
    _wait_for(lambda: Step.objects.filter(run__project=project, run__run_id="conv-big").count() == 5)
    run = api_client.get(f"/api/v1/projects/{project.pk}/runs/conv-big").json()
    assert run["run_id"] == "conv-big"
    listed = api_client.get(f"/api/v1/projects/{project.pk}/spans", {"pending": "false"}).json()
    assert listed["count"] == 5
    assert {row["run_id"] for row in listed["results"]} == {"conv-big"}
    assert _pending(project) == 0


@override_settings(ARCANA_OTLP_INLINE_SPANS=64)
def test_a_small_export_is_derived_before_its_answer(project: Project, api_client: Client) -> None:
    assert _post(api_client, [_chat_span(n, "conv-small") for n in range(3)]).status_code == 200

    assert Step.objects.filter(run__project=project, run__run_id="conv-small").count() == 3
    assert _pending(project) == 0


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the span lock is PostgreSQL's advisory lock")
@override_settings(ARCANA_INGEST_QUEUE="no-worker-reads-this")
def test_an_export_that_would_wait_for_the_span_lock_leaves_its_spans_to_a_worker(
    project: Project, api_client: Client
) -> None:
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        from django.db import connections, transaction

        from traces.ingest import spans

        with transaction.atomic():
            spans._lock_spans_of(project)  # noqa: SLF001  (the test plays another derivation)
            held.set()
            release.wait(30)
        connections.close_all()

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        assert _post(api_client, [_chat_span(0, "conv-busy")]).status_code == 200
        assert time.monotonic() - started < 5  # answered without waiting for the lock
        assert _pending(project) == 1
        assert not Run.objects.filter(project=project, run_id="conv-busy").exists()
    finally:
        release.set()
        holder.join()

    assert do_derive_pending(project) == 1
    assert Step.objects.filter(run__project=project, run__run_id="conv-busy").count() == 1
    assert _pending(project) == 0


@override_settings(ARCANA_OTLP_INLINE_SPANS=0, ARCANA_OTLP_SWEEP_AFTER_SECONDS=60)
def test_the_sweeper_sends_the_task_again_for_spans_left_pending(
    project: Project, api_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        span_queue.current_app, "send_task", lambda name, args, **kw: sent.append((name, args))
    )
    assert _post(api_client, [_chat_span(0, "conv-lost")]).status_code == 200
    assert sent == [("traces.tasks.derive_spans", (project.pk,))]  # the message the broker "lost"

    sent.clear()
    assert span_queue.sweep_spans() == {"projects": 0}  # pending, but not for long yet
    Span.objects.filter(project=project).update(received_at=timezone.now() - timezone.timedelta(minutes=5))
    assert span_queue.sweep_spans() == {"projects": 1}
    assert sent == [("traces.tasks.derive_spans", (project.pk,))]


@override_settings(ARCANA_OTLP_INLINE_SPANS=0, ARCANA_INGEST_QUEUE="no-worker-reads-this")
def test_the_spans_api_shows_a_pending_span_as_received_and_refuses_a_bad_filter(
    project: Project, api_client: Client, alice_client: Client
) -> None:
    assert _post(api_client, [_chat_span(0, "conv-raw"), _chat_span(1, "conv-raw")]).status_code == 200

    listed = alice_client.get(f"/api/v1/projects/{project.pk}/spans", {"trace_id": TRACE, "pending": "true"})
    assert listed.status_code == 200
    rows = listed.json()["results"]
    assert [row["span_id"] for row in rows] == [f"{2:016x}", f"{1:016x}"]  # newest first
    assert all(row["pending"] and row["run_id"] == "" and row["conversation"] == "conv-raw" for row in rows)
    attributes = rows[1]["span"]["attributes"]
    assert attributes["gen_ai.conversation.id"] == "conv-raw"
    assert json.loads(attributes["gen_ai.output.messages"])[0]["parts"][0]["content"] == "answer 0"

    bad = alice_client.get(f"/api/v1/projects/{project.pk}/spans", {"pending": "maybe"})
    assert bad.status_code == 400
    assert "pending" in json.dumps(bad.json())
    assert alice_client.get(f"/api/v1/projects/{project.pk}/spans", {"trace_id": "x" * 40}).status_code == 400


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    param=st.sampled_from(["trace_id", "run_id", "pending", "limit", "offset"]),
    value=st.text(st.characters(codec="utf-8"), max_size=300)
    | st.sampled_from(["%00", "%ED%A0%80", "9" * 40]),
)
def test_the_spans_api_answers_any_query_with_rows_or_a_400(
    project: Project, api_client: Client, param: str, value: str
) -> None:
    response = api_client.get(f"/api/v1/projects/{project.pk}/spans?{param}={quote(value, safe='%')}")

    assert response.status_code in (200, 400), (param, value, response.content[:300])
    body = response.json()
    assert ("results" in body) if response.status_code == 200 else ("error" in body)
