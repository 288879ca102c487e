"""The instruction checks' cast, on top of tests/traces/conftest.py (alice owns Alpha, bob is a
member, charlie an outsider): `vera`, a viewer of Alpha."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from traces.models import Membership, Team


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
