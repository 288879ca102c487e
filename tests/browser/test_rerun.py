"""Re-running a step from an edited context in a real browser, on a real Celery worker (issue 38): the
demo chat played with aggressive truncation, its turn 4 opened, the dropped brief restored, the step
re-run with the scripted provider, ending on the compare page of the original and its branch."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.browser.conftest import login, shoot
from tests.runtime.test_rerun import demo_truncated_run
from tests.traces.workers import Worker, worker
from traces.ingest import ingest_events
from traces.models import Branch, Project, Run, Step

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def agents_worker(settings: Any) -> Iterator[Worker]:
    """A worker of its own on a queue of its own (nothing shared with it but the database and broker)."""
    settings.ARCANA_AGENTS_QUEUE = f"agents-browser-{uuid.uuid4().hex[:8]}"
    with worker() as w:
        yield w


def test_it_restores_a_dropped_message_reruns_the_step_and_compares(
    browser: Any, live_server: Any, project: Project, alice: Any, agents_worker: Worker
) -> None:
    # Played in a thread of its own: Playwright's event loop runs in this one.
    with ThreadPoolExecutor(1) as pool:
        events = pool.submit(demo_truncated_run).result()
    ingest_events(project, events, source="api")
    run = Run.objects.get(project=project, run_id=events[0]["run_id"])
    original = Step.objects.get(run=run, turn_number=4, number=1).assistant_text
    page = login(browser, live_server, "alice")
    page.goto(live_server.url + run.turn_url(4))
    page.click("text=Edit the context of step 1 and re-run it")
    form = page.locator("#rerun-form")
    form.wait_for()
    rows = form.locator("tr.rerun__row--dropped")
    assert rows.count() == 8
    brief = form.locator('tr[data-index="2"]')
    assert "Here is the brief" in brief.inner_text() and "dropped" in brief.inner_text()
    brief.locator("select").select_option("restore")
    shoot(page, "rerun-form-laptop")
    form.locator("button[type=submit]").click()
    # The branch page polls until the worker is done, then opens the compare page.
    page.wait_for_url("**/compare?a=*", timeout=90_000)
    branch = Branch.objects.get()
    assert branch.status == "completed" and branch.edits == [{"op": "restore", "index": 2}], (
        branch.error,
        agents_worker.log_text()[-2000:],
    )
    assert page.locator("h1").inner_text() == "Compare runs"
    text = page.locator("main").inner_text()
    assert branch.answer[:60] in text  # the branch's answer …
    assert (original or "")[:40] in text  # … beside the original's
    shoot(page, "rerun-compare-laptop")
    # The branch run says where it came from; the original's turn page lists its branch.
    page.goto(live_server.url + branch.branch_run.get_absolute_url())
    assert "Branched from run" in page.locator(".branch-origin").inner_text()
    page.goto(live_server.url + run.turn_url(4))
    assert "turn 4 step 1" in page.locator(".branches").inner_text()
