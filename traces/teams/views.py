"""Team pages: the team switcher, members and invites, projects and their API keys, the audit log,
joining through an invite link, and deleting a run.

Access is one rule (`Membership.can`, traces/models/teams.py) applied in one place, `_membership`: a person
outside the team gets 404 for anything of it (never a 403 that would confirm it exists); a member
whose role does not allow the action gets 403. The changes themselves are `traces.teams.actions.do_*`
functions, which write their audit rows in the same transaction.
"""

from __future__ import annotations

from datetime import datetime, time
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_date
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from traces.core.authentication import SignedInRequest
from traces.models import (
    Action,
    ApiKey,
    AuditLog,
    Invite,
    Membership,
    Project,
    Run,
)
from traces.teams import actions as teams

SESSION_TEAM = "team_id"
# A secret (an invite link, an API key) is shown once: the POST puts it in the session and the next GET
# of the page takes it out again, so a reload does not show it twice and it never sits in a URL.
SESSION_SECRET = "shown_once"
AUDIT_PER_PAGE = 100


# --------------------------------------------------------------------------------------------------
# Access


def _membership(request: HttpRequest, team_id: int, action: str = Action.READ) -> Membership:
    """The caller's membership of team `team_id`: 404 when they are not in it, 403 when their role
    does not allow `action`."""
    membership = (
        Membership.objects.filter(team_id=team_id, user=request.user).select_related("team").first()
        if request.user.is_authenticated
        else None
    )
    if membership is None:
        raise Http404("No such team.")
    if not membership.can(action):
        raise PermissionDenied(f"Your role ({membership.role}) cannot do this.")
    return membership


def _project(membership: Membership, project_id: int) -> Project:
    project = Project.objects.filter(pk=project_id, team=membership.team).select_related("team").first()
    if project is None:
        raise Http404("No such project.")
    return project


def memberships_of(request: HttpRequest) -> list[Membership]:
    """The caller's memberships with their teams, read once per request (the header's switcher, the
    runs list's scope and permission checks in templates all ask)."""
    cached: list[Membership] | None = getattr(request, "_memberships", None)
    if cached is None:
        cached = (
            list(Membership.objects.filter(user=request.user).select_related("team").order_by("team__name"))
            if request.user.is_authenticated
            else []
        )
        request._memberships = cached  # type: ignore[attr-defined]
    return cached


def current_team_id(request: HttpRequest) -> int | None:
    """The team chosen in the header's switcher, if the caller still belongs to it; None = all teams."""
    team_id = request.session.get(SESSION_TEAM)
    if not isinstance(team_id, int) or not request.user.is_authenticated:
        return None
    if not any(m.team_id == team_id for m in memberships_of(request)):
        request.session.pop(SESSION_TEAM, None)
        return None
    return team_id


def _shown_once(request: HttpRequest, kind: str, **values: Any) -> None:
    request.session[SESSION_SECRET] = {"kind": kind, **values}


def _take_shown_once(request: HttpRequest, kind: str) -> dict[str, Any] | None:
    secret = request.session.get(SESSION_SECRET)
    if isinstance(secret, dict) and secret.get("kind") == kind:
        del request.session[SESSION_SECRET]
        return secret
    return None


def _back(request: HttpRequest, default: str) -> HttpResponseRedirect:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return HttpResponseRedirect(target)
    return HttpResponseRedirect(default)


def _rule_error(request: HttpRequest, exc: teams.TeamRuleError) -> None:
    messages.error(request, str(exc))


# --------------------------------------------------------------------------------------------------
# Teams and the switcher


@login_required
@require_http_methods(["GET", "POST"])
def team_list(request: SignedInRequest) -> HttpResponse:
    """The caller's teams, and a form to start a new one (its creator is its owner)."""
    if request.method == "POST":
        try:
            team = teams.do_create_team(teams.check_team_name(request.POST.get("name", "")), request.user)
        except teams.TeamRuleError as exc:
            _rule_error(request, exc)
            return redirect("teams:list")
        request.session[SESSION_TEAM] = team.pk
        messages.success(request, f"Team “{team.name}” created. Add a project to send traces to it.")
        return redirect("teams:projects", team_id=team.pk)
    memberships = Membership.objects.filter(user=request.user).select_related("team").order_by("team__name")
    return render(request, "traces/team_list.html", {"memberships": memberships})


@login_required
@require_POST
def team_switch(request: HttpRequest) -> HttpResponse:
    """Choose the current team (`team` = a team id, or `all`); the runs and uploads lists follow it."""
    value = request.POST.get("team", "all")
    if value == "all":
        request.session.pop(SESSION_TEAM, None)
    else:
        try:
            team_id = int(value)
        except ValueError:
            raise Http404("No such team.") from None
        _membership(request, team_id)
        request.session[SESSION_TEAM] = team_id
    return _back(request, reverse("traces:runs"))


