"""`/api/v1/scores` and `/api/v1/score-configs`: scores for automation (issue 36).

Callers: a logged-in user (session) or a read + ingest API key of the project (an ingest-only key gets
403). Reading needs the viewer role; writing scores the member role (`Action.SCORE`); creating configs
the admin role (`Action.MANAGE_SCORES`). A project outside the caller's reach is a 404, never a 403
(DESIGN.md §8). Editing a score is for its author and deleting it for its author or the team's admins
(`Score.can_edit` / `can_delete`, the notes' rule): an API key is neither, so it gets 403 for both.

`POST /api/v1/scores` takes `{"project": id-or-slug, "scores": [...]}` (a key's project needs no
`project`), at most 1,000 scores, and answers per item like the ingest: 200 when every score was
created or a duplicate (same `client_id`), 207 with `results` and the one error shape when some were
refused. A body that is not such an object is a 400 in the one error shape.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, status
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response

from traces.collab.notes import storable_text
from traces.core import access
from traces.core.api import BaseView, error_response, read_limited
from traces.core.authentication import key_of
from traces.core.jsonbody import decode_json, invalid
from traces.core.serializers import ErrorSerializer
from traces.ingest.validation import value_problem
from traces.models import Action, Membership, Project, Score, ScoreConfig, membership_of
from traces.scores import actions
from traces.scores.filters import ScoreFilter
from traces.scores.serializers import (
    ScoreBatchResultSerializer,
    ScoreBatchSerializer,
    ScoreConfigCreateSerializer,
    ScoreConfigSerializer,
    ScoreEditSerializer,
    ScoreSerializer,
)
from traces.scores.targets import ScoreError

BODY_LIMIT = 4 << 20  # a batch of 1,000 scores with long comments fits


class _RawBody(BaseParser):
    """The view reads the body itself (bounded, `read_limited`), so DRF parses nothing."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return {}


def readable_projects(request: Request) -> QuerySet[Project]:
    return access.projects(request)


def project_named(request: Request, value: Any, action: str = Action.READ) -> Project:
    """The project `value` names (an id or an unambiguous slug) among the caller's, or 404; a key's
    own project when `value` is empty. Then `action` is required there (403 saying why)."""
    qs = access.projects(request).select_related("team")
    key = key_of(request)
    if value in (None, "") and key is not None:
        project = key.project
    else:
        if value in (None, ""):
            raise exceptions.ValidationError({"project": "name the project (its id or slug)"})
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise exceptions.ValidationError({"project": "a project id or slug"})
        text = str(value).strip()[:100]
        if not storable_text(text):
            raise exceptions.ValidationError({"project": "a project id or slug"})
        found = list(qs.filter(pk=int(text))[:1] if text.isdigit() else qs.filter(slug=text)[:2])
        if len(found) > 1:
            raise exceptions.ValidationError(
                {"project": "several of your projects have this slug; use its id"}
            )
        if not found:
            raise Http404("no such project")
        project = found[0]
    access.require(request, project.team_id, action)
    return project


def _body(request: Request) -> Any:
    """The batch's body, read up to its limit and decoded by the API's one decoder
    (`traces.core.jsonbody`); its values are checked item by item, so a bad score is refused alone."""
    body = decode_json(read_limited(request, BODY_LIMIT), check_values=False)
    if isinstance(body, dict):
        problem = value_problem({k: v for k, v in body.items() if k != "scores"})
        if problem is not None:
            raise invalid(problem[0] or "body", problem[1])
    return body


def _checked_item(configs: Any, data: Any) -> Any:
    """`actions.check_item` after the API's value rules (`value_problem`), for one item of a batch."""
    problem = value_problem(data)
    if problem is not None:
        raise ScoreError(problem[0] or "score", problem[1])
    return actions.check_item(configs, data)


