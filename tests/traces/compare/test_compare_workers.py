"""Done when (issue 14): the demo script run on a real Celery worker, then "Run again with…" the
primitives off, and the compare page shows where and how the two contexts differed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from runtime.scenarios import get_scenario
from tests.traces.workers import Worker, wait_for, worker
from traces.compare import service as cmp
from traces.models import Conversation, Project, Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agents_worker(settings: Any, django_db_blocker: Any) -> Iterator[Worker]:
    settings.ARCANA_AGENTS_QUEUE = f"agents-compare-{uuid.uuid4().hex[:8]}"
    with worker() as w:
        yield w


def wait_done(conv_id: int) -> Conversation:
    wait_for(
        lambda: Conversation.objects.filter(pk=conv_id, status__in=["completed", "failed"]).exists(),
        timeout=120,
        what=f"conversation {conv_id} to finish",
    )
    return Conversation.objects.get(pk=conv_id)


def test_run_again_without_primitives_and_compare(
    agents_worker: Worker, alice_client: Client, project: Project
) -> None:
    scenario = get_scenario("pin-recall-demo")
    first = alice_client.post(
        "/api/v1/conversations",
        {"project": project.pk, "provider": "scripted", "model": "pin-recall-demo", "script": list(scenario.script)},
        content_type="application/json",
    )  # fmt: skip
    assert first.status_code == 201, first.content
    conv = wait_done(first.json()["id"])
    assert conv.status == "completed", conv.reason

    again = reverse("traces:run_again", kwargs={"project_id": project.pk, "conversation_id": conv.pk})
    r = alice_client.post(again, {"model": "scripted/pin-recall-demo", "pin_budget_fraction": "0.5",
                                  "system": scenario.system or ""})  # fmt: skip
    assert r.status_code == 302
    second = Conversation.objects.exclude(pk=conv.pk).get()
    assert second.config["cognitive_primitives"] == [] and second.script == conv.script
    compare_page = r["Location"]
    # While the worker runs it, the page waits (or the run is already done on a fast machine).
    assert alice_client.get(compare_page).status_code == 200
    second = wait_done(second.pk)
    assert second.status == "completed", second.reason
    wait_for(lambda: not Run.objects.get(project=project, run_id=second.run_id).is_updating, what="run idle")

    page = alice_client.get(compare_page)
    assert page.status_code == 200 and "c" in page.context, "the comparison, not the waiting page"
    c = page.context["c"]
    assert (c.a.summary()["pins_made"], c.b.summary()["pins_made"]) == (1, 0)
    assert (c.a.summary()["recalls_found"], c.b.summary()["recalls_found"]) == (1, 0)
    assert (c.divergence.a_turn, c.divergence.step) == (1, 2)
    assert c.divergence.reason == "pins only in A: 'constraints'"
    html = page.content.decode()
    assert "First divergence: turn 1 (A) / turn 1 (B), step 2" in html
    assert compare_page == cmp.compare_url(f"{project.pk}:{conv.run_id}", f"{project.pk}:{second.run_id}")
