"""A re-run on a real Celery worker process (issue 38): the API enqueues the task by name on commit,
a worker of its own (nothing shared but the database and the broker) runs the step with the scripted
provider or a real loopback OpenAI-compatible server, and the branch run lands in the store."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from tests.runtime.openai_server import OpenAIServer
from tests.traces.branches.helpers import BUDGET, truncated
from tests.traces.workers import Worker, wait_for, worker
from traces.models import Branch, Project, Run, Step

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def llm() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def providers_json(llm: OpenAIServer) -> str:
    return json.dumps({"loop": {"base_url": llm.base_url, "models": ["loopback-model"], "max_retries": 0}})


@pytest.fixture(scope="module")
def agents_queue() -> str:
    return f"agents-rerun-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def queue_settings(settings: Any, providers_json: str, agents_queue: str) -> None:
    settings.ARCANA_PROVIDERS = providers_json
    settings.ARCANA_AGENTS_QUEUE = agents_queue


@pytest.fixture(scope="module")
def shared_worker(
    django_db_setup: None, django_db_blocker: Any, providers_json: str, agents_queue: str
) -> Iterator[Worker]:
    from django.conf import settings

    old = (settings.ARCANA_PROVIDERS, settings.ARCANA_AGENTS_QUEUE)
    settings.ARCANA_PROVIDERS, settings.ARCANA_AGENTS_QUEUE = providers_json, agents_queue
    try:
        with worker() as w:
            yield w
    finally:
        settings.ARCANA_PROVIDERS, settings.ARCANA_AGENTS_QUEUE = old


def rerun(api_client: Client, run: Run, **body: Any) -> Branch:
    r = api_client.post(
        f"/api/v1/projects/{run.project_id}/runs/{run.run_id}/steps/1/rerun",
        {"turn": 3, **body},
        content_type="application/json",
    )
    assert r.status_code == 202, r.content
    branch_id = r.json()["id"]
    wait_for(
        lambda: Branch.objects.filter(pk=branch_id, status__in=["completed", "failed"]).exists(),
        timeout=90,
        what=f"branch {branch_id} to finish",
    )
    return Branch.objects.get(pk=branch_id)


def test_a_worker_reruns_the_step_offline(
    shared_worker: Worker, project: Project, api_client: Client
) -> None:
    run = truncated(project)
    branch = rerun(api_client, run, edits=[{"op": "restore", "index": 1}])
    assert branch.status == "completed", (branch.error, shared_worker.log_text()[-2000:])
    step = Step.objects.get(run__project=project, run__run_id=branch.branch_run_id)
    assert step.prompt_snapshot["messages"][1]["content"] == BUDGET
    assert step.assistant_text == branch.answer and "3 messages" in branch.answer


def test_a_worker_reruns_the_step_on_an_openai_compatible_server(
    shared_worker: Worker, project: Project, api_client: Client, llm: OpenAIServer
) -> None:
    run = truncated(project)
    llm.enqueue_text("The budget is 42,000 EUR.")
    branch = rerun(api_client, run, edits=[{"op": "restore", "index": 1}], provider="loop")
    assert branch.status == "completed", (branch.error, shared_worker.log_text()[-2000:])
    assert (branch.model, branch.answer) == ("loopback-model", "The budget is 42,000 EUR.")
    sent = llm.requests[-1].json["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"] and sent[1]["content"] == BUDGET
