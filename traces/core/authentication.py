"""API key authentication: `Authorization: Bearer <key>` names one project (DESIGN.md §8).

A key authenticates as a `ProjectKeyUser` (no Django user) with `request.auth` = the `ApiKey`; views
scope everything to `request.auth.project`. Only the key's sha256 is stored; revoked keys fail with 401.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import connection
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from traces.core import sqlread
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

    def __init__(self, remember_seconds: float = 0.0) -> None:
        # > 0: this process remembers a key it looked up for that long (`find_key`); only for views
        # that re-check revocation on every request themselves (the ingest view's rate-limit count).
        self.remember_seconds = remember_seconds

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
        return self.key_user(raw)

    def key_user(self, raw: str) -> tuple[ProjectKeyUser, ApiKey]:
        """The key `raw` names, with its user (401 for an unknown or revoked key)."""
        key = self.find_key(ApiKey.hash_key(raw))
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        now = timezone.now()
        if key.last_used_at is None or now - key.last_used_at > LAST_USED_PRECISION:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
            key.last_used_at = now
        return ProjectKeyUser(key), key

    def find_key(self, key_hash: str) -> ApiKey | None:
        """The unrevoked key with this hash, with its project and team (remembered for
        `remember_seconds`, forgotten when the key is saved or deleted in this process)."""
        now = time.monotonic()
        if self.remember_seconds:
            cached = _keys.get(key_hash)
            if cached is not None and cached[0] > now:
                return cached[1]
        key = _unrevoked_key(key_hash)
        if self.remember_seconds and key is not None:
            if len(_keys) >= 1000:
                _keys.clear()  # bounded: a process rarely sees more than a few keys
            _keys[key_hash] = (now + self.remember_seconds, key)
        return key

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


def _unrevoked_key(key_hash: str) -> ApiKey | None:
    """The unrevoked key with this hash, its project and the project's team loaded (as
    `select_related("project__team")` would): one query whose SQL is written once (`traces.core.sqlread`).
    Read views look their key up on every request (a revoked key is refused at once, in every process),
    so the ORM's cost of building this query was paid by every read."""
    qn = connection.ops.quote_name
    key_t = qn(ApiKey._meta.db_table)
    found = sqlread.fetch_with_team(
        ApiKey, f"WHERE {key_t}.{qn('key_hash')} = %s AND {key_t}.{qn('revoked_at')} IS NULL", [key_hash]
    )
    return found[0] if found else None


#: How long the ingest view's process remembers an API key it looked up (a query joining project and
#: team, ~1 ms of a live batch of 20 events).
KEY_CACHE_SECONDS = 10.0
_keys: dict[str, tuple[float, ApiKey]] = {}


@receiver([post_save, post_delete], sender=ApiKey)
def _forget_key(sender: type[ApiKey], instance: ApiKey, **kwargs: Any) -> None:
    _keys.pop(instance.key_hash, None)


def key_of(request: Any) -> ApiKey | None:
    """The API key a request authenticated with, or None for a session."""
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, ApiKey) else None


class ApiKeyHeaderAuthentication(ApiKeyAuthentication):
    """`x-api-key: <key>`, the header OpenTelemetry exporters are often configured with
    (`OTEL_EXPORTER_OTLP_HEADERS=x-api-key=…`). No header → not this scheme."""

    def authenticate(self, request: Request) -> tuple[ProjectKeyUser, ApiKey] | None:
        value = request.META.get("HTTP_X_API_KEY")
        if value is None:
            return None
        raw = value.strip()
        if not raw or not raw.isascii() or not raw.isprintable():
            raise exceptions.AuthenticationFailed("Invalid API key.")
        return self.key_user(raw)

    def authenticate_header(self, request: Request) -> str:
        return "x-api-key"


class ApiKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]  # drf-spectacular leaves __init_subclass__ unannotated
    """Describes the Bearer scheme in the OpenAPI schema."""

    target_class = "traces.core.authentication.ApiKeyAuthentication"
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


class ApiKeyHeaderScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]  # as above
    """Describes the `x-api-key` header scheme (OTLP exporters) in the OpenAPI schema."""

    target_class = "traces.core.authentication.ApiKeyHeaderAuthentication"
    name = "ApiKeyHeader"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "x-api-key",
            "description": "A project API key in the `x-api-key` header, as OpenTelemetry exporters are often "
            "configured (`OTEL_EXPORTER_OTLP_HEADERS=x-api-key=…`); the same keys as the Bearer scheme.",
        }
