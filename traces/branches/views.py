"""The re-run pages: the turn page's form (its context, `rerun_form_ctx`), its post (checks, starts the
branch, redirects to the branch page) and the branch page, which polls until the re-run is done and
then opens the compare page of the original run and its branch."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from traces.branches import actions, forms
from traces.conversations.providers import available_providers
from traces.core import access
from traces.models import Action, Branch, Run


def rerun_form_ctx(run: Run, agent: str, turn: int, step: int) -> dict[str, Any]:
    """What the turn page draws for the re-run form of step `step` (`?rerun=<step>`), or why it cannot."""
    try:
        context = actions.step_context_of(run, turn, step, agent)
    except actions.RerunInputError as exc:
        return {"rerun_step": step, "rerun_problem": str(exc)}
    rows = [{"item": i, "choices": forms.choices_for(i)} for i in context.items]
    system = next((i.text for i in context.items if i.status == "system"), "")
    return {
        "rerun_step": step,
        "rerun_context": context,
        "rerun_rows": rows,
        "rerun_system": system,
        "rerun_providers": available_providers(),
        "rerun_url": reverse(
            "traces:rerun_step",
            kwargs={"project_id": run.project_id, "run_id": run.run_id, "turn": turn, "step": step},
        ),
    }


@login_required
@require_POST
def rerun_step(request: HttpRequest, project_id: int, run_id: str, turn: int, step: int) -> HttpResponse:
    """The form's post: the edits checked and the branch started (members; viewers get 403)."""
    run = access.get_run(request, project_id, run_id)
    access.require(request, run.project.team_id, Action.CONVERSE)
    agent = request.POST.get("agent") or ""
    try:
        context = actions.step_context_of(run, turn, step, agent)
        checked = actions.check_rerun(
            run,
            turn,
            step,
            agent=agent,
            edits=forms.edits_from_post(request.POST, context),
            provider=request.POST.get("provider"),
            model=request.POST.get("model"),
        )
        branch = actions.do_rerun_step(run, checked, user=request.user)
    except actions.RerunInputError as exc:
        if exc.status == 404:
            raise Http404(str(exc)) from None
        ctx = {"run": run, "problem": exc.detail, "back": run.turn_url(turn) + f"?rerun={step}"}
        return render(request, "traces/branches/rerun_refused.html", ctx, status=exc.status)
    return redirect(branch.get_absolute_url())


def _branch(request: HttpRequest, project_id: int, branch_id: int) -> Branch:
    branch = (
        Branch.objects.filter(pk=branch_id, project_id=project_id, project__in=access.projects(request))
        .select_related("run", "project")
        .first()
    )
    if branch is None:
        raise Http404("No such branch.")
    return branch


@login_required
@require_GET
def branch_page(request: HttpRequest, project_id: int, branch_id: int) -> HttpResponse:
    """The branch's status: queued or running (the page polls the API), failed (why), or done (the
    compare page opens; `?stay=1` shows the finished status instead)."""
    branch = _branch(request, project_id, branch_id)
    if (
        branch.status == Branch.Status.COMPLETED
        and branch.branch_run is not None
        and not request.GET.get("stay")
    ):
        return redirect(branch.compare_url())
    status_url = reverse("api-branch", kwargs={"project_id": project_id, "branch_id": branch.pk})
    return render(request, "traces/branches/branch.html", {"branch": branch, "status_url": status_url})


def branch_links_ctx(run: Run, agent: str, turn: int | None = None) -> dict[str, Any]:
    """The links the run and turn pages show, in one query: the branch this run is ("branched from
    run X step N"), and the branches made from this run (at turn `turn`, on a turn page)."""
    rows = actions.branch_links(run)
    made = [
        b for b in rows if b.run_id == run.pk and (turn is None or (b.agent, b.turn_number) == (agent, turn))
    ]
    origin = next((b for b in rows if b.branch_run_id == run.run_id and b.project_id == run.project_id), None)
    return {"branch_origin": origin, "branches_made": made}


def turn_branch_ctx(run: Run, agent: str, turn: int, ctx: dict[str, Any], asked: str) -> dict[str, Any]:
    """The turn page's re-run parts: the links, whether the caller may re-run (their membership is
    the page's `note_member`), and the form of `?rerun=<step>` (`asked`)."""
    out = branch_links_ctx(run, agent, turn)
    membership = ctx.get("note_member")
    allowed = membership is not None and membership.can(Action.CONVERSE)
    out["can_rerun"] = allowed
    numbers = [s["step"].number for s in ctx.get("steps", [])]
    if allowed and asked.isdigit() and int(asked) in numbers:
        out.update(rerun_form_ctx(run, agent, turn, int(asked)))
    return out
