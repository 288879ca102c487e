"""Checks of lost instructions on a real Celery worker process: queued by the action, sent by name on
commit through the broker, answered by the offline checker, written by the worker (issue 35)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.traces.instructions.helpers import FIX, NEVER, ingest_lost_run
from tests.traces.workers import wait_for, worker
from traces.instructions import actions
from traces.models import InstructionCheck, Project

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_a_worker_writes_the_verdicts_of_the_queued_checks(project: Project, bob: Any, settings: Any) -> None:
    settings.ARCANA_AGENTS_QUEUE = f"agents-checks-{uuid.uuid4().hex[:8]}"
    run = ingest_lost_run(project)
    with worker():
        rows = actions.do_check_lost_instructions(
            run, bob, actions.check_request({"model": "scripted/check-heuristic"})
        )
        assert [r.status for r in rows] == ["queued", "queued"]
        wait_for(
            lambda: not InstructionCheck.objects.filter(status="queued").exists(),
            what="the worker to check both instructions",
            timeout=60,
        )
    verdicts = dict(InstructionCheck.objects.values_list("instruction", "verdict"))
    assert verdicts == {NEVER: "contradicts", FIX: "unclear"}
    assert set(InstructionCheck.objects.values_list("status", "requested_by", "error")) == {
        ("done", bob.pk, "")
    }