class ScoreListView(BaseView, generics.ListAPIView[Score]):
    """Scores of the caller's projects, oldest first; `POST` writes a batch."""

    serializer_class = ScoreSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = ScoreFilter
    parser_classes = [_RawBody]

    @extend_schema(summary="List scores (filtered)")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Score]:
        return Score.objects.filter(project__in=readable_projects(self.request)).order_by("created_at", "id")

    @extend_schema(
        request=ScoreBatchSerializer,
        responses={200: ScoreBatchResultSerializer, 207: ScoreBatchResultSerializer, 400: ErrorSerializer},
        summary="Write a batch of scores (idempotent by client_id; 207 per item when some are refused)",
    )
    def post(self, request: Request) -> Response:
        body = _body(request)
        if not isinstance(body, dict) or not isinstance(body.get("scores"), list):
            return error_response(400, 'body must be a JSON object {"project": ..., "scores": [ ... ]}')
        if not body["scores"]:
            return error_response(400, "no scores in the batch")
        if len(body["scores"]) > actions.BATCH_MAX:
            return error_response(400, f"at most {actions.BATCH_MAX:,} scores in one batch; send several")
        project = project_named(request, body.get("project"), Action.SCORE)
        configs = actions.configs_by_name(project)
        items: list[actions.ScoreInput | ScoreError] = []
        for data in body["scores"]:
            try:
                items.append(_checked_item(configs, data))
            except ScoreError as e:
                items.append(e)
        source = Score.Source.API if key_of(request) is not None else Score.Source.PERSON
        result = actions.do_write_scores(project, request.user, items, source)
        return Response(result.to_dict(), status=207 if result.count("rejected") else 200)


class ScoreDetailView(BaseView):
    """One score: read it, change its value or comment (its author), delete it (its author or an admin)."""

    def _score(self, request: Request, score_id: int, writing: bool) -> tuple[Score, Membership | None]:
        score = (
            Score.objects.filter(pk=score_id, project__in=readable_projects(request))
            .select_related("project__team", "config")
            .first()
        )
        if score is None:
            raise Http404("no such score")
        if writing and key_of(request) is not None:
            raise exceptions.PermissionDenied(
                "an API key may not edit or delete scores; sign in as the author"
            )
        return score, membership_of(request.user, score.project.team_id)

    @extend_schema(responses={200: ScoreSerializer}, summary="One score")
    def get(self, request: Request, score_id: int) -> Response:
        return Response(ScoreSerializer(self._score(request, score_id, False)[0]).data)

    @extend_schema(
        request=ScoreEditSerializer, responses={200: ScoreSerializer}, summary="Edit a score (its author)"
    )
    def patch(self, request: Request, score_id: int) -> Response:
        score, membership = self._score(request, score_id, True)
        if not score.can_edit(membership):
            raise exceptions.PermissionDenied("only the score's author can edit it")
        if not isinstance(request.data, dict):
            raise exceptions.ValidationError({"body": "a JSON object with value and/or comment"})
        try:
            actions.do_edit_score(score, request.user, request.data)
        except ScoreError as e:
            raise exceptions.ValidationError({e.field: e.message}) from None
        except Score.DoesNotExist:
            raise Http404("no such score") from None
        return Response(ScoreSerializer(score).data)

    @extend_schema(responses={204: None}, summary="Delete a score (its author or a team admin)")
    def delete(self, request: Request, score_id: int) -> Response:
        score, membership = self._score(request, score_id, True)
        if not score.can_delete(membership):
            raise exceptions.PermissionDenied("only the score's author or a team admin can delete it")
        actions.do_delete_score(score, request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ScoreConfigListView(BaseView, generics.ListAPIView[ScoreConfig]):
    """The caller's projects' score configs; `POST` creates one (admins)."""

    serializer_class = ScoreConfigSerializer

    @extend_schema(
        parameters=[OpenApiParameter("project", str, description="project id (or slug)")],
        summary="List score configs",
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[ScoreConfig]:
        qs = ScoreConfig.objects.filter(project__in=readable_projects(self.request))
        if p := self.request.query_params.get("project"):
            qs = qs.filter(project=project_named(self.request, p))
        return qs.order_by("project_id", "name")

    @extend_schema(
        request=ScoreConfigCreateSerializer,
        responses={201: ScoreConfigSerializer},
        summary="Create a score config (team admins)",
    )
    def post(self, request: Request) -> Response:
        if key_of(request) is not None:
            raise exceptions.PermissionDenied("score configs are managed by team admins, not API keys")
        data = request.data if isinstance(request.data, dict) else {}
        project = project_named(request, data.get("project"), Action.MANAGE_SCORES)
        try:
            fields = actions.check_config(project, data)
        except ScoreError as e:
            raise exceptions.ValidationError({e.field: e.message}) from None
        config = actions.do_create_config(project, request.user, fields)
        return Response(ScoreConfigSerializer(config).data, status=status.HTTP_201_CREATED)
