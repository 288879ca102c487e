"""Settings for the test suite: the real settings, with a fixed key so DEBUG can stay off."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("SECRET_KEY", "test-only-not-secret")
# A data folder of this test session's own (SQLite file, file-system broker), exported so the worker
# processes the tests start share it, and two test sessions on one machine never steal each other's tasks.
os.environ.setdefault("ARCANA_DATA_DIR", tempfile.mkdtemp(prefix="arcana-test-"))

from arcana_site.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

# A file, not ":memory:", so a real Celery worker process started by a test sees the same test database.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-db.sqlite3")}  # noqa: F405

# Tests serve static files from the finders; hashed names need collectstatic's manifest, which the
# production shape (scripts/run, .ci/run) builds.
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
