"""A run's page exists from the moment its conversation is created: "Waiting for the first event…",
polling the run's live fragment, until the first event is stored; an unknown run is still a 404, and
outsiders learn nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.traces.views_helpers import decision, our_step
from traces import conversations as service
from traces.ingest import ingest_events
from traces.models import Conversation, Project, Run
from traces.models.runs import run_page_url

pytestmark = pytest.mark.django_db


def _playground(project: Project, user: Any) -> Conversation:
    spec = service.check_conversation_request({"model": "pin-recall-demo", "script": None})
    return service.start_conversation(project, spec, user=user)


def test_a_conversations_run_answers_before_its_first_event(
    project: Project, alice: Any, alice_client: Client, charlie_client: Client
) -> None:
    conv = _playground(project, alice)
    url = run_page_url(project.pk, conv.run_id)
    assert not Run.objects.filter(run_id=conv.run_id).exists()
    page = alice_client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Waiting for the first event…" in html and conv.run_id in html
    assert f'data-live-url="{url}/live"' in html and conv.page_url() in html
    # The live fragment: the waiting state, tagged, 304 while nothing changed.
    first = alice_client.get(url + "/live")
    assert first.status_code == 200 and b'class="run-waiting" data-live="true"' in first.content
    assert alice_client.get(url + "/live", HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304
    # Outsiders and unknown runs: 404, as before.
    assert charlie_client.get(url).status_code == 404
    assert charlie_client.get(url + "/live").status_code == 404
    assert alice_client.get(run_page_url(project.pk, "no-such-run")).status_code == 404
    assert alice_client.get(run_page_url(project.pk, "no-such-run") + "/live").status_code == 404

    # The first event arrives: the fragment is the run's own, and the page is the run page.
    ingest_events(project, our_step(conv.run_id, 1, 1, decisions=[decision(0, "user")]), source="worker")
    now = alice_client.get(url + "/live", HTTP_IF_NONE_MATCH=first["ETag"])
    assert now.status_code == 200 and b"run-live" in now.content and b"run-waiting" not in now.content
    assert "Waiting for the first event" not in alice_client.get(url).content.decode()


def test_a_conversation_that_ended_without_an_event_says_so(
    project: Project, alice: Any, alice_client: Client
) -> None:
    conv = _playground(project, alice)
    service.cancel_conversation(conv)
    html = alice_client.get(run_page_url(project.pk, conv.run_id)).content.decode()
    assert "ended (cancelled) before writing any event" in html and 'data-live="false"' in html
