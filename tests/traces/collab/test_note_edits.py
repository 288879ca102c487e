"""Editing and deleting review notes: the author edits their note's label and body, the author or a
team admin / owner deletes it (`Note.can_edit`, `Note.can_delete`), through the pages and the API;
each change has its audit row; bad input leaves the note as it was; shared pages never offer it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from tests.traces.views_helpers import PIN_RUN
from traces.collab import notes as notes_service
from traces.collab import sharing
from traces.models import ApiKey, AuditLog, Membership, Note, Project, Run

pytestmark = pytest.mark.django_db

HOSTILE = '<script>window.__xss=1</script>"><img src=x onerror="alert(2)"> {{ request.user }} {% debug %}'


def _client(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


@dataclass
class Cast:
    run: Run
    note: Note  # bob's (a member), on turn 4 step 1
    clients: dict[str, Client]


@pytest.fixture
def cast(samples: Project, alpha: Any, alice: Any, bob: Any, charlie: Any, django_user_model: Any) -> Cast:
    """bob (member) wrote the note; dora another member, adam an admin, alice the owner, vera a viewer,
    charlie an outsider; rita wrote a note too and was then removed from the team; "key" is a
    read + ingest API key of the project."""
    run = Run.objects.get(run_id=PIN_RUN)
    users = {"author": bob, "owner": alice, "outsider": charlie}
    for name, actor, role in (
        ("dora", "member", Membership.Role.MEMBER),
        ("adam", "admin", Membership.Role.ADMIN),
        ("vera", "viewer", Membership.Role.VIEWER),
        ("rita", "removed", Membership.Role.MEMBER),
    ):
        users[actor] = django_user_model.objects.create_user(username=name, password="password")
        Membership.objects.create(team=alpha, user=users[actor], role=role)
    note = Note.objects.create(
        run=run, turn_number=4, step_number=1, label="bug", body="original", author=bob
    )
    clients = {actor: _client(user) for actor, user in users.items()}
    _key, raw = ApiKey.issue(samples, name="ci")
    clients["key"] = Client(headers={"Authorization": f"Bearer {raw}"})
    return Cast(run, note, clients)


def _removed_authors_note(cast: Cast) -> Note:
    """A note of rita's, whose membership then ends."""
    rita = Membership.objects.get(user__username="rita")
    note = Note.objects.create(
        run=cast.run, turn_number=4, label="question", body="original", author=rita.user
    )
    rita.delete()
    return note


def _target(cast: Cast, actor: str) -> Note:
    return _removed_authors_note(cast) if actor == "removed" else cast.note


# actor: (page edit, page delete, API PATCH, API DELETE). The removed member and outsiders read nothing
# of the team (404); a viewer, another member and an API key may read but not change (403).
MATRIX = {
    "author": (302, 302, 200, 204),
    "member": (403, 403, 403, 403),
    "admin": (403, 302, 403, 204),
    "owner": (403, 302, 403, 204),
    "viewer": (403, 403, 403, 403),
    "outsider": (404, 404, 404, 404),
    "removed": (404, 404, 404, 404),
    "key": (None, None, 403, 403),  # a key has no session: the pages are not for it
}


@pytest.mark.parametrize("actor", sorted(MATRIX))
def test_who_may_edit_a_note(cast: Cast, actor: str) -> None:
    page, _delete, api, _api_delete = MATRIX[actor]
    note = _target(cast, actor)
    client = cast.clients[actor]
    if page is not None:
        response = client.post(f"/notes/{note.pk}/edit", {"label": "expected", "body": "by page"})
        assert response.status_code == page
    response = client.patch(f"/api/v1/notes/{note.pk}", {"body": "by API"}, content_type="application/json")
    assert response.status_code == api, response.content
    note.refresh_from_db()
    if actor == "author":
        assert (note.label, note.body) == ("expected", "by API") and note.edited_at is not None
        assert AuditLog.objects.filter(event_type=AuditLog.NOTE_EDITED).count() == 2
    else:
        assert (note.body, note.edited_at) == ("original", None)
        assert not AuditLog.objects.filter(event_type=AuditLog.NOTE_EDITED).exists()
        if api == 403:
            assert response.json()["error"]  # the API's error shape


