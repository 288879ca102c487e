"""Lost instructions checked by a model (issue 35): the offline `scripted` checker and a real
loopback OpenAI-compatible server; the strict reading of its answer (an unreadable one is a visible
error, never a verdict); the run page's "checked by <model>" and the button; the API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from tests.runtime.openai_server import OpenAIServer
from tests.traces.instructions.helpers import FIX, LATE_ANSWER, NEVER, ingest_lost_run
from traces import tasks
from traces.instructions import actions, checking
from traces.instructions.lost import instruction_key
from traces.models import InstructionCheck, Project, Run

API = "/api/v1/projects/{p}/runs/{r}/instruction-checks"


@pytest.fixture
def lost_run(project: Project) -> Run:
    return ingest_lost_run(project)


def _api(run: Run) -> str:
    return API.format(p=run.project_id, r=run.run_id)


def _queued_task(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The tasks sent on commit (by name, to the agents queue), recorded instead of sent."""
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        actions.current_app, "send_task", lambda name, args, **kw: sent.append((name, args, kw))
    )
    return sent


def test_an_answer_is_parsed_strictly() -> None:
    assert checking.parse_answer('{"verdict": "contradicts", "reasoning": " it did "}') == (
        "contradicts",
        "it did",
    )
    assert checking.parse_answer('```json\n{"verdict": "unclear"}\n```') == ("unclear", "")
    for bad, why in (
        ("It contradicts it.", "not one JSON object"),
        ("[1]", 'with a "verdict"'),
        ('{"verdict": "yes"}', "not one of contradicts, consistent, unclear"),
        ('{"verdict": "consistent", "score": 1}', "unexpected keys score"),
        ('{"verdict": "consistent", "reasoning": 3}', "not a string"),
        ('{"verdict": "consistent"} {"verdict": "unclear"}', "not one JSON object"),
        (None, "not one JSON object"),
    ):
        with pytest.raises(checking.CheckAnswerError, match=why):
            checking.parse_answer(bad)


