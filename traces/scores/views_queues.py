"""Review queues in the browser: create one (admins), its page (progress, who did what), taking the
next run, and the review page — the run on the left, the queue's score form on the right, which saves
the scores, marks the run done and opens the next one in one keystroke (`static/js/scores.js`).

Members and above work queues (`Action.SCORE`), admins create them (`Action.MANAGE_SCORES`); a
queue of a project outside the caller's teams is 404.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from traces.models import Action, ReviewItem, ReviewQueue, Run, Score, Step, membership_of
from traces.runs import queries
from traces.runs.context import run_ctx
from traces.scores import actions, forms, queues, summaries
from traces.scores.targets import ScoreError
from traces.scores.views import project_for, scores_url


def _queue(request: HttpRequest, project_id: int, queue_id: int, action: str = Action.READ) -> ReviewQueue:
    project = project_for(request, project_id, action)
    queue = ReviewQueue.objects.filter(project=project, pk=queue_id).first()
    if queue is None:
        raise Http404("No such review queue.")
    queue.project = project
    return queue


def _queue_url(queue: ReviewQueue) -> str:
    return reverse("traces:queue", kwargs={"project_id": queue.project_id, "queue_id": queue.pk})


def _item_url(item: ReviewItem) -> str:
    return reverse(
        "traces:review_item",
        kwargs={"project_id": item.queue.project_id, "queue_id": item.queue_id, "item_id": item.pk},
    )


def _next(request: HttpRequest, queue: ReviewQueue) -> HttpResponseRedirect:
    item = queues.take_next(queue, request.user)
    if item is None:
        messages.success(request, "Nothing left to review in this queue.")
        return HttpResponseRedirect(_queue_url(queue))
    item.queue = queue
    return HttpResponseRedirect(_item_url(item))


@login_required
@require_POST
def queue_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for(request, project_id, Action.MANAGE_SCORES)
    try:
        fields = queues.check_queue(project, request.POST)
    except ScoreError as e:
        messages.error(request, f"Review queue not created: {e.field} {e.message}.")
        return HttpResponseRedirect(scores_url(project) + "#queues")
    queue = queues.do_create_queue(project, request.user, fields)
    messages.success(request, f"Review queue {queue.name} created.")
    return HttpResponseRedirect(_queue_url(queue))


@login_required
@require_GET
def queue_page(request: HttpRequest, project_id: int, queue_id: int) -> HttpResponse:
    queue = _queue(request, project_id, queue_id)
    membership = membership_of(request.user, queue.project.team_id)
    recent = (
        ReviewItem.objects.filter(queue=queue)
        .exclude(status=ReviewItem.Status.ASSIGNED)
        .select_related("finished_by")
        .order_by("-finished_at", "-id")[:30]
    )
    ctx = {
        "project": queue.project,
        "queue": queue,
        "configs": list(queue.configs.all()),
        "progress": queues.progress(queue),
        "recent": list(recent),
        "can_review": membership is not None and membership.can(Action.SCORE),
        "runs_url": queues.runs_list_url(queue, reverse("traces:runs")),
    }
    return render(request, "traces/scores/queue.html", ctx)


@login_required
@require_POST
def queue_take(request: HttpRequest, project_id: int, queue_id: int) -> HttpResponse:
    return _next(request, _queue(request, project_id, queue_id, Action.SCORE))


def _item(request: HttpRequest, queue: ReviewQueue, item_id: int) -> ReviewItem:
    item = ReviewItem.objects.filter(queue=queue, pk=item_id).select_related("assignee").first()
    if item is None:
        raise Http404("No such review item.")
    item.queue = queue
    return item


@login_required
@require_GET
def review_item(request: HttpRequest, project_id: int, queue_id: int, item_id: int) -> HttpResponse:
    queue = _queue(request, project_id, queue_id)
    item = _item(request, queue, item_id)
    run = (
        Run.objects.filter(project=queue.project, run_id=item.run_id).select_related("project__team").first()
    )
    if run is None:
        raise Http404("This run was deleted.")
    mine = item.status == ReviewItem.Status.ASSIGNED and item.assignee_id == request.user.pk
    ctx = run_ctx(request, run, "")
    configs = list(queue.configs.filter(archived=False))
    last = (
        Step.objects.filter(run=run)
        .order_by("-turn_number", "-number")
        .values_list("assistant_text", flat=True)
    )
    ctx.update(
        {
            "project": queue.project,
            "queue": queue,
            "item": item,
            "mine": mine,
            "last_answer": next(iter(last[:1]), None),
            "changes": queries.context_changes(run, ""),
            "scores": summaries.run_scores(run),
            "score_fields": forms.fields_for(configs, "review-score") if mine else [],
            "score_form_id": "review-score",
            "score_action": reverse(
                "traces:review_score",
                kwargs={"project_id": project_id, "queue_id": queue_id, "item_id": item_id},
            ),
            "score_submit": "Save and next",
            "progress": queues.progress(queue),
        }
    )
    return render(request, "traces/scores/review.html", ctx)


@login_required
@require_POST
def review_score(request: HttpRequest, project_id: int, queue_id: int, item_id: int) -> HttpResponse:
    """Save the queue's scores on the run, mark it done, open the next run."""
    queue = _queue(request, project_id, queue_id, Action.SCORE)
    item = _item(request, queue, item_id)
    if item.assignee_id != request.user.pk or item.status != ReviewItem.Status.ASSIGNED:
        raise PermissionDenied("This run is not yours to review (any more): take the next one.")
    configs = {c.name: c for c in queue.configs.filter(archived=False)}
    post = request.POST.copy()
    post["run_id"] = item.run_id
    for key in ("turn", "step", "target", "agent"):
        post.pop(key, None)
    try:
        items, errors = forms.read_scores(configs, post)
    except ScoreError as e:
        items, errors = [], [e]
    if errors or not items:
        for bad in errors:
            messages.error(request, f"Not saved: {bad.field} {bad.message}.")
        if not errors:
            messages.error(request, "Give at least one score, or skip this run.")
        return HttpResponseRedirect(_item_url(item))
    result = actions.do_write_scores(queue.project, request.user, items, Score.Source.PERSON)
    if refused := [r.error for r in result.results if r.error is not None]:
        for err in refused:
            messages.error(request, f"Not saved: {err.field} {err.message}.")
        return HttpResponseRedirect(_item_url(item))
    queues.finish(item, request.user, ReviewItem.Status.DONE)
    messages.success(
        request, f"Saved {result.count('created')} score{'s' if result.count('created') != 1 else ''}."
    )
    return _next(request, queue)


@login_required
@require_POST
def review_skip(request: HttpRequest, project_id: int, queue_id: int, item_id: int) -> HttpResponse:
    queue = _queue(request, project_id, queue_id, Action.SCORE)
    item = _item(request, queue, item_id)
    if not queues.finish(item, request.user, ReviewItem.Status.SKIPPED):
        raise PermissionDenied("This run is not yours to review (any more).")
    return _next(request, queue)


@login_required
@require_POST
def review_release(request: HttpRequest, project_id: int, queue_id: int, item_id: int) -> HttpResponse:
    """Stop reviewing: the run goes back to the queue at once."""
    queue = _queue(request, project_id, queue_id, Action.SCORE)
    queues.release(_item(request, queue, item_id), request.user)
    return HttpResponseRedirect(_queue_url(queue))
