"""`/api/v1/share-links` and `/api/v1/notes`: share links and review notes for automation.

Callers: a logged-in user (session; writes need the member role or above in the run's team) or a
read+ingest API key of the run's project (an ingest-only key gets 403: it may send traces, nothing
else). Editing a note is for its author and deleting it for its author or the team's admins
(`Note.can_edit`, `Note.can_delete`); a key is neither, so it gets 403 for both. A run outside the caller's reach is 404, never 403 (DESIGN.md §8). Bad input gets the API's
one error shape, `{"error": "invalid input", "detail": [{"field": ..., "message": ...}]}`.

`project` in bodies and query strings is the project's id (as in `/api/v1/projects/<id>/…`) or its
slug when the slug names exactly one of the caller's projects.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from traces.collab import notes as notes_service
from traces.collab import sharing
from traces.core import access
from traces.core.api import BaseView
from traces.core.authentication import key_of
from traces.core.serializers import TextField
from traces.models import Action, Membership, Note, Project, Run, ShareLink, membership_of

# --------------------------------------------------------------------------------------------------
# Access


def _readable_projects(request: Request) -> QuerySet[Project]:
    """Projects the caller may read here; an ingest-only key is refused outright (403)."""
    key = key_of(request)
    if key is not None and not getattr(key, "can_read", True):
        raise exceptions.PermissionDenied("this API key may only ingest traces; use a read + ingest key")
    return access.projects(request)


def _project(request: Request, value: Any) -> Project:
    """The project `value` names (id or unambiguous slug) among those the caller may read, or 404."""
    qs = _readable_projects(request)
    if value in (None, ""):
        raise exceptions.ValidationError({"project": "name the project (its id)"})
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise exceptions.ValidationError({"project": "a project id or slug"})
    text = str(value).strip()
    if not notes_service.storable_text(text):
        raise exceptions.ValidationError({"project": "a project id or slug"})
    if text.isdigit():
        found = list(qs.filter(pk=int(text))[:1])
    else:
        found = list(qs.filter(slug=text[:100])[:2])
        if len(found) > 1:
            raise exceptions.ValidationError(
                {"project": "several of your projects have this slug; use its id"}
            )
    if not found:
        raise Http404("no such project")
    return found[0]


def _run(request: Request, project_value: Any, run_id: Any) -> Run:
    project = _project(request, project_value)
    if not isinstance(run_id, str) or not run_id or not notes_service.storable_text(run_id):
        raise exceptions.ValidationError({"run_id": "the run's id (a string)"})
    return access.get_run(request, project.pk, run_id[:200])


def _check_write(request: Request, run: Run, action: str) -> None:
    """Writes: a key of the run's project (already scoped by `_run`), or a user whose role allows it
    (403 with the reason otherwise)."""
    access.require(request, run.project.team_id, action)


# --------------------------------------------------------------------------------------------------
# Share links


class ShareLinkCreateSerializer(serializers.Serializer[Any]):
    project = serializers.CharField(help_text="project id (or an unambiguous slug)")
    run_id = serializers.CharField(max_length=200)
    hide_content = serializers.BooleanField(default=False)
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class ShareLinkSerializer(serializers.Serializer[ShareLink]):
    id = serializers.IntegerField()
    project = serializers.IntegerField(source="project_id")
    run_id = serializers.CharField(source="run.run_id")
    prefix = serializers.CharField(help_text="the token's first characters (the token is shown once)")
    hide_content = serializers.BooleanField()
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    state = serializers.ChoiceField(choices=["active", "revoked", "expired"])
    created_at = serializers.DateTimeField()


class ShareLinkCreatedSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    url = serializers.CharField(help_text="the shared page's absolute URL; shown only in this response")
    expires_at = serializers.DateTimeField(allow_null=True)
    hide_content = serializers.BooleanField()


class ShareLinkListView(BaseView, generics.ListAPIView[ShareLink]):
    """Share links of the caller's projects, newest first."""

    serializer_class = ShareLinkSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("project", str, description="project id (or slug)"),
            OpenApiParameter("run_id", str),
        ],
        summary="List share links",
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[ShareLink]:
        p = self.request.query_params
        projects = _readable_projects(self.request)
        if p.get("project"):
            projects = projects.filter(pk=_project(self.request, p["project"]).pk)
        qs = ShareLink.objects.filter(project__in=projects).select_related("run")
        if p.get("run_id"):
            if not notes_service.storable_text(p["run_id"]):
                raise exceptions.ValidationError({"run_id": "the run's id (a string)"})
            qs = qs.filter(run__run_id=p["run_id"][:200])
        return qs.order_by("-created_at", "-id")

    @extend_schema(
        request=ShareLinkCreateSerializer,
        responses={201: ShareLinkCreatedSerializer},
        summary="Create a share link (the URL is in this response only)",
    )
    def post(self, request: Request) -> Response:
        data = ShareLinkCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        run = _run(request, request.data.get("project"), v["run_id"])
        _check_write(request, run, Action.SHARE)
        actor = request.user
        link, raw = sharing.do_create_share_link(
            run, actor, hide_content=v["hide_content"], expires_at=v["expires_at"]
        )
        body = {
            "id": link.pk,
            "url": request.build_absolute_uri(sharing.share_url(raw)),
            "expires_at": link.expires_at,
            "hide_content": link.hide_content,
        }
        return Response(ShareLinkCreatedSerializer(body).data, status=status.HTTP_201_CREATED)


