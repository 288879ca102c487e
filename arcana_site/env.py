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
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured


def envstr(name: str, default: str | None = None, *, environ: Mapping[str, str] | None = None) -> str | None:
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


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed `DATABASE_URL`: `sqlite:///abs/path.db`, `sqlite:///relative.db` or
    `postgres://user:pass@host:5432/name` (also `postgresql://`)."""

    engine: str
    name: str
    user: str = ""
    password: str = ""
    host: str = ""
    port: str = ""

    def to_django(self) -> dict[str, object]:
        if self.engine == "sqlite":
            # A longer timeout: the web server and the worker share the file.
            return {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": self.name,
                "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
            }
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": self.name,
            "USER": self.user,
            "PASSWORD": self.password,
            "HOST": self.host,
            "PORT": self.port,
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }


def parse_database_url(name: str, value: str) -> DatabaseURL:
    parts = urlsplit(value)
    if parts.scheme == "sqlite":
        path = unquote(parts.path)
        if parts.netloc or not path or path == "/":
            raise ImproperlyConfigured(f"{name} must look like sqlite:///path/to/db.sqlite3, got {value!r}")
        # sqlite:///var/db.sqlite3 → "var/db.sqlite3" relative; sqlite:////abs → "/abs".
        return DatabaseURL(engine="sqlite", name=path[1:])
    if parts.scheme in ("postgres", "postgresql"):
        db = unquote(parts.path.lstrip("/"))
        if not db:
            raise ImproperlyConfigured(
                f"{name} must name a database, e.g. postgres://host/arcana, got {value!r}"
            )
        try:
            port = str(parts.port or "")
        except ValueError:
            raise ImproperlyConfigured(f"{name} has an invalid port: {value!r}") from None
        return DatabaseURL(
            engine="postgres",
            name=db,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            host=parts.hostname or "",
            port=port,
        )
    raise ImproperlyConfigured(f"{name} must start with sqlite:// or postgres://, got {value!r}")


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
