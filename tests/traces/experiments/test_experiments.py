"""Experiments run in this process (the task's body; real worker processes are in
test_experiment_workers.py): every item becomes a run linked to its experiment and item, judged; a
provider error fails the item, not the experiment; caps, cancel, concurrency; two compared."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runtime.openai_server import OpenAIServer
from traces.conversations import ConversationLimitError
from traces.experiments import results, service, worker
from traces.experiments.datasets import DatasetError
from traces.models import Conversation, Dataset, Experiment, ExperimentItem, Judge, Project, Run, Score

pytestmark = pytest.mark.django_db(transaction=True)


def start(project: Project, user: Any, **body: Any) -> Experiment:
    fields = service.check_experiment(project, body)
    return service.do_start_experiment(project, user, fields)


def test_each_item_becomes_a_judged_run_of_the_experiment(
    project: Project, alice: Any, dataset: Dataset, judge: Judge
) -> None:
    exp = start(project, alice, dataset=dataset.pk, model="small-talk", judges=[judge.pk], name="base")
    assert exp.items_total == 3 and exp.dataset_version == 1

    assert worker.run_experiment(exp.pk) == {"experiment": exp.pk, "items": 3}

    exp.refresh_from_db()
    assert (exp.status, exp.items_done, exp.items_failed) == ("completed", 3, 0)
    items = list(ExperimentItem.objects.filter(experiment=exp).select_related("item", "conversation"))
    assert [it.state for it in items] == ["done"] * 3
    for it in items:
        run = Run.objects.get(project=project, run_id=it.run_id)
        assert it.conversation is not None and it.conversation.run_id == run.run_id
        assert run.turns == len(it.item.user_messages)
        assert it.stats["tokens"] == run.tokens > 0 and it.output
        assert 1 <= it.scores["helpfulness"] <= 5 and it.judge_errors == {}
        assert Score.objects.filter(run_id=it.run_id, source="judge").count() == 1
    # The item's system message reached the run when the spec gave none.
    assert items[1].conversation.config["system"] == "Be brief."  # type: ignore[union-attr]
    assert exp.tokens_used == sum(it.stats["tokens"] for it in items)
    overall = results.summary(exp)
    assert overall["states"]["done"] == 3 and overall["scores"]["helpfulness"]["count"] == 3
    # Running it again (a second delivery) does nothing twice.
    assert worker.run_experiment(exp.pk) == {"experiment": exp.pk, "items": 0}
    assert Score.objects.filter(source="judge").count() == 3


def test_a_provider_error_fails_the_item_not_the_experiment(
    project: Project, alice: Any, dataset: Dataset, settings: Any
) -> None:
    with OpenAIServer() as llm:
        settings.ARCANA_PROVIDERS = (
            f'{{"llm": {{"base_url": "{llm.base_url}", "model": "m", "max_retries": 0}}}}'
        )
        llm.enqueue_text("first answer")
        llm.enqueue_error(400, message="bad request")
        llm.enqueue_text("third answer")
        exp = start(project, alice, dataset=dataset.pk, provider="llm")
        worker.run_experiment(exp.pk)
    exp.refresh_from_db()
    assert (exp.status, exp.items_done, exp.items_failed) == ("completed", 3, 1)
    states = list(ExperimentItem.objects.filter(experiment=exp).values_list("state", "error"))
    assert [s for s, _ in states] == ["done", "failed", "done"]
    assert "provider error" in states[1][1]


def test_the_token_cap_skips_the_items_left(project: Project, alice: Any, dataset: Dataset) -> None:
    exp = start(project, alice, dataset=dataset.pk, model="small-talk", max_tokens=1)
    worker.run_experiment(exp.pk)
    exp.refresh_from_db()
    assert exp.status == "completed" and "token cap reached" in exp.reason
    assert list(ExperimentItem.objects.filter(experiment=exp).values_list("state", flat=True)) == [
        "done", "skipped", "skipped",
    ]  # fmt: skip


def test_the_item_cap_and_a_version_choose_the_items(project: Project, alice: Any, dataset: Dataset) -> None:
    exp = start(project, alice, dataset=dataset.pk, model="small-talk", max_items=2)
    assert exp.items_total == 2
    with pytest.raises(DatasetError) as e:
        service.check_experiment(project, {"dataset": dataset.pk, "version": 7})
    assert e.value.field == "version"


def test_cancel_skips_what_has_not_started(project: Project, alice: Any, dataset: Dataset) -> None:
    exp = start(project, alice, dataset=dataset.pk, model="small-talk")
    assert service.do_cancel_experiment(exp)
    exp.refresh_from_db()
    assert exp.status == "cancelled" and exp.items_done == 3
    assert not Conversation.objects.filter(project=project).exists()
    assert not service.do_cancel_experiment(exp)


def test_the_projects_concurrency_limit_refuses_an_experiment(
    project: Project, alice: Any, dataset: Dataset, settings: Any
) -> None:
    settings.ARCANA_MAX_CONCURRENT_CONVERSATIONS = 2
    first = start(project, alice, dataset=dataset.pk, model="small-talk")
    # Its item running as a conversation counts once (in the experiment's `parallel`), not twice.
    it = ExperimentItem.objects.select_related("experiment", "item").get(experiment=first, position=1)
    service.item_conversation(it)
    assert Conversation.objects.filter(status="queued").count() == 1
    start(project, alice, dataset=dataset.pk, model="small-talk")
    with pytest.raises(ConversationLimitError, match="ARCANA_MAX_CONCURRENT_CONVERSATIONS"):
        start(project, alice, dataset=dataset.pk, model="small-talk")


def test_two_experiments_compare_item_by_item_what_matters_first(
    project: Project, alice: Any, dataset: Dataset, judge: Judge
) -> None:
    a = start(project, alice, dataset=dataset.pk, model="small-talk", judges=[judge.pk])
    worker.run_experiment(a.pk)
    b = start(project, alice, dataset=dataset.pk, model="small-talk", judges=[judge.pk])
    worker.run_experiment(b.pk)
    # B's second item failed: it comes first, then a score change.
    second = ExperimentItem.objects.get(experiment=b, position=2)
    ExperimentItem.objects.filter(pk=second.pk).update(state="failed", error="provider error: x")
    third = ExperimentItem.objects.get(experiment=b, position=3)
    ExperimentItem.objects.filter(pk=third.pk).update(scores={"helpfulness": 9})
    pairs = results.compare(a, b)
    assert [p.a.position for p in pairs if p.a] == [2, 3, 1]
    assert pairs[0].changes[0] == "error in B"
    assert any(c.startswith("helpfulness ") for c in pairs[1].changes)
    assert pairs[0].compare_url.startswith("/compare?a=")


def test_an_item_whose_worker_vanished_is_claimed_again_and_the_sweeper_sends_a_task(
    project: Project, alice: Any, dataset: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    exp = start(project, alice, dataset=dataset.pk, model="small-talk")
    held = worker.claim_next(exp.pk, "gone-worker")
    assert held is not None and held.position == 1
    # Another task takes the next item, never the one held under a live lease.
    other = worker.claim_next(exp.pk, "second")
    assert other is not None and other.position == 2
    sent: list[int] = []
    monkeypatch.setattr(service, "enqueue", lambda pk, count=1: sent.append(pk))
    assert service.sweep_experiments() == {"resent": 0}  # both leases are alive
    ExperimentItem.objects.filter(pk=held.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert service.sweep_experiments() == {"resent": 1} and sent == [exp.pk]
    again = worker.claim_next(exp.pk, "third")
    assert again is not None and again.pk == held.pk and again.attempts == 2
    # The stale owner can no longer record it: its lease is gone.
    assert not worker.record_item(held, "gone-worker", "done", "", "", {}, {}, {})


def test_cancel_stops_a_running_item_after_its_step_and_skips_the_rest(
    project: Project, alice: Any, dataset: Dataset, settings: Any
) -> None:
    import threading
    import time

    from django import db

    settings.ARCANA_SCRIPTED_STEP_MS = 700
    settings.ARCANA_CONVERSATION_LEASE_SECONDS = 3
    exp = start(project, alice, dataset=dataset.pk, model="small-talk")
    # The first item gets a long script, so the cancel lands while its conversation runs.
    first = ExperimentItem.objects.select_related("item").get(experiment=exp, position=1)
    first.item.input = [{"role": "user", "content": f"message {i}"} for i in range(8)]
    first.item.save()

    def task() -> None:
        try:
            worker.run_experiment(exp.pk)
        finally:
            db.connection.close()  # this thread's own connection (the test database is dropped after)

    body = threading.Thread(target=task)
    body.start()
    deadline = time.monotonic() + 30
    while not Conversation.objects.filter(project=project, status="running").exists():
        assert time.monotonic() < deadline, "the first item never started"
        time.sleep(0.05)
    assert service.do_cancel_experiment(exp)
    body.join(timeout=60)
    assert not body.is_alive()
    exp.refresh_from_db()
    assert exp.status == "cancelled" and exp.items_done == 3
    states = dict(ExperimentItem.objects.filter(experiment=exp).values_list("position", "state"))
    assert states == {1: "skipped", 2: "skipped", 3: "skipped"}
    conv = Conversation.objects.get(project=project)
    assert conv.status == "cancelled" and conv.cursor < 8  # stopped after its current step


def test_a_cancelled_experiment_does_not_run_again_what_a_vanished_worker_held(
    project: Project, alice: Any, dataset: Dataset
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    exp = start(project, alice, dataset=dataset.pk, model="small-talk")
    held = worker.claim_next(exp.pk, "gone-worker")
    assert held is not None
    conv = service.item_conversation(held)
    assert service.do_cancel_experiment(exp)  # the held item's conversation is cancelled at once (queued)
    ExperimentItem.objects.filter(pk=held.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert worker.run_experiment(exp.pk) == {"experiment": exp.pk, "items": 0}
    exp.refresh_from_db()
    conv.refresh_from_db()
    assert exp.status == "cancelled" and exp.items_done == 3 and conv.status == "cancelled"
    assert ExperimentItem.objects.get(pk=held.pk).state == "skipped"
    assert not Run.objects.filter(project=project, run_id=held.run_id, turns__gt=0).exists()
