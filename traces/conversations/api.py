"""The conversations API (issue 12): start a script or a playground, send a message, cancel, read.

    POST /api/v1/conversations                  {"project", "provider", "model", ...} → 201
    GET  /api/v1/conversations/providers        what the operator configured (no keys)
    GET  /api/v1/conversations/<id>             status, transcript, active pins
    POST /api/v1/conversations/<id>/messages    {"content", "agent"?} → 202 (409 while a turn runs)
    POST /api/v1/conversations/<id>/cancel      → 202

Authenticated by session or by a project API key. Readers of a project may read its conversations;
starting one, sending a message or cancelling needs a role that may write (viewers get 403, outsiders
404). Thin views: the rules are in `traces.conversations`.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.urls import path
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from traces import conversations as service
from traces.core import (
    access,
    converters,  # noqa: F401  (registers the `id` converter)
)
from traces.core.api import BaseView, error_response
from traces.core.authentication import key_of
from traces.core.serializers import ErrorSerializer
from traces.models import Action, Conversation, Project


class AgentSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    system = serializers.CharField(required=False, allow_null=True)
    cognitive_primitives = serializers.ListField(
        child=serializers.ChoiceField(choices=["recall", "pin"]),
        required=False,
        allow_null=True,
        help_text="null inherits the conversation's list, a list overrides it, [] opts out",
    )


class ConversationCreateSerializer(serializers.Serializer):
    """The request body (documented here; checked by `traces.conversations.check_conversation_request`)."""

    project = serializers.CharField(
        required=False, help_text="project id or slug (session callers; an API key names its project)"
    )
    team = serializers.CharField(required=False, help_text="team name when the slug is ambiguous")
    provider = serializers.CharField(default="scripted", help_text="a name from /conversations/providers")
    model = serializers.CharField(
        required=False, help_text="one of the provider's models (scripted: a scenario)"
    )
    system = serializers.CharField(required=False, allow_null=True)
    cognitive_primitives = serializers.ListField(
        child=serializers.ChoiceField(choices=["recall", "pin"]), required=False, allow_null=True
    )
    context_window = serializers.IntegerField(required=False, allow_null=True, min_value=256)
    pin_budget_fraction = serializers.FloatField(required=False, default=0.5)
    prompt_snapshots = serializers.BooleanField(required=False, default=True)
    script = serializers.ListField(
        child=serializers.JSONField(),
        required=False,
        allow_null=True,
        help_text='user messages (strings, or {"agent", "content"} in a pool); null starts a playground',
    )
    agents = AgentSerializer(many=True, required=False, allow_null=True)


class ConversationCreatedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    run_id = serializers.CharField()
    status = serializers.CharField()
    url = serializers.CharField(help_text="the conversation's page (exists at once)")
    run_url = serializers.CharField(help_text="the run page (answers once the first event is stored)")


class ConversationSerializer(serializers.Serializer):
    """`Conversation.to_dict()`."""

    id = serializers.IntegerField()
    project = serializers.IntegerField()
    run_id = serializers.CharField()
    url = serializers.CharField()
    run_url = serializers.CharField()
    mode = serializers.ChoiceField(choices=Conversation.Mode.choices)
    status = serializers.ChoiceField(choices=Conversation.Status.choices)
    reason = serializers.CharField()
    provider = serializers.CharField()
    model = serializers.CharField()
    system = serializers.CharField(allow_null=True)
    cognitive_primitives = serializers.ListField(child=serializers.CharField())
    context_window = serializers.IntegerField(allow_null=True)
    pin_budget_fraction = serializers.FloatField()
    prompt_snapshots = serializers.BooleanField()
    agents = serializers.JSONField(allow_null=True)
    script = serializers.JSONField(allow_null=True)
    turns_done = serializers.IntegerField()
    transcript = serializers.JSONField()
    pins = serializers.JSONField(help_text="pins in force after the last completed turn")
    tokens_used = serializers.IntegerField()
    cancel_requested = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    updated_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class MessageSerializer(serializers.Serializer):
    content = serializers.CharField()
    agent = serializers.CharField(required=False, help_text="the pool agent to address (default: the first)")


ProviderListSerializer = inline_serializer(
    "ProviderList",
    {
        "providers": serializers.ListField(child=serializers.DictField()),
        "scenarios": serializers.DictField(),
    },
)


def _may_write(request: Request, project: Project) -> bool:
    """Members and up may start and steer conversations (`Action.CONVERSE`); so may a read + ingest
    key of the project (ingest-only keys are refused by `BaseView` before this)."""
    return access.can(request, project.team_id, Action.CONVERSE)


def _project_for(request: Request, ref: Any, team: Any) -> Project:
    """The project named in the body (id or slug), among those the caller may read; 404 otherwise."""
    key = key_of(request)
    projects = access.projects(request).select_related("team")
    if key is not None and ref in (None, ""):
        return key.project
    if ref in (None, ""):
        raise service.ConversationInputError(
            [{"field": "project", "message": "name the project (id or slug)"}]
        )
    if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
        found = list(projects.filter(pk=int(ref))[:1])
    elif isinstance(ref, str):
        qs = projects.filter(slug=ref)
        if isinstance(team, str) and team:
            qs = qs.filter(team__name=team)
        found = list(qs.distinct()[:2])
        if len(found) > 1:
            raise service.ConversationInputError(
                [{"field": "team", "message": "several of your teams have this project; name the team"}]
            )
    else:
        raise service.ConversationInputError([{"field": "project", "message": "must be an id or a slug"}])
    if not found:
        raise Http404("no such project")
    return found[0]


def _conversation_for(request: Request, conversation_id: int) -> Conversation:
    conv = (
        Conversation.objects.filter(pk=conversation_id, project__in=access.projects(request))
        .select_related("project")
        .first()
    )
    if conv is None:
        raise Http404("no such conversation")
    return conv


FORBIDDEN = "your role in this team may read runs but not start or steer conversations"


class ConversationBodyLimit:
    """The conversations' request bodies: at most `ARCANA_MAX_CONVERSATION_BYTES` (413 above it)."""

    def body_limit(self) -> int:
        return service.max_conversation_bytes()


