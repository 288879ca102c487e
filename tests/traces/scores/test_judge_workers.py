"""A judge run on a real Celery worker process, SIGKILLed in the middle of judging: a second worker
(whose beat runs the sweeper) finishes it, and every run ends with exactly one result and one score —
none lost, none written twice (issue 36)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from tests.traces.views_helpers import decision, our_step
from tests.traces.workers import wait_for, worker
from traces.ingest import ingest_events
from traces.models import Judge, JudgeResult, JudgeRun, Project, Score, ScoreConfig
from traces.scores import judges

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 6


@pytest.mark.slow
def test_a_worker_killed_mid_judge_loses_no_score_and_writes_none_twice(
    project: Project, alice: Any, settings: Any
) -> None:
    settings.ARCANA_AGENTS_QUEUE = f"agents-judge-{uuid.uuid4().hex[:8]}"
    for i in range(RUNS):
        events = our_step(f"judged-{i}", 1, 1, decisions=[decision(0, "system")], text=f"answer {'x' * i}")
        ingest_events(project, events, source="api")
    config = ScoreConfig.objects.create(
        project=project, name="helpfulness", kind="numeric", min_value=1, max_value=5
    )
    judge = Judge.objects.create(
        project=project, name="slow", provider="scripted", model="judge-heuristic", prompt="{{ last_answer }}",
        config=config,
    )  # fmt: skip
    # Each judge call takes 0.8 s, so the worker is killed with runs judged and runs left.
    env = {
        "ARCANA_SCRIPTED_STEP_MS": "800",
        "ARCANA_CONVERSATION_LEASE_SECONDS": "3",
        "ARCANA_CONVERSATION_SWEEP_SECONDS": "1",
    }
    with worker(env=env) as first:
        jr = judges.do_start_run(judge, alice, {"filter": "", "max_runs": 100, "max_tokens": 1_000_000})
        wait_for(
            lambda: JudgeRun.objects.filter(pk=jr.pk, runs_done__gte=2).exists(),
            what="two runs judged",
            timeout=90,
        )
        first.kill()
    jr.refresh_from_db()
    assert jr.status == "running" and 2 <= jr.runs_done < RUNS, (jr.status, jr.runs_done)
    # What was committed before the kill is whole: one score per result, the counters agree.
    assert (
        Score.objects.filter(judge_run=jr).count()
        == JudgeResult.objects.filter(judge_run=jr).count()
        == jr.runs_done
    )

    with worker(env=env, beat=True):
        wait_for(
            lambda: JudgeRun.objects.filter(pk=jr.pk, status__in=["completed", "failed"]).exists(),
            what="the judge run to finish on the second worker",
            timeout=120,
        )
    jr.refresh_from_db()
    assert jr.status == "completed", jr.reason
    assert (jr.runs_total, jr.runs_done, jr.scored, jr.errors) == (RUNS, RUNS, RUNS, 0)
    per_run = Counter(Score.objects.filter(judge_run=jr).values_list("run_id", flat=True))
    assert per_run == {f"judged-{i}": 1 for i in range(RUNS)}  # none lost, none twice
    assert Counter(JudgeResult.objects.filter(judge_run=jr).values_list("run_id", flat=True)) == per_run
    assert jr.tokens_used == sum(Score.objects.filter(judge_run=jr).values_list("tokens", flat=True))
