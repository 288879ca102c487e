"""The Django admin for operators: teams and projects editable, trace rows and keys read-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from traces.models import ApiKey, Project, Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(django_user_model: Any) -> Client:
    operator = django_user_model.objects.create_superuser("operator", password="pw-operator-1")
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def key(django_user_model: Any) -> ApiKey:
    project = Project.objects.create(team=Team.objects.create(name="Ops"), slug="ops")
    return ApiKey.issue(project, name="ci")[0]


def test_it_lists_every_registered_model_for_an_operator(operator_client: Client, key: ApiKey) -> None:
    for path in ("team", "project", "apikey", "upload", "run"):
        response = operator_client.get(f"/admin/traces/{path}/")
        assert response.status_code == 200, path
    assert key.prefix in operator_client.get("/admin/traces/apikey/").content.decode()


def test_it_keeps_trace_rows_and_keys_read_only(operator_client: Client, key: ApiKey) -> None:
    assert operator_client.get("/admin/traces/run/add/").status_code == 403
    assert operator_client.get("/admin/traces/apikey/add/").status_code == 403
    page = operator_client.get(f"/admin/traces/apikey/{key.pk}/change/")
    assert page.status_code == 200 and key.key_hash not in page.content.decode()


def test_it_revokes_keys_from_the_list(operator_client: Client, key: ApiKey) -> None:
    response = operator_client.post(
        "/admin/traces/apikey/", {"action": "revoke", "_selected_action": [key.pk]}, follow=True
    )
    assert response.status_code == 200 and "Revoked 1 key(s)." in response.content.decode()
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_it_sends_team_members_who_are_not_staff_to_the_login(django_user_model: Any) -> None:
    member = django_user_model.objects.create_user("member", password="pw-member-1")
    client = Client()
    client.force_login(member)
    response = client.get("/admin/traces/run/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
