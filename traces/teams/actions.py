"""Team actions: members, invites, projects, API keys, deleting runs and retention.

Zulip-style verbs (STYLE.md item 6): `check_*` validates what a person typed, `do_*` makes the change
and writes its audit row in the same transaction (`traces.teams.audit.record`, STYLE.md item 21). Whether the
caller may act at all is decided before, by `Membership.can(action)` in the view; these functions
enforce the rules that hold whoever calls them (the last owner stays, only an owner makes owners).
"""

from __future__ import annotations

import logging
import re
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from traces.models import INVITE_PREFIX, ApiKey, Invite, Membership, Project, Run, Team
from traces.teams import audit

log = logging.getLogger(__name__)

Role = Membership.Role
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")
# Retention above ten years is a typo, not a policy.
MAX_RETENTION_DAYS = 3650


class TeamRuleError(Exception):
    """An action that breaks a team rule (the message is shown to the person who tried)."""


# --------------------------------------------------------------------------------------------------
# Teams


def check_team_name(name: str) -> str:
    name = " ".join((name or "").split())
    if not name:
        raise TeamRuleError("Give the team a name.")
    if len(name) > 100:
        raise TeamRuleError("A team name has at most 100 characters.")
    if Team.objects.filter(name=name).exists():
        raise TeamRuleError("A team with this name exists already.")
    return name


def do_create_team(name: str, owner: Any) -> Team:
    """A new team with `owner` as its first owner."""
    with transaction.atomic():
        team = Team.objects.create(name=name)
        Membership.objects.create(team=team, user=owner, role=Role.OWNER)
        audit.record(team, owner, audit.TEAM_CREATED, team)
    return team


def do_delete_team(team: Team) -> None:
    """Delete the team with its projects, runs, keys, invites and audit log (owners only, checked by
    the caller). Nothing is left to audit into: the team's log goes with it; the server log keeps a line."""
    from traces.ingest import do_delete_runs_of_project
    from traces.models import Upload

    files = [f for f in Upload.objects.filter(project__team=team).values_list("file", flat=True) if f]
    with transaction.atomic():
        for project in Project.objects.filter(team=team):
            do_delete_runs_of_project(project)
        team.delete()
        transaction.on_commit(lambda: _delete_files(files))
    log.warning("team %s (%s) deleted", team.pk, team.name)


# --------------------------------------------------------------------------------------------------
# Members and invites


def owner_count(team: Team) -> int:
    return Membership.objects.filter(team=team, role=Role.OWNER).count()


def check_role_change(actor: Membership, target: Membership, new_role: str) -> None:
    """Admins manage viewers, members and admins; only an owner makes an owner or changes one; the
    last owner cannot be demoted."""
    if new_role not in Role.values:
        raise TeamRuleError("Unknown role.")
    if (new_role == Role.OWNER or target.role == Role.OWNER) and actor.role != Role.OWNER:
        raise TeamRuleError("Only an owner can make someone an owner or change an owner's role.")
    if target.role == Role.OWNER and new_role != Role.OWNER and owner_count(target.team) <= 1:
        raise TeamRuleError("The last owner cannot be demoted: make someone else an owner first.")


def do_change_role(target: Membership, actor: Any, new_role: str) -> Membership:
    old = target.role
    if old == new_role:
        return target
    with transaction.atomic():
        # Lock the team's owner rows so two owners demoting each other cannot both succeed.
        owners = list(
            Membership.objects.select_for_update()
            .filter(team=target.team, role=Role.OWNER)
            .values_list("pk", flat=True)
        )
        if old == Role.OWNER and new_role != Role.OWNER and owners == [target.pk]:
            raise TeamRuleError("The last owner cannot be demoted: make someone else an owner first.")
        target.role = new_role
        target.save(update_fields=["role"])
        audit.record(
            target.team,
            actor,
            audit.MEMBER_ROLE_CHANGED,
            target.user.get_username(),
            {audit.OLD: old, audit.NEW: new_role},
        )
    return target


def check_removal(actor: Membership, target: Membership) -> None:
    """Anyone may leave; admins remove non-owners; only an owner removes an owner; the last owner
    never goes."""
    if target.pk != actor.pk:
        if not actor.can("manage_members"):
            raise TeamRuleError("Only admins and owners remove members.")
        if target.role == Role.OWNER and actor.role != Role.OWNER:
            raise TeamRuleError("Only an owner can remove an owner.")
    if target.role == Role.OWNER and owner_count(target.team) <= 1:
        raise TeamRuleError("The last owner cannot leave or be removed: make someone else an owner first.")


def do_remove_member(target: Membership, actor: Any) -> None:
    """Remove `target` from its team. Their sessions stay valid, but every team page and API call
    scopes by membership, so their next request for anything of the team is a 404."""
    team = target.team
    leaving = getattr(actor, "pk", None) == target.user_id
    with transaction.atomic():
        owners = list(
            Membership.objects.select_for_update()
            .filter(team=team, role=Role.OWNER)
            .values_list("pk", flat=True)
        )
        if target.role == Role.OWNER and owners == [target.pk]:
            raise TeamRuleError(
                "The last owner cannot leave or be removed: make someone else an owner first."
            )
        username = target.user.get_username()
        role = target.role
        target.delete()
        audit.record(
            team, actor, audit.MEMBER_LEFT if leaving else audit.MEMBER_REMOVED, username, {"role": role}
        )


