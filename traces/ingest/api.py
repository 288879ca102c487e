"""The ingest API: `POST /api/v1/ingest` (a batch of trace events) and JSONL uploads
(`/api/v1/uploads`). Both hand their events to the one writer, `traces.ingest`."""

from __future__ import annotations

import functools
import tempfile
from typing import Any

import msgspec
from django.conf import settings
from django.core.files import File
from django.db import transaction
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.authentication import BaseAuthentication
from rest_framework.parsers import BaseParser, MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from traces import ingest
from traces.core import access
from traces.core.api import (
    BaseView,
    ChunkedBodyMixin,
    content_length,
    error_response,
    read_limited,
    writable_project,
)
from traces.core.authentication import KEY_CACHE_SECONDS, ApiKeyAuthentication, key_of
from traces.core.jsonbody import PayloadTooLarge
from traces.core.serializers import ErrorSerializer
from traces.ingest.ratelimit import IngestRateThrottle
from traces.ingest.serializers import (
    IngestRequestSerializer,
    IngestResponseSerializer,
    UploadSerializer,
)
from traces.ingest.uploads import clean_file_name, enqueue_upload
from traces.models import (
    Project,
    Upload,
)

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
    tests/traces/ingest/test_api_ingest_answer.py), a 500-event batch's answer in 0.02 ms against 0.18.
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
        body = read_limited(request, limit)
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


#: One rule for both ways to upload (a multipart `file`, a raw body): zero bytes is refused.
EMPTY_UPLOAD = "the upload is empty (0 bytes); send JSONL lines, as a multipart 'file' or as the body"


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
        length = content_length(request)
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
            if not upload.size:  # the raw body's rule: an empty file is refused, not queued
                return error_response(400, EMPTY_UPLOAD)
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
                return error_response(400, EMPTY_UPLOAD)
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
        upload = Upload.objects.filter(pk=upload_id, project__in=access.projects(request)).first()
        if upload is None:
            raise Http404("no such upload")
        return Response(UploadSerializer(upload).data)