def test_the_scripted_checker_reads_a_contradiction_and_the_page_says_who_checked(
    lost_run: Run,
    bob_client: Client,
    alice_client: Client,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = _queued_task(monkeypatch)
    url = f"/projects/{lost_run.project_id}/runs/{lost_run.run_id}"
    page = alice_client.get(url).content.decode()
    assert "Check with a model" in page and "scripted/check-heuristic" in page
    with django_capture_on_commit_callbacks(execute=True):
        r = bob_client.post(f"{url}/instruction-checks", {"model": "scripted/check-heuristic", "agent": ""})
    assert r.status_code == 302 and r["Location"].endswith("#lost-instructions")
    assert [(name, kw["queue"]) for name, _, kw in sent] == [
        ("traces.tasks.check_lost_instructions", "agents")
    ]
    checks = {c.instruction: c for c in InstructionCheck.objects.all()}
    assert set(checks) == {NEVER, FIX}
    assert all(c.status == "queued" and (c.answer_turn, c.answer_step) == (2, 1) for c in checks.values())
    assert checks[NEVER].answer == LATE_ANSWER and (checks[NEVER].lost_turn, checks[NEVER].lost_step) == (
        2,
        1,
    )
    page = alice_client.get(url).content.decode()
    assert "Being checked by scripted/check-heuristic" in page
    # The worker's task, by the name it was sent with.
    assert tasks.check_lost_instructions(*sent[0][1]) == {"done": 2}
    assert tasks.check_lost_instructions(*sent[0][1]) == {"skipped": 2}  # redelivered: written once
    never = InstructionCheck.objects.get(instruction=NEVER)
    assert never.verdict == "contradicts" and never.reasoning.endswith("rules out (touch auth)")
    assert never.provider == "scripted" and never.model == "check-heuristic" and never.error == ""
    assert InstructionCheck.objects.get(instruction=FIX).verdict == "unclear"
    page = alice_client.get(url).content.decode()
    assert "contradicts</strong> — checked by scripted/check-heuristic" in page and "badge--warn" in page
    assert "unclear</strong> — checked by scripted/check-heuristic" in page


def test_an_unparseable_answer_is_a_visible_error_not_a_verdict(
    lost_run: Run, alice_client: Client, api_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    _queued_task(monkeypatch)
    r = api_client.post(
        _api(lost_run), {"model": "scripted/check-unparseable"}, content_type="application/json"
    )
    assert r.status_code == 202, r.content
    for check in r.json()["checks"]:
        actions.do_check_lost_instruction(check["id"])
    rows = list(InstructionCheck.objects.all())
    assert len(rows) == 2 and all(c.status == "failed" and c.verdict == "" for c in rows)
    assert all(
        c.error.startswith("the answer is not one JSON object — the model said: The answer") for c in rows
    )
    page = alice_client.get(f"/projects/{lost_run.project_id}/runs/{lost_run.run_id}").content.decode()
    assert "the check by scripted/check-unparseable failed: the answer is not one JSON object" in page
    body = api_client.get(_api(lost_run)).json()
    assert {i["check"]["status"] for i in body["lost_instructions"]} == {"failed"}
    assert all(i["check"]["verdict"] == "" and i["check"]["error"] for i in body["lost_instructions"])


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


def test_a_configured_provider_is_asked_over_http_and_its_verdict_kept(
    lost_run: Run,
    api_client: Client,
    openai_server: OpenAIServer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOP_KEY", "sk-loop")
    settings.ARCANA_PROVIDERS = json.dumps(
        {
            "loop": {
                "base_url": openai_server.base_url,
                "models": ["judge-7b"],
                "api_key_env": "LOOP_KEY",
                "max_retries": 0,
            }
        }
    )
    _queued_task(monkeypatch)
    openai_server.enqueue_text(
        json.dumps({"verdict": "contradicts", "reasoning": "it touched the auth module"})
    )
    openai_server.enqueue_text("Well, it depends.")
    key = api_client.get(_api(lost_run)).json()["lost_instructions"]
    keys = {i["text"]: i["key"] for i in key}
    r = api_client.post(
        _api(lost_run),
        {"model": "loop/judge-7b", "instructions": [keys[NEVER], keys[FIX]]},
        content_type="application/json",
    )
    assert r.status_code == 202
    ids = [c["id"] for c in r.json()["checks"]]
    assert [actions.do_check_lost_instruction(i) for i in ids] == ["done", "failed"]
    sent = openai_server.requests[0]
    assert sent.headers["authorization"] == "Bearer sk-loop" and sent.json["model"] == "judge-7b"
    system, user = sent.json["messages"]
    assert '"verdict": "contradicts" | "consistent" | "unclear"' in system["content"]
    assert (
        NEVER in user["content"] and LATE_ANSWER in user["content"] and "the system prompt" in user["content"]
    )
    body = api_client.get(_api(lost_run)).json()
    latest = {i["text"]: i["check"] for i in body["lost_instructions"]}
    assert latest[NEVER]["verdict"] == "contradicts" and latest[NEVER]["checked_by"] == "loop/judge-7b"
    assert latest[NEVER]["reasoning"] == "it touched the auth module" and latest[NEVER]["tokens"] > 0
    assert latest[FIX]["verdict"] == "" and "the model said: Well, it depends." in latest[FIX]["error"]
    assert [c["id"] for c in body["checks"]] == sorted(ids, reverse=True)


def test_a_provider_failure_is_the_checks_error(
    lost_run: Run,
    api_client: Client,
    openai_server: OpenAIServer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.ARCANA_PROVIDERS = json.dumps(
        {"loop": {"base_url": openai_server.base_url, "models": ["m"], "max_retries": 0}}
    )
    _queued_task(monkeypatch)
    openai_server.enqueue_error(500)
    r = api_client.post(
        _api(lost_run),
        {
            "model": "loop/m",
            "instructions": [api_client.get(_api(lost_run)).json()["lost_instructions"][0]["key"]],
        },
        content_type="application/json",
    )
    (check,) = r.json()["checks"]
    assert actions.do_check_lost_instruction(check["id"]) == "failed"
    row = InstructionCheck.objects.get(pk=check["id"])
    assert row.verdict == "" and row.error.startswith("the provider failed")


def test_no_answer_after_the_loss_fails_at_once_saying_so(
    project: Project, api_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = ingest_lost_run(project, "quiet-run", answer="")
    sent = _queued_task(monkeypatch)
    r = api_client.post(_api(run), {"model": "scripted/check-heuristic"}, content_type="application/json")
    assert r.status_code == 202
    assert {c["status"] for c in r.json()["checks"]} == {"failed"}
    assert all("no answer at or after turn 2 · step 1" in c["error"] for c in r.json()["checks"])
    assert sent == []


def test_who_may_check(
    lost_run: Run, vera_client: Client, charlie_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    _queued_task(monkeypatch)
    url = f"/projects/{lost_run.project_id}/runs/{lost_run.run_id}"
    assert "Check with a model" not in vera_client.get(url).content.decode()  # a viewer reads verdicts
    assert (
        vera_client.post(f"{url}/instruction-checks", {"model": "scripted/check-heuristic"}).status_code
        == 403
    )
    assert (
        vera_client.post(
            _api(lost_run), {"model": "scripted/check-heuristic"}, content_type="application/json"
        ).status_code
        == 403
    )
    assert vera_client.get(_api(lost_run)).status_code == 200
    assert charlie_client.get(_api(lost_run)).status_code == 404
    assert (
        charlie_client.post(f"{url}/instruction-checks", {"model": "scripted/check-heuristic"}).status_code
        == 404
    )
    assert not InstructionCheck.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "model", "choose one of the offered provider/model pairs"),
        ({"model": "scripted/judge-heuristic"}, "model", "choose one of the offered"),
        ({"model": "nope/m"}, "model", "choose one of the offered"),
        ({"model": 7}, "model", "a string"),
        ({"model": "scripted/check-heuristic", "agent": "x" * 201}, "agent", "at most 200"),
        ({"model": "scripted/check-heuristic", "instructions": "all"}, "instructions", "a list"),
        ({"model": "scripted/check-heuristic", "instructions": []}, "instructions", "1 to 100"),
        (
            {"model": "scripted/check-heuristic", "instructions": ["0" * 32]},
            "instructions",
            "not a lost instruction",
        ),
        ({"model": "scripted/check-heuristic", "agent": "writer"}, "run", "lost no instruction"),
        ([1], "body", "a JSON object"),
    ],
)
def test_bad_requests_are_400_in_the_one_error_shape(
    lost_run: Run, api_client: Client, body: Any, field: str, message: str
) -> None:
    r = api_client.post(_api(lost_run), body, content_type="application/json")
    assert r.status_code == 400, r.content
    data = r.json()
    assert data["error"] == "invalid input"
    assert data["detail"][0]["field"] == field and message in data["detail"][0]["message"]
    assert not InstructionCheck.objects.exists()


def test_deleting_the_run_deletes_its_checks(
    lost_run: Run, api_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    _queued_task(monkeypatch)
    other = ingest_lost_run(lost_run.project, "kept-run")
    for run in (lost_run, other):
        r = api_client.post(_api(run), {"model": "scripted/check-heuristic"}, content_type="application/json")
        assert r.status_code == 202
    assert (
        api_client.delete(f"/api/v1/projects/{lost_run.project_id}/runs/{lost_run.run_id}").status_code == 204
    )
    assert set(InstructionCheck.objects.values_list("run_id", flat=True)) == {"kept-run"}


def test_the_models_words_are_escaped_on_the_page(lost_run: Run, alice_client: Client) -> None:
    InstructionCheck.objects.create(
        project=lost_run.project, run_id=lost_run.run_id, instruction_key=instruction_key("", "system_prompt", NEVER),
        instruction=NEVER, source="system_prompt", lost_turn=2, lost_step=1, answer_turn=2, answer_step=1,
        provider="scripted", model="<i>m</i>", status="done", verdict="consistent",
        reasoning='<script>alert("x")</script>',
    )  # fmt: skip
    page = alice_client.get(f"/projects/{lost_run.project_id}/runs/{lost_run.run_id}").content.decode()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page and "<script>alert" not in page
    assert "checked by scripted/&lt;i&gt;m&lt;/i&gt;" in page


def test_the_sweeper_sends_again_a_check_whose_task_was_lost_then_gives_up(
    lost_run: Run, api_client: Client, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    settings.ARCANA_CONVERSATION_LEASE_SECONDS = 10
    settings.ARCANA_CONVERSATION_MAX_ATTEMPTS = 2
    sent = _queued_task(monkeypatch)
    r = api_client.post(
        _api(lost_run), {"model": "scripted/check-heuristic"}, content_type="application/json"
    )
    ids = [c["id"] for c in r.json()["checks"]]
    assert actions.sweep_checks() == {"resent": 0, "failed": 0}  # sent just now: left alone
    InstructionCheck.objects.update(sent_at=timezone.now() - timedelta(seconds=51))
    assert actions.sweep_checks() == {"resent": 2, "failed": 0}
    assert sent[-1][0] == "traces.tasks.check_lost_instructions" and sorted(sent[-1][1][0]) == sorted(ids)
    assert set(InstructionCheck.objects.values_list("sends", flat=True)) == {2}
    InstructionCheck.objects.update(sent_at=timezone.now() - timedelta(seconds=51))
    assert actions.sweep_checks() == {"resent": 0, "failed": 2}
    assert set(InstructionCheck.objects.values_list("status", "error")) == {
        ("failed", "no worker took this check after 2 sends")
    }
    assert tasks.check_lost_instructions(ids) == {"skipped": 2}  # a late delivery writes nothing
