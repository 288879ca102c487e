"""Review queues: a saved runs filter plus score configs; taking the next run under a lock, done and
skipped, progress and who did what, and the review page's form that saves and moves on."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.test import Client
from django.utils import timezone

from tests.traces.scores.conftest import COMPACTED
from traces.models import (
    AuditLog,
    Membership,
    Project,
    ReviewItem,
    ReviewQueue,
    Run,
    Score,
    ScoreConfig,
    Team,
)


def make_queue(client: Client, project: Project, configs: dict[str, ScoreConfig], filter: str) -> ReviewQueue:
    r = client.post(
        f"/projects/{project.pk}/queues",
        {
            "name": "compactions",
            "filter": filter,
            "configs": [configs["helpfulness"].pk, configs["kept_constraint"].pk],
            "lock_minutes": "10",
        },
    )
    assert r.status_code == 302, r
    return ReviewQueue.objects.get()


def take(client: Client, queue: ReviewQueue) -> str:
    r = client.post(f"/projects/{queue.project_id}/queues/{queue.pk}/take")
    assert r.status_code == 302
    return str(r["Location"])


def test_a_queue_is_worked_run_after_run_from_its_form(
    alice_client: Client, bob_client: Client, project: Project, run: Run, compacted: Run, configs: Any
) -> None:
    queue = make_queue(alice_client, project, configs, "?had_compaction=1&days=3650")
    assert queue.filter == "had_compaction=1&days=3650"
    assert AuditLog.objects.filter(event_type=AuditLog.QUEUE_CREATED).exists()
    page = bob_client.get(f"/projects/{project.pk}/queues/{queue.pk}").content.decode()
    assert "Review the next run" in page
    item_url = take(bob_client, queue)
    item = ReviewItem.objects.get()
    assert item.run_id == COMPACTED and item.assignee is not None and item.assignee.username == "bob"
    page = bob_client.get(item_url).content.decode()
    assert "data-review" in page and "Save and next" in page and 'name="value.helpfulness"' in page
    assert "value.tone" not in page  # not one of the queue's scores
    r = bob_client.post(f"{item_url}/score", {"value.helpfulness": "2", "value.kept_constraint": "false"})
    # Saved, done, and the next run: none left, so back to the queue.
    assert r["Location"] == f"/projects/{project.pk}/queues/{queue.pk}"
    item.refresh_from_db()
    assert item.status == "done" and item.finished_by is not None and item.finished_by.username == "bob"
    assert sorted(Score.objects.values_list("name", "run_id", "target")) == [
        ("helpfulness", COMPACTED, "run"),
        ("kept_constraint", COMPACTED, "run"),
    ]
    page = bob_client.get(r["Location"]).content.decode()
    assert "Nothing left to review" in page and "Who did what" in page and '<th scope="row">bob</th>' in page


def test_a_taken_run_is_locked_to_its_reviewer_until_the_lock_runs_out(
    alice_client: Client, bob_client: Client, django_user_model: Any, alpha: Team, project: Project,
    run: Run, compacted: Run, configs: Any,
) -> None:  # fmt: skip
    dan = django_user_model.objects.create_user(username="dan", password="password")
    Membership.objects.create(team=alpha, user=dan, role="member")
    dan_client = Client()
    dan_client.force_login(dan)
    queue = make_queue(alice_client, project, configs, "had_compaction=1")
    bob_item = take(bob_client, queue)
    assert take(bob_client, queue) == bob_item  # bob gets his own item back
    assert take(dan_client, queue) == f"/projects/{project.pk}/queues/{queue.pk}"  # nothing free for dan
    assert dan_client.post(f"{bob_item}/score", {"value.helpfulness": "5"}).status_code == 403
    assert dan_client.post(f"{bob_item}/skip").status_code == 403
    ReviewItem.objects.update(locked_until=timezone.now() - dt.timedelta(seconds=1))
    assert take(dan_client, queue) == bob_item  # the lock ran out: dan takes the same run
    assert ReviewItem.objects.get().assignee == dan
    assert bob_client.post(f"{bob_item}/skip").status_code == 403  # no longer bob's
    assert dan_client.post(f"{bob_item}/skip").status_code == 302
    item = ReviewItem.objects.get()
    assert item.status == "skipped" and item.finished_by == dan


def test_the_whole_filter_is_worked_and_released_runs_come_back(
    alice_client: Client, bob_client: Client, project: Project, run: Run, compacted: Run, configs: Any
) -> None:
    queue = make_queue(alice_client, project, configs, "")
    first = take(bob_client, queue)
    assert bob_client.post(f"{first}/release").status_code == 302
    assert take(bob_client, queue) == first  # released: the oldest free run again
    second = bob_client.post(f"{first}/skip")["Location"]
    assert second != first and "/items/" in second
    assert bob_client.post(f"{second}/score", {"value.helpfulness": "9"})["Location"] == second  # refused
    assert "Not saved: helpfulness at most 5." in bob_client.get(second).content.decode()
    assert bob_client.post(f"{second}/score", {"value.kept_constraint": "true"})["Location"].endswith(
        f"/queues/{queue.pk}"
    )
    from traces.scores.queues import progress

    p = progress(queue)
    assert (p.total, p.done, p.skipped, p.left) == (2, 1, 1, 0)
    assert p.by_person == [{"who": "bob", "done": 1, "skipped": 1}]


def test_who_may_make_and_work_queues(
    alice_client: Client, bob_client: Client, vera_client: Client, charlie_client: Client,
    project: Project, run: Run, configs: Any,
) -> None:  # fmt: skip
    data = {"name": "q", "filter": "", "configs": [configs["helpfulness"].pk]}
    assert bob_client.post(f"/projects/{project.pk}/queues", data).status_code == 403
    assert charlie_client.post(f"/projects/{project.pk}/queues", data).status_code == 404
    bad = alice_client.post(
        f"/projects/{project.pk}/queues", {**data, "filter": "status=sleeping"}, follow=True
    )
    assert "Review queue not created: filter status" in bad.content.decode()
    bad = alice_client.post(f"/projects/{project.pk}/queues", {**data, "configs": []}, follow=True)
    assert "choose the scores" in bad.content.decode()
    queue = make_queue(alice_client, project, configs, "")
    assert vera_client.get(f"/projects/{project.pk}/queues/{queue.pk}").status_code == 200
    assert vera_client.post(f"/projects/{project.pk}/queues/{queue.pk}/take").status_code == 403
    assert charlie_client.get(f"/projects/{project.pk}/queues/{queue.pk}").status_code == 404
