"""Review notes: written and resolved through the pages and the API, shown on the run, turn and Notes
pages, and refused to viewers (403) and outsiders (404)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.traces.views_helpers import OUR_RUN, PIN_RUN, POOL_RUN
from traces.models import ApiKey, AuditLog, Membership, Note, Project, Run

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def viewer(alpha: Any, django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user(username="vera", password="password")
    Membership.objects.create(team=alpha, user=user, role=Membership.Role.VIEWER)
    return user


def _post_note(client: Client, run: Run, **fields: Any) -> Any:
    return client.post(
        run.get_absolute_url() + "/notes", {"label": "bug", "body": "budget dropped", **fields}
    )


def test_a_member_notes_a_step_and_it_shows_on_every_page(samples: Project, bob: Any) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    client = _client(bob)
    response = _post_note(client, run, turn="4", step="1", body="the customer's budget was dropped here")
    assert response.status_code == 302
    assert response["Location"] == run.turn_url(4) + "#step-1-notes"
    note = Note.objects.get()
    assert (note.turn_number, note.step_number, note.label, note.author) == (4, 1, "bug", bob)
    audit = AuditLog.objects.get(event_type=AuditLog.NOTE_CREATED)
    assert audit.actor == bob and audit.extra["target"] == "turn 4 step 1"
    # The target names the run by its id, never by its internal row id.
    assert (
        audit.target.endswith(f"bug note on {PIN_RUN} turn 4 step 1") and f"on {run.pk} " not in audit.target
    )

    turn = client.get(run.turn_url(4)).content.decode()
    step = turn.split('id="step-1"')[1].split('id="step-2"')[0] if 'id="step-2"' in turn else turn
    assert "the customer&#x27;s budget was dropped here" in step
    assert 'id="step-1-notes"' in turn
    overview = client.get(run.get_absolute_url()).content.decode()
    assert "the customer&#x27;s budget was dropped here" in overview and "turn 4 step 1" in overview
    listing = client.get("/notes").content.decode()
    assert "the customer&#x27;s budget was dropped here" in listing


def test_a_member_notes_the_run_and_a_turn(samples: Project, bob: Any) -> None:
    run = Run.objects.get(run_id=OUR_RUN)
    client = _client(bob)
    assert _post_note(client, run, body="whole run", label="expected").status_code == 302
    assert _post_note(client, run, turn="2", body="turn two", label="question").status_code == 302
    assert [(n.turn_number, n.step_number) for n in Note.objects.order_by("id")] == [(None, None), (2, None)]
    turn = client.get(run.turn_url(2)).content.decode()
    assert "turn two" in turn.split('id="turn-notes"')[1]
    assert "whole run" not in turn
    assert "whole run" in client.get(run.get_absolute_url()).content.decode()


def test_it_notes_a_pool_agents_turn(samples: Project, bob: Any) -> None:
    run = Run.objects.get(run_id=POOL_RUN)
    client = _client(bob)
    assert _post_note(client, run, agent="critic", turn="1", body="critic note").status_code == 302
    assert Note.objects.get().agent == "critic"
    assert "critic note" in client.get(run.turn_url(1) + "?agent=critic").content.decode()
    assert "critic note" not in client.get(run.turn_url(1) + "?agent=planner").content.decode()
    assert _post_note(client, run, agent="nobody", turn="1").status_code == 302
    assert Note.objects.count() == 1


@pytest.mark.parametrize(
    "fields",
    [
        {"body": "  "},
        {"label": "praise"},
        {"turn": "99"},
        {"turn": "1", "step": "9"},
        {"step": "1"},
        {"turn": "x"},
    ],
)
def test_it_rejects_bad_notes_from_the_page(samples: Project, bob: Any, fields: dict[str, str]) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    client = _client(bob)
    response = _post_note(client, run, **fields)
    assert response.status_code == 302
    assert not Note.objects.exists()
    assert "Note not saved" in client.get(response["Location"]).content.decode()


def test_it_resolves_and_reopens_a_note(samples: Project, bob: Any) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    note = Note.objects.create(run=run, turn_number=2, body="why dropped?", author=bob)
    client = _client(bob)
    assert client.post(f"/notes/{note.pk}/resolve", {"resolved": "1"}).status_code == 302
    note.refresh_from_db()
    assert note.is_resolved and note.resolved_by == bob
    assert "resolved" in client.get("/notes?resolved=1").content.decode()
    assert "why dropped?" not in client.get("/notes?resolved=0").content.decode()
    assert client.post(f"/notes/{note.pk}/resolve", {"resolved": "0"}).status_code == 302
    note.refresh_from_db()
    assert not note.is_resolved and note.resolved_by is None
    assert AuditLog.objects.filter(event_type=AuditLog.NOTE_RESOLVED).count() == 2


def test_the_notes_page_filters_by_label_state_and_project(samples: Project, bob: Any, alpha: Any) -> None:
    other = Project.objects.create(team=alpha, slug="other")
    from tests.traces.views_helpers import ARCANA, ingest_file

    ingest_file(other, next(ARCANA.glob("basic_chat/*.jsonl")))
    run = Run.objects.get(run_id=PIN_RUN)
    run2 = Run.objects.filter(project=other).first()
    Note.objects.create(run=run, body="a bug note", label="bug")
    Note.objects.create(run=run, body="a question note", label="question")
    Note.objects.create(run=run2, body="other project note", label="bug")
    client = _client(bob)
    page = client.get("/notes?label=bug").content.decode()
    assert "a bug note" in page and "other project note" in page and "a question note" not in page
    page = client.get(f"/notes?project={other.pk}").content.decode()
    assert "other project note" in page and "a bug note" not in page
    page = client.get("/notes?label=nonsense&resolved=maybe").content.decode()
    assert all(t in page for t in ("a bug note", "a question note", "other project note"))


def test_viewers_read_notes_but_cannot_write(samples: Project, viewer: Any, bob: Any) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    note = Note.objects.create(run=run, turn_number=4, body="seen by viewers", author=bob)
    client = _client(viewer)
    page = client.get(run.turn_url(4)).content.decode()
    assert "seen by viewers" in page and "Add a note" not in page and ">Resolve<" not in page
    assert "seen by viewers" in client.get("/notes").content.decode()
    assert _post_note(client, run).status_code == 403
    assert client.post(f"/notes/{note.pk}/resolve").status_code == 403
    assert Note.objects.count() == 1 and not Note.objects.get().is_resolved


def test_it_checks_team_access(samples: Project, bob: Any, charlie_client: Client) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    note = Note.objects.create(run=run, body="alpha only", author=bob)
    assert _post_note(charlie_client, run).status_code == 404
    assert charlie_client.post(f"/notes/{note.pk}/resolve").status_code == 404
    assert "alpha only" not in charlie_client.get("/notes").content.decode()
    assert Note.objects.count() == 1


def test_it_requires_login(samples: Project) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    for response in (Client().get("/notes"), _post_note(Client(), run)):
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


# ---------------------------------------------------------------------------------------------------
# API


def test_api_creates_and_lists_notes(samples: Project, bob: Any) -> None:
    client = _client(bob)
    response = client.post(
        "/api/v1/notes",
        {"project": samples.pk, "run_id": PIN_RUN, "turn": 4, "step": 1, "label": "bug", "body": "dropped"},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    data = response.json()
    assert (data["turn"], data["step"], data["label"], data["author"], data["resolved"]) == (
        4,
        1,
        "bug",
        "bob",
        False,
    )
    note = Note.objects.get(pk=data["id"])
    assert note.body == "dropped"
    client.post(
        "/api/v1/notes",
        {"project": samples.pk, "run_id": OUR_RUN, "label": "question", "body": "other run"},
        content_type="application/json",
    )
    listed = client.get(f"/api/v1/notes?project={samples.pk}&run_id={PIN_RUN}").json()
    assert [n["body"] for n in listed["results"]] == ["dropped"]
    assert len(client.get(f"/api/v1/notes?project={samples.pk}").json()["results"]) == 2
    assert len(client.get("/api/v1/notes?label=question").json()["results"]) == 1


def test_api_notes_with_a_key(samples: Project, api_client: Client, charlie_project: Project) -> None:
    response = api_client.post(
        "/api/v1/notes",
        {"project": "alpha-app", "run_id": PIN_RUN, "body": "from CI"},
        content_type="application/json",
    )
    assert response.status_code == 201
    assert response.json()["author"] is None and response.json()["label"] == "question"
    assert api_client.get("/api/v1/notes").json()["results"][0]["body"] == "from CI"
    assert (
        api_client.post(
            "/api/v1/notes",
            {"project": charlie_project.pk, "run_id": PIN_RUN, "body": "x"},
            content_type="application/json",
        ).status_code
        == 404
    )
    _key, raw = ApiKey.issue(samples, name="ingest", scope=ApiKey.Scope.INGEST)
    ingest_only = Client(headers={"Authorization": f"Bearer {raw}"})
    assert ingest_only.get("/api/v1/notes").status_code == 403


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"body": ""}, "body"),
        ({"label": "praise"}, "label"),
        ({"turn": 0}, "turn"),
        ({"turn": 99}, "turn"),
        ({"turn": 1, "step": 9}, "step"),
        ({"step": 1}, "step"),
        ({"body": "x" * 5001}, "body"),
        ({"turn": "one"}, "turn"),
    ],
)
def test_api_rejects_bad_notes(
    samples: Project, alice_client: Client, body: dict[str, Any], field: str
) -> None:
    payload = {"project": samples.pk, "run_id": PIN_RUN, "body": "ok", **body}
    response = alice_client.post("/api/v1/notes", payload, content_type="application/json")
    assert response.status_code == 400
    data = response.json()
    assert data["error"] == "invalid input" and data["detail"][0]["field"] == field
    assert not Note.objects.exists()


def test_api_notes_access(samples: Project, viewer: Any, charlie_client: Client) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    Note.objects.create(run=run, body="team note")
    payload = {"project": samples.pk, "run_id": PIN_RUN, "body": "nope"}
    vera = _client(viewer)
    assert vera.get("/api/v1/notes").json()["results"][0]["body"] == "team note"
    assert vera.post("/api/v1/notes", payload, content_type="application/json").status_code == 403
    assert charlie_client.post("/api/v1/notes", payload, content_type="application/json").status_code == 404
    assert charlie_client.get(f"/api/v1/notes?project={samples.pk}").status_code == 404
    assert charlie_client.get("/api/v1/notes").json()["results"] == []
    assert Client().get("/api/v1/notes").status_code in (401, 403)
    assert Note.objects.count() == 1


def test_the_schema_documents_share_links_and_notes(alice_client: Client) -> None:
    schema = alice_client.get("/api/v1/schema", HTTP_ACCEPT="application/json").content.decode()
    for path in ("/api/v1/share-links", "/api/v1/share-links/{link_id}", "/api/v1/notes"):
        assert path in schema


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.fixed_dictionaries(
        {},
        optional={
            "project": _JSON | st.just("alpha-app"),
            "run_id": _JSON | st.just(OUR_RUN),
            "agent": _JSON,
            "turn": _JSON | st.integers(-3, 5),
            "step": _JSON | st.integers(-3, 5),
            "label": _JSON | st.sampled_from(["bug", "expected", "question"]),
            "body": _JSON,
        },
    )
)
def test_api_answers_any_note_body_with_a_note_or_the_error_shape(
    samples: Project, alice_client: Client, body: dict[str, Any]
) -> None:
    before = Note.objects.count()
    response = alice_client.post("/api/v1/notes", body, content_type="application/json")
    data = response.json()
    if response.status_code == 201:
        assert Note.objects.count() == before + 1
        note = Note.objects.get(pk=data["id"])
        assert note.run.run_id == OUR_RUN and note.body == body["body"].strip()
    else:
        assert response.status_code in (400, 404), (response.status_code, data)
        assert set(data) == {"error", "detail"} and Note.objects.count() == before


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.fixed_dictionaries(
        {},
        optional={
            "project": _JSON | st.just("alpha-app"),
            "run_id": _JSON | st.just(OUR_RUN),
            "hide_content": _JSON,
            "expires_at": _JSON | st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
        },
    )
)
def test_api_answers_any_share_link_body_with_a_link_or_the_error_shape(
    samples: Project, alice_client: Client, body: dict[str, Any]
) -> None:
    from traces.models import ShareLink

    before = ShareLink.objects.count()
    response = alice_client.post("/api/v1/share-links", body, content_type="application/json")
    data = response.json()
    if response.status_code == 201:
        assert ShareLink.objects.count() == before + 1 and data["url"].startswith("http://testserver/s/")
    else:
        assert response.status_code in (400, 404), (response.status_code, data)
        assert set(data) == {"error", "detail"} and ShareLink.objects.count() == before


@pytest.mark.parametrize("bad", ["nul\x00byte", "lone \ud800 surrogate"])
def test_it_rejects_text_the_database_cannot_hold(samples: Project, alice_client: Client, bad: str) -> None:
    payload = {"project": samples.pk, "run_id": PIN_RUN, "body": bad}
    response = alice_client.post("/api/v1/notes", payload, content_type="application/json")
    assert response.status_code == 400 and response.json()["detail"][0]["field"] == "body"
    for field in ("run_id", "project"):
        response = alice_client.post(
            "/api/v1/notes", {**payload, "body": "ok", field: bad}, content_type="application/json"
        )
        assert response.status_code == 400 and response.json()["detail"][0]["field"] == field
        response = alice_client.post(
            "/api/v1/share-links", {"project": samples.pk, "run_id": PIN_RUN, field: bad},
            content_type="application/json",
        )  # fmt: skip
        assert response.status_code == 400 and response.json()["detail"][0]["field"] == field
    assert alice_client.get("/api/v1/notes", {"run_id": "a\x00b"}).status_code == 400
    assert alice_client.get("/notes", {"run_id": "a\x00b"}).status_code in (200, 400)  # never a 500
    assert not Note.objects.exists()