class ShareLinkDetailView(BaseView):
    @extend_schema(
        responses={204: None}, summary="Revoke a share link (it opens nothing from the next request)"
    )
    def delete(self, request: Request, link_id: int) -> Response:
        link = (
            ShareLink.objects.filter(pk=link_id, project__in=_readable_projects(request))
            .select_related("run__project__team", "project__team")
            .first()
        )
        if link is None:
            raise Http404("no such share link")
        _check_write(request, link.run, Action.SHARE)
        sharing.do_revoke_share_link(link, request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --------------------------------------------------------------------------------------------------
# Notes


class NoteCreateSerializer(serializers.Serializer[Any]):
    project = serializers.CharField(help_text="project id (or an unambiguous slug)")
    run_id = serializers.CharField(max_length=200)
    agent = TextField(required=False, allow_blank=True, max_length=200, help_text="pool agent")
    turn = serializers.IntegerField(required=False, allow_null=True, min_value=1, help_text="1-based turn")
    step = serializers.IntegerField(required=False, allow_null=True, min_value=1, help_text="1-based step")
    # DRF's metaclass moves declared fields off the class, so this does not replace Field.label.
    label = serializers.ChoiceField(choices=Note.Label.values, default=Note.Label.QUESTION)  # type: ignore[assignment]
    body = TextField(max_length=Note.BODY_MAX)


class NoteEditSerializer(serializers.Serializer[Any]):
    label = serializers.ChoiceField(choices=Note.Label.values, required=False)  # type: ignore[assignment]
    body = TextField(required=False, max_length=Note.BODY_MAX)


class NoteSerializer(serializers.Serializer[Note]):
    id = serializers.IntegerField()
    project = serializers.IntegerField(source="run.project_id")
    run_id = serializers.CharField(source="run.run_id")
    agent = serializers.CharField()
    turn = serializers.IntegerField(source="turn_number", allow_null=True)
    step = serializers.IntegerField(source="step_number", allow_null=True)
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field, not Field.label (see above)
    body = serializers.CharField()
    author = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    edited_at = serializers.DateTimeField(allow_null=True, help_text="the last change of label or body")
    resolved = serializers.BooleanField(source="is_resolved")
    resolved_at = serializers.DateTimeField(allow_null=True)

    def get_author(self, note: Note) -> str | None:
        return note.author.get_username() if note.author else None


class NoteListView(BaseView, generics.ListAPIView[Note]):
    """Review notes of the caller's projects, oldest first (the same filters as the Notes page)."""

    serializer_class = NoteSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("project", str, description="project id (or slug)"),
            OpenApiParameter("run_id", str),
            OpenApiParameter("label", str, enum=Note.Label.values),
            OpenApiParameter("resolved", bool),
        ],
        summary="List review notes",
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Note]:
        p = self.request.query_params
        qs = Note.objects.filter(run__project__in=_readable_projects(self.request))
        filters = notes_service.NoteFilters.from_query(p)
        if p.get("project"):
            # Resolve a slug (or 404) before the shared filters, which take ids.
            project = _project(self.request, p["project"])
            filters = notes_service.NoteFilters(
                project=project.pk, run_id=filters.run_id, label=filters.label, resolved=filters.resolved
            )
        if p.get("run_id") and not notes_service.storable_text(p["run_id"]):
            raise exceptions.ValidationError({"run_id": "the run's id (a string)"})
        if p.get("label") and p["label"] not in Note.Label.values:
            raise exceptions.ValidationError({"label": f"one of {', '.join(Note.Label.values)}"})
        return filters.apply(qs).select_related("run", "author").order_by("created_at", "id")

    @extend_schema(
        request=NoteCreateSerializer, responses={201: NoteSerializer}, summary="Write a review note"
    )
    def post(self, request: Request) -> Response:
        data = NoteCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        run = _run(request, request.data.get("project"), v["run_id"])
        _check_write(request, run, Action.NOTE)
        try:
            checked = notes_service.check_note(run, v)
        except notes_service.NoteError as e:
            raise exceptions.ValidationError({e.field: e.message}) from None
        note = notes_service.do_create_note(run, request.user, checked)
        return Response(NoteSerializer(note).data, status=status.HTTP_201_CREATED)


