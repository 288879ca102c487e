"""Celery tasks. They take ids, re-read rows, and call `traces.ingest` or `runtime`."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from traces import conversations
from traces.experiments import service as experiments
from traces.experiments import worker as experiment_worker
from traces.ingest import span_queue, spans, uploads
from traces.instructions import actions as instruction_checks
from traces.models import Project
from traces.scores import judges
from traces.scores import worker as judge_worker
from traces.teams import actions as teams

log = logging.getLogger(__name__)


@shared_task(name="traces.tasks.ping")
def ping(value: str) -> dict[str, str]:
    """A no-op round trip through the broker and a worker (health checks and tests)."""
    return {"pong": value}


@shared_task(
    name="traces.tasks.process_upload",
    # Redelivered when its worker dies (the row's lease makes a second delivery harmless), and bounded:
    # the soft limit stops a chunk that hangs (rolled back, re-queued from the cursor), the hard limit
    # kills what ignores it (the lease then runs out and the sweeper re-queues the row).
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,  # progress and outcome are on the row; sending needs no result backend
    soft_time_limit=uploads.UPLOAD_TIME_BUDGET_S + 120,
    time_limit=uploads.UPLOAD_TIME_BUDGET_S + 180,
)
def process_upload(upload_id: int) -> dict[str, Any]:
    """Ingest an upload's file from its cursor under a lease (`traces.ingest.uploads.process_upload`). Safe to
    deliver twice: the row is claimed with a conditional update; chunks commit with the cursor."""
    return uploads.process_upload(upload_id)


@shared_task(name="traces.tasks.sweep_uploads", ignore_result=True, soft_time_limit=120, time_limit=180)
def sweep_uploads() -> dict[str, int]:
    """Periodic (Celery beat): re-queue uploads whose worker vanished or whose message was lost."""
    return uploads.sweep_uploads()


@shared_task(name="traces.tasks.run_demo_conversation")
def run_demo_conversation(project_id: int) -> dict[str, Any]:
    """Run the scripted demo conversation on the `agents` queue, streaming into the project."""
    project = Project.objects.get(pk=project_id)
    return conversations.run_demo_conversation(project)


# ignore_result: the outcome is on the conversation row. With a Redis result backend, a task sent
# without it subscribes the sender to its result channel, and the AsyncResult dropped afterwards
# unsubscribes from its __del__ — which the garbage collector may run in the middle of another
# command on the same connection, deadlocking that thread (seen in the test harness's pings).
@shared_task(
    name="traces.tasks.run_conversation", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def run_conversation(conversation_id: int) -> dict[str, Any]:
    """Run a conversation's pending turns (a whole script, or one playground turn) on the `agents`
    queue. Safe to deliver twice: the row is claimed with a conditional update under a lease
    (`traces.conversations.run_pending_turns`)."""
    return conversations.run_pending_turns(conversation_id)


@shared_task(name="traces.tasks.sweep_conversations", ignore_result=True)
def sweep_conversations() -> dict[str, int]:
    """Periodic (Celery beat): re-queue conversations whose worker vanished, fail the hopeless ones."""
    return conversations.sweep_conversations()


# Judges (issue 36): on the `agents` queue, with the conversations' lease and sweeper rules.
@shared_task(name="traces.tasks.run_judge", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_judge(judge_run_id: int) -> dict[str, Any]:
    """Judge the runs of a judge run under a lease (`traces.scores.worker.run_judge`). Safe to deliver
    twice: the row is claimed with a conditional update; each run's score commits with its result."""
    return judge_worker.run_judge(judge_run_id)


@shared_task(name="traces.tasks.sweep_judge_runs", ignore_result=True)
def sweep_judge_runs() -> dict[str, int]:
    """Periodic (Celery beat): re-queue judge runs whose worker vanished, fail the hopeless ones."""
    return judge_worker.sweep_judge_runs()


@shared_task(name="traces.tasks.judge_new_runs", ignore_result=True)
def judge_new_runs() -> dict[str, int]:
    """Periodic (Celery beat): judges that watch new runs get an automatic judge run over them."""
    return judges.judge_new_runs()


# Experiments (issue 38): on the `agents` queue; items claimed one at a time under a lease.
@shared_task(
    name="traces.tasks.run_experiment", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def run_experiment(experiment_id: int) -> dict[str, Any]:
    """Run an experiment's items (`traces.experiments.worker.run_experiment`). Safe to deliver twice
    or to several workers at once: each item is claimed with a conditional update."""
    return experiment_worker.run_experiment(experiment_id)


@shared_task(name="traces.tasks.sweep_experiments", ignore_result=True)
def sweep_experiments() -> dict[str, int]:
    """Periodic (Celery beat): send a task again to experiments whose worker vanished."""
    return experiments.sweep_experiments()


@shared_task(name="traces.tasks.refresh_rollups", ignore_result=True, soft_time_limit=300, time_limit=360)
def refresh_rollups() -> dict[str, int]:
    """Periodic (Celery beat): recompute the dashboard's days that ingestion or deletion marked
    (`traces.dashboard.rollups.refresh_marked`). Safe to run twice: a day is replaced whole."""
    from traces.dashboard import rollups

    return {"days": rollups.refresh_marked()}


@shared_task(name="traces.tasks.enforce_retention")
def enforce_retention() -> dict[str, int]:
    """Periodic (Celery beat): delete runs older than their project's `retention_days`, audited per
    project (`traces.teams.actions.do_enforce_retention`). Safe to run twice: a deleted run is not found again."""
    return {"deleted": teams.do_enforce_retention()}


# Lost instructions checked by a model (issue 35): on the `agents` queue, like judges.
@shared_task(
    name="traces.tasks.check_lost_instructions",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def check_lost_instructions(check_ids: list[int]) -> dict[str, int]:
    """Ask each queued check's model whether the answer contradicts the lost instruction
    (`traces.instructions.actions.run_checks`). Safe to deliver twice: only a row still queued is
    written."""
    return instruction_checks.run_checks(check_ids)


@shared_task(name="traces.tasks.sweep_instruction_checks", ignore_result=True)
def sweep_instruction_checks() -> dict[str, int]:
    """Periodic (Celery beat): send again the checks whose task was lost, fail the hopeless ones."""
    return instruction_checks.sweep_checks()


# Re-running a step from an edited context (issue 38): on the `agents` queue, claimed once.
@shared_task(name="traces.tasks.rerun_step", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def rerun_step(branch_id: int) -> dict[str, Any]:
    """Re-run one step of a run from its edited context and store the branch run
    (`traces.branches.worker.run_branch`). Safe to deliver twice: the branch row is claimed first."""
    from traces.branches import worker as branch_worker

    return branch_worker.run_branch(branch_id)


@shared_task(
    name="traces.tasks.derive_spans",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    soft_time_limit=600,
    time_limit=660,
)
def derive_spans(project_id: int) -> dict[str, int]:
    """Derive the runs of a project's pending OTLP spans (`traces.ingest.spans.do_derive_pending`).
    Safe to deliver twice: each round derives under the project's span lock only what is pending."""
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return {"project": project_id, "spans": 0}
    return {"project": project_id, "spans": spans.do_derive_pending(project)}


@shared_task(name="traces.tasks.sweep_spans", ignore_result=True, soft_time_limit=120, time_limit=180)
def sweep_spans() -> dict[str, int]:
    """Periodic (Celery beat): a derive task again for projects whose spans stayed pending."""
    return span_queue.sweep_spans()
