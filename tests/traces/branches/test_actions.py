"""Re-running a step (issue 38): the checks, `do_rerun_step`, and the task's body run in this process
(the branch run stored through the ingest path, linked to the original at that step)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from tests.traces.branches.helpers import BUDGET, truncated
from traces.branches import actions, worker
from traces.models import Branch, Event, Project, Run, Step

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_step_context_comes_from_the_stored_events(project: Project) -> None:
    run = truncated(project)
    ctx = actions.step_context_of(run, 3, 1)
    assert [i.status for i in ctx.items] == ["system", "dropped", "dropped", "dropped", "dropped", "kept"]
    assert ctx.items[1].original == {"role": "user", "content": BUDGET}


@pytest.mark.parametrize(
    ("turn", "step", "edits", "provider", "status", "field", "words"),
    [
        (3, 1, [{"op": "restore", "index": 42}], None, 400, "edits[0].index", "unknown message index 42"),
        (3, 1, [{"op": "restore", "index": 5}], None, 400, "edits[0].index", "cannot be restored"),
        (3, 1, [{"op": "unpin", "index": 1}], None, 400, "edits[0].index", "not a pinned block"),
        (3, 1, "restore", None, 400, "edits", "must be a list"),
        (9, 1, [{"op": "restore", "index": 1}], None, 404, "step", "no step 1 in turn 9"),
        (3, 1, [], "nobody", 400, "provider", "unknown provider 'nobody'"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    project: Project, turn: int, step: int, edits: Any, provider: Any, status: int, field: str, words: str
) -> None:
    run = truncated(project)
    with pytest.raises(actions.RerunInputError) as err:
        actions.check_rerun(run, turn, step, agent=None, edits=edits, provider=provider, model=None)
    assert err.value.status == status
    assert err.value.detail[0]["field"] == field and words in err.value.detail[0]["message"]


def test_a_model_the_provider_does_not_offer_is_refused(project: Project, settings: Any) -> None:
    settings.ARCANA_PROVIDERS = '{"local": {"base_url": "http://127.0.0.1:9/v1", "models": ["m1"]}}'
    run = truncated(project)
    with pytest.raises(actions.RerunInputError) as err:
        actions.check_rerun(run, 3, 1, agent=None, edits=[], provider="local", model="m2")
    assert err.value.detail[0]["field"] == "model"
    checked = actions.check_rerun(run, 3, 1, agent=None, edits=[], provider="local", model=None)
    assert checked.model == "m1"  # the step's own model is not one it offers: its first


def test_a_branch_reruns_the_step_and_stores_its_run_linked_to_the_original(
    project: Project, alice: Any, alice_client: Client
) -> None:
    run = truncated(project)
    checked = actions.check_rerun(
        run, 3, 1, agent=None, edits=[{"op": "restore", "index": 1}], provider="scripted", model=None
    )
    branch = actions.do_rerun_step(run, checked, user=alice)
    assert (branch.status, branch.turn_number, branch.step_number, branch.created_by) == (
        "queued",
        3,
        1,
        alice,
    )
    out = worker.run_branch(branch.pk)
    assert out["status"] == "completed", out
    branch.refresh_from_db()
    assert branch.status == Branch.Status.COMPLETED and "3 messages" in branch.answer
    # The branch run went through the ingest path: a run of its own, with a step that received the
    # edited messages and events that say where they branched from.
    b_run = Run.objects.get(project=project, run_id=branch.branch_run_id)
    step = Step.objects.get(run=b_run)
    assert (step.turn_number, step.number, step.assistant_text) == (3, 1, branch.answer)
    assert [m["content"] for m in step.prompt_snapshot["messages"]][1] == BUDGET
    raw = Event.objects.filter(project=project, run_id=branch.branch_run_id).values_list("raw", flat=True)
    links = [json.loads(r)["metadata"]["branch"] for r in raw]
    assert len(links) == 4  # context_decision, prompt_snapshot, turn, llm_call
    assert all((b["from_run_id"], b["turn"], b["step"]) == (run.run_id, 3, 1) for b in links)
    assert links[0]["edits"] == [{"op": "restore", "index": 1}] and links[0]["provider"] == "scripted"
    # A second delivery of the task runs nothing.
    assert worker.run_branch(branch.pk)["skipped"] == "not claimable"
    # The compare page of the two opens on the re-run turn and shows both answers.
    page = alice_client.get(branch.compare_url())
    assert page.status_code == 200
    assert branch.answer.split("(")[0].encode() in page.content
    # The branch page of a finished branch opens the compare page.
    assert alice_client.get(branch.get_absolute_url())["Location"] == branch.compare_url()


def test_a_provider_failure_fails_the_branch_not_the_original(project: Project, settings: Any) -> None:
    settings.ARCANA_PROVIDERS = (
        '{"dead": {"base_url": "http://127.0.0.1:9/v1", "models": ["m1"], "max_retries": 0, "timeout": 2}}'
    )
    run = truncated(project)
    checked = actions.check_rerun(run, 3, 1, agent=None, edits=[], provider="dead", model=None)
    branch = actions.do_rerun_step(run, checked)
    assert worker.run_branch(branch.pk)["status"] == "failed"
    branch.refresh_from_db()
    assert branch.status == Branch.Status.FAILED and "ProviderConnectionError" in branch.error
    b_run = Run.objects.get(project=project, run_id=branch.branch_run_id)
    assert b_run.errors >= 1
    run.refresh_from_db()
    assert run.status != Run.Status.FAILED


def test_a_project_runs_at_most_its_limit_of_reruns(
    project: Project, settings: Any, api_client: Client
) -> None:
    settings.ARCANA_MAX_CONCURRENT_CONVERSATIONS = 1
    run = truncated(project)
    checked = actions.check_rerun(run, 3, 1, agent=None, edits=[], provider="scripted", model=None)
    actions.do_rerun_step(run, checked)
    with pytest.raises(actions.RerunInputError) as err:
        actions.do_rerun_step(run, checked)
    assert err.value.status == 429 and "ARCANA_MAX_CONCURRENT_CONVERSATIONS" in str(err.value)
    r = api_client.post(
        f"/api/v1/projects/{project.pk}/runs/{run.run_id}/steps/1/rerun",
        {"turn": 3},
        content_type="application/json",
    )
    assert r.status_code == 429 and r["Retry-After"] == "30"
    assert Branch.objects.count() == 1


def test_a_branch_whose_worker_died_is_claimed_again_by_the_redelivered_task(project: Project) -> None:
    from datetime import timedelta

    from django.utils import timezone

    run = truncated(project)
    checked = actions.check_rerun(run, 3, 1, agent=None, edits=[], provider="scripted", model=None)
    branch = actions.do_rerun_step(run, checked)
    # Running, claimed a moment ago: another delivery leaves it alone.
    Branch.objects.filter(pk=branch.pk).update(status="running", started_at=timezone.now(), attempts=1)
    assert worker.run_branch(branch.pk)["skipped"] == "not claimable"
    # Running since long before any model call could end: its worker died; the task runs it.
    Branch.objects.filter(pk=branch.pk).update(
        started_at=timezone.now() - worker.STALE_AFTER - timedelta(seconds=1)
    )
    assert worker.run_branch(branch.pk)["status"] == "completed"
    branch.refresh_from_db()
    assert branch.attempts == 2 and Run.objects.filter(run_id=branch.branch_run_id).count() == 1