@login_required
@require_POST
def team_delete(request: HttpRequest, team_id: int) -> HttpResponse:
    membership = _membership(request, team_id, Action.DELETE_TEAM)
    team = membership.team
    if request.POST.get("confirm", "") != team.name:
        messages.error(request, "Type the team's name to delete it.")
        return redirect("teams:members", team_id=team.pk)
    name = team.name
    teams.do_delete_team(team)
    request.session.pop(SESSION_TEAM, None)
    messages.success(request, f"Team “{name}” and all its projects and runs were deleted.")
    return redirect("teams:list")


# --------------------------------------------------------------------------------------------------
# Members and invites


@login_required
@require_GET
def team_members(request: HttpRequest, team_id: int) -> HttpResponse:
    membership = _membership(request, team_id)
    team = membership.team
    members = list(Membership.objects.filter(team=team).select_related("user").order_by("user__username"))
    can_manage = membership.can(Action.MANAGE_MEMBERS)
    invites = (
        list(Invite.objects.filter(team=team).select_related("created_by", "accepted_by")[:50])
        if can_manage
        else []
    )
    roles = [r for r in Membership.Role.values if membership.role == Membership.Role.OWNER or r != "owner"]
    # Who the caller may change or remove: not themselves (they leave instead), and owners only by owners.
    rows = [
        (m, can_manage and m.pk != membership.pk and (m.role != "owner" or membership.role == "owner"))
        for m in members
    ]
    ctx = {
        "team": team,
        "me": membership,
        "tab": "members",
        "rows": rows,
        # The last owner cannot leave: the page says so instead of offering a button that fails.
        "last_owner": membership.role == "owner" and sum(m.role == "owner" for m in members) == 1,
        "invites": invites,
        "can_manage": can_manage,
        "roles": roles,
        "all_roles": Membership.Role.values,
        "new_invite": _take_shown_once(request, "invite"),
        "invite_days": settings.ARCANA_INVITE_DAYS,
    }
    return render(request, "traces/team_members.html", ctx)


def _target(membership: Membership, membership_id: int) -> Membership:
    target = (
        Membership.objects.filter(pk=membership_id, team=membership.team)
        .select_related("user", "team")
        .first()
    )
    if target is None:
        raise Http404("No such member.")
    return target


@login_required
@require_POST
def member_role(request: HttpRequest, team_id: int, membership_id: int) -> HttpResponse:
    membership = _membership(request, team_id, Action.MANAGE_MEMBERS)
    target = _target(membership, membership_id)
    new_role = request.POST.get("role", "")
    try:
        teams.check_role_change(membership, target, new_role)
        teams.do_change_role(target, request.user, new_role)
    except teams.TeamRuleError as exc:
        _rule_error(request, exc)
    else:
        messages.success(request, f"{target.user.get_username()} is now {new_role}.")
    return redirect("teams:members", team_id=team_id)


@login_required
@require_POST
def member_remove(request: HttpRequest, team_id: int, membership_id: int) -> HttpResponse:
    """Remove a member, or leave (anyone may remove themselves, except the last owner)."""
    membership = _membership(request, team_id)
    target = _target(membership, membership_id)
    leaving = target.pk == membership.pk
    if not leaving and not membership.can(Action.MANAGE_MEMBERS):
        raise PermissionDenied("Only admins and owners remove members.")
    try:
        teams.check_removal(membership, target)
        teams.do_remove_member(target, request.user)
    except teams.TeamRuleError as exc:
        _rule_error(request, exc)
        return redirect("teams:members", team_id=team_id)
    if leaving:
        request.session.pop(SESSION_TEAM, None)
        messages.success(request, f"You left “{membership.team.name}”.")
        return redirect("teams:list")
    messages.success(request, f"{target.user.get_username()} was removed from the team.")
    return redirect("teams:members", team_id=team_id)


@login_required
@require_POST
def invite_create(request: HttpRequest, team_id: int) -> HttpResponse:
    membership = _membership(request, team_id, Action.MANAGE_MEMBERS)
    try:
        role = teams.check_invite_role(membership, request.POST.get("role", Membership.Role.MEMBER))
        invite, raw = teams.do_create_invite(
            membership.team, request.user, role, request.POST.get("note", "").strip()
        )
    except teams.TeamRuleError as exc:
        _rule_error(request, exc)
        return redirect("teams:members", team_id=team_id)
    url = request.build_absolute_uri(reverse("teams:invite", kwargs={"token": raw}))
    _shown_once(
        request, "invite", url=url, role=invite.role, expires=invite.expires_at.isoformat(), note=invite.note
    )
    return redirect("teams:members", team_id=team_id)


