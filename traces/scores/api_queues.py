"""Review queues in the API (issue 36): `/api/v1/projects/<id>/queues`.

Thin views over `traces/scores/queues.py`, under the one access rule (`traces.core.access`): viewers
read a project's queues and their progress; members work them (take the next run, then finish it as
done or skipped, or release it); admins create, change and delete them (`Action.MANAGE_SCORES`). A
project outside the caller's teams is a 404, never a 403. Working a queue is a person's: an item is
locked to its reviewer, so an API key may read queues but not take, finish or manage them (403).
Scores themselves are written through `POST /api/v1/scores`, then the item is marked done.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from traces.core import access
from traces.core.api import BaseView, error_response
from traces.core.authentication import key_of
from traces.core.serializers import ErrorSerializer
from traces.models import Action, Project, ReviewItem, ReviewQueue
from traces.scores import queues
from traces.scores.serializers import (
    ReviewItemChangeSerializer,
    ReviewItemSerializer,
    ReviewQueueSerializer,
    ReviewQueueWriteSerializer,
)
from traces.scores.targets import ScoreError

Status = ReviewItem.Status


def project_of(request: Request, project_id: int, action: str = Action.READ) -> Project:
    """The caller's project (404 outside their reach), with `action` required there (403 saying why).
    Writes are a person's: an API key gets 403 for them."""
    project = access.projects(request).filter(pk=project_id).select_related("team").first()
    if project is None:
        raise Http404("no such project")
    if action != Action.READ and key_of(request) is not None:
        raise exceptions.PermissionDenied("review queues and judges are worked by people: sign in")
    access.require(request, project.team_id, action)
    return project


def body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise exceptions.ValidationError({"body": "a JSON object"})
    return dict(request.data)


def queue_of(request: Request, project_id: int, queue_id: int, action: str = Action.READ) -> ReviewQueue:
    project = project_of(request, project_id, action)
    queue = ReviewQueue.objects.filter(project=project, pk=queue_id).prefetch_related("configs").first()
    if queue is None:
        raise Http404("no such review queue")
    queue.project = project
    return queue


def queue_dict(queue: ReviewQueue) -> dict[str, Any]:
    """A queue and its progress now (the runs its filter matches, done, skipped, in review, left)."""
    p = queues.progress(queue)
    return {
        **ReviewQueueSerializer(queue).data,
        "progress": {
            "total": p.total,
            "done": p.done,
            "skipped": p.skipped,
            "in_review": p.in_review,
            "left": p.left,
            "by_person": p.by_person,
        },
    }


def _refused(e: ScoreError) -> exceptions.ValidationError:
    return exceptions.ValidationError({e.field: e.message})


class QueueListView(BaseView):
    @extend_schema(responses={200: ReviewQueueSerializer(many=True)}, summary="A project's review queues")
    def get(self, request: Request, project_id: int) -> Response:
        project = project_of(request, project_id)
        qs: QuerySet[ReviewQueue] = ReviewQueue.objects.filter(project=project).prefetch_related("configs")
        return Response({"results": ReviewQueueSerializer(qs.order_by("name", "id"), many=True).data})

    @extend_schema(
        request=ReviewQueueWriteSerializer,
        responses={201: ReviewQueueSerializer, 400: ErrorSerializer},
        summary="Create a review queue (team admins)",
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_of(request, project_id, Action.MANAGE_SCORES)
        try:
            fields = queues.check_queue(project, body(request))
        except ScoreError as e:
            raise _refused(e) from None
        queue = queues.do_create_queue(project, request.user, fields)
        return Response(queue_dict(queue), status=status.HTTP_201_CREATED)


class QueueDetailView(BaseView):
    @extend_schema(responses={200: ReviewQueueSerializer}, summary="A review queue and its progress")
    def get(self, request: Request, project_id: int, queue_id: int) -> Response:
        return Response(queue_dict(queue_of(request, project_id, queue_id)))

    @extend_schema(
        request=ReviewQueueWriteSerializer(partial=True),
        responses={200: ReviewQueueSerializer, 400: ErrorSerializer},
        summary="Change a review queue (team admins)",
    )
    def patch(self, request: Request, project_id: int, queue_id: int) -> Response:
        queue = queue_of(request, project_id, queue_id, Action.MANAGE_SCORES)
        try:
            fields = queues.check_queue_change(queue, body(request))
        except ScoreError as e:
            raise _refused(e) from None
        queues.do_change_queue(queue, request.user, fields)
        return Response(queue_dict(queue))

    @extend_schema(responses={204: None}, summary="Delete a review queue (team admins; its scores stay)")
    def delete(self, request: Request, project_id: int, queue_id: int) -> Response:
        queue = queue_of(request, project_id, queue_id, Action.MANAGE_SCORES)
        queues.do_delete_queue(queue, request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class QueueTakeView(BaseView):
    @extend_schema(
        request=None,
        responses={200: ReviewItemSerializer, 204: None},
        summary="Take the next run to review (members): the one you hold, else the oldest free one",
        description="The item is locked to you for the queue's lock time. 204: nothing left to review.",
    )
    def post(self, request: Request, project_id: int, queue_id: int) -> Response:
        queue = queue_of(request, project_id, queue_id, Action.SCORE)
        item = queues.take_next(queue, request.user)
        if item is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(ReviewItemSerializer(item).data)


class QueueItemView(BaseView):
    def _item(
        self, request: Request, project_id: int, queue_id: int, item_id: int, action: str
    ) -> ReviewItem:
        queue = queue_of(request, project_id, queue_id, action)
        item = (
            ReviewItem.objects.filter(queue=queue, pk=item_id)
            .select_related("assignee", "finished_by")
            .first()
        )
        if item is None:
            raise Http404("no such review item")
        item.queue = queue
        return item

    @extend_schema(responses={200: ReviewItemSerializer}, summary="A review item: its run, who holds it")
    def get(self, request: Request, project_id: int, queue_id: int, item_id: int) -> Response:
        return Response(
            ReviewItemSerializer(self._item(request, project_id, queue_id, item_id, Action.READ)).data
        )

    @extend_schema(
        request=ReviewItemChangeSerializer,
        responses={200: ReviewItemSerializer, 400: ErrorSerializer, 409: ErrorSerializer},
        summary="Finish your review item: done, skipped, or released back to the queue (members)",
        description="409 when the item is not yours (any more): another reviewer took it after your "
        "lock ran out, or it is finished.",
    )
    def patch(self, request: Request, project_id: int, queue_id: int, item_id: int) -> Response:
        item = self._item(request, project_id, queue_id, item_id, Action.SCORE)
        wanted = body(request).get("status")
        if wanted not in ("done", "skipped", "released"):
            raise exceptions.ValidationError({"status": "done, skipped or released"})
        if wanted == "released":
            ok = queues.release(item, request.user)
        else:
            ok = queues.finish(item, request.user, Status.DONE if wanted == "done" else Status.SKIPPED)
        if not ok:
            return error_response(409, "this run is not yours to review (any more): take the next one")
        item.refresh_from_db()
        return Response(ReviewItemSerializer(item).data)
