"""API key authentication: `Authorization: Bearer <key>` names one project (DESIGN.md §8).

A key authenticates as a `ProjectKeyUser` (no Django user) with `request.auth` = the `ApiKey`; views
scope everything to `request.auth.project`. Only the key's sha256 is stored; revoked keys fail with 401.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from traces.models import ApiKey, Project

# Writing last_used_at on every request would add a write to every batch; a minute is precise enough.
LAST_USED_PRECISION = timedelta(seconds=60)


class SignedInRequest(HttpRequest):
    """The request of a page view behind `@login_required`, whose `user` is a real `User`.

    A type only (Django never builds one): annotating such a view's `request` with it tells the type
    checker that `request.user` is not `AnonymousUser`, as the decorator guarantees."""

    user: User


class ProjectKeyUser:
    """The caller behind an API key: authenticated, but only for its project and never a Django user."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    pk = None
    id = None

    def __init__(self, key: ApiKey) -> None:
        self.key = key
        self.project: Project = key.project

    def __str__(self) -> str:
        return f"api key {self.key.prefix}…"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <key>`. No header → not this scheme (None); a bad or revoked key → 401."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[ProjectKeyUser, ApiKey] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <api key>'.")
        try:
            raw = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid API key.") from None
        key = self.find_key(ApiKey.hash_key(raw))
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        now = timezone.now()
        if key.last_used_at is None or now - key.last_used_at > LAST_USED_PRECISION:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
            key.last_used_at = now
        return ProjectKeyUser(key), key

    def find_key(self, key_hash: str) -> ApiKey | None:
        """The unrevoked key with this hash, with its project and team."""
        return (
            ApiKey.objects.select_related("project__team")
            .filter(key_hash=key_hash, revoked_at__isnull=True)
            .first()
        )

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


def key_of(request: Any) -> ApiKey | None:
    """The API key a request authenticated with, or None for a session."""
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, ApiKey) else None


class ApiKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]  # drf-spectacular leaves __init_subclass__ unannotated
    """Describes the Bearer scheme in the OpenAPI schema."""

    target_class = "traces.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A project API key (the project's settings page, or manage.py create_api_key). "
            "An ingest-only key may send traces (ingest, uploads and their status) and gets 403 on reads; "
            "a read + ingest key may also read and delete the project's runs. Ingest is rate-limited per "
            "key (429 with Retry-After).",
        }
