"""System checks for risky configurations, with stable ids (`arcana.W001`…)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


def sqlite_concurrency_warnings(engine: str, processes: int) -> list[Warning]:
    if engine.endswith("sqlite3") and processes > 1:
        return [
            Warning(
                f"SQLite with {processes} worker processes writing at once.",
                hint="SQLite serialises writers; use PostgreSQL (DATABASE_URL=postgres://…) for more than one worker.",
                id="arcana.W001",
            )
        ]
    return []


@register(Tags.database)
def check_sqlite_concurrency(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    return sqlite_concurrency_warnings(
        settings.DATABASES["default"]["ENGINE"], settings.ARCANA_WORKER_PROCESSES
    )


@register(deploy=True)
def check_embedded_broker_in_production(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    if not settings.DEBUG and settings.CELERY_BROKER_URL.startswith(("filesystem://", "memory://")):
        return [
            Warning(
                "The embedded file-system broker is in use with DEBUG off.",
                hint="It only works when the web server and the worker share one disk; use Redis in production "
                "(CELERY_BROKER_URL=redis://…).",
                id="arcana.W002",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def check_secure_cookies(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    if not settings.DEBUG and not settings.SESSION_COOKIE_SECURE:
        return [
            Warning(
                "Session cookies are sent over plain HTTP.",
                hint="Behind TLS, set SESSION_COOKIE_SECURE=True and CSRF_COOKIE_SECURE=True.",
                id="arcana.W003",
            )
        ]
    return []


@register()
def check_providers(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """`ARCANA_PROVIDERS` must parse (`arcana.E001`), so a typo stops `migrate` / `check` at start
    instead of failing the first conversation."""
    from django.core.exceptions import ImproperlyConfigured

    from traces.conversations import server_providers

    try:
        server_providers()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), hint="See docs/guide/conversations.md for the format.", id="arcana.E001")]
    return []