class ConversationListView(ConversationBodyLimit, BaseView):
    @extend_schema(
        request=ConversationCreateSerializer,
        responses={
            201: ConversationCreatedSerializer,
            400: ErrorSerializer,
            413: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            429: OpenApiResponse(
                ErrorSerializer, description="too many conversations running in the project"
            ),
        },
        summary="Start a conversation (a script run unattended, or a playground)",
        description="A `script` (list of user messages) runs to completion on a worker; `script: null` "
        "starts a playground that waits for `POST …/messages`. `agents` makes it a pool.",
    )
    def post(self, request: Request) -> Response:
        data = request.data
        if not isinstance(data, dict):
            return error_response(
                400, "invalid input", [{"field": "body", "message": "must be a JSON object"}]
            )
        try:
            project = _project_for(request, data.get("project"), data.get("team"))
            if not _may_write(request, project):
                return error_response(403, FORBIDDEN)
            spec = service.check_conversation_request(data)
            conv = service.start_conversation(project, spec, user=request.user)
        except service.ConversationTooLarge as exc:
            return error_response(413, exc.message, exc.detail)
        except service.ConversationInputError as exc:
            return error_response(400, "invalid input", exc.detail)
        except service.ConversationLimitError as exc:
            return error_response(429, str(exc), headers={"Retry-After": str(exc.retry_after)})
        body = {
            "id": conv.pk,
            "run_id": conv.run_id,
            "status": conv.status,
            "url": conv.page_url(),
            "run_url": conv.get_absolute_url(),
        }
        return Response(body, status=201)


class ProviderListView(BaseView):
    @extend_schema(
        responses={200: ProviderListSerializer},
        summary="Providers and models a conversation may use",
        description="The built-in offline `scripted` provider (its scenarios are its models) and the "
        "endpoints the operator configured in ARCANA_PROVIDERS. Keys are never shown.",
    )
    def get(self, request: Request) -> Response:
        return Response({"providers": service.available_providers(), "scenarios": service.scenario_details()})


class ConversationDetailView(BaseView):
    @extend_schema(
        responses={200: ConversationSerializer, 404: ErrorSerializer}, summary="A conversation's status"
    )
    def get(self, request: Request, conversation_id: int) -> Response:
        return Response(_conversation_for(request, conversation_id).to_dict())


class ConversationMessageView(ConversationBodyLimit, BaseView):
    @extend_schema(
        request=MessageSerializer,
        responses={
            202: ConversationSerializer,
            400: ErrorSerializer,
            413: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            409: OpenApiResponse(ErrorSerializer, description="a turn is running, or the conversation ended"),
            429: OpenApiResponse(
                ErrorSerializer, description="too many conversations running in the project"
            ),
        },
        summary="Send a playground message (one turn on a worker)",
    )
    def post(self, request: Request, conversation_id: int) -> Response:
        conv = _conversation_for(request, conversation_id)
        if not _may_write(request, conv.project):
            return error_response(403, FORBIDDEN)
        data = request.data if isinstance(request.data, dict) else {}
        try:
            conv = service.post_message(conv, data.get("content"), agent=data.get("agent"))
        except service.ConversationTooLarge as exc:
            return error_response(413, exc.message, exc.detail)
        except service.ConversationInputError as exc:
            return error_response(400, "invalid input", exc.detail)
        except service.ConversationBusyError as exc:
            return error_response(409, str(exc))
        except service.ConversationLimitError as exc:
            return error_response(429, str(exc), headers={"Retry-After": str(exc.retry_after)})
        return Response(conv.to_dict(), status=202)


class ConversationCancelView(BaseView):
    @extend_schema(
        request=None,
        responses={202: ConversationSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
        summary="Cancel a conversation (a running turn stops after its current step)",
    )
    def post(self, request: Request, conversation_id: int) -> Response:
        conv = _conversation_for(request, conversation_id)
        if not _may_write(request, conv.project):
            return error_response(403, FORBIDDEN)
        return Response(service.cancel_conversation(conv).to_dict(), status=202)


#: Mounted under /api/v1/ by `traces.api_urls`.
conversation_urls = [
    path("conversations", ConversationListView.as_view(), name="api-conversations"),
    path("conversations/providers", ProviderListView.as_view(), name="api-conversation-providers"),
    path("conversations/<id:conversation_id>", ConversationDetailView.as_view(), name="api-conversation"),
    path(
        "conversations/<id:conversation_id>/messages",
        ConversationMessageView.as_view(),
        name="api-conversation-messages",
    ),
    path(
        "conversations/<id:conversation_id>/cancel",
        ConversationCancelView.as_view(),
        name="api-conversation-cancel",
    ),
]
