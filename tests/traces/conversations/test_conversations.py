"""A real Celery worker plays a runtime conversation and streams its events into the store."""

from __future__ import annotations

import subprocess

import pytest

from traces.models import Pin, PrimitiveEvent, Project, Run, Team
from traces.tasks import run_demo_conversation


@pytest.mark.django_db(transaction=True)
def test_it_streams_a_worker_conversation_into_the_project(
    celery_worker_process: subprocess.Popen[bytes],
) -> None:
    team = Team.objects.create(name="Workers")
    project = Project.objects.create(team=team, slug="agents", name="Agents")

    result = run_demo_conversation.apply_async(args=[project.pk], queue="agents").get(timeout=120)

    assert result["rejected"] == 0
    assert result["accepted"] > 0
    chat = Run.objects.get(project=project, run_id=result["chat_run_id"])
    pool = Run.objects.get(project=project, run_id=result["pool_run_id"])
    assert chat.source == Run.Source.RUNTIME
    assert chat.events + pool.events == result["accepted"]
    assert sorted(pool.agents) == ["researcher", "writer"]
    # The demo pins, recalls and unpins: the projections show each primitive and the pin's lifetime.
    primitives = set(PrimitiveEvent.objects.filter(run=chat).values_list("primitive", flat=True))
    assert {"pin", "recall", "unpin"} <= primitives
    pin = Pin.objects.get(run=chat, pin_id="p_a7145c0d")
    assert pin.created_turn >= 1
    assert pin.unpinned_turn is not None and pin.unpinned_turn > pin.created_turn
