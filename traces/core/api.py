"""What every view of the REST API under /api/v1/ shares: the base view, the one error shape, and
the body readers (a size limit, chunked bodies).

Every endpoint is scoped to the caller: an API key sees its project; a logged-in user sees the projects
of their teams. Anything outside that scope is a 404, never a 403 (DESIGN.md §8). Bad input gets one
error shape (STYLE.md item 9): `{"error": "...", "detail": [{"index"|"line": n, "message": "..."}]}`.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.handlers.wsgi import LimitedStream
from django.http import Http404
from rest_framework import exceptions, permissions, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, exception_handler, set_rollback

from runtime import errors as runtime_errors
from traces.core import access
from traces.core.authentication import ApiKeyAuthentication, key_of
from traces.core.jsonbody import DEFAULT_BODY_LIMIT, PayloadTooLarge, decode_write_body
from traces.models import (
    Action,
    Project,
)

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# Errors: one shape


def error_body(error: str, detail: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The one error shape of the API, for API errors, JSONL line errors and upload errors alike
    (`runtime.errors.error_body`, which the CLI reads too)."""
    return dict(runtime_errors.error_body(error, detail))  # type: ignore[arg-type]


def error_response(
    code: int, error: str, detail: list[dict[str, Any]] | None = None, headers: dict[str, str] | None = None
) -> Response:
    return Response(error_body(error, detail), status=code, headers=headers)


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


#: `Retry-After` (seconds) of a 429 whose view gave none.
DEFAULT_RETRY_AFTER = 30


class BaseView(APIView):
    """Key or session authentication, our error shape, JSON out."""

    authentication_classes = [ApiKeyAuthentication, SessionAuthentication]
    permission_classes = [permissions.IsAuthenticated]
    # What an API key must allow to call this view: "read" (read + ingest keys only) or "ingest" (any
    # key of the project: sending traces and following one's uploads).
    key_scope = "read"

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return api_exception_handler

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        """Every 429 says when to come back: a view that set no `Retry-After` gets the default."""
        response = super().finalize_response(request, response, *args, **kwargs)
        if response.status_code == status.HTTP_429_TOO_MANY_REQUESTS and not response.has_header(
            "Retry-After"
        ):
            response["Retry-After"] = str(DEFAULT_RETRY_AFTER)
        return response

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        key = key_of(request)
        if key is not None and self.key_scope == "read" and not key.can_read:
            raise exceptions.PermissionDenied("this API key is ingest-only; use a read + ingest key to read")
        decode_write_body(request)  # a bad JSON body is refused before the view acts (traces.core.jsonbody)

    def body_limit(self) -> int:
        """The largest JSON body this endpoint reads (`traces.core.jsonbody`): 413 above it."""
        return DEFAULT_BODY_LIMIT


def writable_project(request: Request, slug: str | None, team: str | None) -> Project:
    """The project an upload goes to: the key's, or the user's project named by `slug` (and `team`
    when the slug is ambiguous). A project outside the user's teams is a 404; one where their role
    may read but not upload (a viewer) is a 403 that says why (`access.require`)."""
    key = key_of(request)
    if key is not None:
        return key.project
    if not slug:
        raise exceptions.ValidationError({"project": "name the project (its slug) to upload to"})
    if "\x00" in f"{slug}{team or ''}":  # no project is named so; PostgreSQL refuses NUL in a query
        raise exceptions.ValidationError({"project": "a project slug or team name holds no NUL character"})
    qs = access.projects(request).filter(slug=slug).select_related("team")
    if team:
        qs = qs.filter(team__name=team)
    found = list(qs[:2])
    if not found:
        raise Http404("no such project")
    if len(found) > 1:
        raise exceptions.ValidationError({"team": "several of your teams have this project; name the team"})
    try:
        access.require(request, found[0].team_id, Action.UPLOAD)
    except DjangoPermissionDenied as exc:
        raise exceptions.PermissionDenied(f"{exc} Uploading traces needs the member role or above.") from None
    return found[0]


def content_length(request: Request) -> int | None:
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


def read_limited(request: Request, limit: int) -> bytes:
    """Read the body, refusing (413) above `limit` by Content-Length and by the bytes actually read."""
    length = content_length(request)
    if length is not None and length > limit:
        raise PayloadTooLarge(limit)
    stream = request.stream
    if stream is None:
        return b""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(limit)
    return data