def check_invite_role(actor: Membership, role: str) -> str:
    if role not in Role.values:
        raise TeamRuleError("Unknown role.")
    if role == Role.OWNER and actor.role != Role.OWNER:
        raise TeamRuleError("Only an owner can invite an owner.")
    return role


def do_create_invite(
    team: Team, actor: Any, role: str, note: str = "", days: int | None = None
) -> tuple[Invite, str]:
    """A one-time invite; returns the row and the raw token (shown once, only its hash is stored)."""
    raw = INVITE_PREFIX + secrets.token_urlsafe(24)
    days = days or int(settings.ARCANA_INVITE_DAYS)
    with transaction.atomic():
        invite = Invite.objects.create(
            team=team,
            role=role,
            note=note[:100],
            token_hash=Invite.hash_token(raw),
            created_by=audit.actor_fields(actor)[0],
            expires_at=timezone.now() + timedelta(days=days),
        )
        audit.record(
            team,
            actor,
            audit.MEMBER_INVITED,
            f"invite {invite.pk}" + (f" ({invite.note})" if invite.note else ""),
            {"role": role, "expires_at": invite.expires_at.isoformat()},
        )
    return invite, raw


def find_invite(raw: str) -> Invite | None:
    """The invite with this token, usable or not (None for an unknown token)."""
    if not raw or not raw.startswith(INVITE_PREFIX) or len(raw) > 100:
        return None
    return Invite.objects.select_related("team").filter(token_hash=Invite.hash_token(raw)).first()


def do_revoke_invite(invite: Invite, actor: Any) -> None:
    with transaction.atomic():
        updated = Invite.objects.filter(
            pk=invite.pk, accepted_at__isnull=True, revoked_at__isnull=True
        ).update(revoked_at=timezone.now())
        if updated:
            audit.record(
                invite.team, actor, audit.INVITE_REVOKED, f"invite {invite.pk}", {"role": invite.role}
            )


def do_accept_invite(invite: Invite, user: Any) -> Membership:
    """Use the invite: `user` joins its team with its role (a member already keeps their role). The
    claim is a conditional update, so a link works once even when two people open it together."""
    with transaction.atomic():
        claimed = Invite.objects.filter(
            pk=invite.pk, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now()
        ).update(accepted_at=timezone.now(), accepted_by=user)
        if not claimed:
            raise TeamRuleError("This invite link has expired, was revoked or was used already.")
        membership, created = Membership.objects.get_or_create(
            team=invite.team, user=user, defaults={"role": invite.role}
        )
        audit.record(
            invite.team,
            user,
            audit.MEMBER_JOINED,
            user.get_username(),
            {"role": membership.role, "invite": invite.pk, "already_member": not created},
        )
    return membership


def check_signup(username: str, password: str, password2: str) -> tuple[str, str]:
    """Validate a sign-up through an invite with Django's own username and password rules."""
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError

    user_model = get_user_model()
    username = (username or "").strip()
    field = user_model._meta.get_field(user_model.USERNAME_FIELD)
    try:
        field.run_validators(username)  # type: ignore[union-attr]
    except ValidationError as exc:
        raise TeamRuleError(" ".join(exc.messages)) from None
    if not username or len(username) > 150:
        raise TeamRuleError("Choose a user name (150 characters at most).")
    if user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).exists():
        raise TeamRuleError("This user name is taken. If it is yours, log in first and open the link again.")
    if password != password2:
        raise TeamRuleError("The two passwords differ.")
    try:
        validate_password(password, user_model(**{user_model.USERNAME_FIELD: username}))
    except ValidationError as exc:
        raise TeamRuleError(" ".join(exc.messages)) from None
    return username, password


def do_signup_with_invite(invite: Invite, username: str, password: str) -> Any:
    """Create the account and use the invite, together: no account without its team."""
    user_model = get_user_model()
    try:
        with transaction.atomic():
            user = user_model.objects.create_user(username=username, password=password)
            do_accept_invite(invite, user)
    except IntegrityError:
        raise TeamRuleError("This user name is taken.") from None
    return user


# --------------------------------------------------------------------------------------------------
# Projects


def check_project(team: Team, slug: str, name: str, *, project: Project | None = None) -> tuple[str, str]:
    slug = (slug or "").strip().lower()
    name = " ".join((name or "").split())
    if not SLUG_RE.match(slug):
        raise TeamRuleError("A project slug is 1–100 lower-case letters, digits and dashes.")
    if len(name) > 100:
        raise TeamRuleError("A project name has at most 100 characters.")
    clash = Project.objects.filter(team=team, slug=slug)
    if project is not None:
        clash = clash.exclude(pk=project.pk)
    if clash.exists():
        raise TeamRuleError("This team has a project with this slug already.")
    return slug, name


