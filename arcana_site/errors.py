"""The site's error pages: 400, 403, 404, 429, 500 and a refused CSRF check, drawn in the site's layout
(templates/error.html) — what happened, why when the server knows (a 403 says which role may not do
what: `traces.core.access.require`), and where to go. Under `/api/` the same errors are the API's one
error shape (`runtime.errors.error_body`), never a page.

Wired in `arcana_site/urls.py` (`handler400` …) and `settings.CSRF_FAILURE_VIEW`. `QuietForbidden`
keeps an ordinary 403 to one log line: Django's `django.request` logger would print its traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader

from runtime.errors import error_body

#: status → (title, what happened, where to go)
PAGES: dict[int, tuple[str, str]] = {
    400: ("Bad request", "The request could not be understood: a malformed address or form."),
    403: ("Not allowed", "You are signed in, but you may not do this here."),
    404: ("Not found", "There is nothing at this address, or it is not in one of your teams."),
    429: ("Too many requests", "This was refused for now: too many attempts in a short time."),
    500: ("Something went wrong", "The server failed to answer; the error has been logged."),
}


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def _reason(exception: Any) -> str:
    """The message an exception was raised with ("Your role (member) cannot do this."), or ""."""
    text = str(exception) if exception is not None else ""
    # Django's own defaults carry no reason a reader can use (e.g. a bare 404's resolver dump).
    return text if text and not text.startswith(("{", "[")) else ""


def error_page(request: HttpRequest, status: int, reason: str = "", **extra: Any) -> HttpResponse:
    """The error page of `status` (JSON under `/api/`), saying `reason` when there is one."""
    title, what = PAGES[status]
    if _is_api(request):
        return JsonResponse(error_body(reason or title.lower(), []), status=status)
    ctx = {"status": status, "title": title, "what": what, "reason": reason, **extra}
    return render(request, "error.html", ctx, status=status)


def bad_request(request: HttpRequest, exception: Any = None) -> HttpResponse:
    return error_page(request, 400)


def permission_denied(request: HttpRequest, exception: Any = None) -> HttpResponse:
    return error_page(request, 403, _reason(exception))


def page_not_found(request: HttpRequest, exception: Any = None) -> HttpResponse:
    return error_page(request, 404, _reason(exception))


def too_many_requests(request: HttpRequest, reason: str, retry_after: int | None = None) -> HttpResponse:
    """A 429 page (JSON under `/api/`) with `Retry-After` when it is known."""
    response = error_page(request, 429, reason, retry_after=retry_after)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 page, drawn without the request's context: what failed may be the database or a template
    tag the layout uses, so nothing here asks either (no user, no team switcher)."""
    if _is_api(request):
        return JsonResponse(error_body("internal server error; it has been logged", []), status=500)
    title, what = PAGES[500]
    html = loader.get_template("error.html").render({"status": 500, "title": title, "what": what})
    return HttpResponse(html, status=500)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form refused by the CSRF check: most often a page left open across a sign-in or sign-out."""
    return error_page(
        request,
        403,
        "The form's security token was missing or out of date (the page was open across a sign-in or "
        "sign-out, or cookies are blocked). Reload the page and send it again.",
        csrf=True,
    )


class QuietForbidden(logging.Filter):
    """On `django.request`: a 403 (PermissionDenied, a refused CSRF check) is logged as its one warning
    line, without the traceback Django attaches — an ordinary refusal, not a failure."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, PermissionDenied) or getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
