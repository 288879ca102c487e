"""Review queues and judges through the API: an admin makes and changes them, members work a queue
(take, done / skipped / released, 409 once it is not theirs), a judge run starts over a filter with
caps, is listed, followed and cancelled; viewers read; API keys read but do not work or manage."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from tests.traces.scores.conftest import COMPACTED
from traces.models import AuditLog, Judge, JudgeRun, Project, ReviewItem, ReviewQueue, Run, ScoreConfig


def send(client: Client, method: str, url: str, body: Any = None) -> Any:
    call = getattr(client, method)
    if method == "get":
        return call(url)
    return call(url, data=json.dumps(body if body is not None else {}), content_type="application/json")


def test_a_queue_is_made_worked_and_followed_through_the_api(
    alice_client: Client,
    bob_client: Client,
    vera_client: Client,
    api_client: Client,
    project: Project,
    run: Run,
    compacted: Run,
    configs: dict[str, ScoreConfig],
) -> None:
    base = f"/api/v1/projects/{project.pk}/queues"
    r = send(alice_client, "post", base, {"name": "compactions", "filter": "had_compaction=1&days=3650",
                                          "configs": ["helpfulness", configs["kept_constraint"].pk]})  # fmt: skip
    assert r.status_code == 201, r.content
    made = r.json()
    assert made["configs"] == ["helpfulness", "kept_constraint"] and made["lock_minutes"] == 15
    assert made["progress"] == {
        "total": 1,
        "done": 0,
        "skipped": 0,
        "in_review": 0,
        "left": 1,
        "by_person": [],
    }
    queue = ReviewQueue.objects.get(pk=made["id"])

    # Viewers and keys read; a key may not work a queue, a viewer may not, a member may not manage.
    assert [q["name"] for q in vera_client.get(base).json()["results"]] == ["compactions"]
    assert api_client.get(f"{base}/{queue.pk}").json()["name"] == "compactions"
    assert send(api_client, "post", f"{base}/{queue.pk}/take").status_code == 403
    assert send(vera_client, "post", f"{base}/{queue.pk}/take").status_code == 403
    assert send(bob_client, "patch", f"{base}/{queue.pk}", {"name": "x"}).status_code == 403

    # Bob takes the compacted run (twice: the same item), Alice finds nothing free.
    taken = send(bob_client, "post", f"{base}/{queue.pk}/take")
    assert taken.status_code == 200 and taken.json()["run_id"] == COMPACTED
    assert taken.json()["assignee"] == "bob" and taken.json()["status"] == "assigned"
    assert send(bob_client, "post", f"{base}/{queue.pk}/take").json()["id"] == taken.json()["id"]
    assert send(alice_client, "post", f"{base}/{queue.pk}/take").status_code == 204
    item_url = f"{base}/{queue.pk}/items/{taken.json()['id']}"
    assert vera_client.get(item_url).json()["assignee"] == "bob"

    # Not Alice's to finish; a wrong status is a 400 naming the field; Bob marks it done.
    assert send(alice_client, "patch", item_url, {"status": "done"}).status_code == 409
    bad = send(bob_client, "patch", item_url, {"status": "finished"})
    assert bad.status_code == 400 and bad.json()["detail"][0]["field"] == "status"
    done = send(bob_client, "patch", item_url, {"status": "done"})
    assert done.status_code == 200 and done.json()["status"] == "done" and done.json()["finished_by"] == "bob"
    assert send(bob_client, "patch", item_url, {"status": "skipped"}).status_code == 409
    progress = alice_client.get(f"{base}/{queue.pk}").json()["progress"]
    assert progress["done"] == 1 and progress["left"] == 0
    assert progress["by_person"] == [{"who": "bob", "done": 1, "skipped": 0}]

    # Widening the filter (PATCH) brings the other run in; Bob takes it and releases it.
    r = send(alice_client, "patch", f"{base}/{queue.pk}", {"filter": "days=3650", "lock_minutes": 5})
    assert r.status_code == 200 and r.json()["filter"] == "days=3650" and r.json()["lock_minutes"] == 5
    change = AuditLog.objects.get(event_type=AuditLog.QUEUE_CHANGED)
    assert change.extra["old"] == {"filter": "had_compaction=1&days=3650", "lock_seconds": 900}
    second = send(bob_client, "post", f"{base}/{queue.pk}/take").json()
    assert second["run_id"] == run.run_id
    released = send(bob_client, "patch", f"{base}/{queue.pk}/items/{second['id']}", {"status": "released"})
    assert released.status_code == 200
    assert send(alice_client, "post", f"{base}/{queue.pk}/take").json()["run_id"] == run.run_id

    # Bad input names its field; the delete keeps the scores, drops the items, is audited.
    r = send(alice_client, "patch", f"{base}/{queue.pk}", {"configs": "helpfulness"})
    assert r.status_code == 400 and r.json()["detail"][0]["field"] == "configs"
    r = send(alice_client, "post", base, {"name": "none", "configs": ["nope"]})
    assert r.status_code == 400 and r.json()["detail"][0]["field"] == "configs"
    assert send(bob_client, "delete", f"{base}/{queue.pk}").status_code == 403
    assert send(alice_client, "delete", f"{base}/{queue.pk}").status_code == 204
    assert not ReviewItem.objects.exists()
    assert AuditLog.objects.filter(event_type=AuditLog.QUEUE_DELETED).count() == 1


def test_a_judge_is_made_run_over_a_filter_followed_and_cancelled_through_the_api(
    alice_client: Client,
    bob_client: Client,
    vera_client: Client,
    api_client: Client,
    project: Project,
    run: Run,
    configs: dict[str, ScoreConfig],
) -> None:
    base = f"/api/v1/projects/{project.pk}/judges"
    body = {"name": "helpful?", "model": "scripted/judge-heuristic", "prompt": "Rate: {{ last_answer }}",
            "config": str(configs["helpfulness"].pk)}  # fmt: skip
    assert send(bob_client, "post", base, body).status_code == 403
    assert send(api_client, "post", base, body).status_code == 403
    r = send(alice_client, "post", base, body)
    assert r.status_code == 201, r.content
    judge = Judge.objects.get(pk=r.json()["id"])
    assert r.json()["model"] == "scripted/judge-heuristic" and r.json()["config"] == "helpfulness"
    again = send(alice_client, "post", base, body)
    assert again.status_code == 400 and again.json()["detail"][0]["field"] == "name"
    r = send(alice_client, "post", base, {**body, "name": "other", "model": "nowhere/none"})
    assert r.status_code == 400 and r.json()["detail"][0]["field"] == "model"

    # Changing it is audited; on_new_runs is a boolean.
    r = send(
        alice_client,
        "patch",
        f"{base}/{judge.pk}",
        {"prompt": "Again: {{ last_answer }}", "on_new_runs": True},
    )
    assert r.status_code == 200 and r.json()["on_new_runs"] is True and r.json()["prompt"].startswith("Again")
    assert AuditLog.objects.filter(event_type=AuditLog.JUDGE_CHANGED).count() == 2  # prompt, then auto
    r = send(alice_client, "patch", f"{base}/{judge.pk}", {"on_new_runs": "yes"})
    assert r.status_code == 400 and r.json()["detail"][0]["field"] == "on_new_runs"

    # A judge run over a filter with caps: queued (no worker in this test), listed, followed.
    r = send(
        alice_client,
        "post",
        f"{base}/{judge.pk}/runs",
        {"filter": "days=7", "max_runs": 5, "max_tokens": 1000},
    )
    assert r.status_code == 202, r.content
    jr = r.json()
    assert (jr["status"], jr["filter"], jr["max_runs"], jr["max_tokens"]) == ("queued", "days=7", 5, 1000)
    r = send(alice_client, "post", f"{base}/{judge.pk}/runs", {"max_runs": 0})
    assert r.status_code == 400 and r.json()["detail"][0]["field"] == "max_runs"
    assert [x["id"] for x in vera_client.get(f"{base}/{judge.pk}/runs").json()["results"]] == [jr["id"]]
    run_url = f"/api/v1/projects/{project.pk}/judge-runs/{jr['id']}"
    assert api_client.get(run_url).json()["status"] == "queued"

    # A judge with a run queued is not deleted; cancelled, it is.
    assert send(alice_client, "delete", f"{base}/{judge.pk}").status_code == 409
    assert send(bob_client, "post", f"{run_url}/cancel").status_code == 403
    r = send(alice_client, "post", f"{run_url}/cancel")
    assert r.status_code == 202 and r.json()["status"] == "cancelled"
    assert send(alice_client, "post", f"{run_url}/cancel").status_code == 409
    rerun = send(alice_client, "post", f"{run_url}/again")
    assert rerun.status_code == 202 and rerun.json()["id"] != jr["id"] and rerun.json()["filter"] == "days=7"
    JudgeRun.objects.filter(pk=rerun.json()["id"]).update(status=JudgeRun.Status.CANCELLED)
    assert send(alice_client, "delete", f"{base}/{judge.pk}").status_code == 204
    assert not Judge.objects.exists()
    assert AuditLog.objects.filter(event_type=AuditLog.JUDGE_DELETED).count() == 1


def test_an_outsider_gets_404_for_everything(charlie_client: Client, project: Project, configs: Any) -> None:
    queue = ReviewQueue.objects.create(project=project, name="q")
    for method, url in [
        ("get", f"/api/v1/projects/{project.pk}/queues"),
        ("get", f"/api/v1/projects/{project.pk}/queues/{queue.pk}"),
        ("post", f"/api/v1/projects/{project.pk}/queues/{queue.pk}/take"),
        ("get", f"/api/v1/projects/{project.pk}/judges"),
    ]:
        assert send(charlie_client, method, url).status_code == 404, url