@pytest.mark.parametrize(
    ("actor", "via"), [(a, v) for a in sorted(MATRIX) for v in ("page", "api") if (a, v) != ("key", "page")]
)
def test_who_may_delete_a_note(cast: Cast, actor: str, via: str) -> None:
    _edit, page, _api, api = MATRIX[actor]
    expected = page if via == "page" else api
    note = _target(cast, actor)
    client = cast.clients[actor]
    if via == "page":
        response = client.post(f"/notes/{note.pk}/delete")
    else:
        response = client.delete(f"/api/v1/notes/{note.pk}")
    assert response.status_code == expected
    deleted = expected in (302, 204)
    assert Note.objects.filter(pk=note.pk).exists() is not deleted
    assert AuditLog.objects.filter(event_type=AuditLog.NOTE_DELETED).count() == int(deleted)


def test_an_author_made_viewer_may_no_longer_change_their_note(cast: Cast) -> None:
    Membership.objects.filter(user=cast.note.author).update(role=Membership.Role.VIEWER)
    client = cast.clients["author"]
    assert client.post(f"/notes/{cast.note.pk}/edit", {"body": "x"}).status_code == 403
    assert client.post(f"/notes/{cast.note.pk}/delete").status_code == 403
    assert "Edit<span" not in client.get(cast.run.turn_url(4)).content.decode()
    cast.note.refresh_from_db()
    assert cast.note.body == "original"


def test_a_note_written_with_a_key_is_edited_by_nobody_and_deleted_by_admins(cast: Cast) -> None:
    response = cast.clients["key"].post(
        "/api/v1/notes",
        {"project": cast.run.project_id, "run_id": PIN_RUN, "turn": 4, "body": "from CI"},
        content_type="application/json",
    )
    assert response.status_code == 201
    pk = response.json()["id"]
    for actor in ("key", "owner", "admin", "member"):
        r = cast.clients[actor].patch(f"/api/v1/notes/{pk}", {"body": "x"}, content_type="application/json")
        assert r.status_code == 403, actor
    assert cast.clients["key"].delete(f"/api/v1/notes/{pk}").status_code == 403
    assert cast.clients["member"].delete(f"/api/v1/notes/{pk}").status_code == 403
    assert cast.clients["admin"].delete(f"/api/v1/notes/{pk}").status_code == 204
    row = AuditLog.objects.get(event_type=AuditLog.NOTE_DELETED)
    assert row.actor_label == "adam" and row.extra["author"] is None and row.extra["body"] == "from CI"


def test_an_ingest_only_key_and_a_key_of_another_project_are_refused(
    cast: Cast, charlie_project: Any
) -> None:
    _k, raw = ApiKey.issue(cast.run.project, name="ingest", scope=ApiKey.Scope.INGEST)
    ingest = Client(headers={"Authorization": f"Bearer {raw}"})
    assert ingest.delete(f"/api/v1/notes/{cast.note.pk}").status_code == 403
    _k, raw = ApiKey.issue(charlie_project, name="other")
    other = Client(headers={"Authorization": f"Bearer {raw}"})
    assert other.delete(f"/api/v1/notes/{cast.note.pk}").status_code == 404
    assert Client().delete(f"/api/v1/notes/{cast.note.pk}").status_code in (401, 403)
    assert Note.objects.filter(pk=cast.note.pk).exists()


# ---------------------------------------------------------------------------------------------------
# Audit rows


