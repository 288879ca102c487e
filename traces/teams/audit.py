"""The team audit log: `record(...)` writes one `AuditLog` row for a change (STYLE.md item 21).

Call it from the `do_*` action that makes the change, inside the same `transaction.atomic()` block, so
the change and its record commit (or roll back) together:

    with transaction.atomic():
        link = ShareLink.objects.create(...)
        audit.record(run.project.team, request.user, AuditLog.SHARE_LINK_CREATED, link, {"run_id": run.run_id})

`actor` may be a user, an `ApiKey` or the key's `ProjectKeyUser` (`request.user` of a key request), or a
plain string for the system ("retention"). Event types are the constants on `AuditLog`.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model

from traces.models import AuditLog, Team

# `extra` keys for changes (zulip's OLD_VALUE / NEW_VALUE).
OLD = "old"
NEW = "new"

# Re-exported so callers can write `audit.SHARE_LINK_CREATED`.
KEY_CREATED = AuditLog.KEY_CREATED
KEY_REVOKED = AuditLog.KEY_REVOKED
SHARE_LINK_CREATED = AuditLog.SHARE_LINK_CREATED
SHARE_LINK_REVOKED = AuditLog.SHARE_LINK_REVOKED
NOTE_CREATED = AuditLog.NOTE_CREATED
NOTE_RESOLVED = AuditLog.NOTE_RESOLVED
NOTE_EDITED = AuditLog.NOTE_EDITED
NOTE_DELETED = AuditLog.NOTE_DELETED
MEMBER_INVITED = AuditLog.MEMBER_INVITED
INVITE_REVOKED = AuditLog.INVITE_REVOKED
MEMBER_JOINED = AuditLog.MEMBER_JOINED
MEMBER_ROLE_CHANGED = AuditLog.MEMBER_ROLE_CHANGED
MEMBER_REMOVED = AuditLog.MEMBER_REMOVED
MEMBER_LEFT = AuditLog.MEMBER_LEFT
PROJECT_CREATED = AuditLog.PROJECT_CREATED
PROJECT_CHANGED = AuditLog.PROJECT_CHANGED
PROJECT_DELETED = AuditLog.PROJECT_DELETED
RUN_DELETED = AuditLog.RUN_DELETED
RUN_LABELED = AuditLog.RUN_LABELED
RUNS_EXPIRED = AuditLog.RUNS_EXPIRED
TEAM_CREATED = AuditLog.TEAM_CREATED


def actor_fields(actor: Any) -> tuple[Any, str]:
    """(user or None, label) for an actor: a user, an ApiKey, a key's request user, a string or None."""
    from traces.models import ApiKey

    if actor is None:
        return None, "system"
    if isinstance(actor, str):
        return None, actor[:200]
    key = getattr(actor, "key", None)  # traces.core.authentication.ProjectKeyUser
    api_key = actor if isinstance(actor, ApiKey) else key if isinstance(key, ApiKey) else None
    if api_key is not None:
        return None, f"API key {api_key.prefix}… ({api_key.name or 'unnamed'})"[:200]
    if getattr(actor, "is_authenticated", False) and getattr(actor, "pk", None) is not None:
        return actor, str(actor.get_username())[:200]
    return None, str(actor)[:200]


def describe(target: Any) -> str:
    """A short text naming the changed thing: a string as is, a model as `<model> <pk>: <str>`."""
    if target is None:
        return ""
    if isinstance(target, Model):
        return f"{target._meta.model_name} {target.pk}: {target}"[:300]
    return str(target)[:300]


def record(
    team: Team,
    actor: Any,
    event_type: str,
    target: Any = None,
    extra: dict[str, Any] | None = None,
) -> AuditLog:
    """Write one audit row. Call inside the transaction of the change it records.

    `extra` must be JSON-serialisable; for a change put the values under `audit.OLD` and `audit.NEW`."""
    if event_type not in AuditLog.EVENT_TYPES:
        raise ValueError(f"unknown audit event type {event_type!r}")
    user, label = actor_fields(actor)
    return AuditLog.objects.create(
        team=team,
        actor=user,
        actor_label=label,
        event_type=event_type,
        target=describe(target),
        extra=extra or {},
    )
