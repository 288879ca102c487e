"""Issue 37 in a real browser, on the demo data (`manage.py setup_demo`, its two conversations played
by a real Celery worker): the project dashboard whose charts link to the runs behind them, a price
set by the project's owner and the cost it gives on the run page, the run page's context band (a
fragment it loads), a context-composition bar on a turn page, and a session with its transcript linking to its turns."""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from tests.browser.conftest import LAPTOP, shoot
from traces.models import Conversation, Project, Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _demo(celery_worker_process: Any) -> Project:
    call_command("setup_demo", stdout=io.StringIO())
    user = get_user_model().objects.get(username="demo")
    user.set_password("password")
    user.save()
    deadline = time.monotonic() + 120
    while Conversation.objects.exclude(status=Conversation.Status.COMPLETED).exists():
        assert time.monotonic() < deadline, list(Conversation.objects.values_list("status", flat=True))
        time.sleep(0.5)
    return Project.objects.get(slug="demo")


def _login(browser: Any, live_server: Any) -> Any:
    page = browser.new_context(viewport=LAPTOP).new_page()
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "demo")
    page.fill("#id_password", "password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


def test_the_demo_dashboard_cost_context_and_sessions(
    browser: Any, live_server: Any, celery_worker_process: Any
) -> None:
    project = _demo(celery_worker_process)
    runs = Run.objects.filter(project=project)
    assert runs.filter(source="runtime").count() == 2 and runs.filter(source="arcana").exists()
    page = _login(browser, live_server)

    # The dashboard, from the main navigation; its first chart's bar opens the runs of that day.
    page.click("nav.main-nav >> text=Dashboard")
    page.wait_for_url(f"**/projects/{project.pk}**")
    page.locator("#chart-runs svg rect.bar").first.wait_for()
    assert page.locator(".kpi").first.locator("dd").inner_text().strip() == str(runs.count())
    shoot(page, "project-dashboard-laptop")
    bar = page.locator("#chart-runs svg a").first
    href = bar.get_attribute("href")
    assert href is not None
    query = parse_qs(urlparse(href).query)
    first, last = (
        datetime.fromisoformat(query[k][0]).replace(tzinfo=UTC) for k in ("started_after", "started_before")
    )
    day_runs = runs.filter(started_at__gte=first, started_at__lt=last)
    bar.locator("rect").click()
    page.wait_for_url("**/?project=demo*")
    assert page.locator(".runs-table tbody tr").count() == day_runs.count() > 0
    # The failure chart's data table links to the failed runs of a day.
    page.go_back()
    page.locator("#chart-failures summary").click()
    link = page.locator("#chart-failures table a").first
    assert "status=failed" in (link.get_attribute("href") or "")

    # The demo's models have no default price: the run page says so, then the owner sets one.
    arcana = runs.filter(source="arcana").order_by("-steps").first()
    assert arcana is not None
    page.goto(live_server.url + arcana.get_absolute_url())
    assert "cost not priced" in page.locator("[data-cost]").inner_text()
    page.goto(f"{live_server.url}/projects/{project.pk}/prices")
    page.fill("#id_model", arcana.model)
    page.fill("#id_input_per_million", "2.5")
    page.fill("#id_output_per_million", "10")
    page.click("text=Save price")
    page.wait_for_url("**/prices")
    assert arcana.model in page.locator("table").first.inner_text()
    page.goto(live_server.url + arcana.get_absolute_url())
    assert page.locator("[data-cost]").inner_text().startswith("cost $")
    shoot(page, "run-cost-laptop")
    # What filled the context: run.js puts the band's fragment in place of the link to it.
    page.locator("#ctx-band-title").wait_for()
    assert page.locator("[data-band-url]").count() == 0
    assert page.locator("svg.ctx-band a").count() > 0

    # A turn page of our runtime's demo chat: a composition bar per step with a decision.
    chat = runs.filter(source="runtime", agents=[]).first()
    assert chat is not None
    page.goto(live_server.url + chat.turn_url(2))
    bar = page.locator("[data-context-composition]").first
    bar.wait_for()
    assert bar.locator("svg.ctx-bar rect").count() >= 2
    assert "system prompt" in bar.locator(".ctx-legend").inner_text()
    shoot(page, "turn-context-composition-laptop")

    # Sessions: the chat is one session; its transcript links each turn to its turn page.
    page.click("nav.main-nav >> text=Sessions")
    page.wait_for_url("**/sessions")
    page.locator(f"a[title='{chat.run_id}']").click()
    page.wait_for_url("**/sessions/run*")
    turns = page.locator(".session-transcript a", has_text="turn page")
    assert turns.count() == chat.turns
    shoot(page, "session-laptop")
    turns.nth(1).click()
    page.wait_for_url(f"**{chat.turn_url(2)}")
    assert page.locator("h1").inner_text().startswith("Turn 2")