def test_an_edit_writes_its_audit_row_with_old_and_new(cast: Cast) -> None:
    long_body = "word " * 100
    response = cast.clients["author"].post(
        f"/notes/{cast.note.pk}/edit", {"label": "expected", "body": long_body}
    )
    assert response["Location"] == cast.run.turn_url(4) + f"#note-{cast.note.pk}"
    row = AuditLog.objects.get(event_type=AuditLog.NOTE_EDITED)
    assert row.actor_label == "bob" and row.team_id == cast.run.project.team_id
    assert row.extra["old"] == {"label": "bug", "body": "original"}
    assert row.extra["new"]["label"] == "expected"
    assert len(row.extra["new"]["body"]) == notes_service.EXCERPT
    assert row.extra["new"]["body"].endswith("…") and row.extra["target"] == "turn 4 step 1"
    # The same label and body again: no change, no row, the edit time stays.
    cast.note.refresh_from_db()
    edited = cast.note.edited_at
    cast.clients["author"].post(
        f"/notes/{cast.note.pk}/edit", {"label": "expected", "body": long_body.strip()}
    )
    cast.note.refresh_from_db()
    assert cast.note.edited_at == edited
    assert AuditLog.objects.filter(event_type=AuditLog.NOTE_EDITED).count() == 1


def test_a_moderators_delete_writes_its_audit_row(cast: Cast) -> None:
    response = cast.clients["admin"].post(f"/notes/{cast.note.pk}/delete")
    assert response["Location"] == cast.run.turn_url(4) + "#step-1-notes"
    row = AuditLog.objects.get(event_type=AuditLog.NOTE_DELETED)
    assert row.actor_label == "adam" and row.actor is not None
    assert row.extra == {
        "run_id": PIN_RUN,
        "target": "turn 4 step 1",
        "label": "bug",
        "author": "bob",
        "body": "original",
    }
    assert f"note {cast.note.pk}:" in row.target
    # Deleting it again: 404 (it is gone), still one row.
    assert cast.clients["admin"].post(f"/notes/{cast.note.pk}/delete").status_code == 404
    assert AuditLog.objects.filter(event_type=AuditLog.NOTE_DELETED).count() == 1


def test_a_change_and_its_audit_row_commit_together(cast: Cast, monkeypatch: pytest.MonkeyPatch) -> None:
    from traces.teams import audit

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("audit log unavailable")

    monkeypatch.setattr(audit, "record", broken)
    with pytest.raises(RuntimeError):
        notes_service.do_edit_note(cast.note, cast.note.author, "expected", "changed")
    with pytest.raises(RuntimeError):
        notes_service.do_delete_note(cast.note, cast.note.author)
    row = Note.objects.get(pk=cast.note.pk)
    assert (row.label, row.body, row.edited_at) == ("bug", "original", None)


# ---------------------------------------------------------------------------------------------------
# Validation


BAD = [
    ({"body": ""}, "body"),
    ({"body": "   \n "}, "body"),
    ({"body": "nul\x00byte"}, "body"),
    ({"body": "x" * (Note.BODY_MAX + 1)}, "body"),
    ({"label": "praise"}, "label"),
]


@pytest.mark.parametrize(("data", "field"), BAD)
def test_bad_edits_from_the_page_leave_the_note_unchanged(
    cast: Cast, data: dict[str, str], field: str
) -> None:
    client = cast.clients["author"]
    response = client.post(f"/notes/{cast.note.pk}/edit", {"label": "bug", "body": "fine", **data})
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert f"Note not changed: {field}" in page
    cast.note.refresh_from_db()
    assert (cast.note.label, cast.note.body, cast.note.edited_at) == ("bug", "original", None)
    assert not AuditLog.objects.filter(event_type=AuditLog.NOTE_EDITED).exists()


@pytest.mark.parametrize(
    ("data", "field"), [*BAD, ({"body": "lone \ud800 surrogate"}, "body"), ({"body": None}, "body")]
)
def test_bad_edits_through_the_api_get_the_error_shape(cast: Cast, data: dict[str, Any], field: str) -> None:
    response = cast.clients["author"].patch(
        f"/api/v1/notes/{cast.note.pk}", json.dumps(data), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] == "invalid input" and body["detail"][0]["field"] == field
    cast.note.refresh_from_db()
    assert (cast.note.label, cast.note.body, cast.note.edited_at) == ("bug", "original", None)


@pytest.mark.parametrize("body", ["", "nul\x00", "lone \ud800", "x" * (Note.BODY_MAX + 1)])
def test_the_same_rules_check_new_notes_and_edits(cast: Cast, body: str) -> None:
    with pytest.raises(notes_service.NoteError) as new:
        notes_service.check_note(cast.run, {"body": body})
    with pytest.raises(notes_service.NoteError) as edit:
        notes_service.check_note_text({"body": body}, current=cast.note)
    assert (new.value.field, new.value.message) == (edit.value.field, edit.value.message)


