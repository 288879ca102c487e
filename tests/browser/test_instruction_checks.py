"""Lost instructions checked by a model in a real browser (issue 35): the owner opens a run that lost
two instructions, asks the offline checker from the run page, a real Celery worker writes the
verdicts, and the page shows each beside its instruction, saying which model checked it.

Screenshot: test-artifacts/screenshots/instruction-checks.png."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import login, shoot
from tests.traces.instructions.helpers import NEVER, ingest_lost_run
from tests.traces.workers import Worker, wait_for, worker
from traces.models import InstructionCheck, Project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def agents_worker(settings: Any) -> Iterator[Worker]:
    settings.ARCANA_AGENTS_QUEUE = f"agents-checks-{uuid.uuid4().hex[:8]}"
    with worker() as w:
        yield w


def test_the_owner_checks_the_lost_instructions_from_the_run_page(
    browser: Any, live_server: Any, project: Project, alice: Any, agents_worker: Worker
) -> None:
    run = ingest_lost_run(project)
    page = login(browser, live_server, "alice")
    page.goto(live_server.url + run.get_absolute_url())
    lost = page.locator("ul.lost-list > li")
    assert lost.count() == 2 and NEVER in lost.first.inner_text()
    page.select_option("#checker-model", "scripted/check-heuristic")
    with page.expect_navigation():
        page.click("button:has-text('Check with a model')")
    assert "2 checks queued with scripted/check-heuristic." in page.inner_text("body")
    wait_for(
        lambda: InstructionCheck.objects.filter(status="done").count() == 2,
        what="the worker's verdicts",
        timeout=60,
    )
    page.reload()
    first = page.locator("ul.lost-list > li").first.inner_text()
    assert "contradicts — checked by scripted/check-heuristic against the answer of turn 2 · step 1" in first
    assert "rules out (touch auth)" in first
    shoot(page, "instruction-checks")
