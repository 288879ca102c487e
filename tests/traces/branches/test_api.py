"""The re-run API (issue 38): start a branch, follow it; bad input named by field; OTLP runs too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from tests.traces.branches.helpers import truncated
from tests.traces.otlp.test_api import _json_body, _json_span, _text
from traces.branches import worker
from traces.branches.actions import step_context_of
from traces.models import Branch, Project, Run

pytestmark = pytest.mark.django_db(transaction=True)


def url(run: Run, step: int) -> str:
    return f"/api/v1/projects/{run.project_id}/runs/{run.run_id}/steps/{step}/rerun"


def test_post_starts_a_branch_and_get_follows_it(project: Project, api_client: Client) -> None:
    run = truncated(project)
    body = {
        "turn": 3,
        "edits": [{"op": "restore", "index": 1}, {"op": "pin", "content": "Dana owns go/no-go."}],
    }
    r = api_client.post(url(run, 1), body, content_type="application/json")
    assert r.status_code == 202, r.content
    data = r.json()
    assert (data["status"], data["turn"], data["step"], data["provider"]) == ("queued", 3, 1, "scripted")
    assert data["edits"] == body["edits"] and data["compare_url"] is None
    worker.run_branch(data["id"])
    done = api_client.get(f"/api/v1/projects/{project.pk}/branches/{data['id']}").json()
    assert done["status"] == "completed" and "4 messages" in done["answer"]
    assert done["compare_url"].startswith("/compare?a=") and done["branch_run_url"]


@pytest.mark.parametrize(
    ("step", "body", "status", "field", "words"),
    [
        (
            1,
            {"turn": 3, "edits": [{"op": "restore", "index": 77}]},
            400,
            "edits[0].index",
            "unknown message index",
        ),
        (4, {"turn": 3, "edits": [{"op": "restore", "index": 1}]}, 404, "step", "no step 4 in turn 3"),
        (1, {"turn": 3, "edits": [], "provider": "gpt-nowhere"}, 400, "provider", "unknown provider"),
        (1, {"turn": 3, "edits": [{"op": "wish"}]}, 400, "edits[0].op", "op must be one of"),
        (1, {"edits": []}, 400, "turn", "turn number"),
        (1, {"turn": 3, "agent": 5}, 400, "agent", "string"),
    ],
)
def test_bad_input_is_a_structured_error(
    project: Project, api_client: Client, step: int, body: dict[str, Any], status: int, field: str, words: str
) -> None:
    run = truncated(project)
    r = api_client.post(url(run, step), body, content_type="application/json")
    assert r.status_code == status, r.content
    err = r.json()
    assert err["detail"][0]["field"] == field and words in err["detail"][0]["message"], err
    assert not Branch.objects.exists()


def test_an_otlp_run_whose_spans_carry_the_messages_reruns_with_a_dropped_message_restored(
    client: Client, api_key: str, api_client: Client, project: Project
) -> None:
    trace = "7b8efff798038103d269b633813fc61d"
    first = [_text("system", "Never touch the auth module."), _text("user", "Fix the login bug.")]
    second = [_text("user", "Now refactor the tests.")]  # the system prompt and history are gone
    spans = [
        _json_span(trace, "2001", "chat m", start=1, end=2, attrs={
            "gen_ai.operation.name": "chat", "gen_ai.conversation.id": "rr-1",
            "gen_ai.input.messages": json.dumps(first),
            "gen_ai.output.messages": json.dumps([_text("assistant", "Fixed.")]),
        }),
        _json_span(trace, "2002", "chat m", start=3, end=4, attrs={
            "gen_ai.operation.name": "chat", "gen_ai.conversation.id": "rr-1",
            "gen_ai.input.messages": json.dumps(second),
            "gen_ai.output.messages": json.dumps([_text("assistant", "Refactored.")]),
        }),
    ]  # fmt: skip
    for s in spans:
        s["spanId"] = s["spanId"].rjust(16, "0")
    r = client.post("/v1/traces", _json_body(spans), content_type="application/json", HTTP_X_API_KEY=api_key)
    assert r.status_code == 200, r.content
    run = Run.objects.get(project=project)
    items = step_context_of(run, 2, 1).items
    assert [(i.status, i.text) for i in items] == [
        ("dropped", "Never touch the auth module."),
        ("dropped", "Fix the login bug."),
        ("dropped", "Fixed."),
        ("kept", "Now refactor the tests."),
    ]
    dropped = [i.index for i in items if i.status == "dropped" and i.text == "Never touch the auth module."]
    body = {"turn": 2, "edits": [{"op": "restore", "index": dropped[0]}]}
    r = api_client.post(url(run, 1), body, content_type="application/json")
    assert r.status_code == 202, r.content
    assert worker.run_branch(r.json()["id"])["status"] == "completed"
    branch = Branch.objects.get()
    assert "2 messages" in branch.answer and "System prompt: “Never touch the auth module.”" in branch.answer
    b_run = Run.objects.get(project=project, run_id=branch.branch_run_id)
    assert b_run.steps == 1
