"""The REST API under /api/v1/: batch ingest, JSONL uploads, and the read API over projections.

Every endpoint is scoped to the caller: an API key sees its project; a logged-in user sees the projects
of their teams. Anything outside that scope is a 404, never a 403 (DESIGN.md §8). Bad input gets one
error shape (STYLE.md item 9): `{"error": "...", "detail": [{"index"|"line": n, "message": "..."}]}`.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
from django.conf import settings
from django.core.files import File
from django.core.handlers.wsgi import LimitedStream
from django.db import transaction
from django.db.models import Exists, OuterRef, Prefetch, QuerySet
from django.http import Http404, HttpResponseRedirect
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, permissions, status
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.parsers import BaseParser, MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, exception_handler, set_rollback

from runtime import errors as runtime_errors
from traces import ingest
from traces.core import sqlread
from traces.core.authentication import KEY_CACHE_SECONDS, ApiKeyAuthentication, key_of
from traces.core.serializers import (
    ErrorSerializer,
    EventSerializer,
    IngestRequestSerializer,
    IngestResponseSerializer,
    PinSerializer,
    PrimitiveEventSerializer,
    RunSerializer,
    StepSerializer,
    TurnSerializer,
    UploadSerializer,
    represent,
    represent_many,
)
from traces.ingest.ratelimit import IngestRateThrottle
from traces.ingest.uploads import clean_file_name, enqueue_upload
from traces.models import (
    Action,
    Event,
    Pin,
    PrimitiveEvent,
    Project,
    Run,
    Step,
    Turn,
    Upload,
    projects_for_user,
    user_can,
)
from traces.teams import actions as teams

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# Errors: one shape


def error_body(error: str, detail: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The one error shape of the API, for API errors, JSONL line errors and upload errors alike
    (`runtime.errors.error_body`, which the CLI reads too)."""
    return dict(runtime_errors.error_body(error, detail))  # type: ignore[arg-type]


