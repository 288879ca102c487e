"""Team pages: members and invites, projects and keys, the audit log, the switcher, deleting a run —
status, stored rows and rendered page for each (STYLE.md item 16)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.traces.views_helpers import OUR_RUN, OURS, ingest_file
from traces.models import ApiKey, AuditLog, Event, Invite, Membership, Project, Run, Team

Role = Membership.Role


@pytest.fixture
def viewer(db: None, django_user_model: Any, alpha: Team) -> Any:
    user = django_user_model.objects.create_user(username="vera", password="password")
    Membership.objects.create(team=alpha, user=user, role=Role.VIEWER)
    return user


@pytest.fixture
def run(project: Project) -> Run:
    ingest_file(project, OURS / f"{OUR_RUN}.jsonl")
    return Run.objects.get(project=project, run_id=OUR_RUN)


def _client(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_it_requires_login(client: Client, alpha: Team) -> None:
    r = client.get(f"/teams/{alpha.pk}/members")
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]


def test_it_checks_team_access(charlie_client: Client, alpha: Team, project: Project) -> None:
    for url in (f"/teams/{alpha.pk}/members", f"/teams/{alpha.pk}/projects", f"/teams/{alpha.pk}/audit",
                f"/teams/{alpha.pk}/projects/{project.pk}"):  # fmt: skip
        assert charlie_client.get(url).status_code == 404, url


def test_it_invites_through_a_link_shown_once(alice_client: Client, alpha: Team) -> None:
    r = alice_client.post(f"/teams/{alpha.pk}/invites", {"role": "viewer", "note": "for erin"})
    assert r.status_code == 302
    page = alice_client.get(f"/teams/{alpha.pk}/members").content.decode()
    link = re.search(r'value="(http://testserver/invite/inv_[^"]+)"', page)
    assert link is not None
    # Shown once: the next view of the page has the invite listed but not its link.
    again = alice_client.get(f"/teams/{alpha.pk}/members").content.decode()
    assert link.group(1) not in again and "for erin" in again
    invite = Invite.objects.get(team=alpha)
    assert invite.role == "viewer" and link.group(1).split("/invite/")[1] not in invite.token_hash

    # A new person signs up through it and lands in the team, logged in.
    newcomer = Client()
    path = link.group(1).removeprefix("http://testserver")
    assert "Join “Alpha”" in newcomer.get(path).content.decode()
    r = newcomer.post(
        path, {"username": "erin", "password": "long passphrase 42!", "password2": "long passphrase 42!"}
    )
    assert r.status_code == 302 and r["Location"] == "/"
    erin = Membership.objects.get(team=alpha, user__username="erin")
    assert erin.role == "viewer"
    assert newcomer.get("/").status_code == 200
    # The link is used up.
    assert Client().get(path).status_code == 404
    assert set(AuditLog.objects.filter(team=alpha).values_list("event_type", flat=True)) == {
        AuditLog.MEMBER_INVITED,
        AuditLog.MEMBER_JOINED,
    }


def test_it_lets_a_logged_in_user_accept(
    alice: Any, alpha: Team, charlie_client: Client, charlie: Any
) -> None:
    from traces.teams import actions as teams

    _, raw = teams.do_create_invite(alpha, alice, "member")
    assert "Join Alpha" in charlie_client.get(f"/invite/{raw}").content.decode()
    r = charlie_client.post(f"/invite/{raw}")
    assert r.status_code == 302
    assert Membership.objects.get(team=alpha, user=charlie).role == "member"
    assert charlie_client.session["team_id"] == alpha.pk


def test_it_rejects_a_bad_signup(alice: Any, alpha: Team, bob: Any) -> None:
    from traces.teams import actions as teams

    _, raw = teams.do_create_invite(alpha, alice, "member")
    c = Client()
    r = c.post(
        f"/invite/{raw}",
        {"username": "bob", "password": "long passphrase 42!", "password2": "long passphrase 42!"},
    )
    assert r.status_code == 400 and "taken" in r.content.decode()
    r = c.post(f"/invite/{raw}", {"username": "zed", "password": "long passphrase 42!", "password2": "other"})
    assert r.status_code == 400 and "differ" in r.content.decode()
    r = c.post(f"/invite/{raw}", {"username": "zed", "password": "123", "password2": "123"})
    assert r.status_code == 400
    assert not Membership.objects.filter(user__username="zed").exists()
    assert Invite.objects.get(team=alpha).accepted_at is None


def test_it_changes_roles_and_removes_members(
    alice_client: Client, alpha: Team, bob: Any, alice: Any
) -> None:
    bob_m = Membership.objects.get(team=alpha, user=bob)
    alice_m = Membership.objects.get(team=alpha, user=alice)
    r = alice_client.post(f"/teams/{alpha.pk}/members/{bob_m.pk}/role", {"role": "admin"})
    assert r.status_code == 302
    bob_m.refresh_from_db()
    assert bob_m.role == "admin"
    # The last owner cannot demote herself: nothing changes, and the page says why.
    r = alice_client.post(f"/teams/{alpha.pk}/members/{alice_m.pk}/role", {"role": "member"}, follow=True)
    assert "last owner" in r.content.decode()
    alice_m.refresh_from_db()
    assert alice_m.role == "owner"
    r = alice_client.post(f"/teams/{alpha.pk}/members/{alice_m.pk}/remove", follow=True)
    assert "last owner" in r.content.decode()
    assert Membership.objects.filter(pk=alice_m.pk).exists()
    r = alice_client.post(f"/teams/{alpha.pk}/members/{bob_m.pk}/remove")
    assert r.status_code == 302
    assert not Membership.objects.filter(pk=bob_m.pk).exists()
    assert AuditLog.objects.filter(event_type=AuditLog.MEMBER_REMOVED, target="bob").exists()


def test_it_forbids_members_from_managing(bob_client: Client, alpha: Team, alice: Any, viewer: Any) -> None:
    alice_m = Membership.objects.get(team=alpha, user=alice)
    vera_m = Membership.objects.get(team=alpha, user=viewer)
    assert (
        bob_client.post(f"/teams/{alpha.pk}/members/{vera_m.pk}/role", {"role": "admin"}).status_code == 403
    )
    assert bob_client.post(f"/teams/{alpha.pk}/members/{alice_m.pk}/remove").status_code == 403
    assert bob_client.post(f"/teams/{alpha.pk}/invites", {"role": "member"}).status_code == 403
    assert bob_client.get(f"/teams/{alpha.pk}/audit").status_code == 403
    assert not Invite.objects.exists()
    vera_m.refresh_from_db()
    assert vera_m.role == "viewer"


def test_it_creates_keys_shown_once_and_revokes_them(
    alice_client: Client, alpha: Team, project: Project
) -> None:
    url = f"/teams/{alpha.pk}/projects/{project.pk}"
    r = alice_client.post(f"{url}/keys", {"name": "ci", "scope": "ingest"})
    assert r.status_code == 302
    page = alice_client.get(url).content.decode()
    raw = re.search(r'id="key-raw" class="mono copy-src" readonly value="(arc_[^"]+)"', page)
    assert raw is not None
    assert f'HttpBatchSink("http://testserver/api/v1/ingest", api_key="{raw.group(1)}")' in page
    assert f"arcana trace upload ./arcana-traces --server http://testserver --api-key {raw.group(1)}" in page
    assert raw.group(1) not in alice_client.get(url).content.decode()  # shown once
    key = ApiKey.objects.get(key_hash=ApiKey.hash_key(raw.group(1)))
    assert key.scope == "ingest" and key.name == "ci"
    api = Client(headers={"Authorization": f"Bearer {raw.group(1)}"})
    assert (
        api.post("/api/v1/ingest", data='{"events": []}', content_type="application/json").status_code == 200
    )
    alice_client.post(f"{url}/keys/{key.pk}/revoke")
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert (
        api.post("/api/v1/ingest", data='{"events": []}', content_type="application/json").status_code == 401
    )
    listing = alice_client.get(url).content.decode()
    assert "ci" in listing and key.prefix in listing and "revoked" in listing


def test_it_manages_projects(alice_client: Client, alpha: Team, project: Project) -> None:
    r = alice_client.post(f"/teams/{alpha.pk}/projects", {"slug": "beta", "name": "Beta"})
    beta = Project.objects.get(team=alpha, slug="beta")
    assert r.status_code == 302 and r["Location"] == f"/teams/{alpha.pk}/projects/{beta.pk}"
    alice_client.post(
        f"/teams/{alpha.pk}/projects/{beta.pk}", {"slug": "beta", "name": "Beta 2", "retention_days": "30"}
    )
    beta.refresh_from_db()
    assert (beta.name, beta.retention_days) == ("Beta 2", 30)
    r = alice_client.post(f"/teams/{alpha.pk}/projects/{beta.pk}/delete", {"confirm": "wrong"})
    assert Project.objects.filter(pk=beta.pk).exists()
    alice_client.post(f"/teams/{alpha.pk}/projects/{beta.pk}/delete", {"confirm": "beta"})
    assert not Project.objects.filter(pk=beta.pk).exists()
    page = alice_client.get(f"/teams/{alpha.pk}/audit").content.decode()
    for label in ("project created", "project changed", "project deleted"):
        assert label in page


def test_it_filters_the_audit_log(alice_client: Client, alpha: Team, alice: Any, project: Project) -> None:
    from traces.teams import audit

    audit.record(alpha, alice, audit.PROJECT_CREATED, "p1")
    audit.record(alpha, "retention", audit.RUNS_EXPIRED, "p1", {"runs": 3})
    AuditLog.objects.filter(target="p1", event_type=audit.PROJECT_CREATED).update(
        created_at="2020-01-02T00:00:00Z"
    )
    base = f"/teams/{alpha.pk}/audit"
    page = alice_client.get(base, {"event": "runs_expired"}).content.decode()
    assert "runs deleted by retention" in page and "project created</td>" not in page
    page = alice_client.get(base, {"actor": "alice"}).content.decode()
    assert "project created" in page and "runs deleted by retention</td>" not in page
    page = alice_client.get(base, {"since": "2021-01-01"}).content.decode()
    assert "runs deleted by retention" in page and "project created</td>" not in page
    page = alice_client.get(base, {"until": "2020-01-03"}).content.decode()
    assert "project created" in page and "runs deleted by retention</td>" not in page


def test_it_scopes_the_runs_list_to_the_current_team(
    alice_client: Client, alice: Any, alpha: Team, run: Run, charlie_project: Project
) -> None:
    other = Team.objects.create(name="Other")
    Membership.objects.create(team=other, user=alice, role="viewer")
    assert OUR_RUN in alice_client.get("/").content.decode()
    r = alice_client.post("/teams/switch", {"team": str(other.pk), "next": "/"})
    assert r.status_code == 302 and r["Location"] == "/"
    assert OUR_RUN not in alice_client.get("/").content.decode()
    alice_client.post("/teams/switch", {"team": "all"})
    assert OUR_RUN in alice_client.get("/").content.decode()
    # A team one is not in cannot be chosen.
    assert alice_client.post("/teams/switch", {"team": str(charlie_project.team_id)}).status_code == 404


def test_it_deletes_a_run_from_the_page(
    alice_client: Client, bob_client: Client, charlie_client: Client, run: Run
) -> None:
    url = f"/projects/{run.project_id}/runs/{run.run_id}/delete"
    assert charlie_client.post(url).status_code == 404
    assert bob_client.post(url).status_code == 403
    assert "Delete run" in alice_client.get(run.get_absolute_url()).content.decode()
    assert "Delete run" not in bob_client.get(run.get_absolute_url()).content.decode()
    r = alice_client.post(url, {"confirm": "yes"})
    assert r.status_code == 302
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not Event.objects.filter(project_id=run.project_id, run_id=run.run_id).exists()
    assert alice_client.get(run.get_absolute_url()).status_code == 404
    assert AuditLog.objects.get(event_type=AuditLog.RUN_DELETED).actor_label == "alice"


def test_it_deletes_a_run_through_the_api(
    api_client: Client, bob_client: Client, charlie_client: Client, run: Run
) -> None:
    url = run.api_url()
    assert charlie_client.delete(url).status_code == 404
    assert bob_client.delete(url).status_code == 403
    assert api_client.delete(url).status_code == 204
    assert not Run.objects.filter(pk=run.pk).exists()
    assert api_client.get(url).status_code == 404
    row = AuditLog.objects.get(event_type=AuditLog.RUN_DELETED)
    assert row.actor is None and row.actor_label.startswith("API key arc_")


def test_it_404s_another_teams_objects_under_ones_own_team(
    alice_client: Client, alpha: Team, project: Project, charlie: Any, charlie_project: Project
) -> None:
    """An admin of Alpha naming Charlie's project, key, member or invite inside Alpha's URLs: 404, and
    nothing of Charlie's changes."""
    from traces.teams import actions as teams

    key, _ = teams.do_create_api_key(charlie_project, charlie, "c", "ingest")
    invite, _ = teams.do_create_invite(charlie_project.team, charlie, "member")
    member = Membership.objects.get(user=charlie)
    base = f"/teams/{alpha.pk}"
    assert alice_client.get(f"{base}/projects/{charlie_project.pk}").status_code == 404
    assert (
        alice_client.post(
            f"{base}/projects/{charlie_project.pk}/delete", {"confirm": "charlie-app"}
        ).status_code
        == 404
    )
    assert alice_client.post(f"{base}/projects/{project.pk}/keys/{key.pk}/revoke").status_code == 404
    assert alice_client.post(f"{base}/members/{member.pk}/remove").status_code == 404
    assert alice_client.post(f"{base}/members/{member.pk}/role", {"role": "viewer"}).status_code == 404
    assert alice_client.post(f"{base}/invites/{invite.pk}/revoke").status_code == 404
    key.refresh_from_db()
    invite.refresh_from_db()
    member.refresh_from_db()
    assert key.revoked_at is None and invite.revoked_at is None and member.role == "owner"
    assert Project.objects.filter(pk=charlie_project.pk).exists()
