"""Share links and review notes in the browser.

* Shared pages (`/s/<token>…`): the run overview, its turn pages and their polled fragments, for anyone
  holding a usable link. Same context builders and templates as the team's pages; `traces.collab.sharing`
  binds the run's addresses to the link and redacts the context (the one place that does).
* Team pages: create / revoke share links on the run page, write / resolve / edit / delete notes on the
  run and turn pages, and the team's Notes list.

Access: a run outside the caller's teams is 404 (never 403); a viewer of the team may read but gets
403 on writes; members and above may share and write notes (`Action.SHARE`, `Action.NOTE`); a note is
edited by its author and deleted by its author or the team's admins (`Note.can_edit`, `can_delete`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from traces.collab import notes as notes_service
from traces.collab import sharing
from traces.core import access
from traces.core.authentication import SignedInRequest
from traces.dashboard import band, prices
from traces.dashboard import pages as dashboard_pages
from traces.models import Action, Membership, Note, Run, ShareLink, membership_of
from traces.runs import context, live

NOTES_PER_PAGE = 50


# ---------------------------------------------------------------------------------------------------
# Shared pages


def _shared(response: HttpResponse) -> HttpResponse:
    # The token is in the URL: keep it out of caches, search engines and Referer headers.
    response["Cache-Control"] = "private, no-store"
    response["X-Robots-Tag"] = "noindex, nofollow"
    response["Referrer-Policy"] = "no-referrer"
    return response


@require_GET
def shared_run(request: HttpRequest, token: str) -> HttpResponse:
    link, run = access.shared_run(token)
    agent = context.agent_for(request, run)
    ctx = sharing.redact(context.run_ctx(request, run, agent), hide_content=link.hide_content)
    # Cost and what filled the context, as on the team's page: numbers and model names, no trace text.
    ctx["cost"] = prices.run_cost(run)
    return _shared(render(request, "traces/run.html", ctx))


@require_GET
def shared_run_band(request: HttpRequest, token: str) -> HttpResponse:
    """What filled the context, the fragment the shared overview loads: numbers and part names only."""
    _link, run = access.shared_run(token)
    return _shared(HttpResponse(band.fragment_html(run, context.agent_for(request, run))))


@require_GET
def shared_run_live(request: HttpRequest, token: str) -> HttpResponse:
    link, run = access.shared_run(token)
    agent = context.agent_for(request, run)
    # Conditional polling, as on the team's page (traces/runs/live.py): 304 until the run changes.
    tag = live.run_tag(run, "shared-run", agent, link.hide_content)
    if unchanged := live.not_modified(request, tag):
        return _shared(unchanged)
    ctx = sharing.redact(context.live_run_ctx(request, run, agent), hide_content=link.hide_content)
    return _shared(live.tagged(render(request, "traces/_run_live.html", ctx), tag))


@require_GET
def shared_run_fidelity(request: HttpRequest, token: str) -> HttpResponse:
    link, run = access.shared_run(token)
    agent = context.agent_for(request, run)
    ctx = sharing.redact(context.fidelity_ctx(request, run, agent), hide_content=link.hide_content)
    return _shared(render(request, "traces/_fidelity_map.html", ctx))


def _shared_turn_ctx(request: HttpRequest, token: str, number: int) -> dict[str, Any]:
    link, run = access.shared_run(token)
    agent = context.agent_for(request, run)
    ctx = context.turn_ctx(request, run, agent, number)
    dashboard_pages.add_turn_costs(ctx)  # the turn's and each step's cost, as on the team's page
    return sharing.redact(ctx, hide_content=link.hide_content)


@require_GET
def shared_turn(request: HttpRequest, token: str, number: int) -> HttpResponse:
    return _shared(render(request, "traces/turn.html", _shared_turn_ctx(request, token, number)))


@require_GET
def shared_turn_live(request: HttpRequest, token: str, number: int) -> HttpResponse:
    link, run = access.shared_run(token)
    tag = live.run_tag(run, "shared-turn", context.agent_for(request, run), number, link.hide_content)
    if unchanged := live.not_modified(request, tag):
        return _shared(unchanged)
    ctx = {**_shared_turn_ctx(request, token, number), "live_parts": True}
    return _shared(live.tagged(render(request, "traces/_turn_steps.html", ctx), tag))


# ---------------------------------------------------------------------------------------------------
# Managing share links (run page)


def _run_for_action(request: HttpRequest, project_id: int, run_id: str, action: str) -> Run:
    """The run if the caller may read it (else 404) and may do `action` in its team (else 403)."""
    run = access.get_run(request, project_id, run_id)
    access.require(request, run.project.team_id, action)
    return run


def _back(request: HttpRequest, fallback: str) -> HttpResponseRedirect:
    """Back to the page the form was on (`next`, same host only), else `fallback`."""
    target = request.POST.get("next") or ""
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = fallback
    return HttpResponseRedirect(target)


@login_required
@require_POST
def share_link_create(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    run = _run_for_action(request, project_id, run_id, Action.SHARE)
    days = request.POST.get("expires_in_days") or ""
    if days and days not in {value for value, _label in sharing.EXPIRY_CHOICES}:
        messages.error(request, "Choose an expiry from the list.")
        return HttpResponseRedirect(run.get_absolute_url() + "#share")
    expires_at = timezone.now() + timedelta(days=int(days)) if days else None
    hide = request.POST.get("hide_content") == "1"
    _link, raw = sharing.do_create_share_link(run, request.user, hide_content=hide, expires_at=expires_at)
    # Shown once, on the next render of the run page; only the hash is kept.
    request.session[sharing.new_url_session_key(run)] = request.build_absolute_uri(sharing.share_url(raw))
    return HttpResponseRedirect(run.get_absolute_url() + "#share")


@login_required
@require_POST
def share_link_revoke(request: HttpRequest, project_id: int, run_id: str, link_id: int) -> HttpResponse:
    run = _run_for_action(request, project_id, run_id, Action.SHARE)
    link = get_object_or_404(ShareLink, pk=link_id, run=run)
    if sharing.do_revoke_share_link(link, request.user):
        messages.success(request, f"Share link {link.prefix}… revoked: it now opens nothing.")
    return HttpResponseRedirect(run.get_absolute_url() + "#share")


# ---------------------------------------------------------------------------------------------------
# Notes


def _note_anchor(run: Run, note: Note) -> str:
    """The page (and place) a note is shown on."""
    query = f"?{urlencode({'agent': note.agent})}" if note.agent else ""
    if note.turn_number is None:
        return run.get_absolute_url() + query + "#notes"
    anchor = f"#step-{note.step_number}-notes" if note.step_number else "#turn-notes"
    return run.turn_url(note.turn_number) + query + anchor


@login_required
@require_POST
def note_create(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    run = _run_for_action(request, project_id, run_id, Action.NOTE)
    try:
        data = notes_service.check_note(run, request.POST)
    except notes_service.NoteError as e:
        messages.error(request, f"Note not saved: {e.field} {e.message}.")
        # Back to the page the form was on: the turn's when it named an existing one.
        turn = request.POST.get("turn") or ""
        if turn.isdigit() and run.turn_set.filter(number=int(turn)).exists():
            return HttpResponseRedirect(run.turn_url(int(turn)))
        return HttpResponseRedirect(run.get_absolute_url())
    note = notes_service.do_create_note(run, request.user, data)
    messages.success(request, f"Note added on {note.target_label}.")
    return HttpResponseRedirect(_note_anchor(run, note))


def _readable_note(request: HttpRequest, note_id: int) -> Note:
    """The note if the caller may read it (a run of one of their teams), else 404."""
    note = (
        notes_service.notes_for_user(request.user)
        .select_related("run__project__team", "author")
        .filter(pk=note_id)
        .first()
    )
    if note is None:
        raise Http404("No such note.")
    return note


@login_required
@require_POST
def note_resolve(request: HttpRequest, note_id: int) -> HttpResponse:
    note = _readable_note(request, note_id)
    access.require(request, note.run.project.team_id, Action.NOTE)
    resolved = request.POST.get("resolved", "1") == "1"
    notes_service.do_set_resolved(note, request.user, resolved)
    return _back(request, _note_anchor(note.run, note))


@login_required
@require_POST
def note_edit(request: HttpRequest, note_id: int) -> HttpResponse:
    """Change a note's label and body: its author only (`Note.can_edit`); bad input leaves it as it
    was and says why on the page it came from."""
    note = _readable_note(request, note_id)
    if not note.can_edit(membership_of(request.user, note.run.project.team_id)):
        raise PermissionDenied("Only the note's author can edit it.")
    back = _back(request, _note_anchor(note.run, note).split("#")[0] + f"#note-{note.pk}")
    try:
        label, body = notes_service.check_note_text(request.POST, current=note)
    except notes_service.NoteError as e:
        messages.error(request, f"Note not changed: {e.field} {e.message}.")
        return back
    try:
        notes_service.do_edit_note(note, request.user, label, body)
    except Note.DoesNotExist:
        raise Http404("No such note.") from None
    return back


@login_required
@require_POST
def note_delete(request: HttpRequest, note_id: int) -> HttpResponse:
    """Delete a note: its author, or an admin or owner of the team (`Note.can_delete`)."""
    note = _readable_note(request, note_id)
    if not note.can_delete(membership_of(request.user, note.run.project.team_id)):
        raise PermissionDenied("Only the note's author or a team admin can delete it.")
    back = _back(request, _note_anchor(note.run, note))
    if notes_service.do_delete_note(note, request.user):
        messages.success(request, f"Note on {note.target_label} deleted.")
    return back


@login_required
@require_GET
def notes_page(request: SignedInRequest) -> HttpResponse:
    """The Notes list of the caller's teams, filtered by project, label and resolved state."""
    filters = notes_service.NoteFilters.from_query(request.GET)
    qs = (
        filters.apply(notes_service.notes_for_user(request.user))
        .select_related("run__project__team", "author", "resolved_by")
        .order_by("-created_at", "-id")
    )
    page = Paginator(qs, NOTES_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    writable = set(access.projects(request, Action.NOTE).values_list("team_id", flat=True))
    # Each note with the caller's membership of its team, for its Edit and Delete (Note.can_edit …).
    members = {m.team_id: m for m in Membership.objects.filter(user=request.user)}
    notes = list(page.object_list)
    ctx = {
        "page": page,
        "notes": notes,
        "rows": [(n, members.get(n.run.project.team_id)) for n in notes],
        "note_labels": Note.Label.choices,
        "filters": filters,
        "query": query.urlencode(),
        "projects": list(access.projects(request).select_related("team").order_by("team__name", "slug")),
        "labels": Note.Label.choices,
        "writable_teams": writable,
    }
    return render(request, "traces/notes.html", ctx)
