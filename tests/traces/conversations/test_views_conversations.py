"""The new-run form and the conversation page (traces/conversations/views.py).

No worker runs here: `start_conversation` enqueues on commit and these tests' transactions never
commit, so what is checked is the row the form creates, the page, and the live fragment. The
browser test (tests/browser/test_playground.py) runs a real worker."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tests.traces.conftest import PASSWORD
from tests.traces.views_helpers import decision, our_step
from traces import conversations as service
from traces.ingest import ingest_events
from traces.models import Conversation, Membership, Project, Run

pytestmark = pytest.mark.django_db

NEW = "/conversations/new"


@pytest.fixture
def viewer_client(django_user_model: Any, project: Project) -> Client:
    vera = django_user_model.objects.create_user(username="vera", password=PASSWORD)
    Membership.objects.create(team=project.team, user=vera, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(vera)
    return client


def form_data(project: Project, **over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "project": project.pk,
        "model": "scripted/pin-recall-demo",
        "mode": "script",
        "system": "Be brief.",
        "cognitive_primitives": ["recall", "pin"],
        "context_window": "2400",
        "pin_budget_fraction": "0.5",
        "prompt_snapshots": "on",
        "script": "First message\n\nSecond message\n",
    }
    data.update(over)
    return data


def page_url(conv: Conversation) -> str:
    return f"/projects/{conv.project_id}/conversations/{conv.pk}"


def test_it_requires_login(client: Client, project: Project) -> None:
    r = client.get(NEW)
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]


def test_it_offers_the_demo_ready_to_start(project: Project, alice_client: Client) -> None:
    r = alice_client.get(NEW)
    assert r.status_code == 200
    html = r.content.decode()
    assert '<option value="scripted/pin-recall-demo" selected>' in html
    assert "Here is the brief for the Aurora launch." in html  # the scenario's script, prefilled
    assert 'value="2400"' in html
    # Only what is configured: no provider but the built-in scripted one here.
    assert (
        "scripted/small-talk" in html and "openai" not in html.split('name="model"')[1].split("</select>")[0]
    )


def test_it_offers_configured_providers_only(project: Project, alice_client: Client, settings: Any) -> None:
    settings.ARCANA_PROVIDERS = '{"local": {"base_url": "http://127.0.0.1:9/v1", "models": ["llama3"]}}'
    html = alice_client.get(NEW).content.decode()
    assert '<option value="local/llama3">' in html
    assert "127.0.0.1:9" not in html  # the endpoint is the operator's business, not the page's


def test_the_runs_list_links_to_it_for_members_only(
    project: Project, alice_client: Client, viewer_client: Client
) -> None:
    assert f'href="{NEW}"' in alice_client.get("/").content.decode()
    assert f'href="{NEW}"' not in viewer_client.get("/").content.decode()


def test_it_refuses_viewers(project: Project, viewer_client: Client) -> None:
    assert viewer_client.get(NEW).status_code == 403
    assert viewer_client.post(NEW, form_data(project)).status_code == 403
    assert not Conversation.objects.exists()


def test_it_starts_a_script_and_opens_its_page(project: Project, alice: Any, alice_client: Client) -> None:
    r = alice_client.post(NEW, form_data(project))
    conv = Conversation.objects.get()
    assert r.status_code == 302 and r["Location"] == page_url(conv)
    assert conv.mode == Conversation.Mode.SCRIPT and conv.status == Conversation.Status.QUEUED
    assert conv.provider == "scripted" and conv.model == "pin-recall-demo" and conv.created_by == alice
    assert [m["content"] for m in conv.script] == ["First message", "Second message"]
    assert conv.config["system"] == "Be brief." and conv.config["context_window"] == 2400
    assert (
        conv.config["cognitive_primitives"] == ["recall", "pin"] and conv.config["prompt_snapshots"] is True
    )
    page = alice_client.get(page_url(conv)).content.decode()
    assert "Script run" in page and "Queued" in page and "Second message" in page
    assert 'data-live="true"' in page  # a worker will pick it up: the page polls


def test_it_starts_a_pool_with_per_agent_primitives(project: Project, alice_client: Client) -> None:
    data = form_data(
        project,
        model="scripted/pool-demo",
        script="researcher: Find the weather\nwriter: Write the line\nA line for the first agent",
        pool="on",
        **{
            "agent0-name": "researcher",
            "agent0-system": "You research.",
            "agent0-primitives_mode": "inherit",
            "agent1-name": "writer",
            "agent1-primitives_mode": "override",
            "agent1-primitives": ["recall"],
            "agent2-name": "silent",
            "agent2-primitives_mode": "none",
        },
    )
    r = alice_client.post(NEW, data)
    assert r.status_code == 302, r.content.decode()[:2000]
    conv = Conversation.objects.get()
    assert conv.config["agents"] == [
        {"name": "researcher", "system": "You research.", "cognitive_primitives": None},
        {"name": "writer", "system": None, "cognitive_primitives": ["recall"]},
        {"name": "silent", "system": None, "cognitive_primitives": []},
    ]
    assert conv.script == [
        {"agent": "researcher", "content": "Find the weather"},
        {"agent": "writer", "content": "Write the line"},
        {"agent": "researcher", "content": "A line for the first agent"},
    ]


def test_it_starts_a_playground(project: Project, alice_client: Client) -> None:
    r = alice_client.post(NEW, form_data(project, mode="playground"))
    conv = Conversation.objects.get()
    assert r["Location"] == page_url(conv)
    assert conv.mode == Conversation.Mode.PLAYGROUND and conv.status == Conversation.Status.WAITING_FOR_USER
    page = alice_client.get(page_url(conv)).content.decode()
    assert 'id="message-form"' in page and 'id="message-send"' in page
    assert 'id="message-send" disabled' not in page  # waiting for the user: send is on
    assert 'data-live="false"' in page  # nothing will change until someone sends: no polling


def test_it_reports_bad_input_on_the_form(project: Project, alice_client: Client) -> None:
    r = alice_client.post(NEW, form_data(project, script="  \n "))
    assert r.status_code == 400
    assert "must be a non-empty list of messages" in r.content.decode()
    r = alice_client.post(NEW, form_data(project, model="nowhere/none", pin_budget_fraction="7"))
    assert r.status_code == 400 and not Conversation.objects.exists()


def test_it_refuses_a_project_outside_the_callers_teams(
    project: Project, alice_client: Client, charlie_project: Project
) -> None:
    r = alice_client.post(NEW, form_data(charlie_project))
    assert r.status_code == 400 and not Conversation.objects.exists()


def _playground(project: Project, user: Any) -> Conversation:
    spec = service.check_conversation_request({"model": "pin-recall-demo", "script": None})
    return service.start_conversation(project, spec, user=user)


def test_it_checks_team_access(project: Project, alice: Any, charlie_client: Client) -> None:
    conv = _playground(project, alice)
    for url in (page_url(conv), page_url(conv) + "/live"):
        assert charlie_client.get(url).status_code == 404
    assert charlie_client.post(page_url(conv) + "/messages", {"content": "hi"}).status_code == 404
    assert charlie_client.post(page_url(conv) + "/cancel").status_code == 404
    conv.refresh_from_db()
    assert conv.script == [] and conv.status == Conversation.Status.WAITING_FOR_USER


def test_viewers_read_but_do_not_steer(project: Project, alice: Any, viewer_client: Client) -> None:
    conv = _playground(project, alice)
    page = viewer_client.get(page_url(conv)).content.decode()
    assert "Playground" in page and 'id="message-form"' not in page and 'id="cancel-form"' not in page
    assert viewer_client.post(page_url(conv) + "/messages", {"content": "hi"}).status_code == 403
    assert viewer_client.post(page_url(conv) + "/cancel").status_code == 403


def test_a_message_queues_a_turn_and_the_page_follows(
    project: Project, alice: Any, alice_client: Client
) -> None:
    conv = _playground(project, alice)
    live = page_url(conv) + "/live"
    first = alice_client.get(live)
    assert first.status_code == 200 and b'data-accepts="true"' in first.content
    assert alice_client.get(live, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304

    r = alice_client.post(page_url(conv) + "/messages", {"content": "Plan the launch, please."})
    assert r.status_code == 302
    conv.refresh_from_db()
    assert (
        conv.status == Conversation.Status.QUEUED and conv.script[0]["content"] == "Plan the launch, please."
    )
    queued = alice_client.get(live, HTTP_IF_NONE_MATCH=first["ETag"])
    assert queued.status_code == 200
    assert b'data-accepts="false"' in queued.content and b'data-live="true"' in queued.content
    assert b"Plan the launch, please." in queued.content and b"Queued" in queued.content
    # A second message while the first is queued: refused, and said so on the page.
    r = alice_client.post(page_url(conv) + "/messages", {"content": "Another"}, follow=True)
    assert "wait for the turn to finish" in r.content.decode()
    conv.refresh_from_db()
    assert len(conv.script) == 1


def test_the_page_shows_the_turns_context_and_pins_from_the_store(
    project: Project, alice: Any, alice_client: Client
) -> None:
    """While a turn runs, the side panel reads the projections the worker's events feed."""
    conv = _playground(project, alice)
    service.post_message(conv, "Keep the budget in mind: 42,000 EUR.")
    Conversation.objects.filter(pk=conv.pk).update(status=Conversation.Status.RUNNING)
    events = our_step(
        conv.run_id, 1, 1, decisions=[decision(0, "system"), decision(1, "user")], finish="tool_calls"
    )
    turn_event = events[1]
    events.append(
        {
            **turn_event,
            "step_id": "pin-event-1",
            "event_type": "cognitive_primitive",
            "parent_step_id": turn_event["step_id"],
            "metadata": {
                "producer": "arcana-console",
                "turn": 1,
                "step": 1,
                "primitive": "pin",
                "args": {"content": "budget 42,000 EUR", "label": "budget"},
                "result": {"pinned": True, "pin_id": "p_0000abcd", "label": "budget", "until_turn": None},
                "tokens": 9,
            },
        }
    )
    ingest_events(project, events, source="worker")
    assert Run.objects.filter(run_id=conv.run_id).exists()
    html = alice_client.get(page_url(conv) + "/live").content.decode()
    assert "Context at turn 1" in html and "Step 1" in html and "tail_preserve" in html
    # The step's budget says what it is: the tokens used of the message budget, explained.
    assert "Message budget" in html and "20 of 4000 tokens used" in html
    assert "less the response reserve and the tool definitions" in html
    assert "Active pins at turn 1" in html and "p_0000abcd" in html and "budget" in html
    assert "working" in html and "Running" in html


