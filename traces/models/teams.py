"""Teams and who may do what: `Team`, `Membership` (roles), `Action` and the permission table,
`Project`, API keys, invites, login failures and the audit log."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import QuerySet
from django.utils import timezone


class Team(models.Model):
    """A group of people sharing projects. Every page and API call is scoped to the caller's teams."""

    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's place in a team. Roles, strongest first: owner, admin, member, viewer."""

    class Role(models.TextChoices):
        OWNER = "owner"
        ADMIN = "admin"
        MEMBER = "member"
        VIEWER = "viewer"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_team_user_uniq")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"

    @property
    def can_write(self) -> bool:
        """Viewers read; everyone else may upload, start conversations, write notes and share runs."""
        return self.can(Action.UPLOAD)

    @property
    def rank(self) -> int:
        return ROLE_RANK[self.role]

    def can(self, action: str) -> bool:
        """Whether this member may do `action` (an `Action`) in their team: the ONE permission rule.

        >>> Membership(role="viewer").can(Action.READ), Membership(role="viewer").can(Action.UPLOAD)
        (True, False)
        >>> Membership(role="admin").can(Action.MANAGE_KEYS), Membership(role="admin").can(Action.DELETE_TEAM)
        (True, False)
        """
        return ROLE_RANK[self.role] >= ROLE_RANK[PERMISSIONS[action]]

    def role_at_least(self, role: str) -> bool:
        return ROLE_RANK[self.role] >= ROLE_RANK[role]


class Action:
    """What a member may do in a team; `PERMISSIONS` maps each to the weakest role allowed to (DESIGN.md §8:
    viewer reads < member uploads, converses, notes, shares, names and tags runs < admin manages keys, projects, members,
    deletes data and reads the audit log < owner deletes the team)."""

    READ = "read"
    UPLOAD = "upload"
    CONVERSE = "converse"
    NOTE = "note"
    SHARE = "share"
    LABEL = "label"  # name and tag runs
    MANAGE_KEYS = "manage_keys"
    MANAGE_PROJECTS = "manage_projects"
    MANAGE_MEMBERS = "manage_members"
    DELETE_RUNS = "delete_runs"
    VIEW_AUDIT = "view_audit"
    DELETE_TEAM = "delete_team"
    # Scores (issue 36): members score and work review queues; admins manage configs, queues, judges.
    SCORE = "score"
    MANAGE_SCORES = "manage_scores"


ROLE_RANK: dict[str, int] = {
    Membership.Role.VIEWER: 0,
    Membership.Role.MEMBER: 1,
    Membership.Role.ADMIN: 2,
    Membership.Role.OWNER: 3,
}


PERMISSIONS: dict[str, str] = {
    Action.READ: Membership.Role.VIEWER,
    Action.UPLOAD: Membership.Role.MEMBER,
    Action.CONVERSE: Membership.Role.MEMBER,
    Action.NOTE: Membership.Role.MEMBER,
    Action.SHARE: Membership.Role.MEMBER,
    Action.LABEL: Membership.Role.MEMBER,
    Action.MANAGE_KEYS: Membership.Role.ADMIN,
    Action.MANAGE_PROJECTS: Membership.Role.ADMIN,
    Action.MANAGE_MEMBERS: Membership.Role.ADMIN,
    Action.DELETE_RUNS: Membership.Role.ADMIN,
    Action.VIEW_AUDIT: Membership.Role.ADMIN,
    Action.DELETE_TEAM: Membership.Role.OWNER,
    Action.SCORE: Membership.Role.MEMBER,
    Action.MANAGE_SCORES: Membership.Role.ADMIN,
}


def roles_allowed(action: str) -> list[str]:
    """The roles that may do `action`, for queries (`team__memberships__role__in=roles_allowed(...)`)."""
    return [role for role, rank in ROLE_RANK.items() if rank >= ROLE_RANK[PERMISSIONS[action]]]


def membership_of(user: Any, team: Team | int) -> Membership | None:
    """`user`'s membership of `team` (a Team or its id), or None (anonymous users and outsiders)."""
    if user is None or not getattr(user, "is_authenticated", False) or getattr(user, "pk", None) is None:
        return None
    team_id = team.pk if isinstance(team, Team) else team
    return Membership.objects.filter(team_id=team_id, user=user).select_related("team").first()