def test_a_partial_api_edit_keeps_the_rest(cast: Cast) -> None:
    client = cast.clients["author"]
    response = client.patch(
        f"/api/v1/notes/{cast.note.pk}", {"label": "question"}, content_type="application/json"
    )
    assert response.status_code == 200
    data = response.json()
    assert (data["label"], data["body"]) == ("question", "original") and data["edited_at"]
    listed = client.get(f"/api/v1/notes?run_id={PIN_RUN}").json()["results"]
    assert listed[0]["edited_at"] == data["edited_at"]


# ---------------------------------------------------------------------------------------------------
# Pages


def _forms(html: str, pk: int) -> tuple[bool, bool]:
    return f'action="/notes/{pk}/edit"' in html, f'action="/notes/{pk}/delete"' in html


@pytest.mark.parametrize(
    ("actor", "edit", "delete"),
    [
        ("author", True, True),
        ("member", False, False),
        ("admin", False, True),
        ("owner", False, True),
        ("viewer", False, False),
    ],
)
def test_the_pages_offer_edit_and_delete_by_the_same_rule(
    cast: Cast, actor: str, edit: bool, delete: bool
) -> None:
    client = cast.clients[actor]
    for url in (cast.run.turn_url(4), cast.run.get_absolute_url(), "/notes"):
        html = client.get(url).content.decode()
        assert "original" in html
        assert _forms(html, cast.note.pk) == (edit, delete), (actor, url)


def test_shared_pages_never_offer_edit_or_delete(cast: Cast) -> None:
    _link, token = sharing.do_create_share_link(cast.run, cast.note.author)
    for client in (cast.clients["author"], cast.clients["owner"], Client()):
        for url in (sharing.share_url(token), sharing.share_url(token) + "/turns/4"):
            html = client.get(url).content.decode()
            assert "original" in html and _forms(html, cast.note.pk) == (False, False), url
            assert "note__manage" not in html


def test_an_edit_shows_at_once_with_its_marker_and_stays_escaped(cast: Cast) -> None:
    client = cast.clients["author"]
    turn = cast.run.turn_url(4)
    before = client.get(turn).content.decode()
    assert "original" in before and "note__edited" not in before
    client.post(f"/notes/{cast.note.pk}/edit", {"label": "question", "body": HOSTILE})
    cast.note.refresh_from_db()
    for url in (turn, cast.run.get_absolute_url(), "/notes"):
        html = client.get(url).content.decode()
        assert "<script>window.__xss" not in html and 'onerror="alert' not in html, url
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html and "{{ request.user }}" in html
        assert f'datetime="{cast.note.edited_at:%Y-%m-%dT%H:%M:%S}' in html, url
        assert 'class="note__edited"' in html and ">edited</time>" in html
        assert "original" not in html.split(f'id="note-{cast.note.pk}"')[1][:3000]


def test_the_forms_go_back_where_they_were(cast: Cast) -> None:
    client = cast.clients["author"]
    r = client.post(f"/notes/{cast.note.pk}/edit", {"body": "from the list", "next": "/notes?label=bug"})
    assert r["Location"] == "/notes?label=bug"
    r = client.post(f"/notes/{cast.note.pk}/edit", {"body": "elsewhere", "next": "https://evil.example/"})
    assert r["Location"] == cast.run.turn_url(4) + f"#note-{cast.note.pk}"
    r = client.post(f"/notes/{cast.note.pk}/delete", {"next": "/notes"})
    assert r["Location"] == "/notes" and not Note.objects.filter(pk=cast.note.pk).exists()
    assert "deleted" in client.get("/notes").content.decode()


def test_the_schema_documents_the_note_detail(alice_client: Client) -> None:
    schema = alice_client.get("/api/v1/schema", HTTP_ACCEPT="application/json").content.decode()
    assert "/api/v1/notes/{note_id}" in schema and "patch" in schema