def test_cancel_from_the_page(project: Project, alice: Any, alice_client: Client) -> None:
    conv = _playground(project, alice)
    r = alice_client.post(page_url(conv) + "/cancel")
    assert r.status_code == 302
    conv.refresh_from_db()
    assert conv.status == Conversation.Status.CANCELLED
    page = alice_client.get(page_url(conv)).content.decode()
    assert "Cancelled" in page and "Why it stopped" in page and conv.reason in page


def test_estimated_token_counts_are_marked(project: Project, alice_client: Client) -> None:
    """A model tiktoken does not know: the builder's counts are calibrated estimates, shown with ≈."""
    events = our_step("calibrated-run", 1, 1, decisions=[decision(0, "system"), decision(1, "user")])
    events[0]["metadata"]["context_report"]["token_counts"] = {"estimated": True, "calibration": 1.12}
    events += our_step("exact-run", 1, 1, decisions=[decision(0, "system")])
    ingest_events(project, events, source="api")
    calibrated = Run.objects.get(run_id="calibrated-run")
    exact = Run.objects.get(run_id="exact-run")
    assert calibrated.tokens_estimated and not exact.tokens_estimated
    turn = alice_client.get(calibrated.turn_url(1)).content.decode()
    assert "≈ 20 of 4000 tokens used" in turn and "are estimates" in turn
    assert "≈" in alice_client.get(calibrated.get_absolute_url()).content.decode()
    assert "≈" not in alice_client.get(exact.turn_url(1)).content.decode()
    assert "≈" not in alice_client.get(exact.get_absolute_url()).content.decode()


