"""Run addresses in a real browser (DESIGN.md §9): links to runs whose ids hold `/`, `..`, `?`, `#` or
spaces open those runs — the browser neither splits nor normalises them away — and two projects' runs
with the same id open from their own rows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser.conftest import login
from tests.traces.views_helpers import decision, our_step
from traces.ingest import ingest_events
from traces.models import Membership, Project, Run, Team

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ODD = ["..", "what?x=1#frag", "with space", "50%", "ünï"]


def test_every_odd_run_id_opens_from_the_runs_list(browser: Any, live_server: Any, project: Project) -> None:
    for rid in ODD:
        events = [
            e for t in (1, 2) for e in our_step(rid, t, 1, decisions=[decision(0, "user")], text=f"{rid}-{t}")
        ]
        assert ingest_events(project, json.loads(json.dumps(events)), source="api").rejected == 0
    # A row stored before run ids were checked (`/` is refused now): it still opens.
    Run.objects.create(project=project, run_id="a/b/../c", status=Run.Status.COMPLETED)
    page = login(browser, live_server, "alice")
    for rid in [*ODD, "a/b/../c"]:
        page.goto(f"{live_server.url}/")
        page.locator(f'a.run-link[title="{rid}"]').click()
        page.wait_for_load_state()
        assert page.locator("h1 .run-id").get_attribute("title") == rid, page.url
        if rid != "a/b/../c":
            page.locator("a", has_text="Open turn 1").click()
            page.wait_for_load_state()
            assert page.locator("h1").inner_text().startswith("Turn 1"), page.url
            assert f"{rid}-1" in page.content()
    page.context.close()


def test_two_projects_runs_with_one_id_open_from_their_own_rows(
    browser: Any, live_server: Any, project: Project, alice: Any
) -> None:
    other = Project.objects.create(team=Team.objects.create(name="Beta"), slug="beta-app")
    Membership.objects.create(team=other.team, user=alice, role=Membership.Role.VIEWER)
    for p, text in ((project, "ALPHA"), (other, "BETA")):
        events = our_step("twin-run", 1, 1, decisions=[decision(0, "user")], text=text)
        ingest_events(p, events, source="api")
    page = login(browser, live_server, "alice")
    links = page.locator('a.run-link[title="twin-run"]')
    assert links.count() == 2
    seen = set()
    for i in range(2):
        page.goto(f"{live_server.url}/")
        page.locator('a.run-link[title="twin-run"]').nth(i).click()
        page.locator("a", has_text="Open turn 1").click()
        page.wait_for_load_state()
        body = page.content()
        seen.add("ALPHA" if "ALPHA" in body else "BETA" if "BETA" in body else "?")
        assert ("ALPHA" in body) != ("BETA" in body)
    assert seen == {"ALPHA", "BETA"}
    page.context.close()
