"""Scores in a real browser, from invite to chart (issue 36's "done when"): the owner defines
"helpfulness 1–5" and "kept the user's constraint: yes/no" and a review queue of runs with
compactions; a teammate invited by link reviews it from the keyboard; the owner runs a judge over last
week's runs on a real Celery worker; both kinds of scores show on the runs list (and filter it), the
run page, the API and the chart.

Screenshots go to test-artifacts/screenshots/ (scores-*.png)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.browser.conftest import LAPTOP, login, shoot
from tests.traces.views_helpers import decision, our_step
from tests.traces.workers import Worker, wait_for, worker
from traces.ingest import ingest_events
from traces.models import JudgeRun, Membership, Project, ReviewItem, Score, Team

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def agents_worker(settings: Any) -> Iterator[Worker]:
    settings.ARCANA_AGENTS_QUEUE = f"agents-scores-{uuid.uuid4().hex[:8]}"
    with worker() as w:
        yield w


def runs(project: Project) -> list[str]:
    """Three runs of the last hour: two compacted (a message dropped at turn 2), one not."""
    now = datetime.now(UTC) - timedelta(hours=1)
    ids = ["compacted-a", "compacted-b", "plain-c"]
    for n, run_id in enumerate(ids):
        when = now + timedelta(minutes=n)
        events = our_step(
            run_id,
            1,
            1,
            decisions=[decision(0, "system"), decision(1, "user")],
            when=when,
            text=f"answer {n}",
        )
        outcome = "dropped" if run_id.startswith("compacted") else "kept"
        events += our_step(
            run_id, 2, 1, decisions=[decision(0, "system"), decision(1, "user", outcome), decision(2, "user")],
            when=when + timedelta(seconds=30), text=f"final answer {'x' * n}",
        )  # fmt: skip
        ingest_events(project, events, source="api")
    return ids


def test_from_invite_to_chart(
    browser: Any, live_server: Any, project: Project, alice: Any, alpha: Team, agents_worker: Worker
) -> None:
    run_ids = runs(project)
    base = live_server.url
    owner = login(browser, live_server, "alice")

    # The owner defines the two scores on the project's scores page.
    owner.goto(f"{base}/projects/{project.pk}/scores")
    owner.fill("#cfg-name", "helpfulness")
    owner.select_option("#cfg-kind", "numeric")
    owner.fill("#cfg-min", "1")
    owner.fill("#cfg-max", "5")
    owner.fill("#cfg-desc", "How helpful was the final answer?")
    owner.click("text=Create score config")
    owner.click("summary:has-text('New score config')")
    owner.fill("#cfg-name", "kept_constraint")
    owner.select_option("#cfg-kind", "boolean")
    owner.click("text=Create score config")
    assert owner.locator("#configs td.mono").all_inner_texts() == ["helpfulness", "kept_constraint"]

    # A review queue of the runs that had a compaction, and an invite for a teammate.
    owner.click("summary:has-text('New review queue')")
    owner.fill("#q-name", "compactions this week")
    owner.fill("#q-filter", "had_compaction=1&days=7")
    owner.click("text=Create review queue")
    queue_url = owner.url
    assert (
        "/queues/" in queue_url and "Review queue: compactions this week" in owner.locator("h1").inner_text()
    )
    owner.goto(f"{base}/teams/{alpha.pk}/members")
    owner.select_option("#invite-role", "member")
    owner.click("text=Create invite link")
    link = owner.locator("#invite-url").input_value()

    # The teammate signs up through the link and reviews the queue from the keyboard.
    mate = browser.new_context(viewport=LAPTOP).new_page()
    mate.goto(link)
    mate.fill("#id_username", "erin")
    mate.fill("#id_password", "a long passphrase 42")
    mate.fill("#id_password2", "a long passphrase 42")
    mate.click("text=Create account and join")
    mate.wait_for_url(f"{base}/")
    assert Membership.objects.get(team=alpha, user__username="erin").role == "member"
    mate.goto(queue_url)
    assert "2" in mate.locator(".stat:has-text('Runs') .stat__value").inner_text()
    mate.keyboard.press("Enter")  # the "Review the next run" button has the focus
    mate.wait_for_url("**/items/**")
    first = mate.url
    # The form has the focus: helpfulness 1 → 4 with the arrow keys, Tab to the next score, yes.
    assert mate.evaluate("document.activeElement.name") == "value.helpfulness"
    mate.keyboard.press("Space")
    for _ in range(3):
        mate.keyboard.press("ArrowRight")
    mate.keyboard.press("Tab")
    mate.keyboard.press("ArrowLeft")  # from "skip" (checked) back to "no"
    mate.keyboard.press("ArrowLeft")  # and to "yes"
    shoot(mate, "scores-review-laptop")
    mate.keyboard.press("Control+Enter")
    mate.wait_for_url(lambda url: url != first and "/items/" in url)
    assert "Saved 2 scores." in mate.content()
    mate.keyboard.press("Alt+s")  # skip the second run
    mate.wait_for_url(queue_url)
    assert "Nothing left to review" in mate.content()
    assert sorted(ReviewItem.objects.values_list("status", flat=True)) == ["done", "skipped"]
    person = {s.name: s for s in Score.objects.filter(source="person")}
    assert person["helpfulness"].value == 4 and person["kept_constraint"].label == "true"
    assert {s.author_label for s in person.values()} == {"erin"}

    # The owner runs a judge over last week's runs, on the worker.
    owner.goto(f"{base}/projects/{project.pk}/scores")
    owner.click("summary:has-text('New judge')")
    owner.fill("#j-name", "constraint judge")
    owner.select_option("#j-model", "scripted/judge-heuristic")
    owner.select_option("#j-config", label="kept_constraint (boolean)")
    owner.click("text=Create judge")
    owner.fill("[id^=jr-filter-]", "days=7")
    owner.click("text=Run constraint judge")
    owner.wait_for_url("**/judge-runs/**")
    jr = JudgeRun.objects.get()
    wait_for(lambda: JudgeRun.objects.filter(pk=jr.pk, status="completed").exists(), what="the judge run")
    owner.reload()
    assert "3 / 3" in owner.locator(".stat:has-text('Judged') .stat__value").inner_text()
    judged = dict(Score.objects.filter(source="judge").values_list("run_id", "label"))
    assert judged == dict.fromkeys(run_ids, "true")  # nothing was lost in these runs

    # Both kinds of scores: the runs list (a column, and the filter), the run page, the API, the chart.
    owner.goto(f"{base}/?score.helpfulness>=4")
    rows = owner.locator(".runs-table tbody tr")
    assert rows.count() == 1 and "helpfulness 4" in rows.first.inner_text()
    owner.goto(f"{base}/?score.kept_constraint=true")
    assert owner.locator(".runs-table tbody tr").count() == 3
    shoot(owner, "scores-runs-laptop")
    reviewed = person["helpfulness"].run_id
    owner.goto(f"{base}/projects/{project.pk}/runs/{reviewed}")
    panel = owner.locator("#scores").inner_text()
    assert "erin" in panel and "constraint judge" in panel and "scripted/judge-heuristic" in panel
    queue_id = queue_url.rstrip("/").rsplit("/", 1)[-1]
    progress = owner.request.get(f"{base}/api/v1/projects/{project.pk}/queues/{queue_id}").json()["progress"]
    assert (progress["done"], progress["skipped"], progress["by_person"][0]["who"]) == (1, 1, "erin")
    followed = owner.request.get(f"{base}/api/v1/projects/{project.pk}/judge-runs/{jr.pk}").json()
    assert (followed["status"], followed["scored"], followed["errors"]) == ("completed", 3, 0)
    api = owner.request.get(f"{base}/api/v1/scores?run_id={reviewed}").json()["results"]
    assert sorted((s["name"], s["source"], s["value"]) for s in api) == [
        ("helpfulness", "person", 4),
        ("kept_constraint", "judge", True),
        ("kept_constraint", "person", True),
    ]
    owner.goto(f"{base}/projects/{project.pk}/scores")
    chart = owner.locator("#dist-kept_constraint")
    assert "4 scores" in chart.locator("caption").inner_text()
    assert chart.locator("tbody tr").first.inner_text().split()[:2] == ["yes", "4"]
    shoot(owner, "scores-chart-laptop")
