"""Who may read or write what: the one answer for every page, API view, share link, compare, live
poll and note (DESIGN.md §8).

The caller is a request, a page's `HttpRequest` or the API's `Request` alike (or a user, for the
services that act for one):
- an **API key** reads and writes its own project only (its scope, read or ingest, is checked by the
  API's base view before any of this);
- a **signed-in user** reaches the projects of the teams where their role allows the action
  (`Action`, `roles_allowed`: viewer < member < admin < owner);
- a **share link's holder** reads the one run of a usable link (`shared_run`).

Anything outside the caller's teams is a 404, never a 403, so an outsider cannot learn that it
exists. Inside them, a role too weak for a write is a 403 that says why (`require`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import QuerySet
from django.http import Http404

from traces.collab import sharing
from traces.core import sqlread
from traces.core.authentication import key_of
from traces.models import (
    Action,
    Conversation,
    Membership,
    Project,
    Run,
    ShareLink,
    membership_of,
    projects_for_user,
    roles_allowed,
)

__all__ = [
    "Action",
    "can",
    "find_conversation",
    "find_run",
    "get_run",
    "projects",
    "require",
    "run_roles",
    "runs",
    "shared_run",
]


def _user(caller: Any) -> Any:
    """The user of a request, or `caller` itself when it is a user (services that take one)."""
    return caller.user if hasattr(caller, "user") else caller


def projects(caller: Any, action: str = Action.READ) -> QuerySet[Project]:
    """The projects where `caller` may do `action`: an API key's own project, or the projects of the
    user's teams where their role allows it (none for an anonymous caller)."""
    key = key_of(caller)
    if key is not None:
        return Project.objects.filter(pk=key.project_id)
    return projects_for_user(_user(caller), action)


def allowed_in_any(memberships: Iterable[Any], readable: Iterable[Project], action: str) -> bool:
    """Whether a session caller may do `action` in any of `readable` (their projects, `projects(request)`,
    already read) by their `memberships` (already read): `projects(request, action).exists()` without a
    query, by the same rule (`Membership.can`)."""
    teams = {m.team_id for m in memberships if m.can(action)}
    return any(p.team_id in teams for p in readable)


def runs(caller: Any, action: str = Action.READ) -> QuerySet[Run]:
    """The runs of `projects(caller, action)`."""
    return Run.objects.filter(project__in=projects(caller, action))


_run_project = Run._meta.get_field("project")


def find_run(caller: Any, project_id: int, run_id: str, action: str = Action.READ) -> Run | None:
    """The run `run_id` of project `project_id` (a run is named by both, DESIGN.md §9) with its
    project and team loaded, if `caller` may do `action` there; else None.

    An API key's project was loaded with the key: its run is read alone, by SQL written once
    (`traces.core.sqlread`), and given that project."""
    key = key_of(caller)
    if key is not None:
        if int(project_id) != key.project_id:
            return None
        found = sqlread.fetch(Run, "WHERE project_id = %s AND run_id = %s", [key.project_id, run_id])
        if not found:
            return None
        _run_project.set_cached_value(found[0], key.project)
        return found[0]
    user = _user(caller)
    if user is None or not user.is_authenticated or getattr(user, "pk", None) is None:
        return None
    if not 0 < int(project_id) < 1 << 63:  # no such row (the ORM's answer to an id past 64 bits)
        return None
    # `runs(caller, action).filter(project_id=…, run_id=…).select_related("project__team")` in SQL
    # written once per action (`traces.core.sqlread`): every run page, fragment and poll opens its run
    # here, and building that query cost the ORM more than running it.
    roles = roles_allowed(action)
    found = sqlread.fetch_with_team(
        Run, _run_where(len(roles)), [int(project_id), str(run_id), user.pk, *roles]
    )
    return found[0] if found else None


@functools.cache
def _run_where(n_roles: int) -> str:
    """The run of (project id, run id), if a membership of (user id, one of `n_roles` roles) in its
    project's team allows it."""
    qn = connection.ops.quote_name
    run_t, project_t, member_t = (qn(m._meta.db_table) for m in (Run, Project, Membership))
    roles = ", ".join(["%s"] * n_roles)
    return (
        f"WHERE {run_t}.{qn('project_id')} = %s AND {run_t}.{qn('run_id')} = %s AND EXISTS ("
        f"SELECT 1 FROM {member_t} WHERE {member_t}.{qn('team_id')} = {project_t}.{qn('team_id')} "
        f"AND {member_t}.{qn('user_id')} = %s AND {member_t}.{qn('role')} IN ({roles}))"
    )


def find_conversation(caller: Any, project_id: int, run_id: str) -> Conversation | None:
    """The conversation that writes run `run_id` of project `project_id`, with its project and team
    loaded, if `caller` may read that project; else None. A conversation's run exists from the moment
    the conversation is created, before its first event: pages and compare answer with it then (an
    unknown run is still a 404)."""
    return (
        Conversation.objects.filter(project_id=project_id, run_id=run_id, project__in=projects(caller))
        .select_related("project__team")
        .first()
    )


def get_run(caller: Any, project_id: int, run_id: str) -> Run:
    """`find_run` for reading, or 404: pages, API views, notes and compare all open a run here."""
    run = find_run(caller, project_id, run_id)
    if run is None:
        raise Http404("No such run.")
    return run


def run_roles(action: str = Action.READ) -> list[str]:
    """The roles that may do `action`, for SQL written by hand (the live poll's one query)."""
    return list(roles_allowed(action))


def can(caller: Any, team_id: int, action: str) -> bool:
    """Whether `caller` may do `action` in team `team_id`. An API key may do what its project allows
    keys to do (checked by the API view), so here only its team matters."""
    key = key_of(caller)
    if key is not None:
        return bool(key.project.team_id == team_id)
    membership = membership_of(_user(caller), team_id)
    return membership is not None and membership.can(action)


def require(caller: Any, team_id: int, action: str) -> Membership | None:
    """Refuse (403, saying why) a caller inside the team whose role does not allow `action`. Callers
    outside the team never get here: they were answered 404 when the run or project was looked up.
    Returns the user's membership (None for an API key)."""
    if key_of(caller) is not None:
        if not can(caller, team_id, action):
            raise Http404("No such project.")
        return None
    membership = membership_of(_user(caller), team_id)
    if membership is None:
        raise Http404("No such project.")
    if not membership.can(action):
        raise PermissionDenied(f"Your role ({membership.role}) cannot do this.")
    return membership


def shared_run(token: str) -> tuple[ShareLink, Run]:
    """The link and run a share token opens (404 for an unknown, revoked or expired token), the run
    bound to the link so that its pages link to shared addresses only."""
    link = sharing.link_for_token(token)
    return link, sharing.bind_run_to_share(link.run, token)
