"""Small typed readers for settings from the environment.

Parsing is strict: a value that does not parse raises `ImproperlyConfigured` naming the variable,
so a typo in a deployment fails at start-up instead of silently taking a default.

    >>> envbool("DEBUG", default=False)        # "True" / "False" only
    >>> envint("ARCANA_MAX_UPLOAD_BYTES", default=50_000_000, minimum=1)
    >>> envlist("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, overload
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured


@overload
def envstr(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str: ...
@overload
def envstr(name: str, default: None = None, *, environ: Mapping[str, str] | None = None) -> str | None: ...
def envstr(name: str, default: str | None = None, *, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value; `default` when it is unset or empty."""
    env = os.environ if environ is None else environ
    value = env.get(name)
    if value is None or value == "":
        return default
    return value


def envbool(name: str, default: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    value = envstr(name, environ=environ)
    if value is None:
        return default
    if value == "True":
        return True
    if value == "False":
        return False
    raise ImproperlyConfigured(f"{name} must be 'True' or 'False', got {value!r}")


def envint(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    value = envstr(name, environ=environ)
    if value is None:
        return default
    try:
        number = int(value.replace("_", ""))
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, got {number}")
    return number


def envlist(name: str, default: list[str], *, environ: Mapping[str, str] | None = None) -> list[str]:
    value = envstr(name, environ=environ)
    if value is None:
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise ImproperlyConfigured(
            f"{name} must be a comma-separated list without empty items, got {value!r}"
        )
    return items


def envchoice(
    name: str, default: str, *, choices: list[str], environ: Mapping[str, str] | None = None
) -> str:
    value = envstr(name, environ=environ)
    if value is None:
        return default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed `DATABASE_URL`: `sqlite:///relative.db`, `sqlite:////abs/path.db` or
    `postgres://user:pass@host:5432/name?sslmode=require` (also `postgresql://`).

    Parsing is dj-database-url's, so query options reach the driver (`?sslmode=require`,
    `?connect_timeout=5`, …); our SQLite defaults (a longer lock timeout, IMMEDIATE transactions) and
    persistent PostgreSQL connections go on top.
    """

    engine: str  # "sqlite" or "postgres"
    config: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.config["NAME"])

    def to_django(self) -> dict[str, Any]:
        return dict(self.config)


def parse_database_url(name: str, value: str) -> DatabaseURL:
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in ("sqlite", "postgres", "postgresql"):
        raise ImproperlyConfigured(f"{name} must start with sqlite:// or postgres://, got {value!r}")
    try:
        config: dict[str, Any] = dict(dj_database_url.parse(value, conn_max_age=60, conn_health_checks=True))
    except (ValueError, dj_database_url.ParseError) as exc:
        raise ImproperlyConfigured(f"{name} is not a valid database URL ({exc}): {value!r}") from None
    if scheme == "sqlite":
        if config["NAME"] in ("", ":memory:") or urlsplit(value).netloc:
            raise ImproperlyConfigured(f"{name} must look like sqlite:///path/to/db.sqlite3, got {value!r}")
        # The web server and the worker share the file: wait for its lock instead of failing, and take
        # the write lock at BEGIN so two writers never deadlock on an upgrade.
        options = {"timeout": 20, "transaction_mode": "IMMEDIATE", **config.get("OPTIONS", {})}
        config.update(OPTIONS=options, CONN_MAX_AGE=0, CONN_HEALTH_CHECKS=False)
        return DatabaseURL(engine="sqlite", config=config)
    if not config.get("NAME"):
        raise ImproperlyConfigured(f"{name} must name a database, e.g. postgres://host/arcana, got {value!r}")
    config["PORT"] = str(config.get("PORT") or "")
    # Django's PostgreSQL backend with a health check that skips a connection known alive.
    config["ENGINE"] = "arcana_site.postgres"
    return DatabaseURL(engine="postgres", config=config)


def envdatabase(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> DatabaseURL:
    return parse_database_url(name, envstr(name, environ=environ) or default)


_BROKER_SCHEMES = ("filesystem", "redis", "rediss", "amqp", "pyamqp", "memory")


def envbroker(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str:
    value = envstr(name, environ=environ) or default
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in _BROKER_SCHEMES:
        raise ImproperlyConfigured(
            f"{name} must be a Celery broker URL ({', '.join(s + '://' for s in _BROKER_SCHEMES)}), got {value!r}"
        )
    return value


def envcache(name: str, *, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The `default` entry of Django's CACHES from a URL: empty for this process's memory (the default),
    `redis://host:6379/2` (or `rediss://`) for one cache shared by every web node."""
    value = envstr(name, environ=environ) or ""
    if not value:
        return {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            # A finished run's fidelity maps and turn parts: bounded, oldest dropped first.
            "OPTIONS": {"MAX_ENTRIES": 2000},
        }
    if value.split("://", 1)[0] not in ("redis", "rediss"):
        raise ImproperlyConfigured(f"{name} must be empty or a redis:// URL, got {value!r}")
    return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": value}
