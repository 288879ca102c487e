"""Uploads refused before anything is stored (issue 39): one rule for an empty upload on both paths,
and 403 (saying why) for a role that may read the project but not upload to it."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from traces.models import Membership, Project, Team, Upload

URL = "/api/v1/uploads"
EMPTY = "the upload is empty (0 bytes); send JSONL lines, as a multipart 'file' or as the body"


@pytest.fixture
def viewer_client(db: None, django_user_model: Any, project: Project) -> Client:
    vera = django_user_model.objects.create_user(username="vera", password="pw")
    Membership.objects.create(team=Team.objects.get(name="Alpha"), user=vera, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(vera)
    return client


def test_an_empty_upload_is_refused_alike_as_multipart_and_as_a_raw_body(
    api_client: Client, alice_client: Client, project: Project
) -> None:
    raw = api_client.post(f"{URL}?project=alpha-app", data=b"", content_type="application/x-ndjson")
    empty = SimpleUploadedFile("empty.jsonl", b"")
    multipart = alice_client.post(URL, {"file": empty, "project": "alpha-app"})
    assert (raw.status_code, multipart.status_code) == (400, 400)
    assert raw.json() == multipart.json() == {"error": EMPTY, "detail": []}
    assert Upload.objects.count() == 0


def test_a_viewer_may_not_upload_and_is_told_why(viewer_client: Client, project: Project) -> None:
    f = SimpleUploadedFile("x.jsonl", b"{}\n")
    r = viewer_client.post(URL, {"file": f, "project": "alpha-app"})
    assert r.status_code == 403, r.content
    assert (
        r.json()["error"]
        == "Your role (viewer) cannot do this. Uploading traces needs the member role or above."
    )
    raw = viewer_client.post(f"{URL}?project=alpha-app", data=b"{}\n", content_type="application/x-ndjson")
    assert raw.status_code == 403
    assert Upload.objects.count() == 0


def test_an_outsider_still_gets_404(charlie_client: Client, project: Project) -> None:
    f = SimpleUploadedFile("x.jsonl", b"{}\n")
    r = charlie_client.post(URL, {"file": f, "project": "alpha-app"})
    assert r.status_code == 404 and r.json()["error"] == "no such project"
