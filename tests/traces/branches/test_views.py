"""The re-run pages (issue 38): the turn page's form, its post, the branch page, the links."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.traces.branches.helpers import truncated
from traces.branches import worker
from traces.models import Branch, Membership, Project

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_turn_page_lists_what_the_step_received_with_its_controls(
    project: Project, alice_client: Client
) -> None:
    run = truncated(project)
    page = alice_client.get(run.turn_url(3))
    assert b"Edit the context of step 1 and re-run it" in page.content
    assert b'id="rerun-form"' not in page.content  # the form only when asked for
    page = alice_client.get(run.turn_url(3) + "?rerun=1")
    html = page.content.decode()
    assert 'id="rerun-form"' in html
    assert html.count('class="rerun__row rerun__row--dropped"') == 4
    assert html.count('<option value="restore">restore the original</option>') == 4
    assert 'name="m5"' in html and "What is the budget?" in html
    assert 'id="rerun-system"' in html and "You plan launches." in html


def test_viewers_read_but_cannot_rerun(project: Project, alpha: Any, bob: Any, bob_client: Client) -> None:
    Membership.objects.filter(user=bob).update(role=Membership.Role.VIEWER)
    run = truncated(project)
    page = bob_client.get(run.turn_url(3) + "?rerun=1")
    assert page.status_code == 200 and b"rerun-form" not in page.content and b"re-run it" not in page.content
    post = bob_client.post(
        f"/projects/{project.pk}/runs/{run.run_id}/turns/3/steps/1/rerun", {"m1": "restore"}
    )
    assert post.status_code == 403 and not Branch.objects.exists()


def test_posting_the_form_starts_the_branch_and_its_page_opens_the_compare_page(
    project: Project, alice_client: Client
) -> None:
    run = truncated(project)
    post = alice_client.post(
        f"/projects/{project.pk}/runs/{run.run_id}/turns/3/steps/1/rerun",
        {"m1": "restore", "m5": "keep", "system": "You plan launches.", "provider": "scripted", "model": ""},
    )
    branch = Branch.objects.get()
    assert post.status_code == 302 and post["Location"] == branch.get_absolute_url()
    assert branch.edits == [{"op": "restore", "index": 1}]  # an unchanged system prompt is no edit
    waiting = alice_client.get(branch.get_absolute_url())
    assert waiting.status_code == 200 and b'data-status="queued"' in waiting.content
    worker.run_branch(branch.pk)
    branch.refresh_from_db()
    assert alice_client.get(branch.get_absolute_url())["Location"] == branch.compare_url()
    # The links: the original's turn page lists its branches, the branch's run page names its origin.
    turn = alice_client.get(run.turn_url(3)).content.decode()
    assert "Branches of this turn" in turn and branch.compare_url().replace("&", "&amp;") in turn
    b_page = alice_client.get(branch.branch_run.get_absolute_url()).content.decode()
    assert "Branched from run" in b_page and "turn 3 step 1" in b_page


def test_a_stale_form_is_refused_saying_why(project: Project, alice_client: Client) -> None:
    run = truncated(project)
    post = alice_client.post(
        f"/projects/{project.pk}/runs/{run.run_id}/turns/3/steps/1/rerun",
        {"m9": "restore", "provider": "scripted"},
    )
    assert post.status_code == 400 and b"unknown message index 9" in post.content
    post = alice_client.post(f"/projects/{project.pk}/runs/{run.run_id}/turns/7/steps/1/rerun", {})
    assert post.status_code == 404
    assert not Branch.objects.exists()


def test_trace_text_is_escaped_in_the_form(project: Project, alice_client: Client) -> None:
    from tests.runtime.test_rerun import truncated_run
    from traces.ingest import ingest_events

    events = truncated_run()
    for e in events:
        if e["event_type"] == "prompt_snapshot":
            e["metadata"]["prompt_snapshot"]["messages"][0]["content"] = "<script>alert(1)</script>"
    ingest_events(project, events, source="api")
    run = project.runs.get(run_id=events[0]["run_id"])
    html = alice_client.get(run.turn_url(3) + "?rerun=1").content.decode()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_the_form_of_a_step_whose_messages_carry_tool_calls(samples: Project, alice_client: Client) -> None:
    """Our runtime's sample run: turn 2 step 1 received an assistant message with only tool calls."""
    from tests.traces.views_helpers import OUR_RUN

    run = samples.runs.get(run_id=OUR_RUN)
    page = alice_client.get(run.turn_url(2) + "?rerun=1")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="rerun-form"' in html and "(no text: tool calls)" in html
