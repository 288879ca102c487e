"""Our error pages: 403, 404, 500, 429 and a refused CSRF check in the site's layout, saying what
happened, why (a 403's reason) and where to go; JSON under /api/; an ordinary 403 logs one line, no
traceback; `/compare` alone explains how to compare."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client, RequestFactory

from arcana_site import errors
from traces import conversations as service
from traces.models import Membership, Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(django_user_model: Any, project: Project) -> Client:
    vera = django_user_model.objects.create_user(username="vera", password="password")
    Membership.objects.create(team=project.team, user=vera, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(vera)
    return client


def _in_layout(html: str) -> bool:
    return 'class="site-header"' in html and 'href="/"' in html


def test_a_403_says_why_in_the_layout_and_logs_no_traceback(
    project: Project, alice: Any, viewer: Client, caplog: pytest.LogCaptureFixture
) -> None:
    spec = service.check_conversation_request({"model": "pin-recall-demo", "script": None})
    conv = service.start_conversation(project, spec, user=alice)
    with caplog.at_level(logging.WARNING, logger="django.request"):
        r = viewer.post(f"/projects/{project.pk}/conversations/{conv.pk}/cancel")
    assert r.status_code == 403
    html = r.content.decode()
    assert _in_layout(html) and "Not allowed" in html
    assert "Your role (viewer) cannot do this." in html
    assert 'href="/teams"' in html  # where to go
    (record,) = [rec for rec in caplog.records if rec.name == "django.request"]
    assert record.exc_info is None and "Forbidden" in record.getMessage()
    assert "Traceback" not in caplog.text


def test_a_404_page_in_the_layout_and_json_under_the_api(alice_client: Client, client: Client) -> None:
    r = alice_client.get("/no/such/page")
    assert r.status_code == 404
    html = r.content.decode()
    assert _in_layout(html) and "Not found" in html and 'href="/teams"' in html
    anonymous = client.get("/no/such/page").content.decode()
    assert "Sign in" in anonymous
    api = alice_client.get("/api/v1/no-such-endpoint")
    assert api.status_code == 404 and api.json()["error"]


def test_a_refused_csrf_check_is_explained(project: Project, alice: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    r = client.post("/conversations/new", {"project": project.pk})
    assert r.status_code == 403
    html = r.content.decode()
    assert _in_layout(html) and "security token" in html and "Reload this page" in html


def test_500_and_429_pages() -> None:
    request = RequestFactory().get("/somewhere")
    page = errors.server_error(request)
    assert page.status_code == 500 and b"Something went wrong" in page.content
    assert b'class="site-header"' in page.content
    limited = errors.too_many_requests(RequestFactory().get("/x"), "3 conversations already run", 30)
    assert limited.status_code == 429 and limited["Retry-After"] == "30"
    assert b"3 conversations already run" in limited.content and b"Try again in 30 seconds" in limited.content
    api = errors.server_error(RequestFactory().get("/api/v1/runs"))
    assert api.status_code == 500 and api["Content-Type"] == "application/json"


def test_compare_alone_explains_how(alice_client: Client) -> None:
    r = alice_client.get("/compare")
    assert r.status_code == 200
    assert "tick two runs in the runs list" in r.content.decode()
