"""Lost instructions on the run page: each with its latest model check ("checked by <model>"), and
for members (`Action.SCORE`) a button that asks a model whether later answers contradict them."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_POST

from traces.core import access
from traces.instructions import actions
from traces.instructions.lost import lost_instructions
from traces.models import Action, Membership, Run
from traces.runs import queries


def instruction_panel_ctx(
    run: Run, agent: str, membership: Membership | None, changes: queries.ContextChanges
) -> dict[str, Any]:
    """The agent's lost instructions (of the page's `changes`) with their latest checks, and the
    check form's models (members)."""
    lost = lost_instructions(run, agent, changes)
    can_check = bool(lost) and membership is not None and membership.can(Action.SCORE)
    offered = [f"{p}/{m}" for p, ms in actions.models_offered().items() for m in ms] if can_check else []
    return {"lost_instructions": lost, "can_check_instructions": can_check, "checker_models": offered}


def _back(run: Run, agent: str) -> str:
    url = run.get_absolute_url()
    if agent:
        url += "?" + urlencode({"agent": agent})
    return url + "#lost-instructions"


@login_required
@require_POST
def check_instructions(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    run = access.get_run(request, project_id, run_id)
    access.require(request, run.project.team_id, Action.SCORE)
    data: dict[str, Any] = {"model": request.POST.get("model", ""), "agent": request.POST.get("agent", "")}
    if keys := request.POST.getlist("instruction"):
        data["instructions"] = keys
    try:
        req = actions.check_request(data)
        rows = actions.do_check_lost_instructions(run, request.user, req)
    except actions.CheckError as e:
        messages.error(request, f"Not checked: {e.message}.")
        return HttpResponseRedirect(_back(run, str(data["agent"])[:200]))
    queued = sum(1 for r in rows if r.status == r.Status.QUEUED)
    messages.success(
        request,
        f"{queued} check{'s' if queued != 1 else ''} queued with {req.provider}/{req.model}"
        + (f"; {len(rows) - queued} had no later answer" if queued != len(rows) else "")
        + ".",
    )
    return HttpResponseRedirect(_back(run, req.agent))
