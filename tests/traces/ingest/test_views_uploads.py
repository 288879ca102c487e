"""The uploads page (`/uploads`): the form, past uploads with counts, line errors and run links."""

from __future__ import annotations

from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from tests.traces.views_helpers import ARCANA, PIN_RUN, run_path
from traces.models import Membership, Project, Team, Upload
from traces.tasks import process_upload


def _upload(client: Client, name: str, body: bytes) -> Upload:
    r = client.post("/api/v1/uploads", {"file": SimpleUploadedFile(name, body), "project": "alpha-app"})
    assert r.status_code == 202, r.content
    return Upload.objects.get(pk=r.json()["id"])


def test_it_requires_login(client: Client) -> None:
    r = client.get("/uploads")
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]


def test_it_checks_team_access(project: Project, alice_client: Client, charlie_client: Client) -> None:
    upload = _upload(alice_client, "a.jsonl", (ARCANA / "pin_recall" / f"{PIN_RUN}.jsonl").read_bytes())
    html = charlie_client.get("/uploads").content.decode()
    assert "a.jsonl" not in html and "No uploads yet" in html
    assert charlie_client.get(f"/api/v1/uploads/{upload.pk}").status_code == 404


def test_it_offers_the_form_with_the_users_projects(project: Project, bob_client: Client) -> None:
    html = bob_client.get("/uploads").content.decode()
    assert 'id="upload-form"' in html and 'value="alpha-app"' in html
    assert 'data-api="/api/v1/uploads"' in html and "csrfmiddlewaretoken" in html
    assert 'type="file"' in html and "Drop JSONL files here" in html


def test_it_hides_the_form_from_viewers(project: Project, django_user_model: Any) -> None:
    viewer = django_user_model.objects.create_user(username="vera", password="pw")
    Membership.objects.create(team=Team.objects.get(name="Alpha"), user=viewer, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(viewer)
    html = client.get("/uploads").content.decode()
    assert 'id="upload-form"' not in html and "not upload" in html


def test_it_lists_past_uploads_with_counts_errors_and_runs(project: Project, alice_client: Client) -> None:
    good = (ARCANA / "pin_recall" / f"{PIN_RUN}.jsonl").read_bytes()
    upload = _upload(alice_client, "mixed.jsonl", good + b"{not json\n")
    process_upload(upload.pk)  # the task body, run here; the browser test drives the real worker
    upload.refresh_from_db()
    assert upload.status == Upload.Status.DONE and upload.rejected == 1 and upload.accepted == 42
    r = alice_client.get("/uploads")
    html = r.content.decode()
    assert "mixed.jsonl" in html and "done" in html
    assert ">42<" in html  # accepted
    assert "1 line error" in html and "line 43" in html
    assert f'href="{run_path(PIN_RUN)}"' in html
    fragment = alice_client.get("/uploads?fragment=list")
    assert b"mixed.jsonl" in fragment.content and b"<html" not in fragment.content


def test_it_lists_uploads_in_a_bounded_number_of_queries(
    project: Project, alice_client: Client, django_assert_max_num_queries: Any
) -> None:
    for i in range(5):
        _upload(alice_client, f"f{i}.jsonl", b'{"x": 1}\n')
    with django_assert_max_num_queries(8):
        r = alice_client.get("/uploads")
    assert len(r.context["uploads"]) == 5