class NoteDetailView(BaseView):
    """One note: change its label or body (its author), or delete it (its author, or an admin or owner
    of the team), by the rule the pages use (`Note.can_edit`, `Note.can_delete`). An API key acts for
    no one: it is never a note's author nor a team admin, so it may do neither (403); a note written
    with a key has no author, so only the team's admins and owners may delete it, and nobody edits it."""

    def _note(self, request: Request, note_id: int) -> tuple[Note, Membership | None]:
        note = (
            Note.objects.filter(pk=note_id, run__project__in=_readable_projects(request))
            .select_related("run__project__team", "author")
            .first()
        )
        if note is None:
            raise Http404("no such note")
        if key_of(request) is not None:
            raise exceptions.PermissionDenied(
                "an API key may not edit or delete notes; sign in as the author"
            )
        return note, membership_of(request.user, note.run.project.team_id)

    @extend_schema(
        request=NoteEditSerializer,
        responses={200: NoteSerializer},
        summary="Edit a review note's label or body (its author)",
    )
    def patch(self, request: Request, note_id: int) -> Response:
        note, membership = self._note(request, note_id)
        if not note.can_edit(membership):
            raise exceptions.PermissionDenied("only the note's author can edit it")
        data = NoteEditSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            label, body = notes_service.check_note_text(data.validated_data, current=note)
        except notes_service.NoteError as e:
            raise exceptions.ValidationError({e.field: e.message}) from None
        try:
            notes_service.do_edit_note(note, request.user, label, body)
        except Note.DoesNotExist:
            raise Http404("no such note") from None
        return Response(NoteSerializer(note).data)

    @extend_schema(responses={204: None}, summary="Delete a review note (its author or a team admin)")
    def delete(self, request: Request, note_id: int) -> Response:
        note, membership = self._note(request, note_id)
        if not note.can_delete(membership):
            raise exceptions.PermissionDenied("only the note's author or a team admin can delete it")
        notes_service.do_delete_note(note, request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
