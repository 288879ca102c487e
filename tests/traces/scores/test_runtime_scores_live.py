"""`chat.score(...)` end to end (issue 36): the runtime scores its run, a turn and a step, and its
`HttpBatchSink` posts the events to a live loopback server's `POST /api/v1/ingest` with a project's
key; the server makes them scores, which the scores API and the runs list's score filter then show."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.test import Client

from runtime import HttpBatchSink, Runtime, RuntimeConfig, ScriptedProvider
from traces.models import ApiKey, Project, Run, Score, ScoreConfig

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_runtime_scores_its_run_through_the_http_sink(
    live_server: Any, project: Project, alice: Any, alice_client: Client
) -> None:
    ScoreConfig.objects.create(project=project, name="helpfulness", kind="numeric", min_value=1, max_value=5)
    ScoreConfig.objects.create(project=project, name="kept_constraint", kind="boolean")
    _, key = ApiKey.issue(project, name="runtime", created_by=alice)
    sink = HttpBatchSink(f"{live_server.url}/api/v1/ingest", api_key=key, max_interval_s=0.2)
    rt = Runtime({"scripted": ScriptedProvider(["Paris.", "Still Paris, in one word."])},
                 config=RuntimeConfig(), trace_sinks=[sink])  # fmt: skip

    async def go() -> str:
        async with rt.chat() as chat:
            await chat.send("Capital of France?")
            reply = await chat.send("One word only, please.")
            chat.score("helpfulness", 5, comment="right and brief")
            chat.score("kept_constraint", True, target="turn")
            chat.score("helpfulness", 4, target="step", turn=1, step=1)
            chat.score("no_such_config", 1)  # well formed: stored raw, no score
            return reply.run_id

    run_id = asyncio.run(go())
    sink.close(timeout=10)
    assert (sink.rejected, sink.lost, sink.sent) == (0, 0, sink.stats["sent"]) and sink.sent > 4

    run = Run.objects.get(project=project, run_id=run_id)
    assert run.turns == 2 and run.status == "completed"
    rows = sorted(
        Score.objects.filter(run_id=run_id).values_list(
            "name", "target", "turn_number", "step_number", "value"
        )
    )
    assert rows == [
        ("helpfulness", "run", None, None, 5.0),
        ("helpfulness", "step", 1, 1, 4.0),
        ("kept_constraint", "turn", 2, None, 1.0),
    ]
    api = alice_client.get(f"/api/v1/scores?run_id={run_id}&name=helpfulness").json()
    assert sorted(s["value"] for s in api["results"]) == [4.0, 5.0]
    assert {s["comment"] for s in api["results"]} == {"right and brief", ""}
    listed = alice_client.get("/api/v1/runs?score.kept_constraint=true").json()
    assert [r["run_id"] for r in listed["results"]] == [run_id]
    events = alice_client.get(f"/api/v1/projects/{project.pk}/runs/{run_id}/events?limit=500").json()
    assert sum(1 for e in events["results"] if e["event_type"] == "score") == 4