def check_retention(value: str | None) -> int | None:
    value = (value or "").strip()
    if not value:
        return None
    try:
        days = int(value)
    except ValueError:
        raise TeamRuleError("Retention is a number of days, or empty to keep runs forever.") from None
    if not 1 <= days <= MAX_RETENTION_DAYS:
        raise TeamRuleError(f"Retention is between 1 and {MAX_RETENTION_DAYS} days.")
    return days


def do_create_project(team: Team, actor: Any, slug: str, name: str) -> Project:
    with transaction.atomic():
        project = Project.objects.create(team=team, slug=slug, name=name or slug)
        audit.record(team, actor, audit.PROJECT_CREATED, project.slug, {"name": project.name})
    return project


def do_update_project(
    project: Project, actor: Any, *, slug: str, name: str, retention_days: int | None
) -> None:
    changes: dict[str, Any] = {}
    for field, new in (("slug", slug), ("name", name or slug), ("retention_days", retention_days)):
        old = getattr(project, field)
        if old != new:
            changes[field] = {audit.OLD: old, audit.NEW: new}
            setattr(project, field, new)
    if not changes:
        return
    with transaction.atomic():
        project.save(update_fields=list(changes))
        audit.record(project.team, actor, audit.PROJECT_CHANGED, project.slug, changes)


def do_delete_project(project: Project, actor: Any) -> None:
    """Delete a project with its runs, raw events, uploads and keys."""
    from traces.ingest import do_delete_runs_of_project

    team = project.team
    # The uploaded files go too, once the rows are gone for good (after commit: a rollback must not
    # leave upload rows whose files were deleted).
    files = [f for f in project.uploads.values_list("file", flat=True) if f]
    with transaction.atomic():
        runs = Run.objects.filter(project=project).count()
        do_delete_runs_of_project(project)
        audit.record(team, actor, audit.PROJECT_DELETED, project.slug, {"name": project.name, "runs": runs})
        project.delete()
        transaction.on_commit(lambda: _delete_files(files))


def _delete_files(names: list[str]) -> None:
    from django.core.files.storage import default_storage

    for name in names:
        try:
            default_storage.delete(name)
        except OSError:
            log.warning("could not delete the uploaded file %s of a deleted project", name)


# --------------------------------------------------------------------------------------------------
# API keys


def do_create_api_key(project: Project, actor: Any, name: str, scope: str) -> tuple[ApiKey, str]:
    if scope not in ApiKey.Scope.values:
        raise TeamRuleError("Unknown key scope.")
    with transaction.atomic():
        user, _ = audit.actor_fields(actor)  # a person, or None for a command or another key
        key, raw = ApiKey.issue(project, name=name[:100], created_by=user, scope=scope)
        audit.record(
            project.team,
            actor,
            audit.KEY_CREATED,
            f"{key.prefix}… ({key.name or 'unnamed'})",
            {"project": project.slug, "scope": scope},
        )
    return key, raw


def do_revoke_api_key(key: ApiKey, actor: Any) -> None:
    """Revoke at once: the next request with the key is a 401 (authentication reads `revoked_at`)."""
    with transaction.atomic():
        updated = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if updated:
            audit.record(
                key.project.team,
                actor,
                audit.KEY_REVOKED,
                f"{key.prefix}… ({key.name or 'unnamed'})",
                {"project": key.project.slug},
            )


# --------------------------------------------------------------------------------------------------
# Deleting runs, retention


def do_delete_run(run: Run, actor: Any) -> None:
    """Delete a run: its raw events and every projection, with its audit row, in one transaction."""
    from traces import ingest

    team = run.project.team
    with transaction.atomic():
        summary = {"project": run.project.slug, "events": run.events, "turns": run.turns}
        ingest.do_delete_run(run)
        audit.record(team, actor, audit.RUN_DELETED, run.run_id, summary)


def do_enforce_retention(now: Any = None) -> int:
    """Delete the runs of every project with `retention_days` that received no event for that many
    days; one audit row per project that lost runs. Returns the number of runs deleted."""
    from traces import ingest

    now = now or timezone.now()
    deleted = 0
    for project in Project.objects.filter(retention_days__isnull=False).select_related("team"):
        assert project.retention_days is not None
        cutoff = now - timedelta(days=project.retention_days)
        # Retention counts from when the store last received an event of the run (`updated_at`), not
        # from the producer's clock: an old file uploaded today is kept for the full period.
        expired = list(Run.objects.filter(project=project, updated_at__lt=cutoff).select_related("project"))
        if not expired:
            continue
        with transaction.atomic():
            for run in expired:
                ingest.do_delete_run(run)
            audit.record(
                project.team,
                "retention",
                audit.RUNS_EXPIRED,
                project.slug,
                {
                    "runs": len(expired),
                    "run_ids": [r.run_id for r in expired[:50]],
                    "retention_days": project.retention_days,
                    "cutoff": cutoff.isoformat(),
                },
            )
        deleted += len(expired)
    return deleted
