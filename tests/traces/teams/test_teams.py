"""Team actions (traces/teams/actions.py): roles, invites, projects, keys, deleting runs, retention — each
asserted on the rows it leaves and the audit row it writes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.utils import timezone

from tests.traces.views_helpers import OUR_RUN, OURS, ingest_file
from traces.models import (
    Action,
    ApiKey,
    AuditLog,
    ContextDecision,
    Event,
    Invite,
    Membership,
    Project,
    Run,
    Team,
    Turn,
    Upload,
    projects_for_user,
    user_can,
)
from traces.teams import actions as teams

Role = Membership.Role


def _m(user: Any, team: Team) -> Membership:
    return Membership.objects.get(user=user, team=team)


def test_it_maps_every_role_to_its_permissions() -> None:
    table = {
        Role.VIEWER: {Action.READ},
        Role.MEMBER: {
            Action.READ, Action.UPLOAD, Action.CONVERSE, Action.NOTE, Action.SHARE, Action.LABEL, Action.SCORE,
        },
        Role.ADMIN: {
            Action.READ, Action.UPLOAD, Action.CONVERSE, Action.NOTE, Action.SHARE, Action.LABEL, Action.MANAGE_KEYS,
            Action.MANAGE_PROJECTS, Action.MANAGE_MEMBERS, Action.DELETE_RUNS, Action.VIEW_AUDIT,
            Action.SCORE, Action.MANAGE_SCORES,
        },
    }  # fmt: skip
    everything = {v for k, v in vars(Action).items() if k.isupper()}
    table[Role.OWNER] = everything
    for role, allowed in table.items():
        m = Membership(role=role)
        assert {a for a in everything if m.can(a)} == allowed, role


def test_it_scopes_projects_by_action(alice: Any, bob: Any, charlie: Any, project: Project) -> None:
    assert list(projects_for_user(bob)) == [project]
    assert list(projects_for_user(bob, Action.MANAGE_KEYS)) == []
    assert list(projects_for_user(alice, Action.MANAGE_KEYS)) == [project]
    assert list(projects_for_user(charlie).filter(pk=project.pk)) == []
    assert user_can(alice, project.team, Action.DELETE_TEAM)
    assert not user_can(charlie, project.team, Action.READ)


def test_it_keeps_the_last_owner(alice: Any, bob: Any, alpha: Team) -> None:
    owner = _m(alice, alpha)
    with pytest.raises(teams.TeamRuleError):
        teams.check_role_change(owner, owner, Role.ADMIN)
    with pytest.raises(teams.TeamRuleError):
        teams.do_change_role(owner, alice, Role.ADMIN)
    with pytest.raises(teams.TeamRuleError):
        teams.check_removal(owner, owner)
    with pytest.raises(teams.TeamRuleError):
        teams.do_remove_member(owner, alice)
    assert _m(alice, alpha).role == Role.OWNER
    # With a second owner, the first may step down; the change is audited with old and new.
    teams.do_change_role(_m(bob, alpha), alice, Role.OWNER)
    teams.do_change_role(owner, alice, Role.ADMIN)
    assert _m(alice, alpha).role == Role.ADMIN
    row = AuditLog.objects.filter(event_type=AuditLog.MEMBER_ROLE_CHANGED).first()
    assert row is not None and row.actor == alice and row.target == "alice"
    assert row.extra == {"old": "owner", "new": "admin"}


def test_it_lets_only_owners_touch_owners(alice: Any, bob: Any, alpha: Team, django_user_model: Any) -> None:
    admin = django_user_model.objects.create_user(username="dora", password="password")
    Membership.objects.create(team=alpha, user=admin, role=Role.ADMIN)
    with pytest.raises(teams.TeamRuleError):
        teams.check_role_change(_m(admin, alpha), _m(bob, alpha), Role.OWNER)
    with pytest.raises(teams.TeamRuleError):
        teams.check_removal(_m(admin, alpha), _m(alice, alpha))
    with pytest.raises(teams.TeamRuleError):
        teams.check_invite_role(_m(admin, alpha), Role.OWNER)
    teams.check_role_change(_m(admin, alpha), _m(bob, alpha), Role.VIEWER)  # allowed
    teams.check_removal(_m(bob, alpha), _m(bob, alpha))  # anyone may leave


def test_it_uses_an_invite_once(alice: Any, alpha: Team, django_user_model: Any) -> None:
    invite, raw = teams.do_create_invite(alpha, alice, Role.VIEWER, note="for erin")
    assert raw.startswith("inv_") and invite.token_hash != raw
    assert teams.find_invite(raw) == invite
    erin = teams.do_signup_with_invite(invite, "erin", "a long enough passphrase 42")
    assert _m(erin, alpha).role == Role.VIEWER
    invite.refresh_from_db()
    assert invite.accepted_by == erin and invite.state == "accepted"
    frank = django_user_model.objects.create_user(username="frank", password="password")
    with pytest.raises(teams.TeamRuleError):
        teams.do_accept_invite(invite, frank)
    assert not Membership.objects.filter(user=frank).exists()
    events = list(AuditLog.objects.filter(team=alpha).order_by("id").values_list("event_type", "actor_label"))
    assert events == [(AuditLog.MEMBER_INVITED, "alice"), (AuditLog.MEMBER_JOINED, "erin")]


def test_it_refuses_expired_and_revoked_invites(alice: Any, alpha: Team, django_user_model: Any) -> None:
    frank = django_user_model.objects.create_user(username="frank", password="password")
    expired, _ = teams.do_create_invite(alpha, alice, Role.MEMBER)
    Invite.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    revoked, _ = teams.do_create_invite(alpha, alice, Role.MEMBER)
    teams.do_revoke_invite(revoked, alice)
    for invite in (expired, revoked):
        invite.refresh_from_db()
        with pytest.raises(teams.TeamRuleError):
            teams.do_accept_invite(invite, frank)
    assert not Membership.objects.filter(user=frank).exists()
    assert teams.find_invite("inv_nope") is None


def test_it_creates_renames_and_deletes_projects(
    alice: Any, alpha: Team, project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    with pytest.raises(teams.TeamRuleError):
        teams.check_project(alpha, "alpha-app", "dup")
    with pytest.raises(teams.TeamRuleError):
        teams.check_project(alpha, "Bad Slug!", "x")
    created = teams.do_create_project(alpha, alice, *teams.check_project(alpha, "beta", "Beta"))
    teams.do_update_project(created, alice, slug="beta-2", name="Beta two", retention_days=30)
    created.refresh_from_db()
    assert (created.slug, created.name, created.retention_days) == ("beta-2", "Beta two", 30)
    ingest_file(created, OURS / f"{OUR_RUN}.jsonl")
    assert Event.objects.filter(project_id=created.pk).exists()
    upload = Upload(project=created, original_name="a.jsonl")
    upload.file.save("a.jsonl", ContentFile(b"{}\n"), save=True)
    stored = upload.file.name
    assert default_storage.exists(stored)
    with django_capture_on_commit_callbacks(execute=True):
        teams.do_delete_project(created, alice)
    assert not default_storage.exists(stored)
    assert not Project.objects.filter(pk=created.pk).exists()
    assert not Event.objects.filter(project_id=created.pk).exists()
    changed = AuditLog.objects.get(event_type=AuditLog.PROJECT_CHANGED)
    assert changed.extra["retention_days"] == {"old": None, "new": 30}
    assert AuditLog.objects.get(event_type=AuditLog.PROJECT_DELETED).extra["runs"] == 1


def test_it_issues_and_revokes_keys_with_audit(alice: Any, project: Project) -> None:
    key, raw = teams.do_create_api_key(project, alice, "ci", ApiKey.Scope.INGEST)
    assert key.scope == ApiKey.Scope.INGEST and not key.can_read
    assert ApiKey.objects.get(key_hash=ApiKey.hash_key(raw)) == key
    teams.do_revoke_api_key(key, alice)
    teams.do_revoke_api_key(key, alice)  # twice: one row
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert list(AuditLog.objects.order_by("id").values_list("event_type", flat=True)) == [
        AuditLog.KEY_CREATED,
        AuditLog.KEY_REVOKED,
    ]


def test_it_deletes_a_run_with_its_events_and_projections(alice: Any, project: Project) -> None:
    ingest_file(project, OURS / f"{OUR_RUN}.jsonl")
    run = Run.objects.get(project=project, run_id=OUR_RUN)
    assert Turn.objects.filter(run=run).exists() and ContextDecision.objects.filter(run=run).exists()
    teams.do_delete_run(run, alice)
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not Event.objects.filter(project=project, run_id=OUR_RUN).exists()
    assert not Turn.objects.filter(run_id=run.pk).exists()
    assert not ContextDecision.objects.filter(run_id=run.pk).exists()
    row = AuditLog.objects.get(event_type=AuditLog.RUN_DELETED)
    assert row.target == OUR_RUN and row.actor == alice and row.extra["events"] > 0


def test_it_enforces_retention_per_project(alice: Any, alpha: Team, project: Project) -> None:
    other = Project.objects.create(team=alpha, slug="keep", name="keep")
    ingest_file(project, OURS / f"{OUR_RUN}.jsonl")
    ingest_file(other, OURS / f"{OUR_RUN}.jsonl")
    Project.objects.filter(pk=project.pk).update(retention_days=7)
    Run.objects.update(updated_at=timezone.now() - timedelta(days=8))
    assert teams.do_enforce_retention() == 1
    assert not Run.objects.filter(project=project).exists()
    assert not Event.objects.filter(project=project).exists()
    assert Run.objects.filter(project=other).exists()  # no retention set: kept
    row = AuditLog.objects.get(event_type=AuditLog.RUNS_EXPIRED)
    assert row.actor is None and row.actor_label == "retention" and row.extra["run_ids"] == [OUR_RUN]
    assert teams.do_enforce_retention() == 0


def test_it_deletes_a_team_with_everything_in_it(
    alice: Any,
    alpha: Team,
    project: Project,
    charlie_project: Project,
    django_capture_on_commit_callbacks: Any,
) -> None:
    ingest_file(project, OURS / f"{OUR_RUN}.jsonl")
    ingest_file(charlie_project, OURS / f"{OUR_RUN}.jsonl")
    upload = Upload(project=project, original_name="a.jsonl")
    upload.file.save("a.jsonl", ContentFile(b"{}\n"), save=True)
    teams.do_create_api_key(project, alice, "k", ApiKey.Scope.INGEST)
    with django_capture_on_commit_callbacks(execute=True):
        teams.do_delete_team(alpha)
    assert not Team.objects.filter(pk=alpha.pk).exists()
    assert not Event.objects.filter(project_id=project.pk).exists()
    assert not ApiKey.objects.exists() and not AuditLog.objects.filter(team_id=alpha.pk).exists()
    assert not default_storage.exists(upload.file.name)
    assert Run.objects.filter(project=charlie_project).count() == 1  # another team's runs stay
