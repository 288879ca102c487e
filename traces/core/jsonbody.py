"""The one decoder of JSON request bodies for every API endpoint (`REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]`).

It applies the rules ingest applies to an event (`traces.ingest.validation`, imported, not copied), to
the whole body of any other endpoint:

- a size limit per endpoint (`BaseView.body_limit()`): 413 above it, by Content-Length and by the bytes
  actually read;
- strict UTF-8; then JSON, nested at most `MAX_DEPTH` levels (a body nested deeper than Python's
  decoder can follow is refused too, never a 500);
- no NUL and no lone surrogate in any string or key, at any depth; numbers finite (no NaN or
  Infinity, which Python's json accepts) and integers within ±(2**53 − 1);
- the body an object (every JSON endpoint of the API takes one).

A refused body is the API's one error shape with the field to blame: `{"error": "invalid input",
"detail": [{"field": "script[2]", "message": "contains a lone surrogate (U+D800) …"}]}` (`body` when
the body as a whole is to blame). `BaseView` decodes a write request's JSON body before the view runs
(`decode_write_body`), so a bad body changes nothing even on a route that does not read it.
"""

from __future__ import annotations

import json
from typing import Any

from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser
from rest_framework.request import Request

from traces.ingest.decoding import MAX_DEPTH, TOO_MANY_DIGITS
from traces.ingest.validation import value_problem

#: The body limit of an endpoint that names none (notes, share links, cancelling): ample for a note
#: of `Note.BODY_MAX` characters written as \\u escapes.
DEFAULT_BODY_LIMIT = 64 * 1024


class PayloadTooLarge(exceptions.APIException):
    """413: a body (or what it would make a row grow to) above its limit."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"

    def __init__(self, limit: int, advice: str = "send smaller batches", what: str = "body") -> None:
        super().__init__(f"{what} is larger than the {limit:,}-byte limit; {advice}")


def invalid(field: str, message: str) -> exceptions.ValidationError:
    """The one error shape's 400, naming the field (`traces.core.api.api_exception_handler`)."""
    return exceptions.ValidationError({field: message})


def body_limit(view: Any) -> int:
    limit = getattr(view, "body_limit", None)
    return int(limit()) if callable(limit) else DEFAULT_BODY_LIMIT


def decode_json(data: bytes, *, check_values: bool = True) -> Any:
    """`data` (a request body) as a checked JSON value; `ValidationError` naming the field otherwise.
    `check_values=False` leaves the values' rules (NUL, lone surrogates, finite numbers, integers the
    database holds) to a batch endpoint that refuses a bad item alone (`value_problem` per item)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid("body", f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid("body", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise invalid("body", f"is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError:  # an integer longer than Python converts
        raise invalid("body", f"cannot be decoded: {TOO_MANY_DIGITS}") from None
    problem = value_problem(value) if check_values else None
    if problem is not None:
        field, message = problem
        raise invalid(field or "body", message)
    return value


class JSONBodyParser(JSONParser):
    """DRF's JSON parser, replaced: the endpoint's size limit, then `decode_json`, then an object."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        context = parser_context or {}
        limit = body_limit(context.get("view"))
        request = context.get("request")
        meta = getattr(request, "META", {}) if request is not None else {}
        try:
            length = int(meta.get("CONTENT_LENGTH") or -1)
        except ValueError:
            length = -1
        if length > limit:
            raise PayloadTooLarge(limit, "send less")
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise PayloadTooLarge(limit, "send less")
        value = decode_json(data)
        if not isinstance(value, dict):
            raise invalid("body", "must be a JSON object")
        return value


def decode_write_body(request: Request) -> None:
    """Decode a write request's JSON body now (before the view acts), so that a bad body is refused on
    every write route, whether or not its view reads the body."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    if not (request.content_type or "").split(";")[0].strip().lower() == "application/json":
        return
    if any(isinstance(p, JSONBodyParser) for p in request.parsers or ()):
        request.data  # noqa: B018  (parsed and cached by DRF; refused here when bad)