def error_response(code: int, error: str, detail: list[dict[str, Any]] | None = None) -> Response:
    return Response(error_body(error, detail), status=code)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, reshaped into `{"error", "detail"}`."""
    response = exception_handler(exc, context)
    if response is None:
        # Not an API exception: a failure of ours, never the input's (validation refuses bad input
        # before anything is written). Logged with its traceback; the client still gets JSON.
        log.error("unexpected error in %s", context.get("view").__class__.__name__, exc_info=exc)
        set_rollback()
        return Response(
            error_body("internal server error; it has been logged", []),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    data = response.data
    if isinstance(exc, exceptions.ValidationError) and isinstance(data, dict):
        detail = [
            {"field": k, "message": " ".join(map(str, v)) if isinstance(v, list) else str(v)}
            for k, v in data.items()
        ]
        response.data = error_body("invalid input", detail)
    elif isinstance(data, dict) and "detail" in data:
        response.data = error_body(str(data["detail"]))
    else:
        response.data = error_body(str(data))
    return response


class BaseView(APIView):
    """Key or session authentication, our error shape, JSON out."""

    authentication_classes = [ApiKeyAuthentication, SessionAuthentication]
    permission_classes = [permissions.IsAuthenticated]
    # What an API key must allow to call this view: "read" (read + ingest keys only) or "ingest" (any
    # key of the project: sending traces and following one's uploads).
    key_scope = "read"

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return api_exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        key = key_of(request)
        if key is not None and self.key_scope == "read" and not key.can_read:
            raise exceptions.PermissionDenied("this API key is ingest-only; use a read + ingest key to read")


def scoped_projects(request: Request) -> QuerySet[Project]:
    """The projects the caller may read: the key's project, or the projects of the user's teams."""
    key = key_of(request)
    if key is not None:
        return Project.objects.filter(pk=key.project_id)
    return projects_for_user(request.user)


def writable_project(request: Request, slug: str | None, team: str | None) -> Project:
    """The project an upload goes to: the key's, or the user's project named by `slug` (and `team`
    when the slug is ambiguous) where the user is not a viewer. 404 otherwise."""
    key = key_of(request)
    if key is not None:
        return key.project
    if not slug:
        raise exceptions.ValidationError({"project": "name the project (its slug) to upload to"})
    if "\x00" in f"{slug}{team or ''}":  # no project is named so; PostgreSQL refuses NUL in a query
        raise exceptions.ValidationError({"project": "a project slug or team name holds no NUL character"})
    qs = projects_for_user(request.user, Action.UPLOAD).filter(slug=slug).select_related("team")
    if team:
        qs = qs.filter(team__name=team)
    found = list(qs[:2])
    if not found:
        raise Http404("no such project")
    if len(found) > 1:
        raise exceptions.ValidationError({"team": "several of your teams have this project; name the team"})
    return found[0]


def _content_length(request: Request) -> int | None:
    try:
        value = int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None
    return value if value >= 0 else None


def _buffer_chunked_body(request: Request, limit: int) -> None:
    """Make a `Transfer-Encoding: chunked` body (no Content-Length) readable like any other.

    Django sizes the body stream by Content-Length and reads nothing without one. gunicorn decodes
    the chunks on `wsgi.input` (and marks it `wsgi.input_terminated`), so the body is read from there
    into a spooled file, in bounded reads, stopping (413) past `limit`; then the request gets the
    Content-Length it lacked and a stream over that file, and parsers (multipart included) see it
    as a plain body. Called after authentication, so an anonymous client cannot make us read."""
    meta = request._request.META
    if "chunked" not in meta.get("HTTP_TRANSFER_ENCODING", "").lower() or meta.get("CONTENT_LENGTH"):
        return
    source = meta.get("wsgi.input")
    if source is None or getattr(request._request, "_read_started", False):  # private, not in the stubs
        return
    spool = tempfile.SpooledTemporaryFile(max_size=1 << 20)
    size = 0
    while chunk := source.read(min(1 << 16, limit + 1 - size)):
        size += len(chunk)
        if size > limit:
            spool.close()
            raise PayloadTooLarge(limit)
        spool.write(chunk)
    spool.seek(0)
    meta["CONTENT_LENGTH"] = str(size)
    # Django's private body stream: any binary file serves (the stubs say BytesIO).
    request._request._stream = LimitedStream(spool, size)  # type: ignore[assignment,arg-type]


class ChunkedBodyMixin:
    """Views that take a body: accept it chunked too (`_buffer_chunked_body`), up to `body_limit()`."""

    def body_limit(self) -> int:
        raise NotImplementedError

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        _buffer_chunked_body(request, self.body_limit())


def _read_limited(request: Request, limit: int) -> bytes:
    """Read the body, refusing (413) above `limit` by Content-Length and by the bytes actually read."""
    length = _content_length(request)
    if length is not None and length > limit:
        raise PayloadTooLarge(limit)
    stream = request.stream
    if stream is None:
        return b""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(limit)
    return data


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"body is larger than the {limit:,}-byte limit; send smaller batches")


# --------------------------------------------------------------------------------------------------
# POST /api/v1/ingest


class RawBodyParser(BaseParser):
    """Accept any media type without parsing; the views read the stream themselves."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return {}


class IngestAnswerRenderer(JSONRenderer):
    """DRF's JSON renderer for the ingest view's answers, with msgspec: the same text for what they hold
    (integers, strings, booleans, null, lists and objects: a result per event, or the one error shape;
    tests/traces/test_api_ingest_answer.py), a 500-event batch's answer in 0.02 ms against 0.18.
    An indented answer asked for, or a value msgspec refuses, is rendered by DRF's own. Not for
    answers with floats or dates, which msgspec spells otherwise."""

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        if data is None or self.get_indent(accepted_media_type or "", renderer_context or {}) is not None:
            return super().render(data, accepted_media_type, renderer_context)
        try:
            text = _encode_answer(data)
        except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
            return super().render(data, accepted_media_type, renderer_context)
        # DRF escapes the two line separators JavaScript reads as line ends; so does this.
        return text.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")


_encode_answer = msgspec.json.Encoder().encode