def user_can(user: Any, team: Team | int, action: str) -> bool:
    """Whether `user` may do `action` in `team` (False for outsiders and anonymous users)."""
    membership = membership_of(user, team)
    return membership is not None and membership.can(action)


class Project(models.Model):
    """A team's bucket of runs; API keys belong to one project. `slug` is unique within its team."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="projects")
    slug = models.SlugField(max_length=100)
    name = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Runs whose last activity is older than this many days are deleted by the `enforce_retention`
    # beat task (traces/tasks.py); None keeps runs forever.
    retention_days = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["team__name", "slug"]
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="project_team_slug_uniq")]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.slug}"


def projects_for_user(user: Any, action: str = Action.READ) -> QuerySet[Project]:
    """The projects of every team where `user` may do `action` (empty for anonymous users). One
    membership row must match both the user and the role, hence the single `filter()` call."""
    if user is None or not user.is_authenticated or getattr(user, "pk", None) is None:
        return Project.objects.none()
    return Project.objects.filter(
        team__memberships__user=user, team__memberships__role__in=roles_allowed(action)
    )


class LoginFailure(models.Model):
    """A failed sign-in, kept for the login throttle's window (`arcana_site/login.py`). In the database,
    not in a process, so every gunicorn worker and machine counts the same failures."""

    username = models.CharField(max_length=150)  # as typed, lower-cased
    address = models.CharField(max_length=64)  # the client's IP address
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["username", "created_at"], name="loginfailure_user_idx"),
            models.Index(fields=["address", "created_at"], name="loginfailure_addr_idx"),
            models.Index(fields=["created_at"], name="loginfailure_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.username} from {self.address} at {self.created_at:%Y-%m-%d %H:%M:%S}"


KEY_PREFIX = "arc_"


class ApiKey(models.Model):
    """A project API key. Only its sha256 is stored; the key is shown once, when it is issued.

    `scope`: an `ingest` key may only send traces (`POST /api/v1/ingest`, uploads and their status); a
    `read_ingest` key may also read the project's runs through the API."""

    class Scope(models.TextChoices):
        INGEST = "ingest", "ingest only"
        READ_INGEST = "read_ingest", "read + ingest"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    scope = models.CharField(max_length=12, choices=Scope.choices, default=Scope.READ_INGEST)
    prefix = models.CharField(max_length=16)  # the first characters, to tell keys apart in lists
    key_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The ingest rate limit's fixed window (traces/ingest/ratelimit.py): its number and the requests counted in
    # it. On the key row so every gunicorn worker and machine shares the count through the database.
    rate_window = models.BigIntegerField(default=0)
    rate_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @staticmethod
    def hash_key(raw: str) -> str:
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    @classmethod
    def issue(
        cls, project: Project, name: str = "", created_by: Any = None, scope: str = Scope.READ_INGEST
    ) -> tuple[ApiKey, str]:
        """Create a key; returns the row and the raw key (the only time it exists in clear)."""
        raw = KEY_PREFIX + secrets.token_urlsafe(32)
        key = cls.objects.create(
            project=project,
            name=name,
            prefix=raw[:12],
            key_hash=cls.hash_key(raw),
            created_by=created_by,
            scope=scope,
        )
        return key, raw

    @property
    def can_read(self) -> bool:
        return self.scope == self.Scope.READ_INGEST

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


INVITE_PREFIX = "inv_"