@login_required
@require_POST
def invite_revoke(request: HttpRequest, team_id: int, invite_id: int) -> HttpResponse:
    membership = _membership(request, team_id, Action.MANAGE_MEMBERS)
    invite = Invite.objects.filter(pk=invite_id, team=membership.team).select_related("team").first()
    if invite is None:
        raise Http404("No such invite.")
    teams.do_revoke_invite(invite, request.user)
    messages.success(request, "The invite link no longer works.")
    return redirect("teams:members", team_id=team_id)


@require_http_methods(["GET", "POST"])
def invite_accept(request: HttpRequest, token: str) -> HttpResponse:
    """The invite link. Logged in: a button to join. Anonymous: a sign-up form (user name and
    password) that creates the account in the team, or log in first and come back."""
    invite = teams.find_invite(token)
    if invite is None or not invite.is_usable:
        # Unknown, used, revoked and expired links look alike: a link says nothing about a team
        # unless it can still be used.
        return render(request, "traces/invite_invalid.html", status=404)
    ctx: dict[str, Any] = {"invite": invite, "team": invite.team, "error": None}
    if request.user.is_authenticated:
        already = Membership.objects.filter(team=invite.team, user=request.user).first()
        ctx["already"] = already
        if request.method == "POST":
            try:
                teams.do_accept_invite(invite, request.user)
            except teams.TeamRuleError as exc:
                ctx["error"] = str(exc)
                return render(request, "traces/invite.html", ctx, status=409)
            request.session[SESSION_TEAM] = invite.team.pk
            messages.success(request, f"You joined “{invite.team.name}”.")
            return redirect("traces:runs")
        return render(request, "traces/invite.html", ctx)
    ctx["username"] = ""
    if request.method == "POST":
        username = request.POST.get("username", "")
        ctx["username"] = username
        try:
            username, password = teams.check_signup(
                username, request.POST.get("password", ""), request.POST.get("password2", "")
            )
            user = teams.do_signup_with_invite(invite, username, password)
        except teams.TeamRuleError as exc:
            ctx["error"] = str(exc)
            return render(request, "traces/invite.html", ctx, status=400)
        # The configured backend (the throttled one): a new account has no failed sign-ins to check.
        login(request, user, backend=settings.AUTHENTICATION_BACKENDS[0])
        request.session[SESSION_TEAM] = invite.team.pk
        messages.success(request, f"Welcome, {user.get_username()}. You joined “{invite.team.name}”.")
        return redirect("traces:runs")
    return render(request, "traces/invite.html", ctx)


# --------------------------------------------------------------------------------------------------
# Projects and API keys


@login_required
@require_http_methods(["GET", "POST"])
def team_projects(request: HttpRequest, team_id: int) -> HttpResponse:
    membership = _membership(request, team_id)
    team = membership.team
    if request.method == "POST":
        _membership(request, team_id, Action.MANAGE_PROJECTS)
        try:
            slug, name = teams.check_project(team, request.POST.get("slug", ""), request.POST.get("name", ""))
            project = teams.do_create_project(team, request.user, slug, name)
        except teams.TeamRuleError as exc:
            _rule_error(request, exc)
            return redirect("teams:projects", team_id=team_id)
        messages.success(
            request, f"Project “{project.slug}” created. Create an API key to send traces to it."
        )
        return redirect("teams:project", team_id=team_id, project_id=project.pk)
    projects = list(Project.objects.filter(team=team).order_by("slug"))
    counts = dict(
        Run.objects.filter(project__in=projects)
        .values_list("project_id")
        .order_by()
        .annotate(n=Count("id"))
        .values_list("project_id", "n")
    )
    ctx = {
        "team": team,
        "me": membership,
        "tab": "projects",
        "projects": [(p, counts.get(p.pk, 0)) for p in projects],
        "can_manage": membership.can(Action.MANAGE_PROJECTS),
    }
    return render(request, "traces/team_projects.html", ctx)


@login_required
@require_http_methods(["GET", "POST"])
def project_settings(request: HttpRequest, team_id: int, project_id: int) -> HttpResponse:
    """A project's name, slug and retention, and its API keys (admins manage both)."""
    membership = _membership(request, team_id, Action.MANAGE_PROJECTS)
    project = _project(membership, project_id)
    if request.method == "POST":
        try:
            slug, name = teams.check_project(
                project.team, request.POST.get("slug", ""), request.POST.get("name", ""), project=project
            )
            retention = teams.check_retention(request.POST.get("retention_days"))
            teams.do_update_project(project, request.user, slug=slug, name=name, retention_days=retention)
        except teams.TeamRuleError as exc:
            _rule_error(request, exc)
        else:
            messages.success(request, "Project saved.")
        return redirect("teams:project", team_id=team_id, project_id=project.pk)
    keys = list(ApiKey.objects.filter(project=project).select_related("created_by").order_by("-created_at"))
    new_key = _take_shown_once(request, "key")
    base = request.build_absolute_uri("/").rstrip("/")
    ctx = {
        "team": membership.team,
        "me": membership,
        "tab": "projects",
        "project": project,
        "keys": keys,
        "scopes": ApiKey.Scope.choices,
        "new_key": new_key if new_key and new_key.get("project") == project.pk else None,
        "server": base,
        "ingest_url": base + reverse("api-ingest"),
        "max_retention": teams.MAX_RETENTION_DAYS,
    }
    return render(request, "traces/project_settings.html", ctx)