class IngestView(ChunkedBodyMixin, BaseView):
    """Store a batch of trace events for the key's project."""

    def body_limit(self) -> int:
        return int(settings.ARCANA_MAX_INGEST_BYTES)

    def get_authenticators(self) -> list[BaseAuthentication]:
        # The key look-up remembered for a while: this view's rate-limit count re-reads the key's row
        # every request and refuses a key revoked or deleted since (`traces.ingest.ratelimit.hit`).
        return [ApiKeyAuthentication(remember_seconds=KEY_CACHE_SECONDS)]

    authentication_classes = [ApiKeyAuthentication]
    parser_classes = [RawBodyParser]
    renderer_classes = [IngestAnswerRenderer]
    key_scope = "ingest"
    throttle_classes = [IngestRateThrottle]

    @extend_schema(
        request=IngestRequestSerializer,
        responses={
            200: IngestResponseSerializer,
            207: IngestResponseSerializer,
            400: ErrorSerializer,
            413: ErrorSerializer,
        },
        summary="Ingest a batch of trace events",
        description='Body `{"events": [TraceEvent, …]}`, optionally `Content-Encoding: gzip`. 200 when every '
        "event was accepted or a duplicate, 207 when some were rejected (see `results`).",
    )
    def post(self, request: Request) -> Response:
        key = key_of(request)
        assert key is not None  # ApiKeyAuthentication is the only scheme here
        limit = int(settings.ARCANA_MAX_INGEST_BYTES)
        body = _read_limited(request, limit)
        encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
        if encoding not in ("", "identity", "gzip"):
            return error_response(415, f"unsupported Content-Encoding {encoding!r}; use gzip or none")
        try:
            body = ingest.read_body(body, gzip_encoded=encoding == "gzip", limit=limit)
        except ingest.BodyTooLarge:
            raise PayloadTooLarge(limit) from None
        except ValueError as exc:
            return error_response(400, str(exc))
        # The body's decoding too runs with the cyclic collector paused (`collector_paused`): its
        # objects are the batch's. They are freed when `_ingest_body` returns, before the collector
        # resumes, so its first collection does not walk the batch's thousands of objects.
        with ingest.collector_paused():
            return self._ingest_body(key.project, body)

    def _ingest_body(self, project: Project, body: bytes) -> Response:
        try:
            payload, raw_texts = ingest.parse_batch(body)  # keeps each event's exact JSON text
        except ValueError as exc:  # not JSON, not UTF-8, nested too deep
            return error_response(400, f"body is not valid JSON: {exc}")
        if not isinstance(payload, dict) or not isinstance(payload.get("events"), list):
            return error_response(400, 'body must be a JSON object {"events": [ ... ]}')
        result = ingest.ingest_events(project, payload["events"], source="api", raw_texts=raw_texts)
        return Response(result.to_dict(), status=207 if result.rejected else 200)


# --------------------------------------------------------------------------------------------------
# Uploads


