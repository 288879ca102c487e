"""An experiment on a real Celery worker process, SIGKILLed in the middle of an item: a second worker
(whose beat runs the sweepers) resumes it, and every item ends with exactly one run, one conversation
whose turns ran once each, and one judge score — none lost, none run twice (issue 38)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from tests.traces.workers import wait_for, worker
from traces.experiments import datasets, service
from traces.models import Conversation, Experiment, ExperimentItem, Judge, Project, Run, Score

pytestmark = pytest.mark.django_db(transaction=True)

ITEMS = 6


@pytest.mark.slow
def test_a_worker_killed_mid_experiment_loses_no_item_and_runs_none_twice(
    project: Project, alice: Any, judge: Judge, settings: Any
) -> None:
    settings.ARCANA_AGENTS_QUEUE = f"agents-exp-{uuid.uuid4().hex[:8]}"
    ds = datasets.do_create_dataset(project, alice, {"name": "killed"})
    items = [
        datasets.check_item(
            {
                "input": [
                    {"role": "user", "content": f"question {i}"},
                    {"role": "user", "content": f"more {i}"},
                ]
            }
        )
        for i in range(ITEMS)
    ]
    datasets.do_add_items(ds, alice, items)
    # Each scripted step takes 0.8 s (two turns an item), so the worker is killed with items done,
    # one under way and items left.
    env = {
        "ARCANA_SCRIPTED_STEP_MS": "800",
        "ARCANA_CONVERSATION_LEASE_SECONDS": "3",
        "ARCANA_CONVERSATION_SWEEP_SECONDS": "1",
    }
    with worker(env=env) as first:
        fields = service.check_experiment(
            project, {"dataset": ds.pk, "model": "small-talk", "judges": [judge.pk]}
        )
        exp = service.do_start_experiment(project, alice, fields)
        wait_for(
            lambda: Experiment.objects.filter(pk=exp.pk, items_done__gte=2).exists()
            and ExperimentItem.objects.filter(experiment=exp, state="running").exists(),
            what="two items done and one running",
            timeout=90,
        )
        first.kill()
    exp.refresh_from_db()
    assert exp.status == "running" and 2 <= exp.items_done < ITEMS, (exp.status, exp.items_done)
    cut = ExperimentItem.objects.filter(experiment=exp, state="running").get()

    with worker(env=env, beat=True):
        wait_for(
            lambda: Experiment.objects.filter(
                pk=exp.pk, status__in=["completed", "failed", "cancelled"]
            ).exists(),
            what="the experiment to finish on the second worker",
            timeout=150,
        )
    exp.refresh_from_db()
    assert exp.status == "completed", exp.reason
    assert (exp.items_total, exp.items_done, exp.items_failed) == (ITEMS, ITEMS, 0)
    rows = list(ExperimentItem.objects.filter(experiment=exp).select_related("conversation"))
    assert [r.state for r in rows] == ["done"] * ITEMS
    # The item cut short was claimed twice (once per worker); every other item once.
    assert {r.pk: r.attempts for r in rows} == {r.pk: 2 if r.pk == cut.pk else 1 for r in rows}
    # One conversation and one run per item; each conversation ran each of its two turns once.
    assert Conversation.objects.filter(project=project).count() == ITEMS
    for r in rows:
        assert r.conversation is not None and r.conversation.status == "completed"
        assert [t["index"] for t in r.conversation.transcript] == [0, 1]
        run = Run.objects.get(project=project, run_id=r.run_id)
        assert run.turns == 2 and r.stats["tokens"] == run.tokens
    per_run = Counter(Score.objects.filter(source="judge").values_list("run_id", flat=True))
    assert per_run == {r.run_id: 1 for r in rows}  # none lost, none twice
    assert exp.tokens_used == sum(r.stats["tokens"] for r in rows)
