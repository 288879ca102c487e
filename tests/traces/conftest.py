"""The cast of every traces test (STYLE.md item 15).

* `alice` owns team "Alpha" and its project "alpha-app" (`project`).
* `bob` is a member of Alpha; `vera` a viewer of Alpha (`vera_client`).
* `charlie` is an outsider with his own team "Charlie's" and project "charlie-app".
* `alice_client` / `bob_client` / `charlie_client`: logged-in Django test clients.
* `api_key`: a raw API key for alice's project; `api_client` sends it as `Authorization: Bearer`.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from traces import ingest
from traces.models import ApiKey, Membership, Project, Team

PASSWORD = "password"


def _user(django_user_model: Any, username: str) -> Any:
    return django_user_model.objects.create_user(
        username=username, email=f"{username}@example.org", password=PASSWORD
    )


@pytest.fixture
def alpha(db: None) -> Team:
    return Team.objects.create(name="Alpha")


@pytest.fixture
def alice(db: None, django_user_model: Any, alpha: Team) -> Any:
    user = _user(django_user_model, "alice")
    Membership.objects.create(team=alpha, user=user, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def project(alpha: Team, alice: Any) -> Project:
    return Project.objects.create(team=alpha, slug="alpha-app", name="Alpha app")


@pytest.fixture
def bob(db: None, django_user_model: Any, alpha: Team) -> Any:
    user = _user(django_user_model, "bob")
    Membership.objects.create(team=alpha, user=user, role=Membership.Role.MEMBER)
    return user


@pytest.fixture
def charlie_team(db: None) -> Team:
    return Team.objects.create(name="Charlie's")


@pytest.fixture
def charlie(db: None, django_user_model: Any, charlie_team: Team) -> Any:
    user = _user(django_user_model, "charlie")
    Membership.objects.create(team=charlie_team, user=user, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def charlie_project(charlie_team: Team, charlie: Any) -> Project:
    return Project.objects.create(team=charlie_team, slug="charlie-app", name="Charlie app")


def _logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice_client(alice: Any) -> Client:
    return _logged_in(alice)


@pytest.fixture
def bob_client(bob: Any) -> Client:
    return _logged_in(bob)


@pytest.fixture
def charlie_client(charlie: Any) -> Client:
    return _logged_in(charlie)


@pytest.fixture
def api_key(project: Project, alice: Any) -> str:
    """A raw key for alice's project (only its hash is stored)."""
    _, raw = ApiKey.issue(project, name="test", created_by=alice)
    return raw


@pytest.fixture
def api_client(api_key: str) -> Client:
    """A client that sends `Authorization: Bearer <api_key>` on every request (no session)."""
    return Client(headers={"Authorization": f"Bearer {api_key}"})


@pytest.fixture
def samples(project: Project) -> Project:
    """Alice's project with every sample trace of arcana-agent 1.2 ingested."""
    from tests.traces.views_helpers import ingest_samples

    ingest_samples(project)
    return project


@pytest.fixture
def turn_by_turn(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each call of the turn-by-turn path answered (True: it projected the batch itself)."""
    answers: list[bool] = []
    real = ingest.do_project_turns

    def observed(*args: Any, **kwargs: Any) -> bool:
        answers.append(real(*args, **kwargs))
        return answers[-1]

    monkeypatch.setattr(ingest.projecting, "do_project_turns", observed)  # where `project_runs` looks it up
    return answers


@pytest.fixture
def vera(db: None, django_user_model: Any, alpha: Team) -> Any:
    user = django_user_model.objects.create_user(username="vera", password="password")
    Membership.objects.create(team=alpha, user=user, role=Membership.Role.VIEWER)
    return user


@pytest.fixture
def vera_client(vera: Any) -> Client:
    client = Client()
    client.force_login(vera)
    return client