class UploadListView(ChunkedBodyMixin, BaseView):
    """Upload a JSONL file (multipart field `file`, or a raw `application/x-ndjson` body)."""

    def body_limit(self) -> int:
        return int(settings.ARCANA_MAX_UPLOAD_BYTES) + 64 * 1024  # multipart framing adds a little

    # Multipart is parsed by DRF (so the session CSRF check and the view see the same form data);
    # any other body is read from the stream by the view itself.
    parser_classes = [MultiPartParser, RawBodyParser]
    key_scope = "ingest"
    throttle_classes = [IngestRateThrottle]

    @extend_schema(
        request={"multipart/form-data": OpenApiTypes.OBJECT, "application/x-ndjson": OpenApiTypes.BINARY},
        parameters=[
            OpenApiParameter("project", str, description="project slug (session callers)"),
            OpenApiParameter("team", str, description="team name when the slug is ambiguous"),
        ],
        responses={202: UploadSerializer, 400: ErrorSerializer, 413: ErrorSerializer},
        summary="Upload a .jsonl / .jsonl.gz trace file for background ingestion",
    )
    def post(self, request: Request) -> Response:
        limit = int(settings.ARCANA_MAX_UPLOAD_BYTES)
        length = _content_length(request)
        if length is not None and length > limit + 64 * 1024:  # multipart framing adds a little
            raise PayloadTooLarge(limit)
        content_type = request.META.get("CONTENT_TYPE", "")
        params = request.query_params
        if content_type.startswith("multipart/form-data"):
            upload = request.FILES.get("file")
            slug = request.data.get("project") or params.get("project")
            team = request.data.get("team") or params.get("team")
            project = writable_project(request, slug, team)
            if upload is None:
                return error_response(400, "multipart body has no 'file' field")
            if upload.size is not None and upload.size > limit:
                raise PayloadTooLarge(limit)
            name = clean_file_name(upload.name)  # NUL, `../`, 1,000 characters: cleaned, not a 500
            if not name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
                return error_response(400, f"file must be .jsonl or .jsonl.gz, got {name!r}")
            return self._store(request, project, File(upload, name=name), name, upload.size or 0)
        project = writable_project(request, params.get("project"), params.get("team"))
        with tempfile.TemporaryFile() as tmp:
            size = 0
            stream = request.stream
            while stream is not None and (chunk := stream.read(1 << 20)):
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(limit)
                tmp.write(chunk)
            if size == 0:
                return error_response(400, "empty body; send JSONL lines or a multipart 'file'")
            tmp.seek(0)
            name = clean_file_name(
                params.get("filename"), "upload.jsonl.gz" if "gzip" in content_type else "upload.jsonl"
            )
            return self._store(request, project, File(tmp, name=name), name, size)

    def _store(self, request: Request, project: Project, file: File, name: str, size: int) -> Response:
        user = request.user if key_of(request) is None and request.user.is_authenticated else None
        # The file goes to MEDIA_ROOT first (slow I/O, no lock held), then the row is committed and the
        # task enqueued after the commit (the row it reads exists). A broker that is down does not fail
        # the request: the row stays `queued` and the upload sweeper sends it once the broker is back
        # (traces/ingest/uploads.py).
        upload = Upload(
            project=project, original_name=name[:300], bytes=size, created_by=user, api_key=key_of(request)
        )
        upload.file.save(name.rsplit("/", 1)[-1], file, save=False)
        with transaction.atomic():
            upload.save()
            transaction.on_commit(functools.partial(enqueue_upload, upload.pk))
        data = UploadSerializer(upload).data
        return Response(data, status=status.HTTP_202_ACCEPTED, headers={"Location": data["url"]})


class UploadDetailView(BaseView):
    key_scope = "ingest"  # `arcana trace upload` follows its uploads with the key it uploaded with

    @extend_schema(responses={200: UploadSerializer}, summary="An upload's status, progress and line errors")
    def get(self, request: Request, upload_id: int) -> Response:
        upload = Upload.objects.filter(pk=upload_id, project__in=scoped_projects(request)).first()
        if upload is None:
            raise Http404("no such upload")
        return Response(UploadSerializer(upload).data)


# --------------------------------------------------------------------------------------------------
# Read API


def _parse_dt(value: str | None, name: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = parse_datetime(value)
        # Without an offset, a time is in the default time zone (what Django assumes, with a warning).
        if parsed is not None and timezone.is_naive(parsed):
            parsed = timezone.make_aware(parsed)
        # The database compares in UTC: a time that leaves years 1-9999 there is no time at all.
        if parsed is not None:
            parsed.astimezone(UTC)
    except (ValueError, OverflowError):  # "2026-13-01T00:00", "9999-12-31T23:00-05:00"
        parsed = None
    if parsed is None:
        raise exceptions.ValidationError({name: f"not an ISO-8601 date-time: {value!r}"})
    return parsed


class RunListView(BaseView, generics.ListAPIView[Run]):
    """Runs of the caller's projects, newest first."""

    serializer_class = RunSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("project", str, description="project slug"),
            OpenApiParameter("agent", str, description="runs with a turn by this agent"),
            OpenApiParameter("status", str, enum=["running", "completed", "failed"]),
            OpenApiParameter("has_primitives", bool),
            OpenApiParameter("model", str),
            OpenApiParameter("started_after", OpenApiTypes.DATETIME),
            OpenApiParameter("started_before", OpenApiTypes.DATETIME),
        ]
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return _paginated(self, RunSerializer)

    def get_queryset(self) -> QuerySet[Run]:
        p = self.request.query_params
        qs = Run.objects.filter(project__in=scoped_projects(self.request)).select_related("project__team")
        if p.get("project"):
            qs = qs.filter(project__slug=p["project"])
        if p.get("agent"):
            qs = qs.filter(Exists(Turn.objects.filter(run=OuterRef("pk"), agent=p["agent"])))
        if p.get("status"):
            if p["status"] not in Run.Status.values:
                raise exceptions.ValidationError({"status": f"one of {', '.join(Run.Status.values)}"})
            qs = qs.filter(status=p["status"])
        if p.get("has_primitives") in ("true", "1", "yes"):
            qs = qs.filter(primitives__gt=0)
        elif p.get("has_primitives") in ("false", "0", "no"):
            qs = qs.filter(primitives=0)
        if p.get("model"):
            qs = qs.filter(model=p["model"])
        after = _parse_dt(p.get("started_after"), "started_after")
        before = _parse_dt(p.get("started_before"), "started_before")
        if after:
            qs = qs.filter(started_at__gte=after)
        if before:
            qs = qs.filter(started_at__lt=before)
        return qs.order_by("-started_at", "-pk")


