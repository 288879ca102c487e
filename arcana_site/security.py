"""Security headers every response carries (DESIGN.md §8).

Django 5.2 has no Content-Security-Policy of its own, so this small middleware sets one: pages may use
only the app's own static files — no inline script or style, no `on*=` handlers, nothing from another
origin (templates and static/js are written for it: widths are CSS classes, behaviour is in
static/js/<page>.js). `frame-ancestors 'none'` repeats X-Frame-Options for browsers that prefer CSP.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class ContentSecurityPolicyMiddleware:
    """Adds `Content-Security-Policy` to every response that has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response


class RejectNulMiddleware:
    """400 for a request whose path or query string holds a NUL character.

    No stored value contains NUL (ingest forbids it), so such a request can match nothing; and
    PostgreSQL refuses NUL in any query, so without this every page and API filter would have to guard
    against it or answer 500. API paths get the API's one error shape."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        bad = _nul_field(request)
        if bad is not None:
            message = f"{bad} contains a NUL character"
            if request.path_info.startswith("/api/"):
                body = {"error": "invalid input", "detail": [{"field": bad, "message": message}]}
                return JsonResponse(body, status=400)
            return HttpResponseBadRequest(
                f"Bad request: {message}.", content_type="text/plain; charset=utf-8"
            )
        return self.get_response(request)


def _nul_field(request: HttpRequest) -> str | None:
    if "\x00" in request.path_info:
        return "the path"
    for key, values in request.GET.lists():
        if "\x00" in key or any("\x00" in v for v in values):
            return f"query parameter {key.replace(chr(0), '?')!r}"
    return None