class Invite(models.Model):
    """A one-time link that adds whoever opens it (signing up, or already logged in) to `team` with
    `role`. Only the token's sha256 is stored: the link is shown once, to the admin who made it."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invites")
    role = models.CharField(max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    token_hash = models.CharField(max_length=64, unique=True)
    note = models.CharField(max_length=100, blank=True)  # who it is for, as the admin wrote it
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invite to {self.team} as {self.role}"

    @staticmethod
    def hash_token(raw: str) -> str:
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    @property
    def is_usable(self) -> bool:
        """Not yet used, not revoked, not expired."""
        return self.accepted_at is None and self.revoked_at is None and self.expires_at > timezone.now()

    @property
    def state(self) -> str:
        if self.accepted_at is not None:
            return "accepted"
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "open"


class AuditLog(models.Model):
    """One change to a team's members, keys, share links, notes, projects or data (STYLE.md item 21).

    Written by the action that makes the change, inside its transaction (`traces.teams.audit.record`), so no
    change exists without its row. `actor` is the user who acted (None for an API key or the system:
    `actor_label` then says which); `target` names the thing changed; `extra` holds details and, for
    changes, `{"old": ..., "new": ...}`."""

    KEY_CREATED = "key_created"
    KEY_REVOKED = "key_revoked"
    SHARE_LINK_CREATED = "share_link_created"
    SHARE_LINK_REVOKED = "share_link_revoked"
    NOTE_CREATED = "note_created"
    NOTE_RESOLVED = "note_resolved"
    NOTE_EDITED = "note_edited"
    NOTE_DELETED = "note_deleted"
    MEMBER_INVITED = "member_invited"
    INVITE_REVOKED = "invite_revoked"
    MEMBER_JOINED = "member_joined"
    MEMBER_ROLE_CHANGED = "member_role_changed"
    MEMBER_REMOVED = "member_removed"
    MEMBER_LEFT = "member_left"
    PROJECT_CREATED = "project_created"
    PROJECT_CHANGED = "project_changed"
    PROJECT_DELETED = "project_deleted"
    RUN_DELETED = "run_deleted"
    RUN_LABELED = "run_labeled"
    RUNS_EXPIRED = "runs_expired"
    TEAM_CREATED = "team_created"
    # Scores (issue 36)
    SCORE_CONFIG_CREATED = "score_config_created"
    SCORE_CONFIG_CHANGED = "score_config_changed"
    SCORE_CREATED = "score_created"
    SCORE_EDITED = "score_edited"
    SCORE_DELETED = "score_deleted"
    QUEUE_CREATED = "queue_created"
    QUEUE_CHANGED = "queue_changed"
    QUEUE_DELETED = "queue_deleted"
    JUDGE_CREATED = "judge_created"
    JUDGE_CHANGED = "judge_changed"
    JUDGE_DELETED = "judge_deleted"
    JUDGE_RUN_STARTED = "judge_run_started"
    JUDGE_RUN_CANCELLED = "judge_run_cancelled"

    EVENT_TYPES: dict[str, str] = {
        KEY_CREATED: "API key created",
        KEY_REVOKED: "API key revoked",
        SHARE_LINK_CREATED: "share link created",
        SHARE_LINK_REVOKED: "share link revoked",
        NOTE_CREATED: "note created",
        NOTE_RESOLVED: "note resolved",
        NOTE_EDITED: "note edited",
        NOTE_DELETED: "note deleted",
        MEMBER_INVITED: "member invited",
        INVITE_REVOKED: "invite revoked",
        MEMBER_JOINED: "member joined",
        MEMBER_ROLE_CHANGED: "member role changed",
        MEMBER_REMOVED: "member removed",
        MEMBER_LEFT: "member left",
        PROJECT_CREATED: "project created",
        PROJECT_CHANGED: "project changed",
        PROJECT_DELETED: "project deleted",
        RUN_DELETED: "run deleted",
        RUN_LABELED: "run name or tags changed",
        RUNS_EXPIRED: "runs deleted by retention",
        TEAM_CREATED: "team created",
        SCORE_CONFIG_CREATED: "score config created",
        SCORE_CONFIG_CHANGED: "score config changed",
        SCORE_CREATED: "scores written",
        SCORE_EDITED: "score edited",
        SCORE_DELETED: "score deleted",
        QUEUE_CREATED: "review queue created",
        QUEUE_CHANGED: "review queue changed",
        QUEUE_DELETED: "review queue deleted",
        JUDGE_CREATED: "judge created",
        JUDGE_CHANGED: "judge changed",
        JUDGE_DELETED: "judge deleted",
        JUDGE_RUN_STARTED: "judge run started",
        JUDGE_RUN_CANCELLED: "judge run cancelled",
    }

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="audit_logs")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_label = models.CharField(max_length=200, blank=True)  # "alice", "api key arc_abc…", "retention"
    event_type = models.CharField(max_length=40, choices=list(EVENT_TYPES.items()))
    target = models.CharField(max_length=300, blank=True)
    extra = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "-created_at"], name="auditlog_team_created_idx")]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_label} {self.event_type} {self.target}"

    @property
    def event_label(self) -> str:
        return self.EVENT_TYPES.get(self.event_type, self.event_type)