def _paginated(view: generics.GenericAPIView[Any], serializer_class: type[Any]) -> Response:
    """`ListAPIView.list` with the rows written by `represent_many` (the same JSON)."""
    queryset = view.filter_queryset(view.get_queryset())
    page = view.paginate_queryset(queryset)
    if page is None:
        return Response(represent_many(serializer_class, queryset))
    return view.get_paginated_response(represent_many(serializer_class, page))


def get_run_for_request(request: Request, project_id: int, run_id: str) -> Run:
    """The run `run_id` of project `project_id` if the caller may read that project. 404 otherwise.
    A run is addressed by both (DESIGN.md §9): two projects may hold the same run id.

    An API key reads its own project only, which its look-up loaded with the team: the run is read
    alone, by SQL written once (`traces.core.sqlread`), and given that project."""
    key = key_of(request)
    if key is not None:
        found = (
            sqlread.fetch(Run, "WHERE project_id = %s AND run_id = %s", [key.project_id, run_id])
            if int(project_id) == key.project_id
            else []
        )
        if not found:
            raise Http404("no such run")
        _run_project.set_cached_value(found[0], key.project)
        return found[0]
    run = (
        Run.objects.filter(project_id=project_id, run_id=run_id, project__in=scoped_projects(request))
        .select_related("project__team")
        .first()
    )
    if run is None:
        raise Http404("no such run")
    return run


_run_project = Run._meta.get_field("project")


class LegacyRunView(BaseView):
    """`/api/v1/runs/<id>[/turns/<n>|/events]`, the unscoped addresses of earlier versions: a 302 to
    the project-scoped address when exactly one run the caller can read has this id, 404 otherwise
    (never "the newest": with two candidates, which one a client meant is unknown)."""

    @extend_schema(exclude=True)
    def get(self, request: Request, run_id: str, number: int | None = None) -> HttpResponseRedirect:
        found = list(Run.objects.filter(run_id=run_id, project__in=scoped_projects(request))[:2])
        if not found:
            raise Http404("no such run")
        if len(found) > 1:
            raise Http404(
                "several of your projects have a run with this id; "
                "use /api/v1/projects/<project_id>/runs/<run_id> (the `url` of each run in /api/v1/runs)"
            )
        run = found[0]
        name = request.resolver_match.url_name if request.resolver_match else ""
        if name == "api-legacy-events":
            url = run.api_events_url()
        elif number is not None:
            url = run.api_turn_url(number)
        else:
            url = run.api_url()
        query = request.GET.urlencode()
        return HttpResponseRedirect(f"{url}?{query}" if query else url)


def _api_turn_link(run: Run) -> Callable[[int], str]:
    """`number → run.api_turn_url(number)` from two `reverse()` calls instead of one a turn: the
    address with the number swapped, checked against a second real call (else each turn's own call)."""
    probe = 987654321
    head, sep, tail = run.api_turn_url(probe).rpartition(str(probe))
    if sep and run.api_turn_url(1) == f"{head}1{tail}":
        return lambda number: f"{head}{int(number)}{tail}"
    return run.api_turn_url