def test_the_run_page_shows_the_lifecycle_and_why_it_failed(
    project: Project, alice: Any, alice_client: Client
) -> None:
    spec = service.check_conversation_request({"model": "pin-recall-demo", "script": ["one", "two"]})
    conv = service.start_conversation(project, spec, user=alice)
    ingest_events(project, our_step(conv.run_id, 1, 1, decisions=[decision(0, "user")]), source="worker")
    now = timezone.now()
    Conversation.objects.filter(pk=conv.pk).update(
        status=Conversation.Status.FAILED,
        reason="provider error: HTTP 500 from http://127.0.0.1:9/v1 <b>boom</b>",
        started_at=now,
        finished_at=now,
        cursor=1,
    )
    run = Run.objects.get(run_id=conv.run_id)
    html = alice_client.get(run.get_absolute_url()).content.decode()
    panel = html.split('class="card conv-panel"')[1].split("</section>")[0]
    assert "Script run by a worker" in panel and "Failed" in panel and "1 turn done of 2" in panel
    assert "Why it failed" in panel and "&lt;b&gt;boom&lt;/b&gt;" in panel  # escaped, never markup
    assert "Created" in panel and "Started" in panel and "Finished" in panel
    assert f'href="{page_url(conv)}"' in panel
    conv_page = alice_client.get(page_url(conv)).content.decode()
    assert "Why it failed" in conv_page and 'data-finished="true"' in conv_page
