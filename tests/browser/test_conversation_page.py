"""The conversation page's side panel in a real browser, from a run stored without a worker: the
per-message decisions of each step are listed, row by row (they were once always "0 rows")."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import login
from tests.traces.views_helpers import decision, our_step
from traces import conversations as service
from traces.ingest import ingest_events
from traces.models import Conversation, Project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_side_panel_lists_each_steps_message_decisions(
    browser: Any, live_server: Any, project: Project, alice: Any
) -> None:
    spec = service.check_conversation_request({"model": "pin-recall-demo", "script": None})
    conv = service.start_conversation(project, spec, user=alice)
    service.post_message(conv, "Plan the launch.")
    rows = [decision(0, "system"), decision(1, "user"), decision(2, "assistant", "compressed", "L2")]
    ingest_events(project, our_step(conv.run_id, 1, 1, decisions=rows), source="worker")
    Conversation.objects.filter(pk=conv.pk).update(status=Conversation.Status.WAITING_FOR_USER, cursor=1)

    page = login(browser, live_server, "alice")
    page.goto(f"{live_server.url}/projects/{project.pk}/conversations/{conv.pk}")
    table = page.locator("#conv-side .conv-step .decision-table")
    table.wait_for()
    assert "3 rows" in page.locator("#conv-side .decisions summary").inner_text()
    cells = [
        [c.strip() for c in r.locator("td").all_inner_texts()[:4]] for r in table.locator("tbody tr").all()
    ]
    assert cells == [
        ["0", "system", "kept", "L0"],
        ["1", "user", "kept", "L0"],
        ["2", "assistant", "compressed", "L2"],
    ]


def test_a_run_page_opened_before_its_first_event_turns_into_the_run(
    browser: Any, live_server: Any, project: Project, alice: Any
) -> None:
    """`run_url` of a new conversation: "Waiting for the first event…", then the run, without a reload
    by the user."""
    spec = service.check_conversation_request({"model": "pin-recall-demo", "script": None})
    conv = service.start_conversation(project, spec, user=alice)
    page = login(browser, live_server, "alice")
    page.goto(live_server.url + conv.get_absolute_url())
    assert "Waiting for the first event" in page.locator("#run-waiting").inner_text()
    ingest_events(project, our_step(conv.run_id, 1, 1, decisions=[decision(0, "user")]), source="worker")
    page.locator(".run-badges").wait_for(timeout=15_000)
    assert page.locator("#run-waiting").count() == 0
    assert conv.run_id in page.locator("h1").inner_text()
