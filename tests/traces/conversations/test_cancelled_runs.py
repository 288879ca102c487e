"""A cancelled conversation's run says `cancelled` — on the run page, the runs list, the read API and
compare — because its events say so (`runtime.facts.run_outcome`), and it stays so after
`rebuild_projections`. Before, its last answer was final and the run read `completed`."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from runtime import TraceEvent
from runtime.facts import build_steps, normalize_events, run_outcome
from tests.traces.views_helpers import decision, our_step
from traces import conversations as service
from traces.compare import service as cmp
from traces.ingest import ingest_events
from traces.models import Conversation, Project, Run

pytestmark = pytest.mark.django_db


def _played_playground(project: Project, user: Any) -> Conversation:
    """A playground whose first turn answered (its events stored as a worker stores them)."""
    spec = service.check_conversation_request({"model": "pin-recall-demo", "script": None})
    conv = service.start_conversation(project, spec, user=user)
    service.post_message(conv, "Plan the launch.")
    ingest_events(project, our_step(conv.run_id, 1, 1, decisions=[decision(0, "user")]), source="worker")
    Conversation.objects.filter(pk=conv.pk).update(status=Conversation.Status.WAITING_FOR_USER, cursor=1)
    assert Run.objects.get(run_id=conv.run_id).status == Run.Status.COMPLETED
    return conv


def test_a_cancelled_playground_run_says_cancelled_everywhere(
    project: Project, alice: Any, alice_client: Client
) -> None:
    conv = _played_playground(project, alice)
    other = "finished-run"
    ingest_events(project, our_step(other, 1, 1, decisions=[decision(0, "user")]), source="api")
    r = alice_client.post(f"/projects/{project.pk}/conversations/{conv.pk}/cancel")
    assert r.status_code == 302
    run = Run.objects.get(run_id=conv.run_id)
    assert run.status == Run.Status.CANCELLED and run.failure == "cancelled before the next turn started"

    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert ">Cancelled</span>" in page and ">Completed</span>" not in page
    listed = alice_client.get("/").content.decode()
    row = listed[listed.index(conv.run_id[:8]) :].split("</tr>", 1)[0]
    assert "Cancelled" in row and "Completed" not in row
    body = alice_client.get(run.api_url()).json()
    assert body["status"] == "cancelled"
    only = alice_client.get("/api/v1/runs?status=cancelled").json()["results"]
    assert [x["run_id"] for x in only] == [conv.run_id]
    finished = Run.objects.get(run_id=other)
    summary = alice_client.get("/api/v1/compare", {"a": cmp.run_ref(run), "b": cmp.run_ref(finished)}).json()
    assert (summary["a"]["status"], summary["b"]["status"]) == ("cancelled", "completed")

    # The status is the events': a rebuild from the raw events keeps it.
    call_command("rebuild_projections", run=conv.run_id, stdout=io.StringIO())
    assert Run.objects.get(run_id=conv.run_id).status == Run.Status.CANCELLED


def test_a_turn_stopped_after_a_step_reads_cancelled() -> None:
    """The runtime's own record (a `state_change` with `stop_reason "user_cancelled"` after a step)."""
    events = [TraceEvent.from_dict(e) for e in our_step("r", 1, 1, decisions=[decision(0, "user")])]
    when = datetime(2026, 5, 1, 10, 0, tzinfo=UTC) + timedelta(minutes=5)
    stop = TraceEvent.from_dict(
        {
            **events[1].to_dict(),
            "step_id": "stop-1",
            "event_type": "state_change",
            "timestamp": when.isoformat(),
            "stop_reason": "user_cancelled",
            "stop_detail": "cancelled by a user",
            "parent_step_id": events[1].step_id,
        }
    )
    outcome = run_outcome(build_steps(normalize_events([*events, stop])), [*events, stop])
    assert (outcome.status, outcome.reason) == ("cancelled", "cancelled by a user")
    assert run_outcome(build_steps(normalize_events(events)), events).status == "completed"
