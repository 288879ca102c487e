"""Settings for the test suite: the real settings, with a fixed key so DEBUG can stay off."""

from __future__ import annotations

import os

os.environ.setdefault("SECRET_KEY", "test-only-not-secret")
os.environ.setdefault(
    "ARCANA_DATA_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test")
)

from arcana_site.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

# A file, not ":memory:", so a real Celery worker process started by a test sees the same test database.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-db.sqlite3")}  # noqa: F405
