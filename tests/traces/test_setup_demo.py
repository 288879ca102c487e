"""`manage.py setup_demo` gives a first-time user a login and real runs, once."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from traces.models import Event, Membership, Run

pytestmark = pytest.mark.django_db


def _run() -> str:
    out = io.StringIO()
    call_command("setup_demo", stdout=out)
    return out.getvalue()


def test_it_creates_a_login_printed_once_and_imports_the_demo_traces() -> None:
    first = _run()
    match = re.search(r"Demo login \(shown once\):  demo / (\S+)", first)
    assert match, first
    user = get_user_model().objects.get(username="demo")
    assert user.check_password(match.group(1))
    assert Membership.objects.get(user=user).role == "owner"
    # Every line of the nine sample files is one event, all accepted.
    assert Event.objects.count() == 64
    assert Run.objects.filter(project__slug="demo").count() == 9

    second = _run()
    assert match.group(1) not in second
    assert "password was printed at the first start" in second
    assert Event.objects.count() == 64  # nothing imported twice


def test_it_starts_the_demo_conversations_through_the_conversation_path() -> None:
    from traces.models import Conversation

    out = _run()

    convs = {c.model: c for c in Conversation.objects.filter(project__slug="demo")}
    assert set(convs) == {"pin-recall-demo", "pool-demo"}
    assert all(c.status == "queued" and c.mode == "script" for c in convs.values())
    assert convs["pool-demo"].agent_names == ["researcher", "writer"]
    assert convs["pin-recall-demo"].run_id in out
    _run()
    assert Conversation.objects.count() == 2  # started once
