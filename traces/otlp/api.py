"""`POST /v1/traces` (and `/api/v1/otlp/v1/traces`): OTLP/HTTP trace export, as the OpenTelemetry
protocol specifies, so an exporter configured with only `OTEL_EXPORTER_OTLP_ENDPOINT=<this server>` and
the project's key (`Authorization: Bearer …` or `x-api-key: …`, any key of the project) works unchanged.

- Body: `ExportTraceServiceRequest` as `application/x-protobuf` or `application/json`, optionally
  `Content-Encoding: gzip`, up to `ARCANA_MAX_INGEST_BYTES` (413 past it, also once inflated).
- 200 with an `ExportTraceServiceResponse` in the request's encoding; when some spans were refused,
  `partial_success.rejected_spans` and an `error_message` naming them (the others are stored).
- 400 for a body that cannot be read at all, 415 for another content type or encoding, 401 without a
  valid key, 429 (the project key's ingest rate, `Retry-After`), 503 when the database cannot be
  reached (`Retry-After`; the exporter retries). Errors carry a `google.rpc.Status` body in the
  request's encoding.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.db.models import QuerySet
from django.http import HttpResponse
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from runtime.otlp import DecodeLimits, OtlpDecodeError, decode_request, encode_response
from traces import ingest
from traces.core import access
from traces.core.api import BaseView, ChunkedBodyMixin, read_limited
from traces.core.authentication import (
    KEY_CACHE_SECONDS,
    ApiKeyAuthentication,
    ApiKeyHeaderAuthentication,
    key_of,
)
from traces.core.jsonbody import PayloadTooLarge
from traces.ingest.api import RawBodyParser
from traces.ingest.ratelimit import IngestRateThrottle
from traces.ingest.spans import do_ingest_spans
from traces.models import Span
from traces.otlp.filters import SpanFilter
from traces.otlp.serializers import SpanSerializer

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
RETRY_AFTER_OUTAGE = "5"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def status_body(code: int, message: str, protobuf: bool) -> bytes:
    """A `google.rpc.Status` (`code`, `message`): protobuf written by hand (two fields), or JSON."""
    if not protobuf:
        return json.dumps({"code": code, "message": message}, ensure_ascii=False).encode()
    text = message.encode("utf-8", "replace")
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _answer(status: int, body: bytes, protobuf: bool) -> HttpResponse:
    return HttpResponse(body, status=status, content_type=PROTOBUF if protobuf else JSON)


# google.rpc.Code for the HTTP statuses the view answers with.
_RPC_CODE = {400: 3, 401: 16, 403: 7, 404: 5, 413: 8, 415: 3, 429: 8, 503: 14}


class OtlpTracesView(ChunkedBodyMixin, BaseView):
    """Store the spans of an OTLP/HTTP export for the key's project and derive their runs."""

    authentication_classes = [ApiKeyAuthentication, ApiKeyHeaderAuthentication]
    parser_classes = [RawBodyParser]
    key_scope = "ingest"
    throttle_classes = [IngestRateThrottle]

    def get_authenticators(self) -> list[BaseAuthentication]:
        return [
            ApiKeyAuthentication(remember_seconds=KEY_CACHE_SECONDS),
            ApiKeyHeaderAuthentication(remember_seconds=KEY_CACHE_SECONDS),
        ]

    def body_limit(self) -> int:
        return int(settings.ARCANA_MAX_INGEST_BYTES)

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        # An error of the API's own (401, 413, 429…) answered as OTLP asks: a Status in the request's
        # encoding, the status code and headers (Retry-After) kept.
        response = super().finalize_response(request, response, *args, **kwargs)
        if response.status_code >= 400 and isinstance(response, Response):
            protobuf = _is_protobuf(request)
            data = getattr(response, "data", None) or {}
            message = str(data.get("error") if isinstance(data, dict) else data)
            code = _RPC_CODE.get(response.status_code, 2)
            answer = _answer(response.status_code, status_body(code, message, protobuf), protobuf)
            for header in ("Retry-After", "WWW-Authenticate"):
                if header in response:
                    answer[header] = response[header]
            return answer
        return response

    @extend_schema(
        request={PROTOBUF: bytes, JSON: dict},
        responses={200: OpenApiResponse(description="ExportTraceServiceResponse")},
        summary="OTLP/HTTP trace export (OpenTelemetry spans of any agent framework)",
        description="`ExportTraceServiceRequest` as protobuf or JSON, optionally gzip. Answers as the "
        "OpenTelemetry protocol specifies: 200 with `partial_success` naming refused spans; 400, 413, 415, "
        "429 and 503 with a `google.rpc.Status`.",
    )
    def post(self, request: Request) -> HttpResponse:
        key = key_of(request)
        assert key is not None  # key authentication is the only scheme here
        protobuf = _is_protobuf(request)
        limit = int(settings.ARCANA_MAX_INGEST_BYTES)
        body = read_limited(request, limit)
        try:
            decoded = decode_request(
                body,
                request.META.get("CONTENT_TYPE", ""),
                content_encoding=request.META.get("HTTP_CONTENT_ENCODING"),
                limits=DecodeLimits(max_body_bytes=limit),
            )
        except OtlpDecodeError as exc:
            if exc.status == 413:
                raise PayloadTooLarge(limit) from None
            return _answer(
                exc.status, status_body(_RPC_CODE.get(exc.status, 3), str(exc), protobuf), protobuf
            )
        try:
            with ingest.collector_paused():
                do_ingest_spans(key.project, decoded.spans)
        except (OperationalError, InterfaceError):
            answer = _answer(
                503, status_body(14, "the database cannot be reached; retry later", protobuf), protobuf
            )
            answer["Retry-After"] = RETRY_AFTER_OUTAGE
            return answer
        return _answer(200, encode_response(decoded, PROTOBUF if protobuf else JSON), protobuf)


def _is_protobuf(request: Request) -> bool:
    return request.META.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower() != JSON


class SpanListView(BaseView, generics.ListAPIView[Span]):
    """The project's raw OTLP spans as stored (the source its runs are derived from), newest first,
    filtered by `SpanFilter`: `?trace_id=`, `?run_id=`, `?pending=true` (stored, run not derived yet).
    A span is here as soon as its export was answered 200; its run follows when it is derived."""

    serializer_class = SpanSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = SpanFilter

    def get_queryset(self) -> QuerySet[Span]:
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no project
            return Span.objects.none()
        project = access.projects(self.request).filter(pk=self.kwargs["project_id"]).first()
        if project is None:
            raise NotFound("no such project")
        return Span.objects.filter(project=project).order_by("-pk")