@login_required
@require_POST
def project_delete(request: HttpRequest, team_id: int, project_id: int) -> HttpResponse:
    membership = _membership(request, team_id, Action.MANAGE_PROJECTS)
    project = _project(membership, project_id)
    if request.POST.get("confirm", "") != project.slug:
        messages.error(request, "Type the project's slug to delete it.")
        return redirect("teams:project", team_id=team_id, project_id=project.pk)
    slug = project.slug
    teams.do_delete_project(project, request.user)
    messages.success(request, f"Project “{slug}” and its runs were deleted.")
    return redirect("teams:projects", team_id=team_id)


@login_required
@require_POST
def key_create(request: HttpRequest, team_id: int, project_id: int) -> HttpResponse:
    membership = _membership(request, team_id, Action.MANAGE_KEYS)
    project = _project(membership, project_id)
    try:
        key, raw = teams.do_create_api_key(
            project, request.user, request.POST.get("name", "").strip(), request.POST.get("scope", "")
        )
    except teams.TeamRuleError as exc:
        _rule_error(request, exc)
    else:
        _shown_once(request, "key", project=project.pk, raw=raw, name=key.name, scope=key.get_scope_display())
    return redirect("teams:project", team_id=team_id, project_id=project.pk)


@login_required
@require_POST
def key_revoke(request: HttpRequest, team_id: int, project_id: int, key_id: int) -> HttpResponse:
    membership = _membership(request, team_id, Action.MANAGE_KEYS)
    project = _project(membership, project_id)
    key = ApiKey.objects.filter(pk=key_id, project=project).select_related("project__team").first()
    if key is None:
        raise Http404("No such key.")
    teams.do_revoke_api_key(key, request.user)
    messages.success(request, f"Key {key.prefix}… revoked: its next request is refused.")
    return redirect("teams:project", team_id=team_id, project_id=project.pk)


# --------------------------------------------------------------------------------------------------
# Audit log


def _day(value: str | None, end: bool = False) -> datetime | None:
    day = parse_date(value or "") if value else None
    if day is None:
        return None
    return timezone.make_aware(datetime.combine(day, time.max if end else time.min))


@login_required
@require_GET
def team_audit(request: HttpRequest, team_id: int) -> HttpResponse:
    """The team's audit log, newest first, filterable by event type, actor and a date range."""
    membership = _membership(request, team_id, Action.VIEW_AUDIT)
    team = membership.team
    qs = AuditLog.objects.filter(team=team).select_related("actor")
    event = request.GET.get("event", "")
    actor = request.GET.get("actor", "")
    since, until = request.GET.get("since", ""), request.GET.get("until", "")
    if event in AuditLog.EVENT_TYPES:
        qs = qs.filter(event_type=event)
    if actor:
        qs = qs.filter(actor_label=actor)
    if start := _day(since):
        qs = qs.filter(created_at__gte=start)
    if stop := _day(until, end=True):
        qs = qs.filter(created_at__lte=stop)
    page = Paginator(qs, AUDIT_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    actors = list(
        AuditLog.objects.filter(team=team)
        .order_by("actor_label")
        .values_list("actor_label", flat=True)
        .distinct()[:200]
    )
    ctx = {
        "team": team,
        "me": membership,
        "tab": "audit",
        "page": page,
        "rows": list(page.object_list),
        "event_types": list(AuditLog.EVENT_TYPES.items()),
        "actors": actors,
        "f": {"event": event, "actor": actor, "since": since, "until": until},
        "query": query.urlencode(),
    }
    return render(request, "traces/team_audit.html", ctx)


# --------------------------------------------------------------------------------------------------
# Deleting a run


@login_required
@require_POST
def run_delete(request: SignedInRequest, project_id: int, run_id: str) -> HttpResponse:
    """Delete a run (admins and owners). Outsiders get 404; members and viewers of the team get 403."""
    run = (
        Run.objects.filter(
            project_id=project_id,
            run_id=run_id,
            project__team__memberships__user=request.user,
        )
        .select_related("project__team")
        .first()
    )
    if run is None:
        raise Http404("No such run.")
    _membership(request, run.project.team_id, Action.DELETE_RUNS)
    teams.do_delete_run(run, request.user)
    messages.success(request, f"Run {run.run_id} and all its events were deleted.")
    return redirect("traces:runs")