class RunDetailView(BaseView):
    @extend_schema(responses={200: RunSerializer}, summary="One run with its turns and pins")
    def get(self, request: Request, project_id: int, run_id: str) -> Response:
        run = get_run_for_request(request, project_id, run_id)
        data = represent(RunSerializer, run)
        # The turns and pins by SQL written once (`traces.core.sqlread`): the same rows and order as
        # `run.turn_set.order_by("agent", "number")` and `run.pins.all()` (Pin's Meta.ordering).
        turns = sqlread.fetch(Turn, 'WHERE run_id = %s ORDER BY agent, "number"', [run.pk])
        turn_list = represent_many(TurnSerializer, turns)
        turn_url = _api_turn_link(run)
        for turn in turn_list:
            turn["url"] = turn_url(turn["number"])
        data["turn_list"] = turn_list
        pins = sqlread.fetch(Pin, "WHERE run_id = %s ORDER BY created_turn, created_step, id", [run.pk])
        data["pins"] = represent_many(PinSerializer, pins)
        return Response(data)

    @extend_schema(
        request=None,
        responses={204: None, 403: ErrorSerializer, 404: ErrorSerializer},
        summary="Delete a run: its raw events and every projection (audited)",
        description="Session callers need the admin or owner role in the run's team; a read + ingest API "
        "key of the run's project may delete its runs. Outsiders get 404.",
    )
    def delete(self, request: Request, project_id: int, run_id: str) -> Response:
        run = get_run_for_request(request, project_id, run_id)
        key = key_of(request)
        if key is None and not user_can(request.user, run.project.team_id, Action.DELETE_RUNS):
            raise exceptions.PermissionDenied("deleting runs needs the admin or owner role")
        teams.do_delete_run(run, key or request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TurnDetailView(BaseView):
    @extend_schema(
        parameters=[OpenApiParameter("agent", str, description="one pool agent (default: every agent)")],
        responses={200: OpenApiTypes.OBJECT},
        summary="One turn: its steps with decisions and primitive events, and the pins active at it",
    )
    def get(self, request: Request, project_id: int, run_id: str, number: int) -> Response:
        run = get_run_for_request(request, project_id, run_id)
        agent = request.query_params.get("agent")
        turns = run.turn_set.filter(number=number)
        if agent is not None:
            turns = turns.filter(agent=agent)
        turn_list = list(turns.order_by("agent"))
        if not turn_list:
            raise Http404("no such turn")
        steps = (
            Step.objects.filter(turn__in=turn_list)
            .select_related("decision")
            .prefetch_related(
                Prefetch("primitive_events", queryset=PrimitiveEvent.objects.order_by("timestamp", "id"))
            )
            .order_by("agent", "number")
        )
        primitives = run.primitive_events.filter(turn_number=number)
        if agent is not None:
            primitives = primitives.filter(agent=agent)
        return Response(
            {
                "run_id": run.run_id,
                "project_id": run.project_id,
                "run_url": run.api_url(),
                "page_url": run.turn_url(number),
                "turn": number,
                "agents": [t.agent for t in turn_list],
                "turns": represent_many(TurnSerializer, turn_list),
                "steps": represent_many(StepSerializer, steps),
                "active_pins": represent_many(PinSerializer, run.active_pins_at(number, agent=agent)),
                "primitive_events": represent_many(
                    PrimitiveEventSerializer, primitives.order_by("timestamp", "id")
                ),
            }
        )


class EventListView(BaseView, generics.ListAPIView[Event]):
    """The run's raw events, oldest first; `?type=` filters by event type (comma-separated)."""

    serializer_class = EventSerializer

    @extend_schema(parameters=[OpenApiParameter("type", str, description="event types, comma-separated")])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return _paginated(self, EventSerializer)

    def get_queryset(self) -> QuerySet[Event]:
        run = get_run_for_request(self.request, self.kwargs["project_id"], self.kwargs["run_id"])
        qs = run.raw_events()
        types = [t for t in (self.request.query_params.get("type") or "").split(",") if t]
        if types:
            qs = qs.filter(event_type__in=types)
        return qs
